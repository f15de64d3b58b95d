"""Netprofiles in the datapath: what an endpoint may send (an OpenFlow meter) and the DSCP
its IP packets are marked with, as pure flows and meters.

Measured on this machine (shared/spec/DATAPATH-FEATURES.md §2, §3): OVS's
ingress_policing_rate and its egress-policer QoS do nothing on the userspace datapath; a
meter with one drop band on the classify flow of the endpoint's port limits what the
container sends (Contiv's ingress policing of the port) within 5 % when its burst is about
a quarter of the rate (in kbit); set_field ip_dscp needs an IPv4 or IPv6 match, so a marked
endpoint's classify flow is split per family. The meter of an endpoint is named by its
ofport (unique on the bridge while the port lives).
"""

from __future__ import annotations

from dataclasses import dataclass

from datapath.flows import ETH_TYPE_IPV4, ETH_TYPE_IPV6, Action, Entry, Meter, flow, meter
from datapath.tables import CLASSIFY, PRIO_RULE

MAX_DSCP = 63
DEFAULT_BURST_SHARE = 0.25  # of the rate, in kbit: within 5 % of the rate for TCP and UDP
MIN_BURST_KBIT = 500  # a floor for tiny rates (make bench measures 1 Mbit/s)


@dataclass(frozen=True)
class QosState:
    """A group's netprofile, resolved: kbit/s (0: unlimited), burst in kbit (0: the
    default), DSCP (0: packets keep theirs)."""

    rate_kbps: int = 0
    burst_kbit: int = 0
    dscp: int = 0


def check_qos(owner: str, q: QosState) -> None:
    """Refuse a profile the switch cannot realise, naming the field."""
    for what, value, high in (
        ("rate", q.rate_kbps, 0xFFFF_FFFF),
        ("burst", q.burst_kbit, 0xFFFF_FFFF),
        ("DSCP", q.dscp, MAX_DSCP),
    ):
        if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= high:
            raise ValueError(f"{owner}: {what} {value!r} is out of 0-{high}")


def burst_of(q: QosState) -> int:
    """The meter's burst in kbit: the profile's, or a quarter of the rate (at least 500 kbit)."""
    return q.burst_kbit or max(int(q.rate_kbps * DEFAULT_BURST_SHARE), MIN_BURST_KBIT)


def endpoint_meter(ofport: int, q: QosState | None) -> list[Meter]:
    """The meter that limits what the endpoint on ``ofport`` sends (none if unlimited)."""
    if q is None or not q.rate_kbps:
        return []
    return [meter(ofport, q.rate_kbps, burst_of(q))]


def classify_flows(ofport: int, mark: Action, goto: Action, q: QosState | None) -> list[Entry]:
    """The classify flows of a local endpoint's port (``mark``: its write_metadata), through
    its meter and marking its IP packets with the profile's DSCP; and its meter."""
    meters = endpoint_meter(ofport, q)
    head: list[Action] = [("meter", ofport)] if meters else []
    flows: list[Entry] = [flow(CLASSIFY.id, PRIO_RULE, [*head, mark, goto], in_port=ofport)]
    if q is not None and q.dscp:
        flows += [
            flow(
                CLASSIFY.id,
                PRIO_RULE + 1,
                [*head, ("set_field", "ip_dscp", q.dscp), mark, goto],
                in_port=ofport,
                eth_type=eth_type,
            )
            for eth_type in (ETH_TYPE_IPV4, ETH_TYPE_IPV6)
        ]
    return [*flows, *meters]
