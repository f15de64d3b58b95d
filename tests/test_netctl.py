"""netctl: argument parsing -> REST requests, output rendering and error reporting (no network)."""

from __future__ import annotations

import json
import socket
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import pytest
import requests

from common.kinds import TENANTS
from netctl import __version__
from netctl.cli import main, render_table
from netctl.client import MasterClient, MasterError, normalize_url


@dataclass
class Call:
    method: str
    url: str
    path: str
    params: dict[str, str] | None
    body: Any


def _response(status: int, body: Any, url: str = "", raw: bytes | None = None) -> requests.Response:
    resp = requests.Response()
    resp.status_code = status
    resp.reason = {200: "OK", 400: "Bad Request", 404: "Not Found", 409: "Conflict"}.get(
        status, "Bad Gateway"
    )
    resp._content = raw if raw is not None else json.dumps(body).encode()
    resp.headers["Content-Type"] = "application/json"
    resp.url = url
    return resp


class FakeSession(requests.Session):
    """Records every request and answers from canned (method, path) -> (status, body) routes."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[Call] = []
        self.routes: dict[tuple[str, str], tuple[int, Any]] = {}
        self.raw: dict[tuple[str, str], tuple[int, bytes]] = {}
        self.exc: BaseException | None = None

    def answer(self, method: str, path: str, body: Any, status: int = 200) -> None:
        self.routes[(method, path)] = (status, body)

    def request(  # type: ignore[override]
        self,
        method: str,
        url: str,
        params: dict[str, str] | None = None,
        json: Any = None,
        timeout: float | None = None,
        **kwargs: Any,
    ) -> requests.Response:
        path = urlsplit(url).path
        self.calls.append(Call(method, url, path, params, json))
        if self.exc is not None:
            raise self.exc
        if (method, path) in self.raw:
            status, raw = self.raw[(method, path)]
            return _response(status, None, url, raw)
        status, body = self.routes.get((method, path), (200, {}))
        return _response(status, body, url)

    @property
    def last(self) -> Call:
        return self.calls[-1]


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeSession:
    monkeypatch.delenv("NETMASTER", raising=False)
    return FakeSession()


def run(
    capsys: pytest.CaptureFixture[str], argv: list[str], session: requests.Session | None
) -> tuple[int, str, str]:
    """Run netctl; returns (exit code, stdout, stderr), argparse's SystemExit as a code."""
    try:
        rc = main(argv, session=session)
    except SystemExit as e:
        rc = int(e.code or 0)
    out, err = capsys.readouterr()
    return rc, out, err


NET = {
    "key": "blue:web",
    "tenantName": "blue",
    "networkName": "web",
    "encap": "vxlan",
    "pktTag": 0,
    "subnet": "10.1.0.0/24",
    "gateway": "10.1.0.1",
    "ipv6Subnet": "",
    "ipv6Gateway": "",
    "nwType": "data",
    "dockerNetworkID": "",
    "internal": False,
}
NET2 = {
    **NET,
    "key": "default:dual",
    "tenantName": "default",
    "networkName": "dual",
    "encap": "vlan",
    "pktTag": 100,
    "subnet": "10.5.0.0/24",
    "gateway": "10.5.0.1",
    "ipv6Subnet": "fd00:5::/64",
    "ipv6Gateway": "fd00:5::1",
}
GROUP = {
    "key": "blue:front",
    "tenantName": "blue",
    "groupName": "front",
    "networkName": "web",
    "ipPool": "10.1.0.100-10.1.0.150",
    "policies": ["p1", "p2"],
    "netProfile": "gold",
    "extContractsGrps": [],
    "cfgdTag": "",
}
EP = {
    "key": "ep1",
    "endpointID": "ep1",
    "tenantName": "default",
    "networkName": "dual",
    "groupName": "",
    "host": "node1",
    "ipAddress": "10.5.0.2/24",
    "ipv6Address": "fd00:5::2/64",
    "macAddress": "02:00:0a:05:00:02",
    "containerID": "0123456789abcdef0123",
    "containerName": "",
    "ipv4Pool": "",
    "ipv6Pool": "",
}


# --- request shapes ---


