#!/usr/bin/env python3
"""make lint: no production module over LIMIT lines, unless EXCEPTIONS names it with a reason.

docs/DESIGN.md says why each exception stands. An exception that no longer applies (the
module shrank or went away) is an error too, so the list stays true.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path

LIMIT = 500
PACKAGES = ("common", "store", "ipam", "datapath", "master", "plugin", "netctl", "cni")

# Path (relative to the repository) -> one-line reason. Remove the line once the module fits.
EXCEPTIONS: dict[str, str] = {}


def line_counts(root: Path, packages: tuple[str, ...] = PACKAGES) -> dict[str, int]:
    """The number of lines of every Python module in ``packages`` under ``root``."""
    return {
        path.relative_to(root).as_posix(): len(path.read_bytes().splitlines())
        for package in packages
        for path in sorted((root / package).rglob("*.py"))
    }


def problems(
    sizes: Mapping[str, int], limit: int = LIMIT, exceptions: Mapping[str, str] = EXCEPTIONS
) -> list[str]:
    """What breaks the rule: modules over ``limit`` not excepted, and stale exceptions."""
    found = [
        f"{path}: {lines} lines, over {limit}: split it, or add it to EXCEPTIONS in "
        "scripts/check_module_size.py with a reason (and say why in docs/DESIGN.md)"
        for path, lines in sorted(sizes.items())
        if lines > limit and path not in exceptions
    ]
    for path, reason in sorted(exceptions.items()):
        if path not in sizes:
            found.append(f"{path}: excepted ({reason}) but there is no such module: drop it")
        elif sizes[path] <= limit:
            found.append(f"{path}: {sizes[path]} lines, within {limit} now: drop its exception")
    return found


def main(argv: list[str]) -> int:
    root = Path(argv[0]) if argv else Path(__file__).resolve().parent.parent
    found = problems(line_counts(root))
    for problem in found:
        print(f"module size: {problem}", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
