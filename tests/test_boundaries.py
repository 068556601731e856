"""The one-way rule of docs/design.md §2: ``profiler`` works without pytest, and only its
capture boundary imports torch."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "profiler"
NAME = "tprof_engine"  # what the profiler/ folder is installed as (pyproject.toml's package-dir)
NAMED = (
    NAME,
    "tprof_engine.compare",
    "tprof_engine.store",
    "tprof_engine.report",
    "tprof_engine.stats",
    "tprof_engine.reduce",
    "tprof_engine.records",
    "tprof_engine.environment",
    "tprof_engine.results",
    "tprof_engine.traces",
)
PYTEST_SIDE = ("pytest", "_pytest", "pluggy", "xdist", "pytest_tprof")
FORBIDDEN = (*PYTEST_SIDE, "torch")
# The capture boundary: the timed rounds, and the census of the work the ops do.
CAPTURE = {"tprof_engine.capture", "tprof_engine.work_capture"}


def _modules() -> list[str]:
    """The named modules and every other module of the package, except the capture boundary
    and ``__main__`` (which would run the CLI)."""
    found = {
        ".".join((NAME, *p.relative_to(PACKAGE).with_suffix("").parts)).removesuffix(".__init__")
        for p in PACKAGE.rglob("*.py")
    }
    found -= {*CAPTURE, f"{NAME}.__main__"}
    return [*NAMED, *sorted(found - set(NAMED))]


def _import_in_fresh_interpreter(modules: list[str], cwd: Path) -> dict[str, object]:
    code = (
        "import importlib, json, sys\n"
        f"for m in {modules!r}:\n"
        "    importlib.import_module(m)\n"
        f"import {NAME}\n"
        f"print(json.dumps({{'loaded': sorted(n for n in {FORBIDDEN!r} if n in sys.modules),"
        f" 'file': {NAME}.__file__}}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout.splitlines()[-1])
    return result


def test_importing_the_library_loads_neither_pytest_nor_torch(tmp_path: Path) -> None:
    result = _import_in_fresh_interpreter(_modules(), tmp_path)
    assert result["loaded"] == []


def test_the_engine_imports_as_this_projects_package(tmp_path: Path) -> None:
    # Run from an unrelated folder so the answer comes from the installed distribution: a
    # same-named project from PyPI shadowing ours shows up here.
    result = _import_in_fresh_interpreter([NAME], tmp_path)
    assert Path(str(result["file"])).resolve() == PACKAGE / "__init__.py"


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imported(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name.split(".")[0] for a in node.names]
    if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
        return [node.module.split(".")[0]]
    return []


def _runtime_module_level_imports(body: list[ast.stmt]) -> list[tuple[int, str]]:
    """Top-level imports that run on import: inside if/try/with blocks too, not in functions,
    classes or ``if TYPE_CHECKING:`` blocks."""
    out: list[tuple[int, str]] = []
    for stmt in body:
        out.extend((stmt.lineno, name) for name in _imported(stmt))
        if isinstance(stmt, ast.If):
            if not _is_type_checking(stmt.test):
                out.extend(_runtime_module_level_imports(stmt.body))
            out.extend(_runtime_module_level_imports(stmt.orelse))
        elif isinstance(stmt, ast.Try):
            for block in (stmt.body, stmt.orelse, stmt.finalbody):
                out.extend(_runtime_module_level_imports(block))
            for handler in stmt.handlers:
                out.extend(_runtime_module_level_imports(handler.body))
        elif isinstance(stmt, ast.With):
            out.extend(_runtime_module_level_imports(stmt.body))
    return out


def _sources() -> list[tuple[str, ast.Module]]:
    return [
        (p.relative_to(ROOT).as_posix(), ast.parse(p.read_text(encoding="utf-8"), str(p)))
        for p in sorted(PACKAGE.rglob("*.py"))
    ]


def test_no_file_of_the_library_imports_pytest_or_the_plugin_anywhere() -> None:
    offending = [
        f"{path}:{node.lineno} imports {name}"
        for path, tree in _sources()
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for name in _imported(node)
        if name in PYTEST_SIDE
    ]
    assert offending == []


def test_only_the_capture_boundary_imports_torch_at_module_level() -> None:
    importers = {
        path
        for path, tree in _sources()
        for _, name in _runtime_module_level_imports(tree.body)
        if name == "torch"
    }
    assert importers == {"profiler/capture.py", "profiler/work_capture.py"}