@pytest.mark.parametrize(
    ("argv", "method", "path", "body"),
    [
        (["tenant", "create", "blue"], "POST", "/api/v1/tenants/blue", {"tenantName": "blue"}),
        (["tenant", "rm", "blue"], "DELETE", "/api/v1/tenants/blue", None),
        (["tenant", "delete", "blue"], "DELETE", "/api/v1/tenants/blue", None),
        (["tenant", "ls"], "GET", "/api/v1/tenants", None),
        (["tenant", "list"], "GET", "/api/v1/tenants", None),
        (["tenant", "inspect", "blue"], "GET", "/api/v1/inspect/tenants/blue", None),
        (["net", "rm", "web"], "DELETE", "/api/v1/networks/default:web", None),
        (["net", "rm", "-t", "blue", "web"], "DELETE", "/api/v1/networks/blue:web", None),
        (["network", "delete", "--tenant", "b", "w"], "DELETE", "/api/v1/networks/b:w", None),
        (["net", "inspect", "web"], "GET", "/api/v1/inspect/networks/default:web", None),
        (["net", "inspect", "web", "-t", "blue"], "GET", "/api/v1/inspect/networks/blue:web", None),
        (["group", "rm", "front"], "DELETE", "/api/v1/endpointGroups/default:front", None),
        (["epg", "rm", "-t", "blue", "f"], "DELETE", "/api/v1/endpointGroups/blue:f", None),
        (["group", "inspect", "-t", "b", "f"], "GET", "/api/v1/inspect/endpointGroups/b:f", None),
        (["endpoint", "inspect", "ep1"], "GET", "/api/v1/inspect/endpoints/ep1", None),
        (["endpoint", "ls"], "GET", "/api/v1/endpoints", None),
        (["global", "info"], "GET", "/api/v1/inspect/globals/global", None),
        (["version"], "GET", "/version", None),
    ],
)
def test_request_shape(
    capsys: pytest.CaptureFixture[str],
    fake: FakeSession,
    argv: list[str],
    method: str,
    path: str,
    body: Any,
) -> None:
    rc, _, err = run(capsys, argv, fake)
    assert (rc, err) == (0, "")
    assert len(fake.calls) == 1
    call = fake.last
    assert (call.method, call.path, call.body) == (method, path, body)
    assert call.url == f"http://127.0.0.1:9999{path}"


def test_net_create_sends_every_field(
    capsys: pytest.CaptureFixture[str], fake: FakeSession
) -> None:
    argv = "net create -t blue -e vlan -p 100 -s 10.2.0.0/24 -g 10.2.0.1 "
    argv += "--subnetv6 fd00::/64 --gatewayv6 fd00::1 -n infra db"
    rc, out, err = run(capsys, argv.split(), fake)
    assert (rc, out, err) == (0, "", "")
    assert (fake.last.method, fake.last.path) == ("POST", "/api/v1/networks/blue:db")
    assert fake.last.body == {
        "tenantName": "blue",
        "networkName": "db",
        "encap": "vlan",
        "pktTag": 100,
        "subnet": "10.2.0.0/24",
        "gateway": "10.2.0.1",
        "ipv6Subnet": "fd00::/64",
        "ipv6Gateway": "fd00::1",
        "nwType": "infra",
    }


def test_net_create_long_flags_and_defaults(
    capsys: pytest.CaptureFixture[str], fake: FakeSession
) -> None:
    rc, _, _ = run(capsys, ["net", "create", "--subnet", "10.1.0.0/24", "web"], fake)
    assert rc == 0
    assert fake.last.path == "/api/v1/networks/default:web"
    assert fake.last.body == {
        "tenantName": "default",
        "networkName": "web",
        "encap": "vxlan",
        "pktTag": 0,
        "subnet": "10.1.0.0/24",
        "gateway": "",
        "ipv6Subnet": "",
        "ipv6Gateway": "",
        "nwType": "data",
    }
    argv = ["network", "create", "--tenant", "t", "--encap", "vlan", "--pkt-tag", "7"]
    argv += ["--gateway", "10.0.0.9", "--nw-type", "infra", "-s", "10.0.0.0/24", "n"]
    assert run(capsys, argv, fake)[0] == 0
    body = fake.last.body
    assert (body["encap"], body["pktTag"], body["gateway"], body["nwType"]) == (
        "vlan",
        7,
        "10.0.0.9",
        "infra",
    )
    assert fake.last.path == "/api/v1/networks/t:n"


