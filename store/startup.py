"""Opening the cluster store when a program starts: TLS problems stop it, an etcd that is
down does not (``common.etcd_tls`` says which is which)."""

from __future__ import annotations

import logging
import time

from common.etcd_tls import EtcdTls, file_problem, first_tls_problem, unused_tls
from store import Store, StoreError, open_store

log = logging.getLogger(__name__)

# An etcd that closes the TLS connection is asked again this many times before we believe it.
PROBES = 3
PAUSE = 0.2


class StoreStartError(StoreError):
    """The store cannot be used as configured, and retrying will not change that.

    Its text is one line naming the endpoint or flag and what to check.
    """


def open_store_at_start(endpoints: list[str], data_dir: str, tls: EtcdTls) -> Store:
    """The store, as ``open_store`` makes it, after one read when it is etcd.

    Raises StoreStartError for a TLS file that cannot be read or a TLS handshake that
    fails; an etcd that does not answer is only logged: callers wait for it as before.
    """
    if not endpoints:
        return open_store(None, data_dir)
    problem = file_problem(tls)
    if problem is not None:
        raise StoreStartError(problem)
    warning = unused_tls(endpoints, tls)
    if warning is not None:
        log.warning("%s", warning)
    store = open_store(
        endpoints, data_dir, ca_cert=tls.ca or None, cert=tls.cert or None, key=tls.key or None
    )
    try:
        probe(store, tls)
    except BaseException:
        store.close()
        raise
    return store


def probe(store: Store, tls: EtcdTls, *, attempts: int = PROBES, pause: float = PAUSE) -> None:
    """Read the store once: raise StoreStartError for a TLS problem, log anything else."""
    from store.etcd_gateway import EndpointsUnavailable

    for attempt in range(1, attempts + 1):
        try:
            store.revision()
            return
        except EndpointsUnavailable as e:
            found = first_tls_problem(e.failures, tls)
            if found is None:
                log.warning("etcd does not answer yet: %s", e)
                return
            if found.certain or attempt == attempts:
                raise StoreStartError(found.message) from None
            time.sleep(pause)  # a server that died mid-handshake is refused next time
        except StoreError as e:
            log.warning("etcd answered with an error: %s", e)
            return
