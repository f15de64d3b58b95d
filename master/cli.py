"""netmaster: serve the control-plane REST API with gunicorn."""

from __future__ import annotations

import logging
import signal
import sys
import urllib.parse
from dataclasses import dataclass
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
    p.add_argument(
        "--leader-ttl",
        type=int,
        default=10,
        help="seconds the leader's lease lives without a refresh: a killed leader is "
        "replaced within about this time",
    )
    p.add_argument(
        "--host-reclaim-grace",
        type=float,
        default=1800.0,
        help="seconds a host may be unregistered before the leader deletes its endpoints "
        "and frees their addresses; 0 disables reclaim",
    )
    p.add_argument("--log-level", default="info", choices=LOG_LEVELS)
    p.add_argument("--workers", type=int, default=1, help="gunicorn worker processes")
    p.add_argument("--threads", type=int, default=16, help="threads per worker")
    p.add_argument(
        "--request-timeout",
        type=float,
        default=30.0,
        help="seconds a client may take to send a whole request; a request reaches a "
        "thread only once it has arrived, so slow clients never hold the threads",
    )
    return p


def _bind(listen_url: str) -> str:
    url = listen_url.removeprefix("http://").rstrip("/")
    if ":" not in url:
        raise SystemExit(f"netmaster: --listen-url {listen_url!r} must be HOST:PORT")
    return url


def control_url(listen_url: str, control: str = "") -> str:
    """The URL other masters and agents reach this one at: --control-url, else the listen URL."""
    url = (control or listen_url).strip().rstrip("/")
    if "://" not in url:
        url = "http://" + url
    return url


def unreachable_host(url: str) -> bool:
    """Whether ``url`` names no host another machine could connect to (0.0.0.0, ::)."""
    host = urllib.parse.urlsplit(url).hostname or ""
    return host in ("", "0.0.0.0", "::")


@dataclass
class Runtime:
    """What a worker runs besides serving: the election and the reclaim loop."""

    elector: Any
    reclaimer: Any
    store: Any

    def stopping(self) -> None:
        """SIGTERM: stop taking part at once (the lease is revoked by the election thread)."""
        self.reclaimer.request_stop()
        self.elector.request_stop()

    def close(self) -> None:
        self.reclaimer.stop()
        self.elector.stop()
        self.store.close()


def build_app(args: Any) -> Any:
    """Open the store and build the Flask app (runs in each gunicorn worker, after fork).

    Each worker takes part in the election with the master's id (made before the fork, so
    shared by the workers of one master) and runs the reclaim loop, which acts only while
    this very worker holds the leader lease.
    """
    from common.models import GlobalSettings
    from store import StoreError, open_store

    from .app import create_app
    from .election import Elector, new_master_id
    from .errors import ApiError
    from .reclaim import Reclaimer
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
    url = control_url(args.listen_url, args.control_url)
    elector = Elector(
        store,
        master_id=getattr(args, "master_id", "") or new_master_id(),
        url=url,
        ttl=args.leader_ttl,
    )
    try:
        elector.step()  # know the leader (or become it) before serving the first request
    except StoreError as e:
        log.warning("election: %s", e)
    elector.start()
    reclaimer = Reclaimer(state, elector.leadership, args.host_reclaim_grace)
    reclaimer.start()
    app = create_app(state, {"LISTEN_URL": args.listen_url, "CONTROL_URL": url}, elector=elector)
    app.extensions["netmaster"] = Runtime(elector, reclaimer, store)
    return app


def _post_worker_init(worker: Any) -> None:
    """Chain our SIGTERM step before gunicorn's: a stopping leader hands over at once."""
    runtime = _runtime(worker)
    if runtime is None:
        return
    previous = signal.getsignal(signal.SIGTERM)

    def on_term(sig: int, frame: Any) -> None:
        runtime.stopping()
        if callable(previous):
            previous(sig, frame)

    signal.signal(signal.SIGTERM, on_term)
    signal.siginterrupt(signal.SIGTERM, False)


def _worker_exit(server: Any, worker: Any) -> None:
    """In the worker, after its last request: resign, stop reclaiming, close the store."""
    runtime = _runtime(worker)
    if runtime is not None:
        runtime.close()


def _runtime(worker: Any) -> Runtime | None:
    # worker_exit also runs in the arbiter, for a worker it reaped: there is no app there.
    app = getattr(worker, "wsgi", None)
    runtime = getattr(app, "extensions", {}).get("netmaster")
    return runtime if isinstance(runtime, Runtime) else None


class _Gunicorn(BaseApplication):  # type: ignore[misc]
    def __init__(self, args: Any) -> None:
        self.args = args
        super().__init__()

    def load_config(self) -> None:
        from .httpworker import worker_class

        options = {
            "bind": _bind(self.args.listen_url),
            "workers": self.args.workers,
            "threads": self.args.threads,
            "worker_class": worker_class(self.args.request_timeout),
            "control_socket_disable": True,
            "loglevel": self.args.log_level,
            "accesslog": "-" if self.args.log_level == "debug" else None,
            "graceful_timeout": 5,
            "timeout": 60,
            "proc_name": "netmaster",
            "post_worker_init": _post_worker_init,
            "worker_exit": _worker_exit,
        }
        for key, value in options.items():
            if value is not None:
                self.cfg.set(key, value)

    def load(self) -> Any:
        return build_app(self.args)


def main(argv: list[str] | None = None) -> None:
    from .election import new_master_id

    p = parser()
    args = p.parse_args(argv)
    if args.leader_ttl < 1:
        p.error(f"--leader-ttl {args.leader_ttl}: must be at least 1 second")
    if args.request_timeout <= 0:
        p.error(f"--request-timeout {args.request_timeout:g}: must be more than 0 seconds")
    if args.host_reclaim_grace < 0:
        p.error(f"--host-reclaim-grace {args.host_reclaim_grace:g}: must be >= 0 (0 disables)")
    setup_logging(args.log_level, "netmaster")
    if not split_endpoints(args.etcd_endpoints):
        # Before the workers fork: a damaged store stops netmaster here, with one line.
        from store import StoreError, check_embedded

        try:
            check_embedded(args.data_dir)
        except StoreError as e:
            raise SystemExit(f"netmaster: {e}") from None
    args.master_id = new_master_id()  # before the fork: every worker shares it
    url = control_url(args.listen_url, args.control_url)
    log.info(
        "netmaster %s listening on %s (control URL %s), store %s, leader TTL %ds, host reclaim %s",
        args.master_id,
        args.listen_url,
        url,
        args.etcd_endpoints or f"embedded ({args.data_dir}/state.db)",
        args.leader_ttl,
        f"after {args.host_reclaim_grace:g}s" if args.host_reclaim_grace > 0 else "disabled",
    )
    if unreachable_host(url):
        log.warning(
            "control URL %s names no reachable host: other masters cannot forward to this "
            "one when it leads; set --control-url",
            url,
        )
    sys.argv = [sys.argv[0]]  # gunicorn must not parse our flags
    _Gunicorn(args).run()


if __name__ == "__main__":
    main()