def test_group_create(capsys: pytest.CaptureFixture[str], fake: FakeSession) -> None:
    argv = ["group", "create", "-t", "blue", "-r", "10.1.0.100-10.1.0.150"]
    argv += ["-p", "a", "--policy", "b,c", "-n", "gold", "web", "front"]
    rc, out, err = run(capsys, argv, fake)
    assert (rc, out, err) == (0, "", "")
    assert (fake.last.method, fake.last.path) == ("POST", "/api/v1/endpointGroups/blue:front")
    assert fake.last.body == {
        "tenantName": "blue",
        "groupName": "front",
        "networkName": "web",
        "ipPool": "10.1.0.100-10.1.0.150",
        "policies": ["a", "b", "c"],
        "netProfile": "gold",
    }
    assert run(capsys, ["epg", "create", "net1", "g1"], fake)[0] == 0
    assert fake.last.path == "/api/v1/endpointGroups/default:g1"
    assert fake.last.body == {
        "tenantName": "default",
        "groupName": "g1",
        "networkName": "net1",
        "ipPool": "",
        "policies": [],
        "netProfile": "",
    }


def test_global_set_sends_only_given_fields(
    capsys: pytest.CaptureFixture[str], fake: FakeSession
) -> None:
    rc, out, _ = run(capsys, ["global", "set", "--vxlan-range", "1000-2000"], fake)
    assert (rc, out) == (0, "")
    assert (fake.last.method, fake.last.path) == ("POST", "/api/v1/globals/global")
    assert fake.last.body == {"vxlans": "1000-2000"}
    argv = ["global", "set", "--fwd-mode", "routing", "--arp-mode", "flood"]
    argv += ["--vlan-range", "1-100", "--vxlan-range", "5-6", "--private-subnet", "172.20.0.0/16"]
    assert run(capsys, argv, fake)[0] == 0
    assert fake.last.body == {
        "fwdMode": "routing",
        "arpMode": "flood",
        "vlans": "1-100",
        "vxlans": "5-6",
        "pvtSubnet": "172.20.0.0/16",
    }


def test_global_set_without_options_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], fake: FakeSession
) -> None:
    rc, _, err = run(capsys, ["global", "set"], fake)
    assert rc == 2
    assert "nothing to set" in err
    assert fake.calls == []


@pytest.mark.parametrize(
    ("argv", "params"),
    [
        (["net", "ls"], {"tenant": "default"}),
        (["net", "ls", "-t", "blue"], {"tenant": "blue"}),
        (["network", "list", "--tenant", "blue"], {"tenant": "blue"}),
        (["net", "ls", "-a"], None),
        (["net", "ls", "--all", "-t", "blue"], None),
        (["group", "ls"], {"tenant": "default"}),
        (["epg", "ls", "-t", "blue"], {"tenant": "blue"}),
        (["group", "list", "-a"], None),
    ],
)
def test_ls_tenant_filter(
    capsys: pytest.CaptureFixture[str], fake: FakeSession, argv: list[str], params: Any
) -> None:
    fake.answer("GET", "/api/v1/networks", [])
    fake.answer("GET", "/api/v1/endpointGroups", [])
    rc, _, _ = run(capsys, argv, fake)
    assert rc == 0
    path = "/api/v1/networks" if argv[0].startswith("net") else "/api/v1/endpointGroups"
    assert (fake.last.method, fake.last.path, fake.last.params) == ("GET", path, params)


# --- output ---


def test_render_table() -> None:
    text = render_table(["Name", "Tag"], [["a", 1], ["longer-name", None], ["x", ["p", "q"]]])
    assert text == (
        "Name         Tag\n----         ---\na            1\nlonger-name\nx            p,q\n"
    )
    assert render_table(["A", "B"], []) == "A  B\n-  -\n"


