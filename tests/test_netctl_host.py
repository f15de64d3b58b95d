"""netctl host inspect: the agent's inspect API over its unix socket (a werkzeug server on a
temporary socket answering as the agent does), as tables or --json."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from flask import Flask, Response

from netctl.cli import main
from plugin.server import make_socket_server

DRIVER = {
    "version": "0.1.0",
    "uptimeSeconds": 12.5,
    "host": "h1",
    "bridge": "netplugin",
    "datapath": "netdev",
    "ready": True,
    "switch": {"connected": True, "reconciles": 4},
    "networks": ["default:n1"],
    "endpoints": 1,
    "vtep": "192.0.2.1",
    "peers": 1,
    "cluster": {"synced": True, "revision": 7, "storeRevision": 9, "watchRestarts": 0}
    | {"lastResync": "2026-01-01T00:00:00+00:00", "unresolvedRules": 0},
    "flows": {"connected": True, "expected": 30, "onSwitch": 29, "missing": 1}
    | {"changed": 0, "extra": 0},
}
ENDPOINTS = [
    {
        "endpointID": "ab" * 32,
        "containerID": "c0ffee" * 10,
        "containerName": "web",
        "network": "default:n1",
        "group": "",
        "ipv4": "10.1.0.2",
        "ipv6": "",
        "mac": "02:42:0a:01:00:02",
        "ovsPort": "vpabababababab",
        "ofport": 11,
        "hostVeth": "vpabababababab",
        "containerVeth": "vcabababababab",
        "publishedPorts": ["0.0.0.0:8080->80/tcp", "127.0.0.1:8081->80/tcp"],
    },
    {
        "endpointID": "cd" * 32,
        "containerID": "",
        "containerName": "",
        "network": "default:n1",
        "group": "",
        "ipv4": "10.1.0.3",
        "ipv6": "",
        "mac": "02:42:0a:01:00:03",
        "ovsPort": "vpcdcdcdcdcdcd",
        "ofport": 12,
        "hostVeth": "vpcdcdcdcdcdcd",
        "containerVeth": "vccdcdcdcdcdcd",
        "publishedPorts": [],
    },
]
TUNNELS = {
    "vtep": "192.0.2.1",
    "bridge": "netplugin",
    "vlanUplink": None,
    "peers": [{"host": "h2", "vtepIp": "192.0.2.2", "port": "vxc0000202", "ofport": None}],
}
CLUSTER = {
    "synced": True,
    "revision": 7,
    "storeRevision": 9,
    "lagRevisions": 2,
    "lastResync": "2026-01-01T00:00:00+00:00",
    "watchRestarts": 1,
    "mirrors": [
        {"prefix": "/netplugin/hosts/", "keys": 2, "revision": 7, "synced": True}
        | {"restarts": 1, "lastRead": "2026-01-01T00:00:00+00:00"}
    ],
    "unresolvedRules": [{"group": "default:g", "rule": "r1", "reason": "no group default:x"}],
}
FLOWS = {
    "connected": True,
    "expected": 3,
    "onSwitch": 2,
    "inSync": False,
    "settled": True,
    "tables": [
        {"table": 0, "name": "classify", "expected": 3, "onSwitch": 2}
        | {"missing": 1, "changed": 0, "extra": 0}
    ],
    "missing": ["table=0,priority=10,in_port=1 actions=goto:10"],
    "changed": [],
    "extra": [],
    "listedUpTo": 20,
}
ANSWERS = {
    "driver": DRIVER,
    "endpoints": ENDPOINTS,
    "tunnels": TUNNELS,
    "cluster": CLUSTER,
    "flows": FLOWS,
    "teardown": {
        "pending": ["ef" * 32],
        "done": 7,
        "failed": 1,
        "pool": {"free": 5, "size": 16, "taken": 40, "missed": 2, "reused": 33, "made": 21},
        "costs": {
            "port_add_ms": 171.2,
            "port_adds": 9,
            "port_add_ports": 1016,
            "ports": 1012,
            "move_ms": 23.5,
            "moves": 4,
            "cni_pair": "pool",
            "chosen_by": "measured",
        },
    },
}


@pytest.fixture
def agent_socket(tmp_path: Path) -> Iterator[str]:
    app = Flask("fake-agent")

    @app.get("/inspect/<section>")
    def inspect(section: str) -> Response:
        return Response(json.dumps(ANSWERS[section]), mimetype="application/json")

    path = str(tmp_path / "api.sock")
    server = make_socket_server(path, app)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield path
    server.shutdown()
    thread.join(5)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = main(["host", "inspect", *argv])
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.mark.parametrize("section", sorted(ANSWERS))
def test_json_is_the_agents_answer(
    capsys: pytest.CaptureFixture[str], agent_socket: str, section: str
) -> None:
    rc, out, _ = run(capsys, "--socket", agent_socket, "--json", section)
    assert rc == 0 and json.loads(out) == ANSWERS[section]


def test_the_summary_is_the_default_section(
    capsys: pytest.CaptureFixture[str], agent_socket: str
) -> None:
    rc, out, _ = run(capsys, "--socket", agent_socket)
    assert rc == 0
    lines = dict(line.split(":", 1) for line in out.splitlines())
    assert lines["Host"].strip() == "h1" and lines["Endpoints"].strip() == "1"
    assert lines["Cluster revision"].strip() == "7 (store 9)"
    assert "1 missing" in lines["Flows"]


def test_tables_for_endpoints_tunnels_cluster_and_flows(
    capsys: pytest.CaptureFixture[str], agent_socket: str
) -> None:
    _, out, _ = run(capsys, "--socket", agent_socket, "endpoints")
    header, _, row, _ = out.splitlines()
    assert header.split()[:3] == ["Endpoint", "Container", "Network"]
    mac, port = "02:42:0a:01:00:02", "vpabababababab"
    assert row.split()[:7] == ["abababababab", "web", "default:n1", "10.1.0.2", mac, port, "11"]
    _, out, _ = run(capsys, "--socket", agent_socket, "tunnels")
    assert out.splitlines()[-1].split() == ["h2", "192.0.2.2", "vxc0000202", "none"]
    _, out, _ = run(capsys, "--socket", agent_socket, "cluster")
    assert "rule r1 of group default:g not enforced: no group default:x" in out
    assert "/netplugin/hosts/" in out
    _, out, _ = run(capsys, "--socket", agent_socket, "flows")
    assert "classify" in out and "Missing (first 20):" in out
    _, out, _ = run(capsys, "--socket", agent_socket, "teardown")
    lines = out.splitlines()
    values = [line.split(":")[1].strip() for line in lines[:11]]
    assert values[:8] == ["1", "7", "1", "5 of 16", "40", "33", "21", "2"]
    assert values[8:] == [
        "171.2 ms (9 measured; last at 1016 ports, 1012 now)",
        "23.5 ms (4 measured)",
        "a pool port, moved in (measured)",
    ]
    assert lines[11].strip() == "ef" * 32


def test_the_endpoints_table_shows_each_endpoints_published_ports(
    capsys: pytest.CaptureFixture[str], agent_socket: str
) -> None:
    """Issue 22: the README says `netctl host inspect endpoints` lists published ports;
    only --json had them."""
    _, out, _ = run(capsys, "--socket", agent_socket, "endpoints")
    header, _, web, bare = out.splitlines()
    column = header.index("Published ports")
    assert web[column:] == "8080->80/tcp, 127.0.0.1:8081->80/tcp"  # 0.0.0.0: every address
    assert bare[column:] == "" and bare.split()[0] == "cdcdcdcdcdcd"


def test_an_agent_that_is_not_there_is_one_line_and_exit_1(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    rc, out, err = run(capsys, "--socket", str(tmp_path / "none.sock"))
    assert rc == 1 and out == ""
    assert err.startswith("netctl: cannot reach the agent at ") and err.count("\n") == 1


def test_socket_and_url_exclude_each_other(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main(["host", "inspect", "--socket", "/x", "--url", "http://127.0.0.1:1"])
    assert e.value.code == 2
    assert "not allowed with" in capsys.readouterr().err


def test_an_unknown_section_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["host", "inspect", "routes"])
    assert "invalid choice" in capsys.readouterr().err


def test_a_managed_plugins_api_socket_is_found_when_the_default_is_missing(
    tmp_path: Path,
) -> None:
    from netctl.host import default_socket

    missing = str(tmp_path / "run" / "netplugin-api.sock")
    pattern = str(tmp_path / "*" / "netplugin-api.sock")
    assert default_socket(missing, pattern, missing) == missing  # no plugin: unchanged
    one = tmp_path / ("a" * 64)
    one.mkdir()
    (one / "netplugin-api.sock").touch()
    assert default_socket(missing, pattern, missing) == str(one / "netplugin-api.sock")
    assert default_socket("/elsewhere.sock", pattern, missing) == "/elsewhere.sock"  # given
    two = tmp_path / ("b" * 64)
    two.mkdir()
    (two / "netplugin-api.sock").touch()
    assert default_socket(missing, pattern, missing) == missing  # two plugins: ambiguous
