"""Endpoint interface names and MACs are pure functions of the endpoint."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from datapath.veth import HOST_END_SYSCTLS, NetlinkLinks, endpoint_mac, veth_names


def test_docker_ids_keep_their_prefix() -> None:
    eid = "3f1c9ab0d2e47c5b9a8f0e6d1c2b3a4f5e6d7c8b9a0f1e2d3c4b5a6978877665"
    assert veth_names(eid) == ("vp3f1c9ab0d2e", "vc3f1c9ab0d2e")


@given(st.text(min_size=1, max_size=200))
def test_names_fit_the_kernel_limit_and_pair_up(eid: str) -> None:
    host, container = veth_names(eid)
    assert len(host) <= 15 and len(container) <= 15
    assert host[2:] == container[2:] and host != container
    assert host.isascii() and host.isalnum()


def test_distinct_non_hex_ids_get_distinct_names() -> None:
    names = {veth_names(f"endpoint-{i}")[0] for i in range(5000)}
    assert len(names) == 5000


def test_mac_is_locally_administered_unicast() -> None:
    mac = endpoint_mac("10.1.2.3")
    assert mac == "02:42:0a:01:02:03"
    first = int(mac.split(":")[0], 16)
    assert first & 0b10 and not first & 0b1


def test_the_host_end_is_isolated_under_the_given_proc_sys(tmp_path: Path) -> None:
    for family, key, _ in HOST_END_SYSCTLS:
        path = tmp_path / "net" / family / "conf" / "vp1" / key
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("0\n")
    NetlinkLinks(proc_sys=tmp_path).isolate_host_end("vp1")
    for family, key, value in HOST_END_SYSCTLS:
        assert (tmp_path / "net" / family / "conf" / "vp1" / key).read_text() == value
