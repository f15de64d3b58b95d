"""The containers of this host's endpoints (plugin.containers), and what the agent makes of
the cluster's services and netprofiles (plugin.service_view, plugin.policy_view): pure,
with dockerd's container list and the master as fakes."""

from __future__ import annotations

from typing import Any

import pytest

from common.models import Endpoint, EndpointContainer, EndpointGroup, NetProfile, Network, ServiceLB
from common.records import GroupRecord, NetworkRecord, ServiceRecord
from datapath.qos import QosState
from datapath.services import ProviderState, ServicePortState
from plugin.containers import ContainerReporter, reports
from plugin.policy_view import group_states, qos_of
from plugin.service_view import service_states


def ep(eid: str, host: str = "h1", ip: str = "", **over: Any) -> Endpoint:
    return Endpoint(
        endpointID=eid,
        tenantName="t",
        networkName="n",
        host=host,
        ipAddress=ip,
        macAddress=f"02:42:00:00:00:{len(eid):02x}",
        **over,
    )


def listed(cid: str, name: str, labels: dict[str, str], *endpoints: str) -> dict[str, Any]:
    """A /containers/json entry with its endpoints on networks net0, net1, ..."""
    nets = {f"net{i}": {"EndpointID": e} for i, e in enumerate(endpoints)}
    return {
        "Id": cid,
        "Names": [f"/{name}"],
        "Labels": labels,
        "NetworkSettings": {"Networks": nets},
    }


def test_reports_match_endpoints_to_the_containers_that_have_them() -> None:
    pending = {"e1": ep("e1"), "e2": ep("e2")}
    got = reports(
        pending,
        [
            listed("c1", "web1", {"app": "web"}, "e1", "elsewhere"),
            listed("c2", "db", {}, "other"),
            {"Id": "c3", "NetworkSettings": None},  # no networks (--net none)
        ],
    )
    assert got == {
        "e1": EndpointContainer(containerID="c1", containerName="web1", labels={"app": "web"})
    }
    done = {"e1": ep("e1", containerID="c1", containerName="web1", labels={"app": "web"})}
    assert reports(done, [listed("c1", "web1", {"app": "web"}, "e1")]) == {}


class FakeMaster:
    def __init__(self) -> None:
        self.calls: list[tuple[str, EndpointContainer]] = []
        self.fail = False

    def report(self, eid: str, info: EndpointContainer) -> None:
        if self.fail:
            raise RuntimeError("master away")
        self.calls.append((eid, info))


def test_the_reporter_lists_containers_only_while_an_endpoint_of_its_host_lacks_one() -> None:
    endpoints = {"e1": ep("e1"), "e2": ep("e2", host="h2")}
    listings = 0

    def containers() -> list[dict[str, Any]]:
        nonlocal listings
        listings += 1
        return [listed("c1", "web1", {"app": "web"}, "e1"), listed("c2", "x", {}, "e2")]

    master = FakeMaster()
    r = ContainerReporter("h1", lambda: endpoints, containers, master.report)
    assert r.pass_once() == 0
    assert [eid for eid, _ in master.calls] == ["e1"]  # e2 is another host's to tell
    assert r.pass_once() == 0 and len(master.calls) == 1  # told: not again
    endpoints["e1"] = ep("e1", containerID="c1", containerName="web1", labels={"app": "web"})
    listings_before = listings
    assert r.pass_once() == 0 and listings == listings_before  # nothing pending: no listing


def test_the_reporter_retries_what_did_not_take() -> None:
    endpoints = {"e1": ep("e1")}
    master = FakeMaster()
    master.fail = True
    listing: list[dict[str, Any]] = []
    r = ContainerReporter("h1", lambda: endpoints, lambda: listing, master.report)
    assert r.pass_once() == 1  # not listed yet: still pending
    listing.append(listed("c1", "web1", {}, "e1"))
    assert r.pass_once() == 1  # the master is away
    master.fail = False
    assert r.pass_once() == 0 and master.calls[0][0] == "e1"