def test_net_ls_all_table(capsys: pytest.CaptureFixture[str], fake: FakeSession) -> None:
    fake.answer("GET", "/api/v1/networks", [NET, NET2])
    rc, out, err = run(capsys, ["net", "ls", "-a"], fake)
    assert (rc, err) == (0, "")
    assert fake.last.params is None
    assert out.splitlines() == [
        "Tenant   Network  Nw Type  Encap type  Packet tag  Subnet       Gateway   IPv6Subnet   IPv6Gateway",  # noqa: E501
        "------   -------  -------  ----------  ----------  ------       -------   ----------   -----------",  # noqa: E501
        "blue     web      data     vxlan       0           10.1.0.0/24  10.1.0.1",
        "default  dual     data     vlan        100         10.5.0.0/24  10.5.0.1  fd00:5::/64  fd00:5::1",  # noqa: E501
    ]


def test_group_ls_table(capsys: pytest.CaptureFixture[str], fake: FakeSession) -> None:
    fake.answer("GET", "/api/v1/endpointGroups", [GROUP])
    rc, out, _ = run(capsys, ["group", "ls", "-t", "blue"], fake)
    assert rc == 0
    assert out.splitlines() == [
        "Tenant  Group  Network  IP Pool                Policies  Network profile",
        "------  -----  -------  -------                --------  ---------------",
        "blue    front  web      10.1.0.100-10.1.0.150  p1,p2     gold",
    ]


def test_tenant_ls_table(capsys: pytest.CaptureFixture[str], fake: FakeSession) -> None:
    tenants = [{"key": n, "tenantName": n, "defaultNetwork": ""} for n in ("blue", "default")]
    fake.answer("GET", "/api/v1/tenants", tenants)
    rc, out, _ = run(capsys, ["tenant", "ls"], fake)
    assert rc == 0
    assert out == "Name\n----\nblue\ndefault\n"


def test_endpoint_ls_table(capsys: pytest.CaptureFixture[str], fake: FakeSession) -> None:
    named = {**EP, "endpointID": "ep2", "groupName": "g", "containerName": "web1"}
    fake.answer("GET", "/api/v1/endpoints", [EP, named])
    rc, out, _ = run(capsys, ["endpoint", "ls"], fake)
    assert rc == 0
    lines = out.splitlines()
    assert lines[0].split() == [
        "Endpoint", "Tenant", "Network", "Group", "Host", "IPv4", "IPv6", "Container"
    ]  # fmt: skip
    assert set(lines[1]) == {"-", " "}
    assert lines[2].split() == [
        "ep1", "default", "dual", "node1", "10.5.0.2/24", "fd00:5::2/64", "0123456789ab"
    ]  # fmt: skip
    assert lines[3].split()[-1] == "web1"
    assert lines[3].split()[3] == "g"


def test_empty_list_prints_header_only(
    capsys: pytest.CaptureFixture[str], fake: FakeSession
) -> None:
    fake.answer("GET", "/api/v1/networks", [])
    rc, out, _ = run(capsys, ["net", "ls"], fake)
    assert rc == 0
    assert len(out.splitlines()) == 2


def test_ls_json(capsys: pytest.CaptureFixture[str], fake: FakeSession) -> None:
    fake.answer("GET", "/api/v1/networks", [NET, NET2])
    rc, out, _ = run(capsys, ["net", "ls", "-a", "--json"], fake)
    assert rc == 0
    assert json.loads(out) == [NET, NET2]
    assert out.startswith("[\n  {")  # indented


def test_inspect_prints_indented_json(
    capsys: pytest.CaptureFixture[str], fake: FakeSession
) -> None:
    doc = {"Config": NET, "Oper": {"pktTag": 1, "endpoints": []}}
    fake.answer("GET", "/api/v1/inspect/networks/blue:web", doc)
    rc, out, _ = run(capsys, ["net", "inspect", "-t", "blue", "web"], fake)
    assert rc == 0
    assert json.loads(out) == doc
    assert out == json.dumps(doc, indent=2) + "\n"


