"""The house's size rules (docs/design.md §2): a module holds one job and a function does one
thing, so neither grows past what a reader takes in at once.  ruff's complexity check bounds
the branches; this bounds the lines."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCES = sorted([*(ROOT / "profiler").rglob("*.py"), *(ROOT / "pytest_tprof").glob("*.py")])
MODULE_LINES = 520
FUNCTION_LINES = 50


def test_no_module_of_the_engine_or_the_glue_is_over_its_size() -> None:
    long = {
        p.relative_to(ROOT).as_posix(): n
        for p in SOURCES
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > MODULE_LINES
    }
    assert long == {}


def test_no_function_is_over_fifty_lines() -> None:
    long = [
        f"{p.relative_to(ROOT).as_posix()}:{node.lineno} {node.name} "
        f"({node.end_lineno - node.lineno + 1} lines)"
        for p in SOURCES
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8")))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.end_lineno is not None
        and node.end_lineno - node.lineno + 1 > FUNCTION_LINES
    ]
    assert long == []