# --- what the agent makes of services and netprofiles ---

NET = NetworkRecord(
    config=Network(tenantName="t", networkName="n", subnet="10.1.0.0/24"), encap="vxlan", pkt_tag=5
)


def test_service_states_carry_the_providers_the_master_would_show() -> None:
    svc = ServiceRecord(
        config=ServiceLB(
            tenantName="t",
            serviceName="web",
            networkName="n",
            selectors=["app=web"],
            ports=["80:8080:TCP", "53:53:UDP"],
        ),
        vip="10.1.0.100",
        tag=2,
    )
    lost = ServiceRecord(
        config=svc.config.model_copy(update={"networkName": "gone"}), vip="10.9.0.1", tag=3
    )
    eps = [
        ep("e1", ip="10.1.0.7", labels={"app": "web"}),
        ep("e22", ip="10.1.0.3", labels={"app": "web"}, host="h2"),
        ep("e333", ip="10.1.0.4", labels={"app": "db"}),
    ]
    states, skipped = service_states([svc, lost], eps, {NET.id: NET})
    (s,) = states
    assert (s.id, s.network_id, s.vip, s.tag) == ("t:web", "t:n", "10.1.0.100", 2)
    assert s.ports == (ServicePortState(6, 80, 8080), ServicePortState(17, 53, 53))
    assert s.providers == (
        ProviderState("10.1.0.3", eps[1].macAddress),
        ProviderState("10.1.0.7", eps[0].macAddress),
    )
    assert skipped == ["service t:web: network t:gone is unknown"]


@pytest.mark.parametrize(
    ("fields", "qos"),
    [
        ({"bandwidth": "10mbps", "burst": 300, "DSCP": 46}, QosState(10_000, 2_400, 46)),
        ({"bandwidth": "1gbps"}, QosState(1_000_000, 0, 0)),
        ({"DSCP": 10}, QosState(0, 0, 10)),
        ({}, None),  # asks nothing
        ({"bandwidth": "fast"}, None),  # one the master would refuse: nothing, not a crash
    ],
)
def test_netprofiles_as_the_datapath_takes_them(fields: dict[str, Any], qos: Any) -> None:
    assert qos_of(NetProfile(tenantName="t", profileName="p", **fields)) == qos


def test_groups_carry_their_netprofile() -> None:
    group = GroupRecord(
        config=EndpointGroup(tenantName="t", groupName="g", networkName="n", netProfile="gold"),
        tag=4,
    )
    plain = GroupRecord(config=EndpointGroup(tenantName="t", groupName="h", networkName="n"), tag=5)
    gold = NetProfile(tenantName="t", profileName="gold", bandwidth="5mbps", DSCP=8)
    states, _ = group_states([group, plain], [], [NET], [gold])
    assert [(g.id, g.qos) for g in states] == [("t:g", QosState(5_000, 0, 8)), ("t:h", None)]
    states, _ = group_states([group], [], [NET], [])  # the profile not mirrored yet
    assert states[0].qos is None


def test_an_endpoint_given_up_on_is_tried_again_at_dockers_next_event(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import plugin.containers as containers

    clock = [1000.0]
    monkeypatch.setattr(containers.time, "monotonic", lambda: clock[0])
    endpoints = {"e1": ep("e1")}
    master = FakeMaster()
    master.fail = True  # the master away for longer than the reporter waits
    listing = [listed("c1", "web1", {"app": "web"}, "e1")]
    r = ContainerReporter("h1", lambda: endpoints, lambda: listing, master.report)
    assert r.pass_once() == 1
    clock[0] += containers.GIVE_UP + 1
    master.fail = False
    assert r.pass_once() == 0 and master.calls == []  # given up: not listed any more
    r.on_event({"Type": "container", "Action": "destroy"})  # not one that wakes it
    assert r.pass_once() == 0 and master.calls == []
    # A container started somewhere: everything pending is tried again.
    r.on_event({"Type": "container", "Action": "start"})
    assert r.pass_once() == 0 and [eid for eid, _ in master.calls] == ["e1"]
