"""The files of netplugin's runtime Python dependencies in this venv, for the managed
plugin's rootfs (scripts/build-plugin.sh): the closure of pyproject's dependencies, without
extras' packages (tests, linters), one path per line relative to site-packages."""

from __future__ import annotations

import re
import sys
from importlib import metadata

from packaging.requirements import Requirement


def closure(root: str) -> list[metadata.Distribution]:
    seen: dict[str, metadata.Distribution] = {}
    todo = [Requirement(r) for r in metadata.requires(root) or []]
    todo = [r for r in todo if not r.marker or r.marker.evaluate({"extra": ""})]
    while todo:
        req = todo.pop()
        key = re.sub(r"[-_.]+", "-", req.name).lower()
        if key in seen:
            continue
        dist = metadata.distribution(req.name)
        seen[key] = dist
        for r in map(Requirement, dist.requires or []):
            if not r.marker or r.marker.evaluate({"extra": ""}):
                todo.append(r)
    return list(seen.values())


def main() -> None:
    for dist in sorted(closure("netplugin"), key=lambda d: d.metadata["Name"].lower()):
        for f in dist.files or []:
            path = str(f)
            if path.startswith("..") or "__pycache__" in path:
                continue  # console scripts outside site-packages; bytecode is rebuilt
            print(path)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
