"""plugin.bgp: the routes a host announces, and the session that keeps its speaker telling
exactly those (a fake speaker with os-ken's lost-withdrawal bug and handler threads), and
os-ken's real BGPSpeaker in a child process, connecting out to nobody on 127.0.0.1."""

from __future__ import annotations

import dataclasses
import json
import logging
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from common.models import Bgp
from datapath.local import EndpointState, NetworkState
from plugin.bgp import (
    BgpSession,
    Peering,
    kernel_routes,
    route_diff,
    routed_by_bgp,
    wanted_routes,
)
from testbed.fakes_bgp import FakeSpeaker
from testbed.fakes_datapath import FakeRouteTable
from testbed.wait import wait_for

ROOT = Path(__file__).resolve().parents[1]

VLAN = NetworkState(id="t1:vlan", tag=100, subnet="10.1.0.0/24", encap="vlan", vrf=1)
VXLAN = NetworkState(id="t1:vx", tag=5000, subnet="10.2.0.0/24", encap="vxlan", vrf=1)


def ep(eid: str, net: str, ipv4: str = "", ipv6: str = "") -> EndpointState:
    return EndpointState(id=eid, network_id=net, mac="02:42:0a:01:00:02", ipv4=ipv4, ipv6=ipv6)


ENDPOINTS = [
    ep("a", "t1:vlan", "10.1.0.2", "fd01::2"),
    ep("b", "t1:vlan", "10.1.0.3/24"),
    ep("c", "t1:vx", "10.2.0.2"),
]

PEERING = Peering(local_as=65001, router_ip="50.1.1.1", neighbor="50.1.1.2", neighbor_as=65000)


# -- decisions -----------------------------------------------------------------------


def test_only_vlan_networks_in_routing_mode_are_routed_by_bgp() -> None:
    assert routed_by_bgp("routing", VLAN)
    assert not routed_by_bgp("routing", VXLAN)
    assert not routed_by_bgp("bridge", VLAN)


def test_wanted_routes_are_local_endpoints_host_routes_on_bgp_networks() -> None:
    routes = wanted_routes("routing", [VLAN, VXLAN], ENDPOINTS, "50.1.1.1")
    assert routes == {"10.1.0.2/32": "50.1.1.1", "10.1.0.3/32": "50.1.1.1"}


def test_a_128_is_announced_only_with_an_ipv6_next_hop() -> None:
    routes = wanted_routes("routing", [VLAN], ENDPOINTS, "50.1.1.1", "fd50::1")
    assert routes["fd01::2/128"] == "fd50::1"
    assert routes["10.1.0.2/32"] == "50.1.1.1"


def test_bridge_mode_announces_nothing() -> None:
    assert wanted_routes("bridge", [VLAN, VXLAN], ENDPOINTS, "50.1.1.1", "fd50::1") == {}


def test_route_diff_adds_new_and_changed_next_hops_and_withdraws_the_rest() -> None:
    told = {"10.1.0.2/32": "50.1.1.1", "10.1.0.3/32": "50.1.1.1", "10.1.0.4/32": "50.1.1.9"}
    wanted = {"10.1.0.2/32": "50.1.1.1", "10.1.0.4/32": "50.1.1.1", "10.1.0.5/32": "50.1.1.1"}
    add, withdraw = route_diff(wanted, told)
    assert add == {"10.1.0.4/32": "50.1.1.1", "10.1.0.5/32": "50.1.1.1"}
    assert withdraw == {"10.1.0.3/32"}
    assert route_diff(told, told) == ({}, set())


def test_kernel_routes_skip_a_next_hop_of_another_family_or_mapped() -> None:
    learned = {"192.0.2.0/24": "50.1.1.2", "2001:db8::/48": "::ffff:50.1.1.2", "x": "y"}
    learned["2001:db8:1::/48"] = "50.1.1.2"
    learned["2001:db8:2::/48"] = "fd50::2"
    assert kernel_routes(learned) == {"192.0.2.0/24": "50.1.1.2", "2001:db8:2::/48": "fd50::2"}


