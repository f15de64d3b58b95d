"""netctl policy (policies and rules) and netctl group update: every verb and flag -> its
REST request, the tables and --json, exit codes, and a round trip through the real master
app (no network)."""

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


RULE_DEFAULTS = {
    "direction": "in",
    "priority": 1,
    "fromEndpointGroup": "",
    "toEndpointGroup": "",
    "fromNetwork": "",
    "toNetwork": "",
    "fromIpAddress": "",
    "toIpAddress": "",
    "protocol": "",
    "port": 0,
    "action": "allow",
}


# --- request shapes ---


@pytest.mark.parametrize(
    ("argv", "method", "path", "body"),
    [
        (
            ["policy", "create", "web"],
            "POST",
            "/api/v1/policys/default:web",
            {"tenantName": "default", "policyName": "web"},
        ),
        (
            ["policy", "create", "-t", "blue", "web"],
            "POST",
            "/api/v1/policys/blue:web",
            {"tenantName": "blue", "policyName": "web"},
        ),
        (["policy", "rm", "web"], "DELETE", "/api/v1/policys/default:web", None),
        (["policy", "delete", "--tenant", "b", "w"], "DELETE", "/api/v1/policys/b:w", None),
        (["policy", "inspect", "-t", "b", "w"], "GET", "/api/v1/inspect/policys/b:w", None),
        (["policy", "rule-rm", "web", "1"], "DELETE", "/api/v1/rules/default:web:1", None),
        (["policy", "rule-delete", "-t", "b", "w", "r2"], "DELETE", "/api/v1/rules/b:w:r2", None),
        (
            ["group", "update", "-p", "a", "--policy", "b,c", "front"],
            "PATCH",
            "/api/v1/endpointGroups/default:front",
            {"policies": ["a", "b", "c"]},
        ),
        (
            ["epg", "update", "-t", "blue", "--no-policy", "front"],
            "PATCH",
            "/api/v1/endpointGroups/blue:front",
            {"policies": []},
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
    rc, out, err = run(capsys, argv, fake)
    assert (rc, err) == (0, "")
    assert out == ("{}\n" if "inspect" in argv else "")  # inspect prints the JSON answer
    assert len(fake.calls) == 1
    assert (fake.last.method, fake.last.path, fake.last.body) == (method, path, body)


def test_rule_add_defaults_are_contivs(
    capsys: pytest.CaptureFixture[str], fake: FakeSession
) -> None:
    assert run(capsys, ["policy", "rule-add", "web", "1"], fake) == (0, "", "")
    assert (fake.last.method, fake.last.path) == ("POST", "/api/v1/rules/default:web:1")
    assert fake.last.body == {
        "tenantName": "default",
        "policyName": "web",
        "ruleId": "1",
        **RULE_DEFAULTS,
    }


@pytest.mark.parametrize(
    ("flags", "fields"),
    [
        (["-p", "10"], {"priority": 10}),
        (["--priority", "100"], {"priority": 100}),
        (["-d", "out"], {"direction": "out"}),
        (["--direction", "in"], {"direction": "in"}),
        (["-g", "app"], {"fromEndpointGroup": "app"}),
        (["--from-group", "app"], {"fromEndpointGroup": "app"}),
        (["-e", "db"], {"toEndpointGroup": "db"}),
        (["--to-group", "db"], {"toEndpointGroup": "db"}),
        (["-n", "net1"], {"fromNetwork": "net1"}),
        (["--from-network", "net1"], {"fromNetwork": "net1"}),
        (["-o", "net2"], {"toNetwork": "net2"}),
        (["--to-network", "net2"], {"toNetwork": "net2"}),
        (["-i", "10.1.0.0/24"], {"fromIpAddress": "10.1.0.0/24"}),
        (["--from-ip", "10.1.0.7"], {"fromIpAddress": "10.1.0.7"}),
        (["-s", "fd00::/64"], {"toIpAddress": "fd00::/64"}),
        (["--to-ip", "10.2.0.1"], {"toIpAddress": "10.2.0.1"}),
        (["-l", "tcp"], {"protocol": "tcp"}),
        (["--protocol", "17"], {"protocol": "17"}),
        (["-P", "80"], {"port": 80}),
        (["--port", "443"], {"port": 443}),
        (["-j", "deny"], {"action": "deny"}),
        (["--action", "allow"], {"action": "allow"}),
        (
            ["-t", "blue", "-d", "out", "-e", "db", "-l", "tcp", "-P", "5432", "-p", "5"],
            {"toEndpointGroup": "db", "protocol": "tcp", "port": 5432, "priority": 5},
        ),
    ],
)
def test_rule_add_flags(
    capsys: pytest.CaptureFixture[str],
    fake: FakeSession,
    flags: list[str],
    fields: dict[str, Any],
) -> None:
    assert run(capsys, ["policy", "rule-add", *flags, "web", "r1"], fake) == (0, "", "")
    tenant = "blue" if "-t" in flags else "default"
    assert fake.last.path == f"/api/v1/rules/{tenant}:web:r1"
    expected = {**RULE_DEFAULTS, **fields}
    if "-d" in flags:
        expected["direction"] = flags[flags.index("-d") + 1]
    assert {k: fake.last.body[k] for k in RULE_DEFAULTS} == expected


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["policy", "rule-add", "-d", "both", "web", "1"],
            "argument -d/--direction: invalid choice",
        ),
        (["policy", "rule-add", "-j", "drop", "web", "1"], "argument -j/--action: invalid choice"),
        (["policy", "rule-add", "-P", "http", "web", "1"], "argument -P/--port: invalid int"),
        (["policy", "rule-add", "-p", "high", "web", "1"], "argument -p/--priority: invalid int"),
        (["policy", "rule-add", "web"], "the following arguments are required: RULEID"),
        (["policy", "rule-rm", "web"], "the following arguments are required: RULEID"),
        (["policy", "rule-ls"], "the following arguments are required: POLICY"),
        (["policy", "create"], "the following arguments are required: name"),
        (["policy", "create", " "], "argument name: must not be empty"),
        (["group", "update", "front"], "nothing to change; give -p, --no-policy, -n or"),
        (
            ["group", "update", "-p", "a", "--no-policy", "front"],
            "argument --no-policy: not allowed with argument -p/--policy",
        ),
        (["policy", "nosuch"], "invalid choice: 'nosuch'"),
    ],
)
def test_usage_errors_exit_2_and_send_nothing(
    capsys: pytest.CaptureFixture[str], fake: FakeSession, argv: list[str], message: str
) -> None:
    rc, out, err = run(capsys, argv, fake)
    assert (rc, out) == (2, "")
    assert message in err
    assert fake.calls == []


