"""netctl netprofile, netctl service and group update -n: every verb and flag -> its REST
request, and a round trip through the real master app (no network)."""

from __future__ import annotations

import json
from typing import Any

import pytest
import requests
from test_netctl import FakeSession, run


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeSession:
    monkeypatch.delenv("NETMASTER", raising=False)
    return FakeSession()


@pytest.mark.parametrize(
    ("argv", "method", "path", "body"),
    [
        (
            ["netprofile", "create", "-b", "10mbps", "-s", "300", "-d", "46", "gold"],
            "POST",
            "/api/v1/netprofiles/default:gold",
            {
                "tenantName": "default",
                "profileName": "gold",
                "bandwidth": "10mbps",
                "burst": 300,
                "DSCP": 46,
            },
        ),
        (
            ["netprofile", "create", "-t", "b", "--dscp", "10", "p"],
            "POST",
            "/api/v1/netprofiles/b:p",
            {"tenantName": "b", "profileName": "p", "bandwidth": "", "burst": 0, "DSCP": 10},
        ),
        (["netprofile", "rm", "-t", "b", "p"], "DELETE", "/api/v1/netprofiles/b:p", None),
        (["netprofile", "inspect", "p"], "GET", "/api/v1/inspect/netprofiles/default:p", None),
        (
            [
                "service",
                "create",
                "-t",
                "b",
                "-s",
                "net1",
                "-l",
                "app=web",
                "-l",
                "tier=x,v=2",
                "-p",
                "80:8080:TCP",
                "--port",
                "53:53:udp",
                "--preferred-ip",
                "10.1.0.9",
                "web",
            ],
            "POST",
            "/api/v1/serviceLBs/b:web",
            {
                "tenantName": "b",
                "serviceName": "web",
                "networkName": "net1",
                "ipAddress": "10.1.0.9",
                "selectors": ["app=web", "tier=x", "v=2"],
                "ports": ["80:8080:TCP", "53:53:udp"],
            },
        ),
        (["service", "rm", "web"], "DELETE", "/api/v1/serviceLBs/default:web", None),
        (["service", "inspect", "-t", "b", "w"], "GET", "/api/v1/inspect/serviceLBs/b:w", None),
        (
            ["group", "update", "-n", "gold", "front"],
            "PATCH",
            "/api/v1/endpointGroups/default:front",
            {"netProfile": "gold"},
        ),
        (
            ["group", "update", "--no-netprofile", "-p", "a", "front"],
            "PATCH",
            "/api/v1/endpointGroups/default:front",
            {"policies": ["a"], "netProfile": ""},
        ),
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
        (["service", "create", "-l", "a=b", "web"], "the following arguments are required: -s"),
        (["netprofile", "create", "-d", "high", "p"], "argument -d/--dscp: invalid int"),
        (
            ["group", "update", "-n", "p", "--no-netprofile", "g"],
            "argument --no-netprofile: not allowed with argument -n/--networkprofile",
        ),
    ],
)
def test_usage_errors_exit_2_and_send_nothing(
    capsys: pytest.CaptureFixture[str], fake: FakeSession, argv: list[str], message: str
) -> None:
    rc, out, err = run(capsys, argv, fake)
    assert (rc, out) == (2, "")
    assert message in err
    assert fake.calls == []


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

    ok("net", "create", "-s", "10.1.0.0/24", "net1")
    ok("netprofile", "create", "-b", "10 Mbps", "-s", "300", "-d", "46", "gold")
    assert ok("netprofile", "ls").splitlines()[2].split() == [
        "default",
        "gold",
        "10mbps",
        "300",
        "46",
    ]
    ok("group", "create", "-n", "gold", "net1", "web")
    assert refused("netprofile", "rm", "gold") == (
        "netprofile default:gold: it is used by endpoint group(s) web; give them another "
        "profile (or none) first"
    )
    assert refused("netprofile", "create", "-d", "64", "bad") == (
        "netprofile default:bad: field 'DSCP': 64 is out of 0-63"
    )
    ok("group", "update", "--no-netprofile", "web")
    ok("netprofile", "rm", "gold")

    ok("service", "create", "-s", "net1", "-l", "app=web", "-p", "80:8080:tcp", "web")
    shown = json.loads(ok("service", "inspect", "web"))
    assert (shown["Oper"]["serviceVip"], shown["Config"]["ports"]) == ("10.1.0.2", ["80:8080:TCP"])
    assert ok("service", "ls").splitlines()[2].split() == [
        "default", "web", "net1", "app=web", "80:8080:TCP"
    ]  # fmt: skip
    taken = refused(
        "service", "create", "-s", "net1", "-l", "app=x", "-p", "80:80",
        "--preferred-ip", "10.1.0.2", "other",
    )  # fmt: skip
    assert taken.endswith("is already in use in pool default:10.1.0.0/24 (by svc:default:web)")
    assert refused("net", "rm", "net1") == (
        "network default:net1: it cannot be deleted while service(s) default:web use it; "
        "delete them first"
    )
    ok("service", "rm", "web")
    ok("group", "rm", "web")
    ok("net", "rm", "net1")
