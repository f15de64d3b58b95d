"""netmaster: serve the control-plane REST API with gunicorn."""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

from gunicorn.app.base import BaseApplication

from common.flags import LOG_LEVELS, EnvArgumentParser, setup_logging, split_endpoints

log = logging.getLogger("netmaster")


def parser() -> EnvArgumentParser:
    p = EnvArgumentParser(prog="netmaster", description=__doc__, env_prefix="NETMASTER")
    p.add_argument(
        "--etcd-endpoints", default="", help="comma-separated etcd URLs; empty = embedded store"
    )
    p.add_argument("--etcd-ca", default="", help="CA certificate for etcd TLS")
    p.add_argument("--etcd-cert", default="", help="client certificate for etcd TLS")
    p.add_argument("--etcd-key", default="", help="client key for etcd TLS")
    p.add_argument(
        "--data-dir", default="/var/lib/netplugin", help="where the embedded store lives"
    )
    p.add_argument(
        "--listen-url", default="127.0.0.1:9999", help="HOST:PORT to serve the REST API on"
    )
    p.add_argument(
        "--control-url",
        default="",
        help="URL other masters and plugins use to reach this one (default: listen-url)",
    )
    p.add_argument(
        "--fwd-mode",
        default="",
        choices=["", "bridge", "routing"],
        help="forwarding mode to set on first start",
    )
    p.add_argument("--log-level", default="info", choices=LOG_LEVELS)
    p.add_argument("--workers", type=int, default=1, help="gunicorn worker processes")
    p.add_argument("--threads", type=int, default=16, help="threads per worker")
    return p


def _bind(listen_url: str) -> str:
    url = listen_url.removeprefix("http://").rstrip("/")
    if ":" not in url:
        raise SystemExit(f"netmaster: --listen-url {listen_url!r} must be HOST:PORT")
    return url


def build_app(args: Any) -> Any:
    """Open the store and build the Flask app (runs in each gunicorn worker, after fork)."""
    from store import open_store

    from .app import create_app
    from .errors import ApiError
    from .models import GlobalSettings
    from .service import ClusterState

    endpoints = split_endpoints(args.etcd_endpoints)
    store = open_store(
        endpoints or None,
        args.data_dir,
        ca_cert=args.etcd_ca or None,
        cert=args.etcd_cert or None,
        key=args.etcd_key or None,
    )
    state = ClusterState(store, backend="etcd" if endpoints else "embedded")
    state.ensure_defaults()
    if args.fwd_mode:
        current = state.get_global()
        if current.fwdMode != args.fwd_mode:
            try:
                state.put_global(
                    GlobalSettings.model_validate({**current.dump(), "fwdMode": args.fwd_mode})
                )
            except ApiError as e:
                log.warning("--fwd-mode %s not applied: %s", args.fwd_mode, e)
    return create_app(
        state, {"LISTEN_URL": args.listen_url, "CONTROL_URL": args.control_url or args.listen_url}
    )


class _Gunicorn(BaseApplication):  # type: ignore[misc]
    def __init__(self, args: Any) -> None:
        self.args = args
        super().__init__()

    def load_config(self) -> None:
        options = {
            "bind": _bind(self.args.listen_url),
            "workers": self.args.workers,
            "threads": self.args.threads,
            "worker_class": "gthread",
            "control_socket_disable": True,
            "loglevel": self.args.log_level,
            "accesslog": "-" if self.args.log_level == "debug" else None,
            "graceful_timeout": 5,
            "timeout": 60,
            "proc_name": "netmaster",
        }
        for key, value in options.items():
            if value is not None:
                self.cfg.set(key, value)

    def load(self) -> Any:
        return build_app(self.args)


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    setup_logging(args.log_level, "netmaster")
    if not split_endpoints(args.etcd_endpoints):
        os.makedirs(args.data_dir, exist_ok=True)
    log.info(
        "netmaster listening on %s, store %s",
        args.listen_url,
        args.etcd_endpoints or f"embedded ({args.data_dir}/state.db)",
    )
    sys.argv = [sys.argv[0]]  # gunicorn must not parse our flags
    _Gunicorn(args).run()


if __name__ == "__main__":
    main()
