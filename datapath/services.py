"""Service load balancing in the datapath: a VIP spread over its providers by a select
group on the client's host, conntrack NAT doing the rest, no controller on the data path.

Measured on this machine (shared/spec/DATAPATH-FEATURES.md §4): a select group whose
buckets ct(commit, nat(dst=PROVIDER:PORT)) spreads connections evenly and keeps
established ones when its buckets change; replies are un-NATed by ct(nat) in conntrack.
The packets of a connection to a VIP, on the client's host:

    arp 20        ARP for the VIP from a local endpoint: answered with the VIP's MAC
    conntrack 30  every tracked IP packet: ct(zone=Z, nat) (an established connection is
                  DNATed, a reply un-DNATed) -> service
    service 40    +new to VIP:port -> the port's select group: a bucket sets the provider's
                  MAC and ct(commit, zone=Z, nat(dst=PROVIDER:PORT)) -> policy (which sees
                  the real provider); an established packet DNATed to a provider gets the
                  provider's MAC; a reply from the VIP gets the VIP's MAC -> policy
    forward 60    what is still addressed to the VIP's MAC (a port the service does not
                  serve, or no provider) is dropped, never flooded

Hairpin (a provider reaching its own VIP and picked for it) needs the source changed too, or
the provider would answer itself directly: the forward table sends a local packet from P to
P back out of its port through ct(commit, zone=H, nat(src=the network's hairpin VIP)), H
being the network's hairpin zone. P answers that VIP: conntrack sends a local packet to a
VIP through zone H first (un-SNAT, and a reply there sets HAIRPIN in reg7), then zone Z
(un-DNAT); service swaps the MACs, and forward sends a HAIRPIN packet back out of its port.

A network's services are one unit of flows (datapath.flowmodel): they depend on the
network (segment, zones) and the services alone, never on which providers are local.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from datapath.arp import ARP_REQUEST, OFPP_IN_PORT, responder
from datapath.flows import ETH_TYPE_ARP, ETH_TYPE_IPV4, Action, Entry, Flow, flow, group
from datapath.tables import (
    ARP,
    CONNTRACK,
    FORWARD,
    POLICY,
    PRIO_EXCEPTION,
    PRIO_RULE,
    SEGMENT_AND_ORIGIN,
    SEGMENT_MASK,
    SERVICE,
)

IP_PROTOS = {6: "tcp_dst", 17: "udp_dst"}
PORTS_PER_SERVICE = 16  # common.services.MAX_PORTS: group id = tag * 16 + port index
MAX_TAG = (1 << 27) - 1
HAIRPIN_ZONE_BIT = 0x8000  # hairpin zone = the network's zone | this (zones below it)
HAIRPIN_REG = "reg7"
HAIRPIN = 1
PRIO_HAIRPIN = PRIO_EXCEPTION + 10
PLAIN_NAT: Action = ("nat", "", None, None, None, None, ())

# ct_state bits (Nicira)
CT_NEW, CT_REPLY, CT_TRACKED, CT_DNAT = 0x01, 0x08, 0x20, 0x80


@dataclass(frozen=True)
class ServicePortState:
    """One port of a service: protocol number (6, 17), its port on the VIP, the providers'."""

    protocol: int
    port: int
    provider_port: int


@dataclass(frozen=True)
class ProviderState:
    """A container a service spreads its connections over (on any host)."""

    ip: str
    mac: str


@dataclass(frozen=True)
class ServiceState:
    """A service LB of a network of this host, with its providers resolved."""

    id: str  # "TENANT:NAME"
    network_id: str
    vip: str  # IPv4
    tag: int  # names its ports' groups: tag * 16 + index
    ports: tuple[ServicePortState, ...]
    providers: tuple[ProviderState, ...] = ()  # by address

    def group_id(self, index: int) -> int:
        return self.tag * PORTS_PER_SERVICE + index


