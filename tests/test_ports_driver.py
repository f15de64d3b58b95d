"""Port publishing through the plugin's Docker API, a real master and the datapath agent
(with fakes for its effects): what Docker sends for -p, -P and ranges, what it is told
back, and a refusal that changes nothing."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from datapath.ports import PublishedPort
from plugin.options import PORTMAP, DriverError, port_bindings
from testbed.fuzz_plugin import EID, NID, POOL, Stack, plugin_stack, seed

ids = {"NetworkID": NID, "EndpointID": EID}
EID2 = "e2" * 32


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    with plugin_stack(tmp_path) as s:
        seed(s)
        yield s


def program(stack: Stack, endpoint: str, portmap: list[dict[str, Any]]) -> Any:
    body = {"NetworkID": NID, "EndpointID": endpoint, "Options": {PORTMAP: portmap}}
    return stack.call("NetworkDriver.ProgramExternalConnectivity", body)


def oper(stack: Stack, endpoint: str) -> dict[str, Any]:
    body = {"NetworkID": NID, "EndpointID": endpoint}
    value: dict[str, Any] = stack.call("NetworkDriver.EndpointOperInfo", body).get_json()["Value"]
    return value


def second_endpoint(stack: Stack) -> str:
    address = stack.call("IpamDriver.RequestAddress", {"PoolID": POOL}).get_json()["Address"]
    body = {"NetworkID": NID, "EndpointID": EID2, "Interface": {"Address": address}}
    assert stack.call("NetworkDriver.CreateEndpoint", body).status_code == 200
    return address.split("/")[0]


def test_docker_port_bindings_as_docker_20_10_sends_them() -> None:
    """Measured with a probe driver: -p 80, -P (HostPort 0), -p 8000-8010:80 (one binding,
    HostPort..HostPortEnd), -p 8000-8002:80-82 (three single ones), HostIP "::" (any)."""
    entries = [
        {"Proto": 6, "IP": "", "Port": 80, "HostIP": "", "HostPort": 0, "HostPortEnd": 0},
        {"Proto": 6, "IP": "", "Port": 80, "HostIP": "", "HostPort": 8000, "HostPortEnd": 8010},
        {"Proto": 17, "Port": 53, "HostIP": "127.0.0.1", "HostPort": 5353, "HostPortEnd": 5353},
        {"Proto": 6, "Port": 80, "HostIP": "::", "HostPort": 8080, "HostPortEnd": 8080},
    ]
    assert port_bindings(entries, "10.5.0.2") == [
        PublishedPort("tcp", "", 0, 80, "10.5.0.2", 0),
        PublishedPort("tcp", "", 8000, 80, "10.5.0.2", 8010),
        PublishedPort("udp", "127.0.0.1", 5353, 53, "10.5.0.2", 5353),
        PublishedPort("tcp", "", 8080, 80, "10.5.0.2", 8080),
    ]
    with pytest.raises(DriverError, match="HostPortEnd 9 without a HostPort"):
        port_bindings([{"Proto": 6, "Port": 80, "HostPort": 0, "HostPortEnd": 9}], "ip")


def test_random_and_ranged_ports_are_chosen_and_told_back(stack: Stack) -> None:
    r = program(
        stack,
        EID,
        [
            {"Proto": 6, "Port": 80, "HostIP": "", "HostPort": 0, "HostPortEnd": 0},
            {"Proto": 17, "Port": 53, "HostIP": "", "HostPort": 8000, "HostPortEnd": 8010},
        ],
    )
    assert r.status_code == 200, r.get_json()
    told = oper(stack, EID)[PORTMAP]
    ip = told[0]["IP"]
    random_port = next(p["HostPort"] for p in told if p["Proto"] == 6)
    assert 40000 <= random_port <= 40009  # the fake host's ephemeral range
    assert {"Proto": 17, "IP": ip, "Port": 53, "HostIP": "0.0.0.0", "HostPort": 8000,
            "HostPortEnd": 8000} in told  # fmt: skip
    assert any(
        f"--dport {random_port} " in rule for rule in stack.iptables.chains["NETPLUGIN-DNAT"]
    )


def test_a_taken_port_is_refused_naming_it_and_nothing_changes(stack: Stack) -> None:
    entry = {"Proto": 6, "Port": 80, "HostIP": "", "HostPort": 8080, "HostPortEnd": 8080}
    assert program(stack, EID, [entry]).status_code == 200
    second_endpoint(stack)
    before = stack.datapath()
    r = program(stack, EID2, [{**entry, "HostPort": 9090, "HostPortEnd": 9090}, entry])
    assert r.status_code == 409
    assert r.get_json()["Err"] == (
        "-p 8080:80/tcp: host port 8080/tcp on every host "
        f"address is already used by container endpoint {EID[:12]}"
    )
    assert stack.datapath() == before and PORTMAP not in oper(stack, EID2)
