"""Which subnets a network may own: a unicast prefix no wider than one site's.

Every host puts a network's gateway address, with its prefix, on the network's gateway
port (npgw<tag>): the kernel then routes the whole subnet there, on every host, ahead of
the host's own wider routes, and the host masquerades whatever leaves it from the subnet
(NETPLUGIN-POSTROUTING). So a subnet is refused when it is

- wider than the largest private block one site uses: 10.0.0.0/8 in IPv4, a ULA /48
  (RFC 4193) in IPv6. 0.0.0.0/0 would masquerade every packet every host sends or forwards
  (the kernel adds no route for it, but the rule matches all), and leave no subnet or
  default pool for any other network; ::/0 would take every host's IPv6 default route
  (its default gateway, ::1, cannot even be addressed); a /1 to /7 takes that share of the
  Internet from every host;
- or overlaps a special-purpose block (RFC 6890) whose addresses no container can hold or
  no host may route: "this network", loopback, link-local (with the cloud metadata
  service at 169.254.169.254), multicast, reserved (class E and the limited broadcast),
  and in IPv6 the unspecified, loopback and IPv4-mapped block, link-local and multicast.

Anything else (private, shared, public space) is the operator's choice, as with Docker's
bridge driver.
"""

from __future__ import annotations

from ipaddress import ip_network

from ipam.errors import UnusableSubnet
from ipam.parse import Network

# The widest prefix a network may have, by IP version.
WIDEST = {4: 8, 6: 48}

SPECIAL: tuple[tuple[Network, str], ...] = (
    (ip_network("0.0.0.0/8"), '"this network" (RFC 1122): no packet may come from or go to it'),
    (ip_network("127.0.0.0/8"), "the loopback range: hosts drop it on any interface but lo"),
    (
        ip_network("169.254.0.0/16"),
        "link-local (RFC 3927): never routed, and 169.254.169.254 is the cloud metadata "
        "service of many hosts",
    ),
    (ip_network("224.0.0.0/4"), "multicast: group addresses, which no container can hold"),
    (
        ip_network("240.0.0.0/4"),
        "reserved (class E, and the broadcast 255.255.255.255): hosts and routers drop it",
    ),
    (
        ip_network("::/8"),
        "reserved (RFC 4291): the unspecified and loopback addresses and IPv4-mapped ones",
    ),
    (
        ip_network("fe80::/10"),
        "link-local: every interface has its own fe80::/64, which a network's route would take",
    ),
    (ip_network("ff00::/8"), "multicast: group addresses, which no container can hold"),
)


def unusable(network: Network) -> str | None:
    """Why ``network`` cannot be a network's subnet (its message's tail), or None."""
    version, widest = network.version, WIDEST[network.version]
    if network.prefixlen < widest:
        if network.prefixlen == 0 and version == 4:
            harm = (
                "it is every IPv4 address: every host would masquerade all the traffic it "
                "sends or forwards, and no other subnet or default pool would be left"
            )
        elif network.prefixlen == 0:
            harm = (
                "it is every IPv6 address: every host would route all its IPv6 traffic to this "
                "network's gateway port, ahead of its default route (and the default gateway, "
                "::1, is the loopback address)"
            )
        else:
            harm = (
                "every host would route all of it to this network's gateway port instead of "
                "along its own routes"
            )
        return f"is too wide: {harm}; a network's IPv{version} subnet must be /{widest} or longer"
    for block, why in SPECIAL:
        if block.version == version and block.overlaps(network):  # type: ignore[arg-type]
            where = "lies in" if network.subnet_of(block) else "overlaps"  # type: ignore[arg-type]
            return f"{where} {block}, {why}; choose a subnet outside it"
    return None


def check_ownable(network: Network, what: str = "subnet") -> Network:
    """``network`` if a network may own it, else UnusableSubnet saying why."""
    reason = unusable(network)
    if reason is not None:
        raise UnusableSubnet(what, str(network), reason)
    return network
