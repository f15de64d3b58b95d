"""Which host ports published ports get (datapath.ports), decided without I/O."""

from __future__ import annotations

import socket

import pytest
from hypothesis import given
from hypothesis import strategies as st

from datapath.hostports import HOST_PROCESS, HostPorts, parse_port_range
from datapath.ports import PortConflict, PublishedPort, candidates, resolve

C = "10.1.0.5"
EPHEMERAL = (40000, 40009)


def free(proto: str, host_ip: str, port: int) -> str | None:
    return None


def req(
    host_port: int, cport: int = 80, end: int = 0, proto: str = "tcp", ip: str = ""
) -> PublishedPort:
    return PublishedPort(proto, ip, host_port, cport, host_port_end=end or host_port)


def test_requests_read_as_docker_run_p() -> None:
    assert req(8080).spec() == "-p 8080:80/tcp"
    assert req(0).spec() == "-p 80/tcp"
    assert req(8000, end=8010, proto="udp").spec() == "-p 8000-8010:80/udp"
    assert req(0, ip="192.0.2.2").spec() == "-p 192.0.2.2::80/tcp"
    assert req(8080, ip="127.0.0.1").spec() == "-p 127.0.0.1:8080:80/tcp"


def test_a_fixed_port_is_taken_as_asked() -> None:
    assert resolve("e1", C, [req(8080)], (), (), free) == (PublishedPort("tcp", "", 8080, 80, C),)


def test_a_random_port_comes_from_the_ephemeral_range_from_start_round() -> None:
    assert list(candidates(req(0), EPHEMERAL, 7))[:4] == [40007, 40008, 40009, 40000]
    [m] = resolve("e1", C, [req(0)], (), (), free, EPHEMERAL, start=3)
    assert m.host_port == 40003


def test_a_range_takes_its_first_free_port() -> None:
    others = [("e2", PublishedPort("tcp", "", 8000, 80, "10.1.0.6"))]
    [m] = resolve("e1", C, [req(8000, end=8010)], (), others, free)
    assert m.host_port == 8001


def test_one_port_per_host_port_and_protocol_and_overlapping_address() -> None:
    others = [("e2" * 32, PublishedPort("tcp", "", 8080, 80, "10.2.0.6"))]
    with pytest.raises(PortConflict) as e:
        resolve("e1", C, [req(8080)], (), others, free)
    assert str(e.value) == (
        "-p 8080:80/tcp: host port 8080/tcp on every host address is already used by "
        "container endpoint e2e2e2e2e2e2"
    )
    with pytest.raises(PortConflict, match=r"on 192\.0\.2\.2"):
        resolve("e1", C, [req(8080, ip="192.0.2.2")], (), others, free)
    assert resolve("e1", C, [req(8080, proto="udp")], (), others, free)  # another protocol
    on_one = [("e2", PublishedPort("tcp", "192.0.2.3", 8080, 80, "10.2.0.6"))]
    assert resolve("e1", C, [req(8080, ip="192.0.2.2")], (), on_one, free)  # another address
    with pytest.raises(PortConflict):
        resolve("e1", C, [req(8080)], (), on_one, free)  # every address includes it


def test_a_port_a_host_process_holds_is_refused_or_skipped() -> None:
    def probe(proto: str, host_ip: str, port: int) -> str | None:
        return HOST_PROCESS if port in (8080, 40000, 40001) else None

    with pytest.raises(
        PortConflict, match="8080/tcp on every host address is already used by a pr"
    ):
        resolve("e1", C, [req(8080)], (), (), probe)
    [m] = resolve("e1", C, [req(0)], (), (), probe, EPHEMERAL, start=0)
    assert m.host_port == 40002


def test_a_full_range_says_who_holds_its_ports() -> None:
    others = [("e2" * 6, PublishedPort("tcp", "", 8001, 80, "10.1.0.6"))]

    def probe(proto: str, host_ip: str, port: int) -> str | None:
        return HOST_PROCESS

    with pytest.raises(PortConflict) as e:
        resolve("e1", C, [req(8000, end=8002)], (), others, probe)
    assert str(e.value) == (
        "-p 8000-8002:80/tcp: no free host port in 8000-8002/tcp on every host address "
        "(used: 8000, 8002 by a process on the host; 8001 by container endpoint e2e2e2e2e2e2)"
    )


