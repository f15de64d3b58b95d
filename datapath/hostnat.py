"""Host-side NAT, isolation and port publishing as iptables rules in chains we own.

Rules are computed from desired state by pure functions. Applying a chain compares its
current contents first and, only when they differ, replaces it atomically with one
`iptables-restore --noflush`, so a restart leaves correct rules (and their counters) alone.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass

from .ports import PublishedPort

GATEWAY_PREFIX = "npgw"  # OVS internal ports holding each network's gateway address
NAT_CHAIN = "NETPLUGIN-POSTROUTING"
DNAT_CHAIN = "NETPLUGIN-DNAT"
FWD_CHAIN = "NETPLUGIN-FWD"
# (table, our chain, built-in chains that must jump to it)
JUMPS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("nat", NAT_CHAIN, ("POSTROUTING",)),
    ("nat", DNAT_CHAIN, ("PREROUTING", "OUTPUT")),
    ("filter", FWD_CHAIN, ("FORWARD",)),
)


FABRIC_PORT = "npfabric"  # routing mode with BGP: the host's router port (bridgeports)


@dataclass(frozen=True)
class GatewayNet:
    subnet: str  # IPv4 CIDR (iptables), or IPv6 (ip6tables: isolation only, no NAT)
    gateway_port: str  # e.g. npgw100
    internal: bool = False
    # Routed through the fabric's router (routing mode with BGP): the subnets of the other
    # tenants' networks routed there, which may not reach it; None: not routed.
    fabric_foreign: tuple[str, ...] | None = None


def gateway_port_name(tag: int) -> str:
    return f"{GATEWAY_PREFIX}{tag}"


def nat_rules(nets: Sequence[GatewayNet]) -> list[str]:
    """Masquerade traffic leaving a non-internal network for anywhere but our own gateways;
    and connections to published ports that would otherwise get their replies past the
    host's conntrack (which undoes the DNAT): from the host itself (127.0.0.1 needs
    route_localnet on the gateway port too), and from the container's own network, itself
    included (hairpin). Clients elsewhere keep their address (policies judge it)."""
    outside = sorted((n for n in nets if not n.internal), key=lambda n: n.subnet)
    return [
        *(  # the fabric routes a routed network's addresses: they leave as they are
            f"-A {NAT_CHAIN} -s {n.subnet} -o {FABRIC_PORT} -j RETURN"
            for n in outside
            if n.fabric_foreign is not None
        ),
        *(f"-A {NAT_CHAIN} -s {n.subnet} ! -o {GATEWAY_PREFIX}+ -j MASQUERADE" for n in outside),
        f"-A {NAT_CHAIN} -o {GATEWAY_PREFIX}+ -m addrtype --src-type LOCAL "
        "-m conntrack --ctstate DNAT -j MASQUERADE",
        *(
            f"-A {NAT_CHAIN} -s {n.subnet} -o {n.gateway_port} -m conntrack --ctstate DNAT "
            "-j MASQUERADE"
            for n in outside
        ),
    ]


def forward_rules(nets: Sequence[GatewayNet]) -> list[str]:
    """Networks are not routed to each other; non-internal ones reach out and get replies;
    a network routed through the fabric is reached from it too, except from the subnets of
    other tenants' routed networks."""
    rules = [
        # Published ports (DNAT'ed by the host) are reachable from every network, as with
        # docker's bridge; everything else between two networks is dropped.
        f"-A {FWD_CHAIN} -o {GATEWAY_PREFIX}+ -m conntrack --ctstate DNAT -j ACCEPT",
        f"-A {FWD_CHAIN} -i {GATEWAY_PREFIX}+ -o {GATEWAY_PREFIX}+ -j DROP",
    ]
    for n in sorted(nets, key=lambda n: n.gateway_port):
        if n.internal:
            rules += [
                f"-A {FWD_CHAIN} -i {n.gateway_port} -j DROP",
                f"-A {FWD_CHAIN} -o {n.gateway_port} -j DROP",
            ]
        else:
            if n.fabric_foreign is not None:
                # In `iptables -S`'s order (-s before -i), so a sync finds them as they are.
                inbound = f"-i {FABRIC_PORT} -o {n.gateway_port}"
                rules += [
                    f"-A {FWD_CHAIN} -s {foreign} {inbound} -j DROP" for foreign in n.fabric_foreign
                ]
                rules.append(f"-A {FWD_CHAIN} {inbound} -j ACCEPT")
            rules += [
                f"-A {FWD_CHAIN} -i {n.gateway_port} -j ACCEPT",
                f"-A {FWD_CHAIN} -o {n.gateway_port} -m conntrack --ctstate RELATED,ESTABLISHED "
                "-j ACCEPT",
            ]
    return rules


