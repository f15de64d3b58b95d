"""What a fuzz run saw: requests by status class and each kind of broken property, with the
first few offending requests kept to show. The bounded tests assert it is clean; the long
run (bench/fuzz.py) writes it into docs/BENCHMARKS.md."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

# The kinds of problem a request can show; every one of them is a bug.
CRASH = "crash"  # a 5xx, or an unhandled exception
SHAPE = "error shape"  # an error that is not the documented JSON
CHANGED = "state changed on refusal"
LEAK = "leak"  # a refused call left an address, port or veth behind
STRAY = "state changed by a call that reads, or names nothing"
KINDS = (CRASH, SHAPE, CHANGED, LEAK, STRAY)


@dataclass
class Problem:
    kind: str
    request: str
    detail: str

    def __str__(self) -> str:
        return f"{self.kind}: {self.request}: {self.detail}"


@dataclass
class Tally:
    requests: int = 0
    by_class: Counter[str] = field(default_factory=Counter)
    problems: Counter[str] = field(default_factory=Counter)
    examples: list[Problem] = field(default_factory=list)
    keep: int = 20

    def count(self, status: int, found: list[Problem]) -> None:
        self.requests += 1
        self.by_class[f"{status // 100}xx"] += 1
        for p in found:
            self.problems[p.kind] += 1
            if len(self.examples) < self.keep:
                self.examples.append(p)

    @property
    def clean(self) -> bool:
        return not self.problems


def short(data: bytes | str, limit: int = 120) -> str:
    text = data if isinstance(data, str) else data.decode("utf-8", "backslashreplace")
    return repr(text) if len(text) <= limit else f"{text[:limit]!r}... ({len(text)} chars)"