@pytest.mark.parametrize(
    ("argv", "params"),
    [
        (["policy", "ls"], {"tenant": "default"}),
        (["policy", "list", "-t", "blue"], {"tenant": "blue"}),
        (["policy", "ls", "-a"], None),
        (["policy", "ls", "--all", "-t", "blue"], None),
    ],
)
def test_policy_ls_tenant_filter(
    capsys: pytest.CaptureFixture[str], fake: FakeSession, argv: list[str], params: Any
) -> None:
    fake.answer("GET", "/api/v1/policys", [])
    assert run(capsys, argv, fake)[0] == 0
    assert (fake.last.method, fake.last.path, fake.last.params) == (
        "GET",
        "/api/v1/policys",
        params,
    )


# --- output ---

POLICIES = [
    {"key": "blue:web", "tenantName": "blue", "policyName": "web"},
    {"key": "default:db", "tenantName": "default", "policyName": "db"},
]
RULES = [
    {**RULE_DEFAULTS, "key": "blue:web:1", "tenantName": "blue", "policyName": "web", "ruleId": "1",
     "fromEndpointGroup": "app", "protocol": "tcp", "port": 80, "priority": 10},
    {**RULE_DEFAULTS, "key": "blue:web:2", "tenantName": "blue", "policyName": "web", "ruleId": "2",
     "protocol": "tcp", "action": "deny"},
    {**RULE_DEFAULTS, "key": "blue:web:3", "tenantName": "blue", "policyName": "web", "ruleId": "3",
     "direction": "out", "toIpAddress": "10.9.0.0/16", "protocol": "icmp"},
    {**RULE_DEFAULTS, "key": "blue:other:1", "tenantName": "blue", "policyName": "other",
     "ruleId": "1"},
]  # fmt: skip


