"""The module size rule of make lint (scripts/check_module_size.py)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "check_module_size.py"


def load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("check_module_size", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


size = load()


def test_a_module_may_reach_the_limit_but_not_pass_it() -> None:
    assert size.problems({"a/x.py": 500}, 500, {}) == []
    [problem] = size.problems({"a/x.py": 501, "a/y.py": 20}, 500, {})
    assert problem.startswith("a/x.py: 501 lines, over 500")


def test_an_exception_lets_a_long_module_pass() -> None:
    assert size.problems({"a/x.py": 900}, 500, {"a/x.py": "being split"}) == []


def test_a_stale_exception_is_a_problem() -> None:
    found = size.problems({"a/x.py": 400}, 500, {"a/x.py": "being split", "a/gone.py": "old"})
    assert found == [
        "a/gone.py: excepted (old) but there is no such module: drop it",
        "a/x.py: 400 lines, within 500 now: drop its exception",
    ]


def test_line_counts_cover_the_packages_asked_for(tmp_path: Path) -> None:
    (tmp_path / "a" / "sub").mkdir(parents=True)
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "x.py").write_text("one\ntwo\n")
    (tmp_path / "a" / "sub" / "y.py").write_text("one\ntwo\nthree")  # no final newline
    (tmp_path / "a" / "notes.txt").write_text("not python\n")
    (tmp_path / "b" / "z.py").write_text("elsewhere\n")
    assert size.line_counts(tmp_path, ("a",)) == {"a/sub/y.py": 3, "a/x.py": 2}


def test_main_fails_on_a_problem(tmp_path: Path) -> None:
    for package in size.PACKAGES:
        (tmp_path / package).mkdir()
    for path in size.EXCEPTIONS:
        (tmp_path / path).write_text("x\n" * (size.LIMIT + 1))
    assert size.main([str(tmp_path)]) == 0
    (tmp_path / "store" / "long.py").write_text("x\n" * (size.LIMIT + 1))
    assert size.main([str(tmp_path)]) == 1