def _mac(value: str) -> str:
    from datapath.flows import canonical_value

    return canonical_value("eth_dst", value)


def check_service(s: ServiceState) -> None:
    """Refuse a service the switch cannot realise, naming it and the field."""
    owner = f"service {s.id}"
    if not isinstance(s.tag, int) or not 0 < s.tag <= MAX_TAG:
        raise ValueError(f"{owner}: tag {s.tag!r} is out of 1-{MAX_TAG}")
    try:
        ipaddress.IPv4Address(s.vip)
    except ValueError:
        raise ValueError(f"{owner}: VIP {s.vip!r} is not an IPv4 address") from None
    if not 0 < len(s.ports) <= PORTS_PER_SERVICE:
        raise ValueError(f"{owner}: {len(s.ports)} ports (1-{PORTS_PER_SERVICE})")
    for p in s.ports:
        if p.protocol not in IP_PROTOS or not 0 < p.port < 65536 or not 0 < p.provider_port < 65536:
            raise ValueError(f"{owner}: port {p} is not TCP/UDP with ports 1-65535")
    for prov in s.providers:
        try:
            ipaddress.IPv4Address(prov.ip)
            _mac(prov.mac)
        except ValueError as e:
            raise ValueError(f"{owner}: provider {prov}: {e}") from None


def vip_mac(vip: str) -> str:
    """The MAC the switch answers ARP for a VIP with: locally administered, from the VIP."""
    b = ipaddress.IPv4Address(vip).packed
    return "0e:4e:" + ":".join(f"{x:02x}" for x in b)


def hairpin_zone(zone: int) -> int | None:
    """The network's hairpin zone, or None if its zone leaves no room for one."""
    return zone | HAIRPIN_ZONE_BIT if zone < HAIRPIN_ZONE_BIT else None


def _local(segment: int) -> tuple[int, int]:
    return (segment, SEGMENT_AND_ORIGIN)  # from a local endpoint (origin 0)


def _state(*bits: int, unset: int = 0) -> tuple[int, int]:
    value = CT_TRACKED
    for bit in bits:
        value |= bit
    return (value, value | unset)


def _service(s: ServiceState, segment: int, zone: int, hzone: int) -> list[Entry]:
    """The flows and groups of one service."""
    vmac = vip_mac(s.vip)
    to_policy = SERVICE.goto(POLICY)
    out: list[Entry] = [
        flow(
            ARP.id,
            PRIO_RULE,
            responder(vmac, s.vip),
            metadata=_local(segment),
            eth_type=ETH_TYPE_ARP,
            arp_op=ARP_REQUEST,
            arp_tpa=s.vip,
        ),
        # A local packet to the VIP meets zone H first: a hairpin reply is un-SNATed there.
        flow(
            CONNTRACK.id,
            PRIO_EXCEPTION,
            [("ct", False, hzone, CONNTRACK.id, (PLAIN_NAT,))],
            ct_state=(0, CT_TRACKED),
            metadata=_local(segment),
            eth_type=ETH_TYPE_IPV4,
            ipv4_dst=s.vip,
        ),
        # What no service port took (another port, no provider): nobody has the VIP.
        flow(FORWARD.id, PRIO_RULE, [], metadata=(segment, SEGMENT_MASK), eth_dst=vmac),
        flow(
            SERVICE.id,
            PRIO_RULE,
            [("set_field", "eth_src", vmac), to_policy],
            ct_state=_state(CT_REPLY),
            metadata=(segment, SEGMENT_MASK),
            eth_type=ETH_TYPE_IPV4,
            ipv4_src=s.vip,
        ),
        flow(
            SERVICE.id,
            PRIO_EXCEPTION,
            [("move", "eth_src", "eth_dst", 48), ("set_field", "eth_src", vmac), to_policy],
            ct_state=_state(CT_REPLY),
            metadata=(segment, SEGMENT_MASK),
            eth_type=ETH_TYPE_IPV4,
            ipv4_src=s.vip,
            **{HAIRPIN_REG: HAIRPIN},
        ),
    ]
    for i, port in enumerate(s.ports):
        nat = ("nat", "dst", None, None, port.provider_port, None, ())
        buckets = [
            [
                ("set_field", "eth_dst", p.mac),
                ("ct", True, zone, POLICY.id, ((nat[0], nat[1], p.ip, *nat[3:]),)),
            ]
            for p in s.providers
        ]
        out.append(group(s.group_id(i), buckets))
        out.append(
            flow(
                SERVICE.id,
                PRIO_RULE,
                [("group", s.group_id(i))],
                ct_state=_state(CT_NEW),
                metadata=_local(segment),
                eth_type=ETH_TYPE_IPV4,
                ip_proto=port.protocol,
                ipv4_dst=s.vip,
                **{IP_PROTOS[port.protocol]: port.port},
            )
        )
    return out


