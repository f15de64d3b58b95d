"""The global settings in the store, and the cluster's defaults."""

from __future__ import annotations

from typing import Any

from common import keys
from common.models import GlobalSettings
from common.records import decode_config, encode_config
from store import KV, Put

from .decisions.settings import TagUse, check_fwd_mode_change, check_tag_ranges, validate_global
from .decisions.views import global_view
from .txn import TxnStore, absent, network_id, none_under, retrying, unchanged, untouched_since


def tag_use(kv: KV) -> TagUse:
    """The tag a keys.tag entry holds, and for which network."""
    encap, value = kv.key[len(keys.TAGS) :].split("/")
    return TagUse(encap, int(value), kv.value.decode())


class Settings:
    def __init__(self, txn: TxnStore, backend: str) -> None:
        self.txn = txn
        self.backend = backend

    def ensure_defaults(self) -> None:
        """Create the global settings if they are missing (the default tenant, with its tag,
        is the tenants family's: Tenants.ensure_default)."""

        def attempt() -> None:
            if self.txn.get(keys.GLOBAL) is None:
                self.txn.commit(
                    [absent(keys.GLOBAL)], [Put(keys.GLOBAL, encode_config(GlobalSettings()))]
                )

        retrying("cluster defaults", attempt)

    def read(self) -> tuple[GlobalSettings, KV]:
        kv = self.txn.get(keys.GLOBAL)
        if kv is None:
            self.ensure_defaults()
            kv = self.txn.get(keys.GLOBAL)
            assert kv is not None
        return decode_config(GlobalSettings, kv.value), kv

    def get(self) -> GlobalSettings:
        return self.read()[0]

    def list(self) -> list[GlobalSettings]:
        return [self.get()]

    def inspect(self) -> dict[str, Any]:
        settings = self.get()
        tags = self.tags()
        nets, _ = self.txn.range(keys.NETWORKS)
        return global_view(settings, self.backend, len(nets), tags)

    def tags(self) -> list[TagUse]:
        return [tag_use(kv) for kv in self.txn.range(keys.TAGS)[0]]

    def put(self, new: GlobalSettings) -> GlobalSettings:
        validate_global(new)

        def attempt() -> GlobalSettings:
            old, gkv = self.read()
            compares = [unchanged(gkv)]
            if new.fwdMode != old.fwdMode:
                nets, _ = self.txn.range(keys.NETWORKS)
                check_fwd_mode_change(old, new, [network_id(kv) for kv in nets])
                compares.append(none_under(keys.NETWORKS))
            tags, rev = self.txn.range(keys.TAGS)
            check_tag_ranges(new, map(tag_use, tags))
            compares.append(untouched_since(keys.TAGS, rev))
            self.txn.commit(compares, [Put(keys.GLOBAL, encode_config(new))])
            return new

        return retrying("global", attempt)