def test_peering_of_a_bgp_object() -> None:
    bgp = Bgp.model_validate(
        {
            "hostname": "h1",
            "routerip": "50.1.1.1/24",
            "as": "65001",
            "neighbor-as": "65000",
            "neighbor": "50.1.1.2",
        }
    )
    assert Peering.of(bgp) == PEERING
    v6 = Peering.of(bgp.model_copy(update={"routeripv6": "fd00::1/64"}))
    assert v6 == dataclasses.replace(PEERING, next_hop6="fd00::1")


# -- the session, with a fake speaker --------------------------------------------------


class Session:
    def __init__(self, repair_after: float = 0.3, rearm_after: float = 60.0) -> None:
        self.routes = FakeRouteTable()
        self.speakers: list[FakeSpeaker] = []

        def make(peering: Peering, events: object) -> FakeSpeaker:
            speaker = FakeSpeaker(peering, events)  # type: ignore[arg-type]
            self.speakers.append(speaker)
            return speaker

        self.session = BgpSession(
            PEERING,
            make,
            self.routes,
            interval=0.2,
            settle=0.05,
            coalesce=0.01,
            adopted_grace=0.5,
            repair_after=repair_after,
            rearm_after=rearm_after,
        )

    @property
    def speaker(self) -> FakeSpeaker:
        return self.speakers[0]


@pytest.fixture
def s():
    s = Session()
    s.session.start()
    yield s
    s.session.stop()


def rib_is(s: Session, prefixes: set[str]) -> bool:
    return s.speaker.rib_prefixes() == prefixes and set(s.session.status().announced) == prefixes


def test_start_adds_the_neighbor(s: Session) -> None:
    assert s.speaker.neighbors == {"50.1.1.2": 65000}
    wait_for(lambda: s.session.status().state == "Established", 2, "the state read")


def test_announces_and_withdraws_the_net_difference(s: Session) -> None:
    s.session.set_wanted({"10.1.0.2/32": "50.1.1.1", "10.1.0.3/32": "50.1.1.1"})
    wait_for(lambda: rib_is(s, {"10.1.0.2/32", "10.1.0.3/32"}), 2, "both announced")
    s.session.set_wanted({"10.1.0.3/32": "50.1.1.1"})
    wait_for(lambda: rib_is(s, {"10.1.0.3/32"}), 2, "one withdrawn")
    assert s.speaker.rib == {"10.1.0.3/32": "50.1.1.1"}
    assert s.speaker.lost == []


def test_a_burst_of_changes_is_one_net_difference() -> None:
    s = Session()
    for i in range(20):  # before the first pass: added and removed again, never told
        s.session.set_wanted({f"10.1.0.{i}/32": "50.1.1.1"})
    s.session.set_wanted({"10.1.0.99/32": "50.1.1.1"})
    s.session.start()
    try:
        wait_for(lambda: rib_is(s, {"10.1.0.99/32"}), 2, "the last set announced")
        routes = [c for c in s.speaker.calls if c[0] != "end_of_rib"]
        assert routes == [("add", "10.1.0.99/32", "50.1.1.1")]
    finally:
        s.session.stop()


def test_a_lost_withdrawal_is_repaired_from_the_rib(s: Session) -> None:
    s.speaker.hold()  # the add stays queued in the speaker ...
    s.session.set_wanted({"10.1.0.2/32": "50.1.1.1"})
    wait_for(lambda: ("add", "10.1.0.2/32", "50.1.1.1") in s.speaker.calls, 2, "the add")
    s.session.set_wanted({})  # ... when the withdrawal comes: lost, as os-ken loses it
    wait_for(lambda: s.speaker.lost == ["10.1.0.2/32"], 2, "the withdrawal lost")
    s.speaker.release()  # the add is processed: the route is stuck in the speaker
    wait_for(lambda: s.session.repairs >= 1, 3, "the stuck route found in the RIB")
    wait_for(lambda: s.speaker.rib_prefixes() == set(), 3, "the stuck route withdrawn again")
    assert s.session.status().announced == ()


