"""Host NAT/isolation/publishing rules are pure functions of the desired state."""

from __future__ import annotations

from datapath.hostnat import (
    DNAT_CHAIN,
    FWD_CHAIN,
    NAT_CHAIN,
    GatewayNet,
    dnat_rules,
    forward_rules,
    gateway_port_name,
    nat_rules,
    parse_dnat_rules,
    restore_script,
)
from datapath.ports import PublishedPort

NETS = [
    GatewayNet("10.2.0.0/24", gateway_port_name(200)),
    GatewayNet("10.1.0.0/24", gateway_port_name(100)),
    GatewayNet("10.3.0.0/24", gateway_port_name(300), internal=True),
]


def test_internal_networks_are_not_masqueraded() -> None:
    assert nat_rules(NETS) == [
        f"-A {NAT_CHAIN} -s 10.1.0.0/24 ! -o npgw+ -j MASQUERADE",
        f"-A {NAT_CHAIN} -s 10.2.0.0/24 ! -o npgw+ -j MASQUERADE",
        # published ports reached from the host itself, and from their own network
        f"-A {NAT_CHAIN} -o npgw+ -m addrtype --src-type LOCAL -m conntrack --ctstate DNAT "
        "-j MASQUERADE",
        f"-A {NAT_CHAIN} -s 10.1.0.0/24 -o npgw100 -m conntrack --ctstate DNAT -j MASQUERADE",
        f"-A {NAT_CHAIN} -s 10.2.0.0/24 -o npgw200 -m conntrack --ctstate DNAT -j MASQUERADE",
    ]


def test_networks_are_isolated_first() -> None:
    rules = forward_rules(NETS)
    assert rules[0] == f"-A {FWD_CHAIN} -o npgw+ -m conntrack --ctstate DNAT -j ACCEPT"
    assert rules[1] == f"-A {FWD_CHAIN} -i npgw+ -o npgw+ -j DROP"
    assert f"-A {FWD_CHAIN} -i npgw300 -j DROP" in rules
    assert f"-A {FWD_CHAIN} -i npgw100 -j ACCEPT" in rules
    assert not any("npgw300 -j ACCEPT" in r for r in rules)


def test_rules_are_deterministic() -> None:
    assert nat_rules(NETS) == nat_rules(list(reversed(NETS)))
    assert forward_rules(NETS) == forward_rules(list(reversed(NETS)))


def test_dnat() -> None:
    rules = dnat_rules(
        [
            PublishedPort("tcp", "", 8080, 80, "10.1.0.5"),
            PublishedPort("udp", "192.0.2.1", 53, 53, "10.1.0.6"),
        ]
    )
    assert rules[0].startswith(f"-A {DNAT_CHAIN} -p tcp -m tcp --dport 8080")
    assert rules[0].endswith("--to-destination 10.1.0.5:80")
    assert "-d 192.0.2.1/32" in rules[1]


def test_published_ports_read_back_exactly() -> None:
    maps = [
        PublishedPort("tcp", "", 8080, 80, "10.1.0.5"),
        PublishedPort("udp", "192.0.2.1", 53, 5353, "10.1.0.6"),
    ]
    assert sorted(parse_dnat_rules(dnat_rules(maps)), key=str) == sorted(maps, key=str)
    assert parse_dnat_rules(["-A OTHER -j ACCEPT", "-N NETPLUGIN-DNAT"]) == []


def test_restore_script_replaces_only_our_chain() -> None:
    script = restore_script("nat", NAT_CHAIN, ["-A X"])
    assert script.splitlines() == [
        "*nat",
        f":{NAT_CHAIN} - [0:0]",
        f"-F {NAT_CHAIN}",
        "-A X",
        "COMMIT",
    ]
