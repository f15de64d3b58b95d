"""netctl bgp: every verb and flag (Contiv's) -> its REST request, its table, and a round trip
through the real master app (no network)."""

from __future__ import annotations

import json
from typing import Any

import pytest
import requests
from test_netctl import FakeSession, run

CREATE = ["--router-ip", "50.1.1.1/24", "--as", "65002", "--neighbor-as", "500"]
V6 = ["--router-ipv6", "fd00::1/64"]
BODY = {
    "hostname": "host1",
    "routerip": "50.1.1.1/24",
    "as": "65002",
    "neighbor-as": "500",
    "neighbor": "50.1.1.2",
}


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeSession:
    monkeypatch.delenv("NETMASTER", raising=False)
    return FakeSession()


@pytest.mark.parametrize(
    ("argv", "method", "path", "body"),
    [
        (
            ["bgp", "create", *CREATE, "--neighbor", "50.1.1.2", "host1"],
            "POST",
            "/api/v1/Bgps/host1",
            BODY,
        ),
        (
            ["bgp", "create", "host1", "--neighbor", "50.1.1.2", *CREATE],  # flags anywhere
            "POST",
            "/api/v1/Bgps/host1",
            BODY,
        ),
        (
            ["bgp", "create", *CREATE, "--neighbor", "50.1.1.2", *V6, "host1"],
            "POST",
            "/api/v1/Bgps/host1",
            {**BODY, "routeripv6": "fd00::1/64"},
        ),
        (["bgp", "rm", "host1"], "DELETE", "/api/v1/Bgps/host1", None),
        (["bgp", "delete", "host1"], "DELETE", "/api/v1/Bgps/host1", None),
        (["bgp", "ls"], "GET", "/api/v1/Bgps", None),
        (["bgp", "list"], "GET", "/api/v1/Bgps", None),
        (["bgp", "inspect", "node-1.example"], "GET", "/api/v1/inspect/Bgps/node-1.example", None),
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
    assert (fake.last.method, fake.last.path, fake.last.body) == (method, path, body)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["bgp", "create", *CREATE, "host1"], "the following arguments are required: --neighbor"),
        (["bgp", "create", *CREATE, "--neighbor", "50.1.1.2"], "required: HOST"),
        (["bgp", "rm"], "the following arguments are required: HOST"),
        (["bgp", "inspect", ""], "argument HOST: must not be empty"),
    ],
)
def test_usage_errors_exit_2_and_send_nothing(
    capsys: pytest.CaptureFixture[str], fake: FakeSession, argv: list[str], message: str
) -> None:
    rc, out, err = run(capsys, argv, fake)
    assert (rc, out) == (2, "")
    assert message in err
    assert fake.calls == []


def test_ls_table(capsys: pytest.CaptureFixture[str], fake: FakeSession) -> None:
    fake.answer("GET", "/api/v1/Bgps", [{"key": "host1", **BODY}])
    rc, out, _ = run(capsys, ["bgp", "ls"], fake)
    assert rc == 0
    assert out.splitlines() == [
        "Hostname  Router IP    AS     Neighbor  Neighbor AS",
        "--------  ---------    --     --------  -----------",
        "host1     50.1.1.1/24  65002  50.1.1.2  500",
    ]


def test_round_trip_through_the_real_master(
    capsys: pytest.CaptureFixture[str], master_session: requests.Session
) -> None:
    s = master_session

    def ok(*argv: str) -> str:
        rc, out, err = run(capsys, list(argv), s)
        assert (rc, err) == (0, ""), (argv, err)
        return out

    def refused(*argv: str) -> str:
        rc, out, err = run(capsys, list(argv), s)
        assert (rc, out) == (1, ""), argv
        return err.removeprefix("netctl: ").rstrip("\n")

    assert ok("bgp", "create", *CREATE, "--neighbor", "50.1.1.2", "host1") == ""
    assert refused("bgp", "create", *CREATE, "--neighbor", "50.1.1.2", "host2") == (
        "bgp host2: field 'routerip': 50.1.1.1 is already host host1's router IP "
        "(50.1.1.1/24); give each host its own address"
    )
    assert refused(
        "bgp", "create", "--router-ip", "50.1.1.3", "--as", "0", "--neighbor-as", "1",
        "--neighbor", "50.1.1.2", "host2",
    ) == (
        "bgp host2: field 'routerip': '50.1.1.3' has no prefix length; give the address "
        "with its subnet's prefix length, e.g. 50.1.1.1/24"
    )  # fmt: skip
    row = ["host1", "50.1.1.1/24", "65002", "50.1.1.2", "500"]
    assert ok("bgp", "ls").splitlines()[2].split() == row
    shown = json.loads(ok("bgp", "inspect", "host1"))
    assert shown == {
        "Config": {"key": "host1", **BODY},
        "Oper": {"hostRegistered": False, "fwdMode": "bridge"},
    }
    assert json.loads(ok("--json", "bgp", "ls")) == [{"key": "host1", **BODY}]
    assert ok("bgp", "rm", "host1") == ""
    assert refused("bgp", "inspect", "host1") == "bgp host1: not found"
    assert ok("bgp", "ls").splitlines()[2:] == []
