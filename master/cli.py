"""netmaster: serve the control-plane REST API with gunicorn."""

from __future__ import annotations

import ipaddress
import logging
import signal
import ssl
import sys
import urllib.parse
from dataclasses import dataclass
from typing import Any

from gunicorn.app.base import BaseApplication

from common.credentials import CredentialError, client_cert
from common.flags import LOG_LEVELS, EnvArgumentParser, setup_logging, split_endpoints

from .auth import TokenFileError, TokenTable, load_tokens
from .metrics import prepare_multiprocess_dir, worker_exited

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
    p.add_argument(
        "--tls-cert", default="", help="serve HTTPS with this certificate (PEM, with its chain)"
    )
    p.add_argument("--tls-key", default="", help="the private key of --tls-cert (PEM)")
    p.add_argument(
        "--tls-ca",
        default="",
        help="CA certificate(s) that signed the other masters' certificates, to verify the "
        "leader when forwarding to it (default: the CA bundle of requests, certifi)",
    )
    p.add_argument(
        "--tls-client-ca",
        default="",
        help="require clients (agents, netctl, other masters) to present a certificate "
        "signed by this CA; a follower presents --tls-cert to the leader",
    )
    p.add_argument(
        "--auth-token-file",
        default="",
        help="require a bearer token of a role allowed the route: one 'ROLE TOKEN [NAME]' "
        "per line, roles admin, agent, reader (README: Security); SIGHUP re-reads it",
    )
    p.add_argument(
        "--insecure",
        action="store_true",
        help="serve a non-loopback --listen-url without TLS or without tokens anyway",
    )
    p.add_argument("--log-level", default="info", choices=LOG_LEVELS)
    p.add_argument("--workers", type=int, default=1, help="gunicorn worker processes")
    p.add_argument("--threads", type=int, default=16, help="threads per worker")
    p.add_argument(
        "--no-group-commit",
        action="store_true",
        help="commit each allocation alone instead of batching concurrent ones",
    )
    p.add_argument(
        "--request-timeout",
        type=float,
        default=30.0,
        help="seconds a client may take to send a whole request; a request reaches a "
        "thread only once it has arrived, so slow clients never hold the threads",
    )
    return p


def _bind(listen_url: str) -> str:
    url = listen_url.removeprefix("http://").removeprefix("https://").rstrip("/")
    if ":" not in url:
        raise SystemExit(f"netmaster: --listen-url {listen_url!r} must be HOST:PORT")
    return url


def control_url(listen_url: str, control: str = "", tls: bool = False) -> str:
    """The URL other masters and agents reach this one at: --control-url, else the listen URL
    (https:// when it serves TLS)."""
    url = (control or listen_url).strip().rstrip("/")
    if "://" not in url:
        url = ("https://" if tls else "http://") + url
    elif not control:  # a listen URL written with a scheme: the scheme follows TLS
        url = ("https://" if tls else "http://") + url.split("://", 1)[1]
    return url


def control_url_mismatch(url: str, tls: bool) -> str | None:
    """A warning when this master serves HTTPS but others are told to reach it over plain
    HTTP (their forwarded requests and the agents' calls would fail); None when fine."""
    if not tls or urllib.parse.urlsplit(url).scheme != "http":
        return None
    return (
        f"--control-url {url} is plain HTTP but this master serves HTTPS (--tls-cert): "
        "other masters and the agents will fail to reach it unless a proxy translates; "
        "write https://"
    )


def loopback_only(listen_url: str) -> bool:
    """Whether the REST API would listen on this host's loopback only (127.0.0.0/8, ::1,
    localhost): nothing outside the host can call it."""
    host = _bind(listen_url).rsplit(":", 1)[0].strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a name (or "" = every address): it may resolve to anything


def exposure_refusal(listen_url: str, tls: bool, auth: bool, insecure: bool) -> str | None:
    """Why netmaster must not start: the REST API would be reachable from other machines
    without TLS or without tokens, and --insecure does not say that is wanted. None: start."""
    if insecure or (tls and auth) or loopback_only(listen_url):
        return None
    missing = [
        *([] if tls else ["TLS (--tls-cert FILE --tls-key FILE)"]),
        *([] if auth else ["authentication (--auth-token-file FILE)"]),
    ]
    return (
        f"netmaster: --listen-url {listen_url} is reachable from other machines, and "
        f"without {' and '.join(missing)} anyone who reaches it can change or delete every "
        "network. Pass --tls-cert FILE --tls-key FILE and --auth-token-file FILE (README: "
        "Security), listen on 127.0.0.1, or pass --insecure to serve it unprotected anyway."
    )