def test_ports_of_one_request_do_not_collide_and_fixed_ones_go_first() -> None:
    made = resolve(
        "e1", C, [req(8000, 81, end=8001), req(8000), req(0, 82)], (), (), free, EPHEMERAL
    )
    assert [(m.host_port, m.container_port) for m in made[:2]] == [(8000, 80), (8001, 81)]
    with pytest.raises(PortConflict, match="container endpoint e1"):
        resolve("e1", C, [req(8080, 80), req(8080, 81)], (), (), free)
    assert len(resolve("e1", C, [req(8080), req(8080)], (), (), free)) == 1  # the same, twice


def test_programming_again_keeps_the_ports_it_got() -> None:
    """Docker programs an endpoint again when its gateway moves: random ports keep theirs."""
    current = (PublishedPort("tcp", "", 40007, 80, C), PublishedPort("udp", "", 8003, 53, C))

    def probe(proto: str, host_ip: str, port: int) -> str | None:
        raise AssertionError("ports it holds are not probed")

    again = [req(0), req(8000, 53, end=8010, proto="udp")]
    assert resolve("e1", C, again, current, (), probe, EPHEMERAL) == current


def test_no_free_ephemeral_port() -> None:
    others = [("e2", PublishedPort("tcp", "", p, 80, "10.1.0.6")) for p in range(40000, 40010)]
    with pytest.raises(PortConflict, match="no free host port in 40000-40009/tcp"):
        resolve("e1", C, [req(0)], (), others, free, EPHEMERAL)


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["tcp", "udp"]),
            st.sampled_from(["", "192.0.2.2"]),
            st.integers(0, 3),
            st.integers(0, 3),
        ),
        max_size=8,
    ),
    st.integers(0, 100),
)
def test_chosen_ports_never_overlap(asks: list[tuple[str, str, int, int]], start: int) -> None:
    """Whatever endpoints ask, one after the other: no two mappings meet, and each fits
    its request."""
    taken: list[tuple[str, PublishedPort]] = []
    for i, (proto, ip, lo, width) in enumerate(asks):
        request = req(
            40000 + lo if lo else 0, end=40000 + lo + width if lo else 0, proto=proto, ip=ip
        )
        try:
            [m] = resolve(f"e{i}", C, [request], (), taken, free, (40000, 40005), start)
        except PortConflict:
            continue
        span = request.span or (40000, 40005)
        assert span[0] <= m.host_port <= span[1]
        for _, other in taken:
            same = (other.proto, other.host_port) == (m.proto, m.host_port)
            assert not (same and (not other.host_ip or not m.host_ip or other.host_ip == m.host_ip))
        taken.append((f"e{i}", m))


def test_the_ephemeral_range_is_read_under_proc_sys(tmp_path: object) -> None:
    from pathlib import Path

    root = Path(str(tmp_path))
    (root / "net" / "ipv4").mkdir(parents=True)
    (root / "net" / "ipv4" / "ip_local_port_range").write_text("49152\t65535\n")
    assert HostPorts(root).ephemeral_range() == (49152, 65535)
    assert HostPorts(root / "missing").ephemeral_range() == (32768, 60999)
    assert parse_port_range("1024 2048") == (1024, 2048)
    with pytest.raises(ValueError):
        parse_port_range("9 1")


def test_the_probe_finds_a_listener_and_a_foreign_address() -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        assert HostPorts().probe("tcp", "127.0.0.1", port) == HOST_PROCESS
        assert HostPorts().probe("tcp", "", port) == HOST_PROCESS  # every address includes it
        assert HostPorts().probe("udp", "127.0.0.1", port) is None
    with pytest.raises(PortConflict, match=r"192\.0\.2\.254 is not an address"):
        HostPorts().probe("tcp", "192.0.2.254", 8080)
