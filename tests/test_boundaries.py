"""The folder rules of docs/design.md §2: the engine works without pytest, only its capture stage
imports torch, and each stage imports only the stages below it."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "profiler" / "tprof_engine"
NAME = "tprof_engine"  # the engine's package, profiler/tprof_engine/
PYTEST_SIDE = ("pytest", "_pytest", "pluggy", "xdist", "pytest_tprof")
FORBIDDEN = (*PYTEST_SIDE, "torch")
# Each stage and the stages it may import, besides itself.  Modules at the top of the package
# (the runner, the CLI and what it reads) may import every stage.
BELOW = {
    "model": set(),
    "reduce": {"model"},
    "decide": {"model", "reduce"},
    "store": {"model", "reduce"},  # store keeps files; what they hold is decided above it
    "render": {"model"},  # render lays out what decide found, handed to it; it decides nothing
    "capture": {"model", "reduce"},  # the trace writer is handed in (store.trace_gzip)
}
# decide's rooms and the rooms each may import besides itself: the timing, then the gates;
# the verdict (judge, policy, outcome) at the stage's top reads both.
ROOMS = {"timing": set(), "gates": {"timing"}}


def _module_of(path: Path) -> str:
    parts = path.relative_to(PACKAGE).with_suffix("").parts
    return ".".join((NAME, *parts)).removesuffix(".__init__")


def _sources() -> list[tuple[Path, ast.Module]]:
    return [
        (p, ast.parse(p.read_text(encoding="utf-8"), str(p))) for p in sorted(PACKAGE.rglob("*.py"))
    ]


def _stage(path: Path) -> str | None:
    parts = path.relative_to(PACKAGE).parts
    return parts[0] if len(parts) > 1 else None


def _imports(tree: ast.Module) -> list[tuple[int, str]]:
    """Every absolute import anywhere in the file, as (line, dotted name)."""
    out: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.extend((node.lineno, a.name) for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == NAME:
                out.extend((node.lineno, f"{NAME}.{a.name}") for a in node.names)
            else:
                out.append((node.lineno, node.module))
    return out


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


def test_importing_every_module_outside_capture_loads_neither_pytest_nor_torch(
    tmp_path: Path,
) -> None:
    modules = [
        _module_of(p)
        for p, _ in _sources()
        if _stage(p) != "capture" and p.name != "__main__.py"  # __main__ would run the CLI
    ]
    assert len(modules) > 30
    assert _import_in_fresh_interpreter(modules, tmp_path)["loaded"] == []


def test_the_engine_imports_as_this_projects_package(tmp_path: Path) -> None:
    # Run from an unrelated folder so the answer comes from the installed distribution: this
    # checkout's folder when installed editable, a copy of its files when from a wheel.
    result = _import_in_fresh_interpreter([NAME], tmp_path)
    imported = Path(str(result["file"])).resolve().parent
    if imported != PACKAGE:
        ours = sorted(p.relative_to(PACKAGE) for p in PACKAGE.rglob("*.py"))
        assert sorted(p.relative_to(imported) for p in imported.rglob("*.py")) == ours
        for path in ours:
            assert (imported / path).read_bytes() == (PACKAGE / path).read_bytes(), path


def test_no_file_of_the_engine_imports_pytest_or_the_plugin_anywhere() -> None:
    offending = [
        f"{path.relative_to(ROOT)}:{line} imports {name}"
        for path, tree in _sources()
        for line, name in _imports(tree)
        if name.split(".")[0] in PYTEST_SIDE
    ]
    assert offending == []


def test_only_the_capture_stage_imports_torch() -> None:
    importers = {
        path.relative_to(PACKAGE).parts[0]
        for path, tree in _sources()
        for _, name in _imports(tree)
        if name.split(".")[0] == "torch"
    }
    assert importers == {"capture"}


def test_each_stage_imports_only_the_stages_below_it() -> None:
    offending = []
    for path, tree in _sources():
        stage = _stage(path)
        if stage is None:
            continue
        assert stage in BELOW, f"{path}: a stage docs/design.md doesn't name"
        for line, name in _imports(tree):
            parts = name.split(".")
            if parts[0] != NAME:
                continue
            used = parts[1] if len(parts) > 1 else NAME
            if used != stage and used not in BELOW[stage] and used != "__version__":
                offending.append(f"{path.relative_to(ROOT)}:{line} imports {name}")
    assert offending == []


def test_decides_rooms_import_only_the_rooms_before_them() -> None:
    """A test's floor crosses each room once: the timing imports nothing of the gates or the
    verdict, a gate nothing of the verdict (docs/design.md §2, "decide/ is three rooms")."""
    offending, seen = [], set()
    for path, tree in _sources():
        parts = path.relative_to(PACKAGE).parts
        if parts[0] != "decide" or len(parts) < 3:
            continue
        room = parts[1]
        seen.add(room)
        for line, name in _imports(tree):
            if name != f"{NAME}.decide" and not name.startswith(f"{NAME}.decide."):
                continue
            other = name.split(".")[2] if name.count(".") >= 2 else "decide"
            if other != room and other not in ROOMS[room]:
                offending.append(f"{path.relative_to(ROOT).as_posix()}:{line} imports {name}")
    assert offending == []
    assert seen == set(ROOMS)


def test_nothing_installed_imports_scipy() -> None:
    # the statistics are numpy's alone: scipy is not a dependency
    importers = {
        path.relative_to(PACKAGE).as_posix()
        for path, tree in _sources()
        for _, name in _imports(tree)
        if name.split(".")[0] == "scipy"
    }
    assert importers == set()


def _glue_may_import(parts: list[str], front: set[str]) -> bool:
    """A module at the package's top, or one of ``model``'s (the records every stage shares)."""
    if len(parts) == 2:
        return parts[1] in front
    return (
        len(parts) == 3 and parts[1] == "model" and (PACKAGE / "model" / f"{parts[2]}.py").is_file()
    )


def test_the_pytest_glue_imports_the_engines_front_and_its_records_and_nothing_deeper() -> None:
    """The glue reaches the engine through its front: the modules at the package's top
    (``api``, the harness's face, and the runner, config, ranked, pairing, ab, …) and the
    records, words, errors and bounds of ``model`` that every stage shares, never a working
    stage's module, so the stages can move beneath it."""
    front = {p.stem for p in PACKAGE.glob("*.py")} - {"__init__", "__main__"}
    offending = []
    for path in sorted((ROOT / "pytest_tprof").glob("*.py")):
        for line, name in _imports(ast.parse(path.read_text(encoding="utf-8"))):
            parts = name.split(".")
            if parts[0] == NAME and not _glue_may_import(parts, front):
                offending.append(f"{path.relative_to(ROOT)}:{line} imports {name}")
    assert offending == []
    assert "api" in front and not set(BELOW) & front
    assert not _glue_may_import([NAME, "decide", "policy"], front)
    assert not _glue_may_import([NAME, "model"], front)


def test_the_harness_face_names_each_of_its_names_in_its_docstring() -> None:
    """``api``'s docstring lists what it exposes, one line each; its ``__all__`` is whole."""
    from tprof_engine import api

    tree = ast.parse((PACKAGE / "api.py").read_text(encoding="utf-8"))
    defined = {
        a.asname or a.name
        for node in tree.body
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(NAME)
        for a in node.names
    } | {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
    assert set(api.__all__) == defined
    doc = api.__doc__ or ""
    assert [n for n in api.__all__ if f"``{n}``" not in doc] == []
    assert len(api.__all__) <= 40  # tens of names: the records are model's


def _dotted(node: ast.AST) -> str:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    return ".".join(reversed(parts))


def _private_torch_names(tree: ast.Module) -> set[str]:
    """The private or release-dependent torch names a module uses in its code (docstrings and
    comments aside): ``torch._x`` attributes, ``torch.__version__``, imports from them."""
    found = set()
    for node in ast.walk(tree):
        name = ""
        if isinstance(node, ast.Attribute):
            name = _dotted(node)
        elif isinstance(node, ast.ImportFrom) and node.module:
            name = node.module
        parts = name.split(".")
        if parts[0] == "torch" and any(map(_private, parts[1:])):
            found.add(name)
    return found


def _private(part: str) -> bool:
    """A private name, or the version (a module's other dunders, ``__file__``, are neither)."""
    dunder = part.startswith("__") and part.endswith("__")
    return part == "__version__" or (part.startswith("_") and not dunder)


def test_only_the_torch_adapter_names_a_private_torch_attribute_or_its_version() -> None:
    glue = sorted((ROOT / "pytest_tprof").glob("*.py"))
    sources = [*_sources(), *((p, ast.parse(p.read_text(encoding="utf-8"))) for p in glue)]
    named = {
        str(path.relative_to(ROOT)): sorted(_private_torch_names(tree))
        for path, tree in sources
        if path.name != "torch_api.py" and _private_torch_names(tree)
    }
    assert named == {}
    adapter = PACKAGE / "capture" / "torch_api.py"
    assert _private_torch_names(ast.parse(adapter.read_text(encoding="utf-8")))  # it does