def test_a_slow_speaker_is_not_repaired_while_it_works_through_a_burst() -> None:
    # os-ken works through 100 withdrawals for seconds on a loaded host: repairing what
    # is merely queued re-adds it, queues more, and snowballs (seen: 16,000 repairs).
    s = Session(repair_after=5.0)
    s.session.start()
    try:
        routes = {f"10.1.0.{i}/32": "50.1.1.1" for i in range(10)}
        s.session.set_wanted(routes)
        wait_for(lambda: rib_is(s, set(routes)), 2, "announced")
        s.speaker.hold()
        s.session.set_wanted({})
        time.sleep(1.0)  # several passes read the RIB still holding them all
        s.speaker.release()
        wait_for(lambda: s.speaker.rib_prefixes() == set(), 3, "withdrawn")
        assert s.session.repairs == 0
        assert sorted(c[1] for c in s.speaker.calls if c[0] == "del") == sorted(routes)
    finally:
        s.session.stop()


def test_a_speaker_that_stopped_trying_is_rearmed() -> None:
    # os-ken's connect loop never runs again when its peer-down handling fails.
    s = Session(rearm_after=0.5)
    s.session.start()
    try:
        s.session.set_wanted({"10.1.0.2/32": "50.1.1.1"})
        wait_for(lambda: rib_is(s, {"10.1.0.2/32"}), 2, "announced")
        s.speaker.state = "Active"  # down, and trying: nothing to do
        time.sleep(0.8)
        assert s.session.rearms == 0
        s.speaker.state, s.speaker.stuck = "Idle", True
        wait_for(lambda: s.session.status().state == "Established", 3, "connected again")
        assert s.session.rearms == 1 and len(s.speakers) == 1
    finally:
        s.session.stop()


def test_a_route_the_speaker_lost_is_announced_again(s: Session) -> None:
    s.session.set_wanted({"10.1.0.2/32": "50.1.1.1"})
    wait_for(lambda: rib_is(s, {"10.1.0.2/32"}), 2, "announced")
    s.speaker.drop("10.1.0.2/32")
    wait_for(lambda: s.speaker.rib_prefixes() == {"10.1.0.2/32"}, 3, "announced again")


def test_learned_routes_go_to_the_kernel_from_the_speakers_thread(s: Session) -> None:
    s.speaker.learn("192.0.2.0/24", "50.1.1.2")
    s.speaker.learn("10.9.0.5/32", "50.1.1.2")
    wait_for(lambda: len(s.routes.routes) == 2, 2, "both installed")
    assert s.routes.routes == {"192.0.2.0/24": "50.1.1.2", "10.9.0.5/32": "50.1.1.2"}
    assert s.speaker.handler_threads == {"fake-bgp-core"}
    s.speaker.learn("10.9.0.5/32", "50.1.1.3")  # a new best path
    s.speaker.unlearn("192.0.2.0/24")
    wait_for(lambda: s.routes.routes == {"10.9.0.5/32": "50.1.1.3"}, 2, "replaced, removed")
    assert s.session.status().learned == {"10.9.0.5/32": "50.1.1.3"}


def test_a_failing_route_table_neither_kills_the_speaker_nor_the_loop(s: Session) -> None:
    s.routes.fail = "netlink: no route to host"
    s.speaker.learn("192.0.2.0/24", "50.1.1.2")
    wait_for(lambda: s.session.loop.failures >= 1, 2, "a pass failed")
    # The speaker's thread lived on: it still delivers, and announcements still work.
    s.speaker.learn("198.51.100.0/24", "50.1.1.2")
    s.session.set_wanted({"10.1.0.2/32": "50.1.1.1"})
    wait_for(lambda: s.speaker.rib_prefixes() == {"10.1.0.2/32"}, 2, "announced meanwhile")
    wait_for(lambda: len(s.session.status().learned) == 2, 2, "both learned")
    s.routes.fail = None
    wait_for(lambda: len(s.routes.routes) == 2, 5, "installed once the table works")


