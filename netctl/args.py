"""netctl's command line pieces shared by the modules of verbs: a handler's signature, the
argument types and options every object uses, and the registrar of objects and verbs, which
also writes every kind's rm, ls and inspect."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from typing import Any, TextIO

from common.kinds import Kind

from .client import MasterClient
from .output import Column, emit_json, emit_list, emit_quiet

Handler = Callable[[MasterClient, argparse.Namespace, TextIO], None]


def name(value: str) -> str:
    """An argparse type for object names: non-empty."""
    if not value.strip():
        raise argparse.ArgumentTypeError("must not be empty")
    return value


def tenant_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("-t", "--tenant", default="default", type=name, help="tenant (default: default)")


class Commands:
    """Adds objects (``netctl OBJECT``) and their verbs to the parser, each of them taking the
    global options (``common``) too."""

    def __init__(self, objects: argparse._SubParsersAction, common: argparse.ArgumentParser):
        self.objects = objects
        self.common = common

    def obj(self, name: str, help_: str, aliases: Sequence[str] = ()) -> argparse._SubParsersAction:
        p = self.objects.add_parser(name, aliases=list(aliases), help=help_, parents=[self.common])
        return p.add_subparsers(dest="verb", metavar="VERB", required=True)

    def verb(
        self,
        subs: argparse._SubParsersAction,
        name: str,
        handler: Handler,
        help_: str,
        aliases: Sequence[str] = (),
    ) -> argparse.ArgumentParser:
        p = subs.add_parser(name, aliases=list(aliases), help=help_, parents=[self.common])
        p.set_defaults(func=handler, parser=p)
        return p

    def kind(
        self,
        noun: str,
        kind: Kind[Any],
        help_: str,
        columns: list[Column],
        create: Handler,
        *,
        what: str = "",
        plural: str = "",
        aliases: Sequence[str] = (),
        key: str = "name",
        create_help: str = "",
        rm_help: str = "",
    ) -> tuple[argparse._SubParsersAction, argparse.ArgumentParser]:
        """``netctl NOUN create|rm|ls|inspect`` of ``kind``: rm, ls and inspect are the kind's
        generic calls, keyed by ``-t TENANT`` (for a kind that lives in a tenant) and the
        positional ``key``. Returns the object's verbs, for more of them, and create's parser,
        for its own flags and positionals."""
        what = what or noun
        plural = plural or f"{what}s"
        scoped = kind.key.tenant_scoped

        def parts(args: argparse.Namespace) -> tuple[str, ...]:
            return (args.tenant, args.name) if scoped else (args.name,)

        def rm(client: MasterClient, args: argparse.Namespace, out: TextIO) -> None:
            emit_quiet(args, client.delete(kind, *parts(args)), out)

        def ls(client: MasterClient, args: argparse.Namespace, out: TextIO) -> None:
            tenant = args.tenant if scoped and not args.all else None
            emit_list(args, client.list(kind, tenant), columns, out)

        def inspect(client: MasterClient, args: argparse.Namespace, out: TextIO) -> None:
            emit_json(client.inspect(kind, *parts(args)), out)

        def verb(name_: str, handler: Handler, help_: str, *aliases: str) -> Any:
            p = self.verb(subs, name_, handler, help_, aliases)
            if scoped:
                tenant_option(p)
            return p

        subs = self.obj(noun, help_, aliases)
        created = verb("create", create, create_help or f"create a {what}")
        for verb_name, handler, text, *more in (
            ("rm", rm, rm_help or f"delete a {what}", "delete"),
            ("inspect", inspect, f"{what} config and oper state"),
        ):
            verb(verb_name, handler, text, *more).add_argument("name", type=name, metavar=key)
        listing = verb("ls", ls, f"list {plural}", "list")
        if scoped:
            listing.add_argument(
                "-a", "--all", action="store_true", help=f"list {plural} of all tenants"
            )
        return subs, created
