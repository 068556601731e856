"""The device is a backend (docs/design.md §10): only the capture stage's backends and the family
spec table name the CUDA family; everything else asks the backend or the spec's role."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCANNED = (ROOT / "profiler" / "tprof_engine", ROOT / "pytest_tprof")
BANNED = "cuda"
ALLOWED = {
    "profiler/tprof_engine/capture/backends.py": "the CUDA backend is its family's capture",
    "profiler/tprof_engine/model/family_specs.py": "the spec table holds the family's entry",
}


def literals(source: str, banned: str = BANNED) -> list[int]:
    """The lines of ``source`` holding the string literal ``banned`` (not within a longer one)."""
    tree = ast.parse(source)
    return sorted(
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and node.value == banned
    )


def test_the_scan_finds_a_comparison_a_key_and_formatted_text_but_not_a_longer_name() -> None:
    source = 'if family == "cuda":\n    x = {"cuda": 1}\ny = "cuda_sync"\nz = f"{d}cuda"\n'
    assert literals(source) == [1, 2, 4]


def test_only_the_backends_and_the_spec_table_name_the_cuda_family() -> None:
    found = []
    for folder in SCANNED:
        for path in sorted(folder.rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel in ALLOWED:
                continue
            found += [f"{rel}:{n}" for n in literals(path.read_text(encoding="utf-8"))]
    assert found == [], (
        "ask the capture backend (capture/backends.py) or the family spec's role "
        "(model/family_specs.py: is_device, device_spec) instead of naming the family"
    )


def test_every_allowed_file_still_needs_its_exception() -> None:
    for rel in ALLOWED:
        assert literals((ROOT / rel).read_text(encoding="utf-8")), rel