def test_status_reports_state_announced_and_learned(s: Session) -> None:
    s.speaker.state = "Active"
    s.session.set_wanted({"10.1.0.3/32": "50.1.1.1", "10.1.0.2/32": "50.1.1.1"})
    s.speaker.learn("192.0.2.0/24", "50.1.1.2")
    s.speaker.peer(False)
    wait_for(lambda: s.session.status().state == "Active", 2, "the state read")
    wait_for(lambda: rib_is(s, {"10.1.0.2/32", "10.1.0.3/32"}), 2, "announced")
    wait_for(lambda: s.session.status().learned, 2, "learned")
    status = s.session.status()
    assert status.neighbor == "50.1.1.2"
    assert status.announced == ("10.1.0.2/32", "10.1.0.3/32")
    assert status.learned == {"192.0.2.0/24": "50.1.1.2"}


def test_stop_ends_the_loop_and_shuts_the_speaker_down() -> None:
    s = Session()
    s.session.start()
    s.session.set_wanted({"10.1.0.2/32": "50.1.1.1"})
    wait_for(lambda: rib_is(s, {"10.1.0.2/32"}), 2, "announced")
    s.session.stop()
    assert s.speaker.shut
    assert s.session.loop.stopped
    assert not any(t.name == "bgp" for t in threading.enumerate())


# -- os-ken's BGPSpeaker, for real -----------------------------------------------------

REAL = textwrap.dedent(
    """
    import json, os, sys, time
    t0 = time.monotonic()
    import plugin.bgp
    out = {"os_ken_at_import": any(m.startswith("os_ken") for m in sys.modules)}
    from plugin.bgp import BgpSession, Peering
    from plugin.bgp_osken import make_speaker

    class Routes:  # testbed's fakes import python-ovs, which imports eventlet (see below)
        def replace(self, prefix, via): pass
        def delete(self, prefix): return False
        def learned(self): return {}

    peering = Peering(local_as=65001, router_ip="127.0.0.1", neighbor="127.0.0.1",
                      neighbor_as=65000)
    session = BgpSession(peering, make_speaker, Routes(), interval=0.2, settle=0.05)
    session.start()
    speaker = session._speaker

    def until(what, check):
        deadline = time.monotonic() + 3
        while not check():
            if time.monotonic() > deadline:
                raise SystemExit("not in time: " + what)
            time.sleep(0.02)

    session.set_wanted({"10.9.0.5/32": "127.0.0.1", "10.9.0.6/32": "127.0.0.1"})
    until("announced", lambda: speaker.rib_prefixes() == {"10.9.0.5/32", "10.9.0.6/32"})
    session.set_wanted({"10.9.0.6/32": "127.0.0.1"})
    until("withdrawn", lambda: speaker.rib_prefixes() == {"10.9.0.6/32"})
    until("state", lambda: session.status().state != "Unknown")
    out["state"] = session.status().state
    out["announced"] = list(session.status().announced)
    # A connect loop that still tries is left alone; one that stopped (os-ken's peer-down
    # handling failed before re-arming it) is re-armed.
    from os_ken.services.protocols.bgp.core_manager import CORE_MANAGER
    peer = CORE_MANAGER.get_core_service().peer_manager.get_by_addr("127.0.0.1")
    out["rearm_while_trying"] = speaker.rearm("127.0.0.1")
    peer._connect_retry_event.clear()
    until("rearmed", lambda: speaker.rearm("127.0.0.1"))
    out["trying_again"] = peer._connect_retry_event.is_set()
    t = time.monotonic()
    session.stop()
    out["stop_secs"] = time.monotonic() - t
    out["eventlet"] = "eventlet" in sys.modules
    from os_ken.lib import hub
    out["hub"] = hub.HUB_TYPE
    out["secs"] = time.monotonic() - t0
    print(json.dumps(out), flush=True)
    os._exit(0)  # os-ken leaves non-daemon threads behind; the agent ends this way too
    """
)


