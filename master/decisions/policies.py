"""Policies and their rules against the cluster state: which groups attach a policy, what a
rule may name, and which rules name a group or a network (the guards of their deletes)."""

from __future__ import annotations

from collections.abc import Collection, Iterable

from common.models import EndpointGroup, Rule

from ..errors import Conflict, NotFound


def attached(policy_name: str, groups: Iterable[EndpointGroup]) -> list[str]:
    """The names of the groups (of the policy's tenant) that attach policy ``policy_name``."""
    return [g.groupName for g in groups if policy_name in g.policies]


def check_deletable(policy_id: str, groups: Iterable[str]) -> None:
    """A policy goes only once no group attaches it (``groups``: the names of those that do);
    its rules go with it."""
    names = list(groups)
    if names:
        raise Conflict(
            f"policy {policy_id}",
            f"it is attached to endpoint group(s) {', '.join(names)}; detach it first",
        )


def check_rule_refs(rule: Rule, groups: Collection[str], networks: Collection[str]) -> None:
    """Every group and network a rule names exists (``groups``, ``networks``: the names of
    those of the rule's tenant that do)."""
    obj = f"rule {rule.id}"
    t = rule.tenantName
    for field in ("fromEndpointGroup", "toEndpointGroup"):
        name = getattr(rule, field)
        if name and name not in groups:
            raise NotFound(
                obj, f"field {field!r}: endpoint group {t}:{name} not found; create it first"
            )
    for field in ("fromNetwork", "toNetwork"):
        name = getattr(rule, field)
        if name and name not in networks:
            raise NotFound(obj, f"field {field!r}: network {t}:{name} not found; create it first")


def names_group(rule: Rule, group: str) -> bool:
    return group in (rule.fromEndpointGroup, rule.toEndpointGroup)


def names_network(rule: Rule, network: str) -> bool:
    return network in (rule.fromNetwork, rule.toNetwork)


def naming_group(group: str, rules: Iterable[Rule]) -> list[str]:
    """The ids of the rules (of the group's tenant) that name group ``group`` (its name)."""
    return [r.id for r in rules if names_group(r, group)]


def naming_network(network: str, rules: Iterable[Rule]) -> list[str]:
    """The ids of the rules (of the network's tenant) that name network ``network``."""
    return [r.id for r in rules if names_network(r, network)]
