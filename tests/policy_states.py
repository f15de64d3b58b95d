"""A network with endpoint groups on one host and across two, and the packets the policy
tests send through them with the fake switch and its conntrack."""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from datapath.desired import DesiredState, EndpointState, NetworkState, TunnelState
from datapath.flows import Flow
from datapath.local import gateway_mac
from datapath.pipeline import compile_flows
from datapath.policy import GroupState, RuleState, sorted_rules
from testbed.fakeoftable import FakeConntrack, Walk, walk

NET = "pn"
VNI, VLAN = 5000, 300
GW_PORT, GW_MAC, GW_IP = 10, gateway_mac(VNI), "10.1.0.254"
TUN, UPLINK = 50, 60
WEB, APP, DB = "t:web", "t:app", "t:db"
TAGS = {WEB: 11, APP: 22, DB: 33}


@dataclass(frozen=True)
class Ep:
    """An endpoint of the test network: its port, addresses and group."""

    n: int
    group: str | None

    @property
    def id(self) -> str:
        return f"ep{self.n}"

    @property
    def mac(self) -> str:
        return f"02:00:00:00:00:{self.n:02x}"

    @property
    def ipv4(self) -> str:
        return f"10.1.0.{self.n}"

    @property
    def ipv6(self) -> str:
        return f"fd00::{self.n}"

    def local(self) -> EndpointState:
        return EndpointState(self.id, NET, self.mac, self.ipv4, self.ipv6, self.group or "", self.n)

    def remote(self, host: str) -> EndpointState:
        return EndpointState(
            self.id, NET, self.mac, self.ipv4, self.ipv6, self.group or "", host=host
        )


WEB1, WEB2, APP1, DB1, LONER = Ep(1, WEB), Ep(2, WEB), Ep(3, APP), Ep(4, DB), Ep(5, None)
GATEWAY = Ep(GW_PORT, None)  # the host side, sending from the gateway port


def rule(direction: str, priority: int, action: str, **kw: Any) -> RuleState:
    return RuleState(direction, priority, action, **kw)


def groups(rules: Mapping[str, Sequence[RuleState]]) -> list[GroupState]:
    """WEB, APP and DB on the network, each with the rules given for it."""
    return [GroupState(g, NET, tag, sorted_rules(rules.get(g, ()))) for g, tag in TAGS.items()]


def network(gateway_port: int = GW_PORT, encap: str = "vni") -> NetworkState:
    if encap == "vni":
        return NetworkState(NET, VNI, gateway=GW_IP, gateway_ofport=gateway_port)
    return NetworkState(NET, VLAN, gateway=GW_IP, encap="vlan", gateway_ofport=gateway_port)


def one_host(rules: Mapping[str, Sequence[RuleState]]) -> DesiredState:
    """Every endpoint on this host."""
    eps = [e.local() for e in (WEB1, WEB2, APP1, DB1, LONER)]
    return DesiredState([network()], eps, groups=groups(rules))


def two_hosts(
    rules: Mapping[str, Sequence[RuleState]], encap: str = "vni"
) -> tuple[DesiredState, DesiredState]:
    """WEB1 on h1, APP1 on h2, over VXLAN (or a VLAN); each host's gateway port, its zone,
    has another number."""
    states = []
    for host, mine, theirs, gw in (("h1", WEB1, APP1, GW_PORT), ("h2", APP1, WEB1, GW_PORT + 1)):
        other = "h2" if host == "h1" else "h1"
        states.append(
            DesiredState(
                [network(gw, encap)],
                [mine.local()],
                [theirs.remote(other)],
                [TunnelState(other, TUN)] if encap == "vni" else [],
                UPLINK if encap == "vlan" else None,
                groups=groups(rules),
            )
        )
    return states[0], states[1]


# ---------------------------------------------------------------- packets


def ip(src: Ep, dst: Ep | str, v6: bool = False, **over: Any) -> dict[str, Any]:
    """An IP packet from ``src`` (an endpoint, or GATEWAY) to an endpoint or an address
    beyond the gateway."""
    family = "ipv6" if v6 else "ipv4"
    to_gateway = isinstance(dst, str)
    dst_ip = dst if isinstance(dst, str) else getattr(dst, family)
    src_ip = (GW_IP if not v6 else "fd00::fe") if src is GATEWAY else getattr(src, family)
    pkt = {
        "in_port": src.n,
        "eth_src": GW_MAC if src is GATEWAY else src.mac,
        "eth_dst": GW_MAC if to_gateway else dst.mac,  # type: ignore[union-attr]
        "eth_type": 0x86DD if v6 else 0x0800,
        f"{family}_src": src_ip,
        f"{family}_dst": dst_ip,
    }
    return {**pkt, **over}


def tcp(src: Ep, dst: Ep | str, port: int, v6: bool = False, sport: int = 40000, **o: Any) -> Any:
    return ip(src, dst, v6, ip_proto=6, tcp_src=sport, tcp_dst=port, **o)


def udp(src: Ep, dst: Ep | str, port: int, v6: bool = False, sport: int = 40000) -> Any:
    return ip(src, dst, v6, ip_proto=17, udp_src=sport, udp_dst=port)


def icmp(src: Ep, dst: Ep | str, v6: bool = False) -> Any:
    if v6:
        return ip(src, dst, True, ip_proto=58, icmpv6_type=128, icmpv6_code=0)
    return ip(src, dst, False, ip_proto=1, icmpv4_type=8, icmpv4_code=0)


def reply(pkt: Mapping[str, Any], sender: Ep) -> dict[str, Any]:
    """The answer of ``sender`` (the destination of ``pkt``) to it."""
    out = dict(pkt)
    out["in_port"], out["eth_src"], out["eth_dst"] = sender.n, pkt["eth_dst"], pkt["eth_src"]
    for a, b in (("ipv4_src", "ipv4_dst"), ("ipv6_src", "ipv6_dst")):
        if a in pkt:
            out[a], out[b] = pkt[b], pkt[a]
    for l4 in ("tcp", "udp"):
        if f"{l4}_src" in pkt:
            out[f"{l4}_src"], out[f"{l4}_dst"] = pkt[f"{l4}_dst"], pkt[f"{l4}_src"]
    return out


@dataclass
class Host:
    """One host's flows and its conntrack, kept between packets."""

    state: DesiredState
    conntrack: FakeConntrack = field(default_factory=FakeConntrack)
    flows: set[Flow] = field(init=False)

    def __post_init__(self) -> None:
        self.flows = compile_flows(self.state)

    def recompile(self, rules: Mapping[str, Sequence[RuleState]]) -> None:
        """New rules; the connections conntrack holds stay."""
        self.state = copy.deepcopy(self.state)
        self.state.groups = groups(rules)
        self.flows = compile_flows(self.state)

    def send(self, pkt: Mapping[str, Any]) -> Walk:
        return walk(self.flows, pkt, conntrack=self.conntrack)


def arrival(sent: Mapping[str, Any], in_port: int) -> dict[str, Any]:
    """A packet one host sent into its tunnel or uplink, as the other host receives it:
    conntrack state and registers stay behind."""
    wire = {k: v for k, v in sent.items() if not k.startswith(("ct_", "reg"))}
    return {**wire, "in_port": in_port}