def tls_problem(cert: str, key: str, ca: str, client_ca: str = "") -> str | None:
    """Why the TLS flags cannot be used (a missing half, a file that does not load), or None."""
    try:
        client_cert(cert, key)  # the same pair rule as the clients'
    except CredentialError as e:
        return str(e)
    if client_ca and not cert:
        return "--tls-client-ca needs --tls-cert and --tls-key: client certificates need TLS"
    try:
        if cert:
            ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as e:
        return f"--tls-cert {cert} --tls-key {key}: {_reason(e)}"
    for flag, path in (("--tls-ca", ca), ("--tls-client-ca", client_ca)):
        try:
            if path:
                ssl.create_default_context(cafile=path)
        except (OSError, ssl.SSLError) as e:
            return f"{flag} {path}: {_reason(e)}"
    return None


def _reason(e: Exception) -> str:
    if isinstance(e, ssl.SSLError):
        return e.reason or str(e)
    return (e.strerror if isinstance(e, OSError) else None) or str(e)


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


def build_app(args: Any, tokens: TokenTable | None = None) -> Any:
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
    from .forwarding import forward_session
    from .httperrors import body_errors_as_400
    from .reclaim import Reclaimer
    from .state import ClusterState

    endpoints = split_endpoints(args.etcd_endpoints)
    store = open_store(
        endpoints or None,
        args.data_dir,
        ca_cert=args.etcd_ca or None,
        cert=args.etcd_cert or None,
        key=args.etcd_key or None,
    )
    state = ClusterState(
        store,
        backend="etcd" if endpoints else "embedded",
        group_commit=not getattr(args, "no_group_commit", False),
    )
    state.ensure_defaults()
    if args.fwd_mode:
        current = state.settings.get()
        if current.fwdMode != args.fwd_mode:
            try:
                state.settings.put(
                    GlobalSettings.model_validate({**current.dump(), "fwdMode": args.fwd_mode})
                )
            except ApiError as e:
                log.warning("--fwd-mode %s not applied: %s", args.fwd_mode, e)
    url = control_url(args.listen_url, args.control_url, tls=bool(args.tls_cert))
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
    app = create_app(
        state,
        {"LISTEN_URL": args.listen_url, "CONTROL_URL": url},
        elector=elector,
        session=forward_session(
            tls_ca=args.tls_ca,
            client_cert=(args.tls_cert, args.tls_key) if args.tls_client_ca else None,
        ),
        tokens=tokens,
    )
    app.wsgi_app = body_errors_as_400(app.wsgi_app)  # type: ignore[method-assign]
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
    def __init__(self, args: Any, tokens: TokenTable | None = None) -> None:
        self.args = args
        self.tokens = tokens
        self._ssl_context: ssl.SSLContext | None = None
        self._configured = False  # load_config ran once: a next run is a SIGHUP
        super().__init__()

    def load_config(self) -> None:
        """At start and on SIGHUP (in the arbiter, before it starts new workers)."""
        if self._configured:
            self._reload_tokens()
        self._configured = True
        self._ssl_context = None  # SIGHUP also re-reads the certificate and key
        tls = {
            "certfile": self.args.tls_cert or None,
            "keyfile": self.args.tls_key or None,
            "ssl_context": self._context if self.args.tls_cert else None,
            "ca_certs": self.args.tls_client_ca or None,
            "cert_reqs": ssl.CERT_REQUIRED if self.args.tls_client_ca else None,
        }
        from .httplog import AccessLogger
        from .httpworker import worker_class

        options = {
            **tls,
            "bind": _bind(self.args.listen_url),
            "workers": self.args.workers,
            "threads": self.args.threads,
            "worker_class": worker_class(self.args.request_timeout),
            "control_socket_disable": True,
            "loglevel": self.args.log_level,
            "accesslog": "-" if self.args.log_level == "debug" else None,
            "logger_class": AccessLogger,  # no credential in the access log
            "graceful_timeout": 5,
            "timeout": 60,
            "proc_name": "netmaster",
            "post_worker_init": _post_worker_init,
            "worker_exit": _worker_exit,
            "child_exit": worker_exited,
        }
        for key, value in options.items():
            if value is not None:
                self.cfg.set(key, value)

    def _reload_tokens(self) -> None:
        if not self.args.auth_token_file:
            return
        try:
            self.tokens = load_tokens(self.args.auth_token_file)
        except TokenFileError as e:
            log.error("%s; keeping the tokens read before", e)
            return
        log.info("re-read %s: %s", self.args.auth_token_file, _role_counts(self.tokens))

    def _context(self, conf: Any, default_factory: Any) -> ssl.SSLContext:
        # gunicorn asks for a context per connection: load the key once, not per handshake.
        if self._ssl_context is None:
            context = default_factory()
            context.minimum_version = ssl.TLSVersion.TLSv1_2
            self._ssl_context = context
        return self._ssl_context

    def load(self) -> Any:
        return build_app(self.args, self.tokens)


