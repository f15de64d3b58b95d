"""netctl's command line pieces shared by the modules of verbs: a handler's signature, the
argument types and options every object uses, and the registrar of objects and verbs."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from typing import TextIO

from .client import MasterClient

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
