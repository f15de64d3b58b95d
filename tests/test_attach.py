"""plugin.attach: one attach for the Docker driver and the CNI service; a failure leaves
nothing of the attachment, and a master's refusal (which changed nothing) frees nothing."""

from __future__ import annotations

from typing import Any

import pytest
from docker_plugin import FakeDatapath

from common.client import MasterError
from common.models import Endpoint, EndpointRequest, Network
from plugin.attach import DatapathFailure, attach, detach

NET = Network(networkName="n1", subnet="10.1.0.0/24", gateway="10.1.0.1")
REQ = EndpointRequest(
    endpointID="e" * 64,
    tenantName="default",
    networkName="n1",
    groupName="web",
    host="h1",
    macAddress="02:00:00:00:00:01",
)


class Master:
    def __init__(self, error: MasterError | None = None) -> None:
        self.error = error
        self.booked: dict[str, Endpoint] = {}
        self.freed: list[str] = []

    def create_endpoint(self, request: EndpointRequest) -> Endpoint:
        if self.error is not None:
            raise self.error
        ep = Endpoint(
            **{**request.model_dump(exclude={"adoptAddress", "swarmTask"}), "ipAddress": "10.1.0.2"}
        )
        self.booked[request.endpointID] = ep
        return ep

    def delete_endpoint(self, endpoint_id: str) -> Any:
        self.freed.append(endpoint_id)
        if self.booked.pop(endpoint_id, None) is None:
            raise MasterError("not found", 404)


def test_attach_books_plugs_and_gives_the_port_its_flows() -> None:
    master, dp = Master(), FakeDatapath()
    ep, ifname = attach(master, dp, REQ, NET, 1450)
    assert ep.ipAddress == "10.1.0.2" and ifname == dp.ports[REQ.endpointID]["name"]
    assert dp.ports[REQ.endpointID]["ipv4"] == "10.1.0.2"
    assert dp.ports[REQ.endpointID]["group"] == "default:web"
    detach(master, dp, REQ.endpointID)
    assert dp.ports == {} and master.booked == {}
    detach(master, dp, REQ.endpointID)  # again: done already


@pytest.mark.parametrize("status, freed", [(409, False), (503, True)])
def test_a_master_that_refuses_or_does_not_answer_leaves_no_port(status: int, freed: bool) -> None:
    master, dp = Master(MasterError("no", status)), FakeDatapath()
    with pytest.raises(MasterError):
        attach(master, dp, REQ, NET, 1450)
    assert dp.ports == {}
    # A refusal changed nothing; no answer may have booked it: freed all the same.
    assert master.freed == ([REQ.endpointID] if freed else [])


def test_a_datapath_failure_after_booking_frees_the_booking() -> None:
    master, dp = Master(), FakeDatapath()
    dp.fail = True
    with pytest.raises(DatapathFailure, match="add-port failed"):
        attach(master, dp, REQ, NET, 1450)
    assert dp.ports == {} and master.booked == {} and master.freed == [REQ.endpointID]


def test_the_booking_is_heard_of_before_the_flows_and_a_hearer_that_fails_leaves_nothing() -> None:
    master, dp = Master(), FakeDatapath()
    heard: list[tuple[str, str]] = []

    def booked(ep: Endpoint) -> None:
        heard.append((ep.ipAddress, dp.ports.get(REQ.endpointID, {}).get("ipv4", "")))

    attach(master, dp, REQ, NET, 1450, on_booked=booked)
    assert heard == [("10.1.0.2", "")]  # before its flows had the address
    detach(master, dp, REQ.endpointID)

    def refuses(ep: Endpoint) -> None:
        raise RuntimeError("cannot schedule the pod's configuration")

    with pytest.raises(DatapathFailure, match="cannot schedule"):
        attach(master, dp, REQ, NET, 1450, on_booked=refuses)
    assert dp.ports == {} and master.booked == {}


class FlowsRefused(FakeDatapath):
    def create_endpoint_port(self, *args: Any, **kwargs: Any) -> str:
        raise RuntimeError("the switch refused its flows")


def test_a_port_plugged_before_its_flows_failed_is_removed() -> None:
    master, dp = Master(), FlowsRefused()
    with pytest.raises(DatapathFailure, match="refused its flows"):
        attach(master, dp, REQ, NET, 1450)
    assert dp.ports == {} and master.booked == {}


ASKED = REQ.model_copy(update={"ipAddress": "10.1.0.7", "adoptAddress": True})


class Booking(Master):
    """A master that books what was asked (or ``other``), and notes what the switch held
    of the endpoint while it was booking."""

    def __init__(self, dp: FakeDatapath, other: str = "", error: MasterError | None = None):
        super().__init__(error)
        self.dp, self.other = dp, other
        self.flows_while_booking: dict[str, Any] | None = None

    def create_endpoint(self, request: EndpointRequest) -> Endpoint:
        import time

        deadline = time.monotonic() + 5
        while request.endpointID not in self.dp.ports and time.monotonic() < deadline:
            time.sleep(0.005)  # the datapath's thread: flows on their way meanwhile
        self.flows_while_booking = dict(self.dp.ports.get(request.endpointID, {}))
        if self.error is not None:
            raise self.error
        ep = Endpoint(
            **{
                **request.model_dump(exclude={"adoptAddress", "swarmTask"}),
                "ipAddress": self.other or request.ipAddress,
            }
        )
        self.booked[request.endpointID] = ep
        return ep


def test_addresses_docker_named_have_their_flows_sent_while_the_master_books() -> None:
    dp = FakeDatapath()
    master = Booking(dp)
    ep, ifname = attach(master, dp, ASKED, NET, 1450)
    assert master.flows_while_booking is not None
    assert master.flows_while_booking.get("ipv4") == "10.1.0.7"  # not after the answer
    assert ep.ipAddress == "10.1.0.7" and dp.ports[ASKED.endpointID]["ipv4"] == "10.1.0.7"
    assert ifname == dp.ports[ASKED.endpointID]["name"]


def test_flows_sent_ahead_follow_the_addresses_the_master_booked() -> None:
    dp = FakeDatapath()
    ep, _ = attach(Booking(dp, other="10.1.0.9"), dp, ASKED, NET, 1450)
    assert ep.ipAddress == "10.1.0.9" and dp.ports[ASKED.endpointID]["ipv4"] == "10.1.0.9"


def test_flows_sent_ahead_are_gone_when_the_master_refuses() -> None:
    dp = FakeDatapath()
    master = Booking(dp, error=MasterError("address 10.1.0.7 is taken", 409))
    with pytest.raises(MasterError, match="taken"):
        attach(master, dp, ASKED, NET, 1450)
    assert master.flows_while_booking and dp.ports == {} and master.freed == []
