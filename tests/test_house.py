"""The house's size rules (docs/design.md §2): a module holds one job and a function does one
thing, so neither grows past what a reader takes in at once.  ruff's complexity check bounds
the branches; this bounds the lines."""

from __future__ import annotations

import ast
import io
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ENGINE = ROOT / "profiler" / "tprof_engine"
SOURCES = sorted([*ENGINE.rglob("*.py"), *(ROOT / "pytest_tprof").glob("*.py")])
MODULE_LINES = 500  # docs/design.md §2
FUNCTION_LINES = 50


def modules_over(sources: list[Path]) -> dict[str, int]:
    """The modules of ``sources`` longer than ``MODULE_LINES``, with their lengths."""
    return {
        p.relative_to(ROOT).as_posix(): n
        for p in sources
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > MODULE_LINES
    }


def functions_over(sources: list[Path]) -> list[str]:
    """The functions of ``sources`` longer than ``FUNCTION_LINES``, where and how long."""
    return [
        f"{p.relative_to(ROOT).as_posix()}:{node.lineno} {node.name} "
        f"({node.end_lineno - node.lineno + 1} lines)"
        for p in sources
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8")))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.end_lineno is not None
        and node.end_lineno - node.lineno + 1 > FUNCTION_LINES
    ]


def formatter_skips(text: str) -> list[int]:
    """Lines whose comment asks the formatter to skip them (comments only: a suite a script
    writes may hold the words in a string)."""
    tokens = tokenize.generate_tokens(io.StringIO(text).readline)
    return [
        t.start[0]
        for t in tokens
        if t.type == tokenize.COMMENT and ("fmt: skip" in t.string or "fmt: off" in t.string)
    ]


def kept_from_the_formatter(sources: list[Path]) -> list[str]:
    return [
        f"{p.relative_to(ROOT).as_posix()}:{n}"
        for p in sources
        for n in formatter_skips(p.read_text(encoding="utf-8"))
    ]


def test_no_module_of_the_engine_or_the_glue_is_over_its_size() -> None:
    assert modules_over(SOURCES) == {}


def test_no_function_is_over_fifty_lines() -> None:
    assert functions_over(SOURCES) == []


def test_each_package_names_its_modules_in_all() -> None:
    """A stage's face is its ``__all__``: every module in it, nothing else, so a newcomer (and
    ``from tprof_engine.decide import *``) sees the whole stage."""
    wrong = {}
    for init in sorted(ENGINE.rglob("__init__.py")):
        folder = init.parent
        modules = {p.stem for p in folder.glob("*.py")} - {"__init__", "__main__"}
        modules |= {p.name for p in folder.iterdir() if (p / "__init__.py").is_file()}
        named = set()
        for node in ast.parse(init.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
            ):
                named = set(ast.literal_eval(node.value))
        if named != modules:
            wrong[folder.relative_to(ROOT).as_posix()] = sorted(named ^ modules)
    assert wrong == {}


def test_no_line_of_the_engine_or_the_glue_is_kept_from_the_formatter() -> None:
    """The bounds hold as ruff lays the code out: no ``# fmt: skip`` or ``# fmt: off`` packs
    lines to stay under them."""
    assert kept_from_the_formatter(SOURCES) == []


def test_the_skip_finder_finds_a_skip_and_not_a_string() -> None:
    text = 'x = [1,2]  # fmt: skip\ny = "# fmt: skip"\n# fmt: off\n'
    assert formatter_skips(text) == [1, 3]
