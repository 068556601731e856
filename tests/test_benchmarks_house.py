"""The house's size rules (tests/test_house.py) applied to benchmarks/: a script is read by the
next engineer as the engine is, so it keeps the engine's bounds, and the formatter's layout."""

from __future__ import annotations

from pathlib import Path

from test_house import functions_over, kept_from_the_formatter, modules_over

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS = ROOT / "benchmarks"
SOURCES = sorted(BENCHMARKS.rglob("*.py"))


def test_the_benchmarks_are_found() -> None:
    assert BENCHMARKS / "busy_reruns.py" in SOURCES
    assert BENCHMARKS / "harness" / "runs.py" in SOURCES


def test_no_benchmark_module_is_over_its_size() -> None:
    assert modules_over(SOURCES) == {}


def test_no_benchmark_function_is_over_fifty_lines() -> None:
    assert functions_over(SOURCES) == []


def test_no_benchmark_line_is_kept_from_the_formatter() -> None:
    assert kept_from_the_formatter(SOURCES) == []