def _role_counts(tokens: TokenTable) -> str:
    return ", ".join(f"{n} {role}" for role, n in sorted(tokens.roles().items()))


def _protection(args: Any) -> TokenTable | None:
    """Check the TLS and token flags (exit with a message when they cannot be used, or
    when the API would be exposed unprotected); the tokens, with --auth-token-file."""
    tls = bool(args.tls_cert)
    refusal = exposure_refusal(args.listen_url, tls, bool(args.auth_token_file), args.insecure)
    if refusal is not None:
        raise SystemExit(refusal)
    problem = tls_problem(args.tls_cert, args.tls_key, args.tls_ca, args.tls_client_ca)
    if problem is not None:
        raise SystemExit(f"netmaster: {problem}")
    if not args.auth_token_file:
        return None
    try:
        return load_tokens(args.auth_token_file)
    except TokenFileError as e:
        raise SystemExit(f"netmaster: --auth-token-file: {e}") from None


def check_store(args: Any) -> None:
    """Before serving (in the arbiter: in a worker it would end in a traceback): a damaged
    embedded store, TLS files that cannot be read, or an etcd whose TLS handshake fails end
    netmaster with a one-line message (an etcd that is merely down does not)."""
    from common.etcd_tls import EtcdTls
    from store import StoreError, check_embedded
    from store.startup import open_store_at_start

    endpoints = split_endpoints(args.etcd_endpoints)
    try:
        if not endpoints:
            check_embedded(args.data_dir)  # made here when there is none yet
            return
        store = open_store_at_start(
            endpoints, args.data_dir, EtcdTls(args.etcd_ca, args.etcd_cert, args.etcd_key)
        )
    except StoreError as e:
        raise SystemExit(f"netmaster: {e}") from None
    store.close()


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
    tokens = _protection(args)  # before anything is created or served
    check_store(args)
    args.master_id = new_master_id()  # before the fork: every worker shares it
    prepare_multiprocess_dir()  # before the fork too: the workers' metrics add up there
    tls = bool(args.tls_cert)
    url = control_url(args.listen_url, args.control_url, tls)
    log.info(
        "netmaster %s listening on %s (control URL %s), store %s, leader TTL %ds, host reclaim %s",
        args.master_id,
        args.listen_url,
        url,
        args.etcd_endpoints or f"embedded ({args.data_dir}/state.db)",
        args.leader_ttl,
        f"after {args.host_reclaim_grace:g}s" if args.host_reclaim_grace > 0 else "disabled",
    )
    log.info(
        "REST API: %s, %s",
        ("HTTPS with client certificates" if args.tls_client_ca else "HTTPS")
        if tls
        else "plain HTTP",
        f"bearer tokens ({_role_counts(tokens)})" if tokens else "no authentication",
    )
    if args.insecure and not loopback_only(args.listen_url) and not (tls and tokens):
        log.warning(
            "--insecure: %s is served to other machines without TLS or without tokens",
            args.listen_url,
        )
    mismatch = control_url_mismatch(url, tls)
    if mismatch is not None:
        log.warning("%s", mismatch)
    if unreachable_host(url):
        log.warning(
            "control URL %s names no reachable host: other masters cannot forward to this "
            "one when it leads; set --control-url",
            url,
        )
    sys.argv = [sys.argv[0]]  # gunicorn must not parse our flags
    _Gunicorn(args, tokens).run()


if __name__ == "__main__":
    main()
