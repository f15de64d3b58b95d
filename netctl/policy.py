"""netctl policy: policies and their rules, with Contiv's verbs and flags.

    netctl policy create|rm|ls|inspect [-t TENANT] NAME
    netctl policy rule-add [-t TENANT] POLICY RULEID [-p PRIORITY] [-d in|out]
        [-g FROM_GROUP] [-e TO_GROUP] [-n FROM_NETWORK] [-o TO_NETWORK] [-i FROM_IP]
        [-s TO_IP] [-l PROTOCOL] [-P PORT] [-j allow|deny]
    netctl policy rule-ls [-t TENANT] POLICY
    netctl policy rule-rm [-t TENANT] POLICY RULEID

Only -d and -j are checked here (argparse's choices); everything else is the master's to
check, so there is one set of messages.
"""

from __future__ import annotations

import argparse
from typing import Any, TextIO

from common.kinds import POLICIES, RULES

from .args import Commands, name, tenant_option
from .client import MasterClient
from .output import Column, emit_json, emit_quiet, field, json_wanted, render_table

POLICY_COLUMNS: list[Column] = [("Tenant", field("tenantName")), ("Policy", field("policyName"))]


def _any(name: str) -> Any:
    """A rule field whose zero value means "any": shown empty."""
    return lambda rule: rule.get(name) or ""


def _rule_columns(side: str, label: str) -> list[Column]:
    """Contiv's rule-ls columns; ``side`` "from" (incoming rules) or "to" (outgoing)."""
    return [
        ("Rule", field("ruleId")),
        ("Priority", field("priority")),
        (f"{label} EndpointGroup", field(f"{side}EndpointGroup")),
        (f"{label} Network", field(f"{side}Network")),
        (f"{label} IpAddress", field(f"{side}IpAddress")),
        ("Protocol", _any("protocol")),
        ("Port", _any("port")),
        ("Action", field("action")),
    ]


INCOMING_COLUMNS = _rule_columns("from", "From")
OUTGOING_COLUMNS = _rule_columns("to", "To")

# rule-add's flags (Contiv's) -> the rule's REST fields.
RULE_FLAGS = {
    "priority": "priority",
    "direction": "direction",
    "from_group": "fromEndpointGroup",
    "to_group": "toEndpointGroup",
    "from_network": "fromNetwork",
    "to_network": "toNetwork",
    "from_ip": "fromIpAddress",
    "to_ip": "toIpAddress",
    "protocol": "protocol",
    "port": "port",
    "action": "action",
}


def policy_create(client: MasterClient, args: argparse.Namespace, out: TextIO) -> None:
    """netctl policy create."""
    emit_quiet(args, client.put(POLICIES, args.tenant, args.name), out)


def rule_add(client: MasterClient, args: argparse.Namespace, out: TextIO) -> None:
    """netctl policy rule-add: create the rule, or replace the one of that id."""
    fields = {rest: getattr(args, flag) for flag, rest in RULE_FLAGS.items()}
    result = client.put(RULES, args.tenant, args.policy, args.rule_id, **fields)
    emit_quiet(args, result, out)


def rule_rm(client: MasterClient, args: argparse.Namespace, out: TextIO) -> None:
    """netctl policy rule-rm."""
    emit_quiet(args, client.delete(RULES, args.tenant, args.policy, args.rule_id), out)


def rule_ls(client: MasterClient, args: argparse.Namespace, out: TextIO) -> None:
    """netctl policy rule-ls: the policy's rules, incoming then outgoing, as Contiv shows them."""
    client.get(POLICIES, args.tenant, args.policy)  # an unknown policy is an error, not no rules
    rules = [r for r in client.list(RULES, args.tenant) if r.get("policyName") == args.policy]
    if json_wanted(args):
        emit_json(rules, out)
        return
    for title, direction, columns in (
        ("Incoming Rules:", "in", INCOMING_COLUMNS),
        ("Outgoing Rules:", "out", OUTGOING_COLUMNS),
    ):
        rows = [[get(r) for _, get in columns] for r in rules if r.get("direction") == direction]
        out.write(title + "\n" + render_table([h for h, _ in columns], rows))


def add_policy_commands(commands: Commands) -> None:
    """`netctl policy ...`."""
    verb = commands.verb
    pol, p = commands.kind(
        "policy",
        POLICIES,
        "policies and their rules",
        POLICY_COLUMNS,
        policy_create,
        plural="policies",
        rm_help="delete a policy and its rules",
    )
    p.add_argument("name", type=name)

    p = verb(pol, "rule-add", rule_add, "add a rule to a policy (or replace the one of RULEID)")
    tenant_option(p)
    p.add_argument(
        "-p",
        "--priority",
        type=int,
        default=1,
        metavar="PRIORITY",
        help="1-100, higher wins (default 1)",
    )
    p.add_argument(
        "-d", "--direction", choices=["in", "out"], default="in", help="direction (default in)"
    )
    for short, long, metavar, what in (
        ("-g", "--from-group", "GROUP", "source endpoint group (in rules)"),
        ("-e", "--to-group", "GROUP", "destination endpoint group (out rules)"),
        ("-n", "--from-network", "NETWORK", "source network (in rules)"),
        ("-o", "--to-network", "NETWORK", "destination network (out rules)"),
        ("-i", "--from-ip", "CIDR", "source address or CIDR (in rules)"),
        ("-s", "--to-ip", "CIDR", "destination address or CIDR (out rules)"),
    ):
        p.add_argument(short, long, default="", metavar=metavar, help=what)
    p.add_argument(
        "-l", "--protocol", default="", metavar="PROTO", help="tcp, udp, icmp or a number (any)"
    )
    p.add_argument(
        "-P", "--port", type=int, default=0, metavar="PORT", help="tcp/udp port (0: any)"
    )
    p.add_argument(
        "-j", "--action", choices=["allow", "deny"], default="allow", help="action (allow)"
    )
    p.add_argument("policy", metavar="POLICY", type=name)
    p.add_argument("rule_id", metavar="RULEID", type=name)

    p = verb(pol, "rule-ls", rule_ls, "list a policy's rules", ["rule-list"])
    tenant_option(p)
    p.add_argument("policy", metavar="POLICY", type=name)
    p = verb(pol, "rule-rm", rule_rm, "delete a rule", ["rule-delete"])
    tenant_option(p)
    p.add_argument("policy", metavar="POLICY", type=name)
    p.add_argument("rule_id", metavar="RULEID", type=name)
