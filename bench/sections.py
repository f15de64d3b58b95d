"""Marked sections of docs/BENCHMARKS.md, each written by a writer of its own: `make fuzz`
writes its counts between markers, and `make bench`, which writes the rest of the file
afresh, keeps them as they are. The kernel datapath's section is make bench's own, but
`python -m bench.kernel` rewrites it alone; a make bench whose guests failed keeps the old one.
"""

from __future__ import annotations

from pathlib import Path

FUZZ = "fuzz"
KERNEL = "kernel"
ROUTING = "routing"
SCALE = "scale"
# The sections make bench keeps when it did not write them itself.
KEPT = (SCALE, ROUTING, KERNEL, FUZZ)
WRITERS = {
    KERNEL: "make bench, or alone by python -m bench.kernel",
    ROUTING: "make bench, or alone by python -m bench.routing",
    SCALE: "make bench, or alone by python -m bench.scale --write",
}


def markers(name: str) -> tuple[str, str]:
    writer = WRITERS.get(name, f"make {name}; make bench keeps it")
    return (
        f"<!-- section {name}: written by {writer} -->",
        f"<!-- end of section {name} -->",
    )


def extract(text: str, name: str) -> str | None:
    """The section ``name`` of ``text``, its markers included; None if it has none."""
    start, end = markers(name)
    i = text.find(start)
    j = text.find(end, i)
    if i < 0 or j < 0:
        return None
    return text[i : j + len(end)]


def wrap(name: str, body: str) -> str:
    """``body`` between the markers of section ``name``."""
    start, end = markers(name)
    return f"{start}\n{body.strip()}\n{end}"


def replace(text: str, name: str, body: str, before: str | None = None) -> str:
    """``text`` with section ``name`` holding ``body``: in place of the old one, or else just
    before the section ``before`` if ``text`` has it, or else at the end."""
    section = wrap(name, body)
    old = extract(text, name)
    if old is not None:
        return text.replace(old, section)
    following = extract(text, before) if before is not None else None
    if following is not None:
        return text.replace(following, f"{section}\n\n{following}", 1)
    return f"{text.rstrip()}\n\n{section}\n"


def write(out: Path, name: str, lines: list[str], before: str | None = None) -> str:
    """Rewrite only section ``name`` of the file ``out`` (new: just before ``before``)."""
    old = out.read_text() if out.exists() else "# Benchmarks\n"
    text = replace(old, name, "\n".join(lines), before=before)
    out.write_text(text)
    return text


def keep(old: str, new: str, names: tuple[str, ...] = KEPT) -> str:
    """``new`` with the sections ``names`` of ``old`` that ``new`` lacks."""
    for name in names:
        section = extract(old, name)
        if section is not None and extract(new, name) is None:
            start, end = markers(name)
            new = replace(new, name, section[len(start) : -len(end)])
    return new