def test_create_and_rm_are_quiet_unless_json(
    capsys: pytest.CaptureFixture[str], fake: FakeSession
) -> None:
    fake.answer("POST", "/api/v1/networks/blue:web", NET)
    fake.answer("DELETE", "/api/v1/networks/blue:web", {"deleted": "network blue:web"})
    argv = ["net", "create", "-t", "blue", "-s", "10.1.0.0/24", "web"]
    assert run(capsys, argv, fake) == (0, "", "")
    rc, out, _ = run(capsys, [*argv, "--json"], fake)
    assert rc == 0 and json.loads(out) == NET
    assert run(capsys, ["net", "rm", "-t", "blue", "web"], fake) == (0, "", "")
    rc, out, _ = run(capsys, ["--json", "net", "rm", "-t", "blue", "web"], fake)
    assert rc == 0 and json.loads(out) == {"deleted": "network blue:web"}


GLOBAL_INSPECT = {
    "Config": {
        "key": "global",
        "name": "global",
        "networkInfraType": "default",
        "vlans": "1-4094",
        "vxlans": "1-10000",
        "fwdMode": "bridge",
        "arpMode": "proxy",
        "pvtSubnet": "172.19.0.0/16",
    },
    "Oper": {
        "clusterMode": "embedded",
        "numNetworks": 2,
        "vlansInUse": "100",
        "vxlansInUse": "",
        "freeVLANs": 4093,
        "freeVXLANs": 10000,
        "somethingNew": "x",
    },
}


def test_global_info(capsys: pytest.CaptureFixture[str], fake: FakeSession) -> None:
    fake.answer("GET", "/api/v1/inspect/globals/global", GLOBAL_INSPECT)
    rc, out, _ = run(capsys, ["global", "info"], fake)
    assert rc == 0
    lines = [line.split(":", 1) for line in out.splitlines()]
    got = {k: v.strip() for k, v in lines}
    assert list(got)[:3] == ["Fabric mode", "Forward mode", "ARP mode"]
    assert got["Forward mode"] == "bridge"
    assert got["Vlan range"] == "1-4094"
    assert got["Vxlan range"] == "1-10000"
    assert got["Private subnet"] == "172.19.0.0/16"
    assert got["Cluster mode"] == "embedded"
    assert got["Vlans in use"] == "100"
    assert got["Vxlans in use"] == "-"
    assert got["somethingNew"] == "x"
    assert "global" not in got.values()
    rc, out, _ = run(capsys, ["global", "info", "--json"], fake)
    assert rc == 0 and json.loads(out) == GLOBAL_INSPECT


def test_version(capsys: pytest.CaptureFixture[str], fake: FakeSession) -> None:
    fake.answer("GET", "/version", {"version": "9.9.9", "backend": "etcd"})
    rc, out, _ = run(capsys, ["version"], fake)
    assert rc == 0
    assert out == (
        f"Client Version:\nVersion: {__version__}\n\n"
        "Server Version:\nVersion: 9.9.9\nBackend: etcd\n"
    )
    rc, out, _ = run(capsys, ["version", "--json"], fake)
    assert json.loads(out) == {
        "client": {"version": __version__},
        "server": {"version": "9.9.9", "backend": "etcd"},
    }


# --- global options and the master's address ---


@pytest.mark.parametrize(
    "argv",
    [
        ["--json", "net", "ls"],
        ["net", "--json", "ls"],
        ["net", "ls", "--json"],
        ["--json", "net", "ls", "--json"],
    ],
)
def test_json_flag_in_any_position(
    capsys: pytest.CaptureFixture[str], fake: FakeSession, argv: list[str]
) -> None:
    fake.answer("GET", "/api/v1/networks", [NET])
    rc, out, _ = run(capsys, argv, fake)
    assert rc == 0
    assert json.loads(out) == [NET]


@pytest.mark.parametrize(
    ("argv", "base"),
    [
        (["--netmaster", "http://10.0.0.1:9999", "tenant", "ls"], "http://10.0.0.1:9999"),
        (["tenant", "ls", "--netmaster", "10.0.0.2:8080"], "http://10.0.0.2:8080"),
        (["tenant", "--netmaster=https://m.example/", "ls"], "https://m.example"),
        (["--netmaster", "a:1", "tenant", "ls", "--netmaster", "b:2"], "http://b:2"),
    ],
)
def test_netmaster_option_in_any_position(
    capsys: pytest.CaptureFixture[str], fake: FakeSession, argv: list[str], base: str
) -> None:
    rc, _, _ = run(capsys, argv, fake)
    assert rc == 0
    assert fake.last.url == f"{base}/api/v1/tenants"