def test_policy_ls_table_and_json(capsys: pytest.CaptureFixture[str], fake: FakeSession) -> None:
    fake.answer("GET", "/api/v1/policys", POLICIES)
    rc, out, _ = run(capsys, ["policy", "ls", "-a"], fake)
    assert rc == 0
    assert out == "Tenant   Policy\n------   ------\nblue     web\ndefault  db\n"
    rc, out, _ = run(capsys, ["policy", "ls", "-a", "--json"], fake)
    assert json.loads(out) == POLICIES


def test_rule_ls_shows_incoming_then_outgoing_rules_of_the_policy(
    capsys: pytest.CaptureFixture[str], fake: FakeSession
) -> None:
    fake.answer("GET", "/api/v1/rules", RULES)
    rc, out, err = run(capsys, ["policy", "rule-ls", "-t", "blue", "web"], fake)
    assert (rc, err) == (0, "")
    assert [(c.method, c.path, c.params) for c in fake.calls] == [
        ("GET", "/api/v1/policys/blue:web", None),
        ("GET", "/api/v1/rules", {"tenant": "blue"}),
    ]
    assert out.splitlines() == [
        "Incoming Rules:",
        "Rule  Priority  From EndpointGroup  From Network  From IpAddress  Protocol  Port  Action",
        "----  --------  ------------------  ------------  --------------  --------  ----  ------",
        "1     10        app                                               tcp       80    allow",
        "2     1                                                           tcp             deny",
        "Outgoing Rules:",
        "Rule  Priority  To EndpointGroup  To Network  To IpAddress  Protocol  Port  Action",
        "----  --------  ----------------  ----------  ------------  --------  ----  ------",
        "3     1                                       10.9.0.0/16   icmp            allow",
    ]
    rc, out, _ = run(capsys, ["policy", "rule-ls", "-t", "blue", "web", "--json"], fake)
    assert json.loads(out) == RULES[:3]


def test_rule_ls_of_an_unknown_policy_is_an_error(
    capsys: pytest.CaptureFixture[str], fake: FakeSession
) -> None:
    error = {"error": "policy default:x: not found", "object": "policy default:x"}
    fake.answer("GET", "/api/v1/policys/default:x", {**error, "reason": "not found"}, 404)
    rc, out, err = run(capsys, ["policy", "rule-ls", "x"], fake)
    assert (rc, out, err) == (1, "", "netctl: policy default:x: not found\n")
    assert len(fake.calls) == 1


def test_create_and_update_print_json_only_when_asked(
    capsys: pytest.CaptureFixture[str], fake: FakeSession
) -> None:
    answer = {**RULE_DEFAULTS, "key": "default:web:1"}
    fake.answer("POST", "/api/v1/rules/default:web:1", answer)
    rc, out, _ = run(capsys, ["policy", "rule-add", "--json", "web", "1"], fake)
    assert (rc, json.loads(out)) == (0, answer)
    fake.answer("PATCH", "/api/v1/endpointGroups/default:g", {"policies": ["p"]})
    rc, out, _ = run(capsys, ["group", "update", "-p", "p", "g", "--json"], fake)
    assert (rc, json.loads(out)) == (0, {"policies": ["p"]})


