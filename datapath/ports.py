"""Which host ports a container's published ports get, decided without I/O.

Docker asks per container port for one host port (`-p 8080:80`), any free one of a range
(`-p 8000-8010:80`: HostPort 8000, HostPortEnd 8010) or any free one at all (`-p 80`, `-P`:
HostPort 0), as its bridge's port allocator serves them. A host port is free when no other
endpoint on this host publishes it (same protocol, overlapping host address) and the host's
own probe (a bind(): a listening process, docker-proxy of Docker's bridge) finds it unused.
The probe is handed in; everything else here is pure.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

# Linux's default net.ipv4.ip_local_port_range, for a host whose file cannot be read.
DEFAULT_EPHEMERAL = (32768, 60999)


class PortConflict(Exception):
    """A published port cannot be had; the message names the port and who holds it."""


@dataclass(frozen=True)
class PublishedPort:
    """A container port published on the host (-p, -P). As asked: host_port 0 is any free
    port of the ephemeral range, host_port_end above host_port any free one of that range.
    As made (resolve, the DNAT chain): the host port it got, to container_ip."""

    proto: str  # tcp | udp
    host_ip: str  # "" = every address of the host
    host_port: int
    container_port: int
    container_ip: str = ""
    host_port_end: int = 0

    @property
    def span(self) -> tuple[int, int] | None:
        """The host ports it accepts, or None for any of the ephemeral range."""
        if not self.host_port:
            return None
        return self.host_port, max(self.host_port, self.host_port_end)

    def spec(self) -> str:
        """The request in `docker run -p` words."""
        span = self.span
        host = (
            "" if span is None else str(span[0]) if span[0] == span[1] else f"{span[0]}-{span[1]}"
        )
        ip = f"{self.host_ip}:" if self.host_ip else ""
        return f"-p {ip}{host}{':' if host or ip else ''}{self.container_port}/{self.proto}"


# A host port's owner by (proto, host_ip, port): the probe answers None when it is free,
# else who holds it ("a process on the host"); it raises PortConflict for a host_ip that is
# not this host's.
Probe = Callable[[str, str, int], str | None]


def where(host_ip: str) -> str:
    return f"on {host_ip}" if host_ip else "on every host address"


def overlaps(a: str, b: str) -> bool:
    """Two host addresses of published ports meet ("" is every address)."""
    return not a or not b or a == b


def holder(
    proto: str, host_ip: str, port: int, published: Iterable[tuple[str, PublishedPort]]
) -> str | None:
    """The endpoint that already publishes this host port, if any."""
    for endpoint_id, m in published:
        if m.proto == proto and m.host_port == port and overlaps(m.host_ip, host_ip):
            return endpoint_id
    return None


def candidates(request: PublishedPort, ephemeral: tuple[int, int], start: int) -> Iterator[int]:
    """The host ports to try, in order: a range from its first port (as Docker's allocator),
    the ephemeral range from ``start`` round (so random ports spread over it)."""
    span = request.span
    if span is not None:
        yield from range(span[0], span[1] + 1)
        return
    lo, hi = ephemeral
    count = hi - lo + 1
    for i in range(count):
        yield lo + (start + i) % count


def _reused(request: PublishedPort, current: list[PublishedPort]) -> PublishedPort | None:
    """A mapping the endpoint already has that satisfies the request (Docker programs an
    endpoint again when its gateway moves; random ports keep their numbers)."""
    span = request.span
    for m in current:
        if (m.proto, m.host_ip, m.container_port) != (
            request.proto,
            request.host_ip,
            request.container_port,
        ):
            continue
        if span is None or span[0] <= m.host_port <= span[1]:
            current.remove(m)
            return m
    return None


def resolve(
    endpoint_id: str,
    container_ip: str,
    requests: Sequence[PublishedPort],
    current: Sequence[PublishedPort],
    published: Sequence[tuple[str, PublishedPort]],
    probe: Probe,
    ephemeral: tuple[int, int] = DEFAULT_EPHEMERAL,
    start: int = 0,
) -> tuple[PublishedPort, ...]:
    """The endpoint's mappings for all of ``requests``, or PortConflict naming the first
    that cannot be had. ``current``: its mappings now (kept where they still fit);
    ``published``: (endpoint, mapping) of every other endpoint on this host."""
    keep = list(current)
    taken = list(published)
    out: list[PublishedPort] = []
    # Fixed ports first, then ranges, then any: a range never takes a port asked for alone.
    ordered = sorted(
        dict.fromkeys(requests),
        key=lambda r: (r.span is None, 0 if r.span is None else r.span[1] - r.span[0]),
    )
    for req in ordered:
        chosen = _reused(req, keep)
        if chosen is None:
            chosen = _choose(req, container_ip, taken, probe, ephemeral, start)
        taken.append((endpoint_id, chosen))
        out.append(chosen)
    return tuple(sorted(out, key=lambda m: (m.proto, m.host_port, m.host_ip, m.container_port)))


def _choose(
    req: PublishedPort,
    container_ip: str,
    taken: Sequence[tuple[str, PublishedPort]],
    probe: Probe,
    ephemeral: tuple[int, int],
    start: int,
) -> PublishedPort:
    reasons: dict[str, list[int]] = {}
    for port in candidates(req, ephemeral, start):
        owner = holder(req.proto, req.host_ip, port, taken)
        who = f"container endpoint {owner[:12]}" if owner is not None else None
        if who is None:
            who = probe(req.proto, req.host_ip, port)
        if who is None:
            return PublishedPort(req.proto, req.host_ip, port, req.container_port, container_ip)
        reasons.setdefault(who, []).append(port)
    span = req.span
    if span is not None and span[0] == span[1]:
        [(who, _)] = reasons.items()
        raise PortConflict(
            f"{req.spec()}: host port {span[0]}/{req.proto} {where(req.host_ip)} is already "
            f"used by {who}"
        )
    lo, hi = span if span is not None else ephemeral
    held = "; ".join(f"{_ports(ports)} by {who}" for who, ports in reasons.items())
    raise PortConflict(
        f"{req.spec()}: no free host port in {lo}-{hi}/{req.proto} {where(req.host_ip)} "
        f"(used: {held})"
    )


def _ports(ports: list[int]) -> str:
    shown = ", ".join(str(p) for p in ports[:5])
    return shown + (f" and {len(ports) - 5} more" if len(ports) > 5 else "")
