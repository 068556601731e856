"""The house's size rules (tests/test_house.py) applied to benchmarks/: a script is read by the
next engineer as the engine is, so it keeps the engine's bounds, and the formatter's layout."""

from __future__ import annotations

import ast
import io
import tokenize
from pathlib import Path

from test_house import FUNCTION_LINES, MODULE_LINES

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS = ROOT / "benchmarks"
SOURCES = sorted(BENCHMARKS.rglob("*.py"))


def _name(p: Path) -> str:
    return p.relative_to(ROOT).as_posix()


def test_the_benchmarks_are_found() -> None:
    assert BENCHMARKS / "busy_reruns.py" in SOURCES
    assert BENCHMARKS / "harness" / "runs.py" in SOURCES


def test_no_benchmark_module_is_over_its_size() -> None:
    long = {
        _name(p): n
        for p in SOURCES
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > MODULE_LINES
    }
    assert long == {}


def test_no_benchmark_function_is_over_fifty_lines() -> None:
    long = [
        f"{_name(p)}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1} lines)"
        for p in SOURCES
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8")))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.end_lineno is not None
        and node.end_lineno - node.lineno + 1 > FUNCTION_LINES
    ]
    assert long == []


def _skips(text: str) -> list[int]:
    """Lines whose comment asks the formatter to skip them (comments only: a suite a script
    writes may hold the words in a string)."""
    tokens = tokenize.generate_tokens(io.StringIO(text).readline)
    return [
        t.start[0]
        for t in tokens
        if t.type == tokenize.COMMENT and ("fmt: skip" in t.string or "fmt: off" in t.string)
    ]


def test_no_benchmark_line_is_kept_from_the_formatter() -> None:
    skipped = [f"{_name(p)}:{n}" for p in SOURCES for n in _skips(p.read_text(encoding="utf-8"))]
    assert skipped == []


def test_the_skip_finder_finds_a_skip_and_not_a_string() -> None:
    text = 'x = [1,2]  # fmt: skip\ny = "# fmt: skip"\n# fmt: off\n'
    assert _skips(text) == [1, 3]