def dnat_rules(mappings: Sequence[PublishedPort]) -> list[str]:
    """Published ports (`docker run -p`): DNAT to the container from anywhere but itself."""
    rules = []
    for m in sorted(mappings, key=lambda m: (m.proto, m.host_port, m.host_ip)):
        dst = f" -d {m.host_ip}/32" if m.host_ip and m.host_ip not in ("0.0.0.0", "::") else ""
        rules.append(
            f"-A {DNAT_CHAIN}{dst} -p {m.proto} -m {m.proto} --dport {m.host_port} "
            "-m addrtype --dst-type LOCAL "
            f"-j DNAT --to-destination {m.container_ip}:{m.container_port}"
        )
    return rules


_DNAT_RE = re.compile(
    rf"^-A {DNAT_CHAIN}(?: -d (?P<host_ip>[0-9.]+)/32)? -p (?P<proto>tcp|udp) -m (?:tcp|udp) "
    r"--dport (?P<host_port>\d+) -m addrtype --dst-type LOCAL "
    r"-j DNAT --to-destination (?P<ip>[0-9.]+):(?P<port>\d+)$"
)


def parse_dnat_rules(rules: Sequence[str]) -> list[PublishedPort]:
    """The inverse of dnat_rules: a restarted agent reads published ports back from the kernel."""
    out = []
    for rule in rules:
        m = _DNAT_RE.match(rule)
        if m:
            out.append(
                PublishedPort(
                    m["proto"], m["host_ip"] or "", int(m["host_port"]), int(m["port"]), m["ip"]
                )
            )
    return out


def restore_script(table: str, chain: str, rules: Sequence[str]) -> str:
    """An iptables-restore input that replaces ``chain`` atomically, leaving other chains."""
    return "\n".join([f"*{table}", f":{chain} - [0:0]", f"-F {chain}", *rules, "COMMIT", ""])


class Iptables:
    """Thin runner; ``netns`` runs every command inside that network namespace (tests)."""

    def __init__(self, netns: str | None = None, binary: str = "iptables") -> None:
        self.prefix = ["ip", "netns", "exec", netns] if netns else []
        self.binary = binary
        self.netns = netns
        self._v6: Iptables | None = None  # ip6tables, once an IPv6 network has been synced

    def _run(
        self, *args: str, stdin: str | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*self.prefix, *args],
            input=stdin,
            capture_output=True,
            text=True,
            check=check,
            timeout=30,
        )

    def current(self, table: str, chain: str) -> list[str] | None:
        """Our chain's rules as `iptables -S` prints them, or None if the chain is missing."""
        res = self._run(self.binary, "-w", "-t", table, "-S", chain, check=False)
        if res.returncode != 0:
            return None
        return [line for line in res.stdout.splitlines() if line.startswith("-A ")]

    def apply(self, table: str, chain: str, rules: Sequence[str]) -> bool:
        """Make ``chain`` hold exactly ``rules``; returns whether anything changed."""
        changed = False
        if self.current(table, chain) != list(rules):
            self._run(
                f"{self.binary}-restore",
                "-w",
                "--noflush",
                stdin=restore_script(table, chain, rules),
            )
            changed = True
        for t, c, parents in JUMPS:
            if (t, c) != (table, chain):
                continue
            for parent in parents:
                if self._run(
                    self.binary, "-w", "-t", t, "-C", parent, "-j", c, check=False
                ).returncode:
                    self._run(self.binary, "-w", "-t", t, "-I", parent, "1", "-j", c)
                    changed = True
        return changed

    def sync(self, nets: Sequence[GatewayNet], mappings: Sequence[PublishedPort] = ()) -> bool:
        """IPv4 networks get NAT and isolation; IPv6 ones isolation (ip6tables' FWD chain),
        which matters once the host forwards IPv6 (routing mode's IPv6 router IP, or
        docker's IPv6 networks). A host that never had an IPv6 network never runs
        ip6tables."""
        v4 = [n for n in nets if ":" not in n.subnet]
        v6 = [n for n in nets if ":" in n.subnet]
        changed = self.apply("nat", NAT_CHAIN, nat_rules(v4))
        changed |= self.apply("nat", DNAT_CHAIN, dnat_rules(mappings))
        changed |= self.apply("filter", FWD_CHAIN, forward_rules(v4))
        if v6 and self._v6 is None:
            self._v6 = Iptables(self.netns, "ip6tables")
        if self._v6 is not None:
            changed |= self._v6.apply("filter", FWD_CHAIN, forward_rules(v6))
        return changed
