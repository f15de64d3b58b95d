"""Bgp objects in the store: one per host (keys.bgp(hostname)). No two hosts share a router
IP: a put reads every Bgp object and its txn compares that none was written since, so two
hosts claiming one address at once fail one side."""

from __future__ import annotations

from typing import Any

from common import keys
from common.models import Bgp
from common.records import BgpSessionRecord, HostRecord, decode_config, encode_config
from store import KV, Delete, Put

from .decisions.bgp import check_router_ip_free, normalize_bgp
from .decisions.views import BgpSession, bgp_view
from .errors import NotFound
from .settings import Settings
from .txn import TxnStore, absent, retrying, unchanged, untouched_since


class Bgps:
    def __init__(self, txn: TxnStore, settings: Settings) -> None:
        self.txn = txn
        self.settings = settings

    def list(self) -> list[Bgp]:
        kvs, _ = self.txn.range(keys.BGPS)
        return [decode_config(Bgp, kv.value) for kv in kvs]

    def read(self, hostname: str) -> tuple[Bgp, KV]:
        kv = self.txn.get(keys.bgp(hostname))
        if kv is None:
            raise NotFound(f"bgp {hostname}")
        return decode_config(Bgp, kv.value), kv

    def get(self, hostname: str) -> Bgp:
        return self.read(hostname)[0]

    def inspect(self, hostname: str) -> dict[str, Any]:
        bgp = self.get(hostname)
        hkv = self.txn.get(keys.host(hostname))
        host = None
        if hkv is not None:
            try:
                host = HostRecord.decode(hkv.value)
            except (ValueError, TypeError):
                host = HostRecord(host=hostname)  # registered, though its record is unreadable
        return bgp_view(bgp, host, self.settings.get().fwdMode, self._session(hostname))

    def _session(self, hostname: str) -> BgpSession | None:
        """What the host's speaker reports (None: nothing, or nothing readable)."""
        kv = self.txn.get(keys.bgp_session(hostname))
        if kv is None:
            return None
        try:
            r = BgpSessionRecord.decode(kv.value)
        except ValueError:
            return None
        return BgpSession(r.state, r.announced, r.learned)

    def put(self, bgp: Bgp) -> Bgp:
        b = normalize_bgp(bgp)
        key = keys.bgp(b.hostname)
        value = encode_config(b)

        def attempt() -> Bgp:
            kvs, rev = self.txn.range(keys.BGPS)
            old = next((kv for kv in kvs if kv.key == key), None)
            if old is not None and old.value == value:
                return b
            check_router_ip_free(b, (decode_config(Bgp, kv.value) for kv in kvs))
            # No host took the router IP since the read: the txn compares every Bgp object.
            compares = [unchanged(old) if old else absent(key), untouched_since(keys.BGPS, rev)]
            self.txn.commit(compares, [Put(key, value)])
            return b

        return retrying(f"bgp {b.hostname}", attempt)

    def delete(self, hostname: str) -> None:
        def attempt() -> None:
            _, kv = self.read(hostname)
            self.txn.commit([unchanged(kv)], [Delete(kv.key)])

        retrying(f"bgp {hostname}", attempt)