# --- against the real master app ---


def test_policies_and_rules_against_the_real_master_app(
    capsys: pytest.CaptureFixture[str], master_session: requests.Session
) -> None:
    s = master_session

    def ok(*argv: str) -> str:
        rc, out, err = run(capsys, list(argv), s)
        assert (rc, err) == (0, ""), argv
        return out

    def refused(*argv: str) -> str:
        rc, out, err = run(capsys, list(argv), s)
        assert (rc, out) == (1, ""), argv
        assert err.startswith("netctl: ") and err.count("\n") == 1
        return err.removeprefix("netctl: ").rstrip("\n")

    ok("net", "create", "-s", "10.1.0.0/24", "net1")
    ok("group", "create", "net1", "app")
    ok("group", "create", "net1", "web")
    ok("policy", "create", "web-in")
    ok("policy", "rule-add", "-p", "1", "-l", "tcp", "-j", "deny", "web-in", "1")
    ok("policy", "rule-add", "-p", "10", "-g", "app", "-l", "TCP", "-P", "80", "web-in", "2")
    ok("policy", "rule-add", "-d", "out", "-s", "10.9.0.5", "-l", "1", "web-in", "3")
    out = ok("policy", "rule-ls", "web-in", "--json")
    rules = {r["ruleId"]: r for r in json.loads(out)}
    assert (rules["2"]["protocol"], rules["3"]["protocol"]) == ("tcp", "icmp")
    assert rules["3"]["toIpAddress"] == "10.9.0.5/32"
    assert ok("policy", "rule-ls", "web-in").splitlines()[4].split() == [
        "2", "10", "app", "tcp", "80", "allow"
    ]  # fmt: skip

    assert refused("policy", "rule-add", "-P", "80", "web-in", "4") == (
        "rule default:web-in:4: field 'port': a port needs protocol tcp or udp"
    )
    assert refused("policy", "rule-add", "-g", "nosuch", "web-in", "4") == (
        "rule default:web-in:4: field 'fromEndpointGroup': endpoint group default:nosuch not "
        "found; create it first"
    )
    assert refused("policy", "rule-add", "-e", "app", "web-in", "4").startswith(
        "rule default:web-in:4: field 'toEndpointGroup': an in rule matches traffic to"
    )
    assert refused("policy", "rule-add", "-i", "10.1.0.5/24", "web-in", "4").endswith(
        "10.1.0.5/24 has host bits set; did you mean 10.1.0.0/24?"
    )
    assert refused("group", "update", "-p", "nosuch", "web") == (
        "endpoint group default:web: policy default:nosuch not found; create it first"
    )

    ok("group", "update", "-p", "web-in", "web")
    groups = json.loads(ok("group", "ls", "--json"))
    assert {g["groupName"]: g["policies"] for g in groups} == {"app": [], "web": ["web-in"]}
    info = json.loads(ok("policy", "inspect", "web-in"))
    assert (info["Oper"]["endpointGroups"], info["Oper"]["numRules"]) == (["web"], 3)
    assert json.loads(ok("group", "inspect", "web"))["Oper"]["groupTag"] == 2

    assert refused("policy", "rm", "web-in") == (
        "policy default:web-in: it is attached to endpoint group(s) web; detach it first"
    )
    assert refused("group", "rm", "app") == (
        "endpoint group default:app: it is named by rule(s) default:web-in:2; remove the "
        "rule(s) first"
    )
    ok("policy", "rule-rm", "web-in", "2")
    ok("group", "rm", "app")
    ok("group", "update", "--no-policy", "web")
    assert ok("policy", "ls") == "Tenant   Policy\n------   ------\ndefault  web-in\n"
    ok("policy", "rm", "web-in")  # with its two remaining rules
    assert json.loads(ok("policy", "ls", "--json")) == []
    assert refused("policy", "rule-ls", "web-in") == "policy default:web-in: not found"