def test_netmaster_env(
    capsys: pytest.CaptureFixture[str], fake: FakeSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NETMASTER", "master.local:7777")
    assert run(capsys, ["tenant", "ls"], fake)[0] == 0
    assert fake.last.url == "http://master.local:7777/api/v1/tenants"
    assert run(capsys, ["tenant", "ls", "--netmaster", "other:1"], fake)[0] == 0
    assert fake.last.url == "http://other:1/api/v1/tenants"  # the flag wins over $NETMASTER


def test_default_netmaster(capsys: pytest.CaptureFixture[str], fake: FakeSession) -> None:
    assert run(capsys, ["tenant", "ls"], fake)[0] == 0
    assert fake.last.url == "http://127.0.0.1:9999/api/v1/tenants"


def test_normalize_url() -> None:
    assert normalize_url("host:1") == "http://host:1"
    assert normalize_url(" http://h:2/ ") == "http://h:2"
    assert normalize_url("https://h") == "https://h"
    with pytest.raises(ValueError):
        normalize_url("  ")


# --- errors ---


def test_master_error_is_one_line_and_exit_1(
    capsys: pytest.CaptureFixture[str], fake: FakeSession
) -> None:
    msg = "tenant blue: it still has network blue:web; delete them first"
    body = {"error": msg, "object": "tenant blue", "reason": "it still has network blue:web"}
    fake.answer("DELETE", "/api/v1/tenants/blue", body, status=409)
    rc, out, err = run(capsys, ["tenant", "rm", "blue"], fake)
    assert rc == 1
    assert out == ""
    assert err == f"netctl: {msg}\n"
    rc, out, err = run(capsys, ["--json", "tenant", "rm", "blue"], fake)
    assert (rc, out, err) == (1, "", f"netctl: {msg}\n")


def test_not_found_on_inspect(capsys: pytest.CaptureFixture[str], fake: FakeSession) -> None:
    fake.answer("GET", "/api/v1/inspect/endpoints/x", {"error": "endpoint x: not found"}, 404)
    assert run(capsys, ["endpoint", "inspect", "x"], fake) == (
        1,
        "",
        "netctl: endpoint x: not found\n",
    )


def test_non_json_error_is_readable(capsys: pytest.CaptureFixture[str], fake: FakeSession) -> None:
    fake.raw[("GET", "/api/v1/tenants")] = (502, b"<html>\nupstream down\n</html>")
    rc, out, err = run(capsys, ["tenant", "ls"], fake)
    assert rc == 1 and out == ""
    assert err.count("\n") == 1
    assert err.startswith("netctl: GET /api/v1/tenants: netmaster answered 502 Bad Gateway")
    assert "upstream down" in err


def test_non_json_success_is_an_error(
    capsys: pytest.CaptureFixture[str], fake: FakeSession
) -> None:
    fake.raw[("GET", "/api/v1/tenants")] = (200, b"hello")
    rc, _, err = run(capsys, ["tenant", "ls"], fake)
    assert rc == 1 and "non-JSON" in err


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (requests.ReadTimeout("slow"), "netctl: netmaster at http://m:1 did not answer within 30s"),
        (
            requests.ConnectTimeout("slow"),
            "netctl: cannot reach netmaster at http://m:1: timed out connecting after 30s",
        ),
        (
            requests.ConnectionError(ConnectionRefusedError(111, "Connection refused")),
            "netctl: cannot reach netmaster at http://m:1: connection refused",
        ),
    ],
)
def test_transport_failures(
    capsys: pytest.CaptureFixture[str], fake: FakeSession, exc: Exception, expected: str
) -> None:
    fake.exc = exc
    assert run(capsys, ["--netmaster", "m:1", "net", "ls"], fake) == (1, "", expected + "\n")