def test_real_os_ken_speaker_in_process_without_eventlet() -> None:
    pytest.importorskip("os_ken.services.protocols.bgp.bgpspeaker")
    # A child process: os-ken's core is a process-wide singleton and leaves threads behind.
    proc = subprocess.run(
        [sys.executable, "-c", REAL], cwd=ROOT, capture_output=True, text=True, timeout=30
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["os_ken_at_import"] is False
    # Neither plugin.bgp nor os-ken's BGP imports eventlet. (The agent's process has it in
    # sys.modules anyway: python-ovs's poller imports it to ask whether select is
    # monkey-patched; nothing patches it, and os-ken's hub stays native.)
    assert out["eventlet"] is False
    assert out["hub"] == "native"
    assert out["state"] in {"Idle", "Connect", "Active"}  # no router on 127.0.0.1:179
    assert out["announced"] == ["10.9.0.6/32"]
    assert out["rearm_while_trying"] is False and out["trying_again"] is True
    assert out["stop_secs"] < 5
    assert out["secs"] < 10


def test_a_previous_agents_kernel_routes_stay_until_the_router_is_heard() -> None:
    """A restarted agent adopts the routes the last one learned: they keep the fabric's
    traffic flowing until the new session has been Established for a moment (the router
    sends its table then); then what the router says wins."""
    s = Session()
    s.routes.routes = {"10.250.0.0/24": "50.1.1.2", "10.251.0.0/24": "50.1.1.2"}
    make = s.session._make_speaker

    def silent(peering: Peering, events: object) -> FakeSpeaker:
        speaker = make(peering, events)  # type: ignore[arg-type]
        speaker.state = "Active"  # the router not heard yet
        return speaker

    s.session._make_speaker = silent
    s.session.start()
    try:
        wait_for(lambda: s.session.status().state == "Active", 2, "the state read")
        time.sleep(0.5)  # passes go by
        assert set(s.routes.routes) == {"10.250.0.0/24", "10.251.0.0/24"}
        s.speaker.state = "Established"
        time.sleep(0.3)  # up, the router's table not sent yet: both stay
        assert set(s.routes.routes) == {"10.250.0.0/24", "10.251.0.0/24"}
        s.speaker.learn("10.250.0.0/24", "50.1.1.2")
        wait_for(lambda: s.routes.routes == {"10.250.0.0/24": "50.1.1.2"}, 2, "stale route gone")
    finally:
        s.session.stop()
    # Stopping keeps the learned routes (a restart adopts them); forgetting removes them.
    assert s.routes.routes == {"10.250.0.0/24": "50.1.1.2"}
    s.session.stop(forget=True)
    assert s.routes.routes == {}


def test_end_of_rib_follows_the_routes_once_per_session(s: Session) -> None:
    """Graceful restart: once the session is up and every wanted route told, one
    End-of-RIB; a session that goes down and up again sends another."""
    s.session.set_wanted({"10.1.0.2/32": "50.1.1.1", "10.1.0.3/32": "50.1.1.1"})
    eor = ("end_of_rib", "50.1.1.2")
    wait_for(lambda: eor in s.speaker.calls, 2, "End-of-RIB")
    assert s.speaker.calls.index(eor) > max(
        i for i, c in enumerate(s.speaker.calls) if c[0] == "add"
    )
    time.sleep(0.5)  # passes go by: no second one
    assert s.speaker.calls.count(eor) == 1
    s.speaker.state = "Active"
    s.session.loop.poke()
    wait_for(lambda: s.session.status().state == "Active", 2, "the session down")
    s.speaker.state = "Established"
    s.session.loop.poke()
    wait_for(lambda: s.speaker.calls.count(eor) == 2, 2, "End-of-RIB of the new session")


def test_our_own_routes_coming_back_are_no_error(caplog: pytest.LogCaptureFixture) -> None:
    from plugin.bgp_osken import _quiet_own_routes

    logger = logging.getLogger("bgpspeaker.peer.test")
    _quiet_own_routes(logger)
    _quiet_own_routes(logger)  # once only
    assert len(logger.filters) == 1
    with caplog.at_level(logging.INFO, logger="bgpspeaker.peer.test"):
        logger.error("AS_PATH on UPDATE message has loops. Ignoring this message: %s", "u")
        logger.error("something else")
    assert [r.getMessage() for r in caplog.records] == ["something else"]
