"""The etcd store against a real etcd: the shared contract, plus outages and failover."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from store import open_store
from store.base import Compare, Put, Store, StoreError, StoreUnavailable
from store.etcd import EtcdStore
from testbed.etcd import EtcdServer, free_port
from testbed.pki import make_pki
from testbed.require import require_etcd
from testbed.store_contract import WAIT, Collector, StoreContract, summary
from testbed.wait import wait_for

pytestmark = pytest.mark.etcd


@pytest.fixture(scope="module")
def contract_etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdServer]:
    """A private etcd: the contract checks global revisions, so nothing else may write."""
    require_etcd()
    with EtcdServer(tmp_path_factory.mktemp("etcd-contract")) as server:
        yield server


class TestEtcdContract(StoreContract):
    @pytest.fixture
    def store(self, contract_etcd: EtcdServer) -> Iterator[Store]:
        s = EtcdStore([contract_etcd.endpoint])
        yield s
        s.close()


@pytest.fixture
def p() -> str:
    return f"/etcd-test/{uuid.uuid4().hex[:12]}/"


def dead_endpoint() -> str:
    return f"127.0.0.1:{free_port()}"


def test_open_store_etcd(etcd_server: EtcdServer, tmp_path: Path, p: str) -> None:
    s = open_store([etcd_server.endpoint], str(tmp_path / "unused"))
    try:
        assert isinstance(s, EtcdStore)
        s.put(p + "k", b"v")
    finally:
        s.close()


def test_endpoint_spellings(etcd_server: EtcdServer, p: str) -> None:
    bare = etcd_server.endpoint.removeprefix("http://")
    for endpoints in ([bare], [etcd_server.endpoint], [f"{dead_endpoint()},{bare}"]):
        with EtcdStore(endpoints) as s:
            s.put(p + "k", b"v")
            kv = s.get(p + "k")
            assert kv is not None and kv.value == b"v"


def test_failover_from_a_dead_endpoint(etcd_server: EtcdServer, p: str) -> None:
    with EtcdStore([dead_endpoint(), etcd_server.endpoint]) as s:
        rev = s.put(p + "a", b"1")
        assert s.txn([Compare(p + "a", "mod", "==", rev)], [Put(p + "b", b"2")]).succeeded
        assert [kv.key for kv in s.range(p).kvs] == [p + "a", p + "b"]
        lease = s.lease_grant(30)
        lease.refresh()
        lease.revoke()
    # A watch fails over by itself too, with no request having picked the live endpoint.
    with EtcdStore([dead_endpoint(), etcd_server.endpoint]) as s:
        w = Collector(s, p, rev)
        try:
            assert [e.kv.key for e in w.take(2)] == [p + "a", p + "b"]
        finally:
            w.close()


def watch_ends(caplog: pytest.LogCaptureFixture) -> int:
    """How many times a watch stream has ended and been resumed (store/etcd.py logs each)."""
    return sum("resuming at revision" in r.getMessage() for r in caplog.records)


def test_all_endpoints_dead(p: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="store.etcd")
    dead = [dead_endpoint(), dead_endpoint()]
    with EtcdStore(dead, timeout=0.5) as s:
        for call in (
            lambda: s.get(p + "k"),
            lambda: s.put(p + "k", b"v"),
            lambda: s.range(p),
            lambda: s.lease_grant(5),
            lambda: s.watch(p, 0),
        ):
            with pytest.raises(StoreUnavailable) as info:
                call()
            assert all(ep in str(info.value) for ep in dead), info.value
        # A watch from a known revision starts anyway, retries, and cancels promptly:
        # cancel() must end it while it fails and retries against both endpoints.
        w = Collector(s, p, 5)

        wait_for(lambda: watch_ends(caplog) >= 2, WAIT, "the watch failed on both endpoints")
        w.close()


def test_range_pages_through_everything(etcd_server: EtcdServer, p: str) -> None:
    with EtcdStore([etcd_server.endpoint], page_size=7) as s:
        s.txn((), [Put(f"{p}{i:02d}", str(i).encode()) for i in range(50)])
        res = s.range(p)
        assert [kv.key for kv in res.kvs] == [f"{p}{i:02d}" for i in range(50)]
        assert res.revision == s.revision()


def test_server_side_errors_are_store_errors(etcd_server: EtcdServer, p: str) -> None:
    with EtcdStore([etcd_server.endpoint]) as s, pytest.raises(StoreError):
        s.txn((), [Put(f"{p}{i}", b"") for i in range(200)])  # over etcd's 128 ops


def test_watch_survives_etcd_restarts(
    etcd_factory: Callable[..., EtcdServer], p: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="store.etcd")
    server = etcd_factory()
    with EtcdStore([server.endpoint], watch_timeout=1.0) as s:
        start = s.put(p + "0", b"0")
        w = Collector(s, p, start)
        try:
            assert len(w.take(1)) == 1
            revs = [start]
            # Written just before the stop: delivered once, whether or not the watch saw them.
            revs += [s.put(p + str(i), str(i).encode()) for i in (1, 2)]
            ended = watch_ends(caplog)
            server.stop()
            # The outage lasts until the watch has noticed it and retried against a dead port.
            wait_for(lambda: watch_ends(caplog) >= ended + 2, WAIT, "the watch retried, in vain")
            server.start()
            revs += [s.put(p + str(i), str(i).encode()) for i in (3, 4)]
            got = w.take(4)
            # Once more with SIGKILL, then idle past the read timeout (idle reconnects).
            server.kill()
            server.start()
            revs.append(s.put(p + "5", b"5"))
            got += w.take(1)
            # A negative check: idle past the 1 s read timeout twice (the watch reconnects
            # each time), and nothing may be delivered again.
            w.assert_quiet(2.5)
            assert summary(got) == [
                ("put", p + str(i), str(i).encode(), revs[i]) for i in range(1, 6)
            ]
        finally:
            w.close()


def test_keepalive_survives_a_short_restart(
    etcd_factory: Callable[..., EtcdServer], p: str
) -> None:
    server = etcd_factory()
    with EtcdStore([server.endpoint], timeout=1.0) as s:
        lease = s.lease_grant(3, keepalive=True)
        s.put(p + "k", b"v", lease=lease.id)
        server.restart(down_for=1.0)
        # Time passing is the subject: the key outlives its TTL only if refreshes go on.
        time.sleep(4.0)
        assert s.get(p + "k") is not None
        assert not lease.lost.is_set()
        lease.revoke()


def test_keepalive_gives_up_after_the_ttl(etcd_factory: Callable[..., EtcdServer]) -> None:
    server = etcd_factory()
    with EtcdStore([server.endpoint], timeout=0.5) as s:
        lease = s.lease_grant(1, keepalive=True)
        server.stop()
        assert lease.lost.wait(WAIT)


def test_tls_with_client_certificates(
    etcd_factory: Callable[..., EtcdServer], tmp_path: Path, p: str
) -> None:
    c = make_pki(tmp_path)
    server = etcd_factory(tls=(c.ca, c.server, c.server_key))
    bare = server.endpoint.removeprefix("https://")
    with EtcdStore([bare], ca_cert=c.ca, cert=c.client, key=c.client_key) as s:
        assert s.endpoints == [server.endpoint]
        rev = s.put(p + "k", b"v")
        w = Collector(s, p, rev)
        try:
            assert summary(w.take(1)) == [("put", p + "k", b"v", rev)]
        finally:
            w.close()
    # Without a client certificate the handshake fails.
    with (
        EtcdStore([server.endpoint], ca_cert=c.ca, timeout=1.0) as s,
        pytest.raises(StoreUnavailable),
    ):
        s.get(p + "k")
