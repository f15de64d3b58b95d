"""netplugin store: the cluster state, embedded (SQLite, one host) or in etcd."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from store.base import (
    KV,
    BatchResult,
    Compacted,
    Compare,
    CompareOp,
    Delete,
    Event,
    Lease,
    LeaseNotFound,
    Op,
    Put,
    RangeResult,
    Store,
    StoreCorrupt,
    StoreError,
    StoreUnavailable,
    Target,
    Txn,
    TxnResult,
    Watch,
    check_txn,
    prefix_end,
    prefix_end_bytes,
)

if TYPE_CHECKING:
    from store.embedded import EmbeddedStore
    from store.etcd import EtcdStore

__all__ = [
    "KV",
    "BatchResult",
    "Compacted",
    "Compare",
    "CompareOp",
    "Delete",
    "EmbeddedStore",
    "EtcdStore",
    "Event",
    "Lease",
    "LeaseNotFound",
    "Op",
    "Put",
    "RangeResult",
    "Store",
    "StoreCorrupt",
    "StoreError",
    "StoreUnavailable",
    "Target",
    "Txn",
    "TxnResult",
    "Watch",
    "check_embedded",
    "check_txn",
    "open_store",
    "prefix_end",
    "prefix_end_bytes",
]


def open_store(
    etcd_endpoints: list[str] | None,
    data_dir: str,
    *,
    ca_cert: str | None = None,
    cert: str | None = None,
    key: str | None = None,
    timeout: float = 5.0,
) -> Store:
    """The etcd store when endpoints are given, else the embedded one in ``data_dir/state.db``."""
    endpoints = [e for e in (etcd_endpoints or []) if e.strip()]
    if endpoints:
        from store.etcd import EtcdStore

        return EtcdStore(endpoints, ca_cert=ca_cert, cert=cert, key=key, timeout=timeout)
    from store.embedded import EmbeddedStore

    os.makedirs(data_dir, exist_ok=True)
    return EmbeddedStore(os.path.join(data_dir, "state.db"))


def check_embedded(data_dir: str) -> str:
    """Make the embedded store in ``data_dir`` if there is none, else check it; its path.

    Raises StoreCorrupt (a one-line message naming the file, what is wrong and what to do)
    for a damaged file, which is left as it is; StoreUnavailable if it cannot be read.
    """
    from store.embedded_file import prepare

    path = os.path.join(data_dir, "state.db")
    try:
        os.makedirs(data_dir, exist_ok=True)
    except OSError as e:
        raise StoreUnavailable(f"cannot make the data dir {data_dir}: {e}") from e
    prepare(path)
    return path


def __getattr__(name: str) -> Any:
    # The backends load lazily: the embedded one must not pay for importing requests.
    if name == "EmbeddedStore":
        from store.embedded import EmbeddedStore

        return EmbeddedStore
    if name == "EtcdStore":
        from store.etcd import EtcdStore

        return EtcdStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
