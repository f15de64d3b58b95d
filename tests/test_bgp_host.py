"""plugin.bgp_host.HostBgp against a cluster view of an embedded store, a datapath of fakes
and the fake speaker: the Bgp object of this host in routing mode makes the router port
and the session, local containers' /32s on VLAN networks are announced, the session is
reported under the host's lease, and a deleted Bgp object ends it all."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from common import keys
from common.models import Bgp, Endpoint, GlobalSettings, Network, Tenant
from common.records import (
    BgpSessionRecord,
    NetworkRecord,
    TenantRecord,
    encode_config,
    encode_endpoint,
)
from datapath.host import HostConfig, HostDatapath
from datapath.hostnat import FABRIC_PORT
from plugin.bgp import Peering, SpeakerEvents
from plugin.bgp_host import HostBgp, host_peering
from plugin.cluster import ClusterView
from plugin.cluster_sync import fabric_subnets
from store.embedded import EmbeddedStore
from testbed.fakes_bgp import FakeSpeaker
from testbed.fakes_datapath import (
    FakeController,
    FakeIptables,
    FakeLinks,
    FakeOvs,
    FakeRouteTable,
)


def wait_until(predicate: Any, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not met"
        time.sleep(0.01)


def network(tenant: str, name: str, subnet: str, encap: str, tag: int) -> NetworkRecord:
    config = Network(tenantName=tenant, networkName=name, subnet=subnet, encap=encap)
    return NetworkRecord(config=config, encap=encap, pkt_tag=tag)


def endpoint(eid: str, host: str, net: str, ip: str) -> bytes:
    mac = f"02:42:0a:00:00:{ip.rsplit('.', 1)[1]:0>2}"
    return encode_endpoint(
        Endpoint(
            endpointID=eid,
            host=host,
            tenantName="blue",
            networkName=net,
            macAddress=mac,
            ipAddress=ip,
        )
    )


BGP = Bgp.model_validate(
    {
        "hostname": "h1",
        "routerip": "10.200.0.1/24",
        "as": "65001",
        "neighbor-as": "65000",
        "neighbor": "10.200.0.254",
    }
)


def test_decisions() -> None:
    assert host_peering("bridge", BGP) is None and host_peering("routing", None) is None
    assert host_peering("routing", BGP) == Peering(65001, "10.200.0.1", "10.200.0.254", 65000)
    records = [
        network("blue", "vl", "10.80.0.0/24", "vlan", 300),
        network("blue", "vx", "10.81.0.0/24", "vxlan", 5001),
        network("red", "vl", "10.90.0.0/24", "vlan", 301),
    ]
    tags = {"blue": 1, "red": 2}
    assert fabric_subnets("routing", records, tags) == {1: ["10.80.0.0/24"], 2: ["10.90.0.0/24"]}
    assert fabric_subnets("bridge", records, tags) == {}


def test_the_host_peers_announces_reports_and_ends(tmp_path: Path) -> None:
    store = EmbeddedStore(str(tmp_path / "state.db"))
    store.put(keys.GLOBAL, encode_config(GlobalSettings(fwdMode="routing")))
    store.put(keys.tenant("blue"), TenantRecord(config=Tenant(tenantName="blue"), tag=1).encode())
    store.put(
        keys.network("blue", "vl"), network("blue", "vl", "10.80.0.0/24", "vlan", 300).encode()
    )
    store.put(
        keys.network("blue", "vx"), network("blue", "vx", "10.81.0.0/24", "vxlan", 5001).encode()
    )
    store.put(keys.endpoint("blue", "vl", "e1"), endpoint("e1", "h1", "vl", "10.80.0.2"))
    store.put(keys.endpoint("blue", "vx", "e2"), endpoint("e2", "h1", "vx", "10.81.0.2"))
    store.put(keys.endpoint("blue", "vl", "e3"), endpoint("e3", "h2", "vl", "10.80.0.3"))
    ovs = FakeOvs()
    agent = HostDatapath(
        HostConfig(datapath_type="netdev", vlan_uplink="eth2"),
        ovs,
        FakeController(),
        FakeIptables(),
        FakeLinks(),
    )
    agent.start()
    agent.resync([], [], fwd_mode="routing")
    speakers: list[FakeSpeaker] = []

    def make(peering: Peering, events: SpeakerEvents) -> FakeSpeaker:
        speakers.append(FakeSpeaker(peering, events))
        return speakers[-1]

    reports: dict[str, bytes | None] = {}

    def report(key: str, value: bytes | None) -> bool:
        reports[key] = value
        return True

    routes = FakeRouteTable()
    routes.routes["10.99.0.0/24"] = "10.200.0.254"  # what a previous agent learned
    view = ClusterView(store, lambda: None).start()
    loop = HostBgp(view, agent, "h1", report, make, routes, interval=0.2, adopted_grace=0.3)
    try:
        assert view.wait_synced(5)
        # No Bgp object: no port, no session, no report.
        assert loop._pass() is None
        assert FABRIC_PORT not in ovs.ports and not speakers
        assert reports == {}
        store.put(keys.bgp("h1"), encode_config(BGP))
        wait_until(lambda: "h1" in view.bgps.values())
        loop._pass()
        assert agent.fabric_addresses() == ("10.200.0.1/24",) and FABRIC_PORT in ovs.ports
        [speaker] = speakers
        assert speaker.neighbors == {"10.200.0.254": 65000}
        session = loop.session
        assert session is not None
        # Only this host's container on the VLAN network is announced.
        wait_until(lambda: speaker.rib == {"10.80.0.2/32": "10.200.0.1"})
        # A previous agent's kernel route stays until the router has had a moment to send
        # its table; then what the router says is the truth.
        speaker.learn("10.250.0.0/24", "10.200.0.254")
        wait_until(lambda: routes.routes == {"10.250.0.0/24": "10.200.0.254"})
        loop._pass()
        record = BgpSessionRecord.decode(reports[keys.bgp_session("h1")] or b"")
        assert record.state == "Established" and record.announced == ("10.80.0.2/32",)
        assert record.learned == {"10.250.0.0/24": "10.200.0.254"}
        # The container goes: its route is withdrawn.
        store.delete(keys.endpoint("blue", "vl", "e1"))
        wait_until(lambda: not view.endpoints.values().get("blue/vl/e1"))
        loop._pass()
        wait_until(lambda: speaker.rib == {})
        # A changed Bgp object: a new session (the old speaker shut down first); an IPv6
        # router IP goes on the port too, and is the next hop of the /128s.
        changed = {"neighbor_as": "65100", "routeripv6": "fd00:200::1/64"}
        store.put(keys.bgp("h1"), encode_config(BGP.model_copy(update=changed)))
        wait_until(lambda: view.bgps.values()["h1"].neighbor_as == "65100")
        loop._pass()
        assert speaker.shut and len(speakers) == 2
        assert speakers[1].neighbors == {"10.200.0.254": 65100}
        assert speakers[1].peering.next_hop6 == "fd00:200::1"
        assert agent.fabric_addresses() == ("10.200.0.1/24", "fd00:200::1/64")
        # The Bgp object deleted: the session ends, its learned routes and the port go.
        store.delete(keys.bgp("h1"))
        wait_until(lambda: "h1" not in view.bgps.values())
        loop._pass()
        assert speakers[1].shut and loop.session is None
        assert routes.routes == {} and FABRIC_PORT not in ovs.ports
        assert reports[keys.bgp_session("h1")] is None
        # Back in bridge mode (an emptied cluster), a pass has nothing to do.
        store.put(keys.GLOBAL, encode_config(GlobalSettings(fwdMode="bridge")))
        wait_until(lambda: view.fwd_mode() == "bridge")
        loop._pass()
        told = agent.set_fabric
        agent.set_fabric = lambda *a: pytest.fail("set_fabric in bridge mode")  # type: ignore[method-assign]
        assert loop._pass() is None
        agent.set_fabric = told  # type: ignore[method-assign]
    finally:
        loop.stop()
        if loop.session is not None:
            loop.session.stop()
        view.stop()
        store.close()
