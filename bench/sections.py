"""Marked sections of docs/BENCHMARKS.md that another writer owns: `make fuzz` writes its
counts between markers, and `make bench`, which writes the rest of the file afresh, keeps
them as they are."""

from __future__ import annotations

FUZZ = "fuzz"
KEPT = (FUZZ,)  # the sections make bench keeps


def markers(name: str) -> tuple[str, str]:
    return (
        f"<!-- section {name}: written by make {name}; make bench keeps it -->",
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


def replace(text: str, name: str, body: str) -> str:
    """``text`` with section ``name`` holding ``body``: in place of the old one, or at the
    end if there was none."""
    start, end = markers(name)
    section = f"{start}\n{body.strip()}\n{end}"
    old = extract(text, name)
    if old is not None:
        return text.replace(old, section)
    return f"{text.rstrip()}\n\n{section}\n"


def keep(old: str, new: str, names: tuple[str, ...] = KEPT) -> str:
    """``new`` with the sections ``names`` of ``old`` that ``new`` lacks."""
    for name in names:
        section = extract(old, name)
        if section is not None and extract(new, name) is None:
            start, end = markers(name)
            new = replace(new, name, section[len(start) : -len(end)])
    return new