def _unused_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_connection_refused_real_socket(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    port = _unused_port()
    monkeypatch.setenv("NETMASTER", f"127.0.0.1:{port}")
    rc, out, err = run(capsys, ["tenant", "ls"], None)
    assert (rc, out) == (1, "")
    assert err == f"netctl: cannot reach netmaster at http://127.0.0.1:{port}: connection refused\n"
    assert "Traceback" not in err


def test_client_raises_master_error_with_status(fake: FakeSession) -> None:
    fake.answer("POST", "/api/v1/tenants/a", {"error": "tenant a: bad"}, status=400)
    client = MasterClient("m:1", timeout=5, session=fake)
    with pytest.raises(MasterError) as info:
        client.put(TENANTS, "a")
    assert (info.value.message, info.value.status) == ("tenant a: bad", 400)
    assert str(info.value) == "tenant a: bad"


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["net"],
        ["net", "create", "-e", "gre", "-s", "10.0.0.0/24", "x"],
        ["net", "create", "-p", "abc", "x"],
        ["net", "create", "-s", "10.0.0.0/24"],
        ["tenant", "create", ""],
        ["group", "create", "onlynetwork"],
        ["global", "set", "--fwd-mode", "nat"],
        ["frobnicate"],
    ],
)
def test_usage_errors_exit_2(
    capsys: pytest.CaptureFixture[str], fake: FakeSession, argv: list[str]
) -> None:
    rc, out, err = run(capsys, argv, fake)
    assert (rc, out) == (2, "")
    assert "usage:" in err
    assert fake.calls == []


# --- against the real master app ---


def test_against_real_master_app(
    capsys: pytest.CaptureFixture[str], master_session: requests.Session
) -> None:
    s = master_session
    assert run(capsys, ["tenant", "create", "blue"], s) == (0, "", "")
    argv = ["net", "create", "-t", "blue", "-e", "vlan", "-p", "100", "-s", "10.2.0.0/24", "db"]
    assert run(capsys, argv, s) == (0, "", "")
    argv = ["group", "create", "-t", "blue", "-r", "10.2.0.10-10.2.0.20", "-p", "p1", "db", "g"]
    rc, _, err = run(capsys, argv, s)
    assert rc == 1 and err == (
        "netctl: endpoint group blue:g: policy blue:p1 not found; create it first\n"
    )
    assert run(capsys, ["policy", "create", "-t", "blue", "p1"], s) == (0, "", "")
    assert run(capsys, argv, s) == (0, "", "")
    rc, out, _ = run(capsys, ["net", "ls", "-a"], s)
    assert rc == 0
    assert out.splitlines()[2].split() == [
        "blue", "db", "data", "vlan", "100", "10.2.0.0/24", "10.2.0.1"
    ]  # fmt: skip
    rc, out, _ = run(capsys, ["group", "ls", "-t", "blue", "--json"], s)
    assert [(g["groupName"], g["ipPool"], g["policies"]) for g in json.loads(out)] == [
        ("g", "10.2.0.10-10.2.0.20", ["p1"])
    ]
    rc, out, _ = run(capsys, ["net", "inspect", "-t", "blue", "db"], s)
    assert json.loads(out)["Oper"]["pktTag"] == 100
    rc, _, err = run(capsys, ["tenant", "rm", "blue"], s)
    assert rc == 1 and err.startswith("netctl: tenant blue: ") and err.count("\n") == 1
    assert run(capsys, ["global", "set", "--arp-mode", "flood"], s)[0] == 0
    rc, out, _ = run(capsys, ["global", "info", "--json"], s)
    assert json.loads(out)["Config"]["arpMode"] == "flood"
    assert json.loads(out)["Config"]["fwdMode"] == "bridge"
    assert run(capsys, ["group", "rm", "-t", "blue", "g"], s) == (0, "", "")
    assert run(capsys, ["policy", "rm", "-t", "blue", "p1"], s) == (0, "", "")
    assert run(capsys, ["net", "rm", "-t", "blue", "db"], s) == (0, "", "")
    assert run(capsys, ["tenant", "rm", "blue"], s) == (0, "", "")
    rc, out, _ = run(capsys, ["version"], s)
    assert rc == 0 and "Server Version:" in out