def _provider(p: ProviderState, segment: int, hzone: int, hairpin_vip: str) -> list[Flow]:
    """What a provider needs whichever services it is in: its MAC on packets DNATed to it,
    and its own connections to a VIP it was picked for sent back to it, SNATed."""
    snat = ("nat", "src", hairpin_vip, None, None, None, ())
    return [
        flow(
            SERVICE.id,
            PRIO_RULE,
            [("set_field", "eth_dst", p.mac), SERVICE.goto(POLICY)],
            ct_state=_state(CT_DNAT, unset=CT_REPLY),
            metadata=(segment, SEGMENT_MASK),
            eth_type=ETH_TYPE_IPV4,
            ipv4_dst=p.ip,
        ),
        flow(
            FORWARD.id,
            PRIO_EXCEPTION,
            [
                ("ct", True, hzone, None, (snat,)),
                ("set_field", "eth_src", vip_mac(hairpin_vip)),
                ("output", OFPP_IN_PORT),
            ],
            metadata=_local(segment),
            eth_type=ETH_TYPE_IPV4,
            ipv4_src=p.ip,
            ipv4_dst=p.ip,
        ),
    ]


def service_flows(segment: int, zone: int | None, services: Sequence[ServiceState]) -> list[Entry]:
    """The flows and groups of a network's services (none if the network is not tracked
    here, or its zone leaves no room for a hairpin zone)."""
    hzone = hairpin_zone(zone) if zone is not None else None
    if zone is None or hzone is None or not services:
        return []
    out: list[Entry] = [
        # A reply in zone H is a hairpin's: marked, then un-DNATed in the network's zone.
        flow(
            CONNTRACK.id,
            PRIO_RULE + 5,
            [("set_field", HAIRPIN_REG, HAIRPIN), ("ct", False, zone, SERVICE.id, (PLAIN_NAT,))],
            ct_state=_state(CT_REPLY),
            ct_zone=hzone,
            metadata=(segment, SEGMENT_MASK),
            eth_type=ETH_TYPE_IPV4,
        )
    ]
    hairpin_vip = min(services, key=lambda s: int(ipaddress.IPv4Address(s.vip))).vip
    providers: dict[str, ProviderState] = {}
    for s in services:
        out += _service(s, segment, zone, hzone)
        providers.update((p.ip, p) for p in s.providers)
    for p in providers.values():
        out += _provider(p, segment, hzone, hairpin_vip)
    return out


def static_flows() -> list[Flow]:
    """A hairpin reply goes back out of the port it came in on."""
    return [flow(FORWARD.id, PRIO_HAIRPIN, [("output", OFPP_IN_PORT)], **{HAIRPIN_REG: HAIRPIN})]


def by_network(services: Iterable[ServiceState]) -> dict[str, list[ServiceState]]:
    out: dict[str, list[ServiceState]] = {}
    for s in sorted(services, key=lambda s: s.id):
        out.setdefault(s.network_id, []).append(s)
    return out
