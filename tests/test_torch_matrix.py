"""benchmarks/torch_matrix.py's shape probe on this environment's own torch, and its table (the
workload it runs in each release's virtualenv is the matrix's own check: docs/torch.md)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _script(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


matrix = _script("torch_matrix")


@pytest.mark.slow
def test_the_shape_probe_reads_this_torch_as_the_recorded_data_does(tmp_path: Path) -> None:
    import torch

    out, trace = tmp_path / "shape.json", tmp_path / "t.pt.trace.json.gz"
    probe = [sys.executable, str(ROOT / "benchmarks" / "torch_shape.py"), str(out), str(trace)]
    subprocess.run(probe, check=True, capture_output=True)
    shape = json.loads(out.read_text(encoding="utf-8"))
    assert shape["torch"] == torch.__version__
    minor = ".".join(torch.__version__.split(".")[:2])
    recorded = ROOT / "tests" / "data" / "torch-releases" / f"{minor}.json"
    if recorded.exists():  # a build of a recorded release: the same classes
        kept = json.loads(recorded.read_text(encoding="utf-8"))
        for key in ("kineto_event", "experimental_config", "function_event", "flop_formulas"):
            assert shape[key] == kept[key], key
    assert trace.stat().st_size > 0


def test_the_table_says_what_each_release_gave() -> None:
    good = matrix.Row("2.6.0", python="3.11.7", torch="2.6.0+cu124", install_s=97.4)
    good.suite, good.suite_s, good.false_failures, good.plant_caught = "1000 passed", 400, 0, True
    missed = matrix.Row("2.7.1", torch="2.7.1+cu126", false_failures=1, plant_caught=False)
    broken = matrix.Row("2.8.0", problem="pip install torch==2.8.0 failed:")
    assert good.ok and not missed.ok and not broken.ok
    lines = matrix.markdown([good, missed, broken]).splitlines()
    assert lines[0].startswith("| release | Python | install s | suite |")
    assert lines[2] == "| 2.6.0+cu124 | 3.11.7 | 97 | 1000 passed | 400 | 0 | yes | none |"
    assert "| 1 | NO |" in lines[3]
    assert "pip install torch==2.8.0 failed:" in lines[4]


def test_the_suites_counts_are_read_from_pytests_closing_line() -> None:
    quiet = "....\n1054 passed, 11 skipped in 650.1s (0:10:50)\n"
    serial = "SKIPPED [1] x.py:1: why\n14 passed, 1 skipped, 1065 deselected in 83.81s (0:01:23)\n"
    framed = "==== 2 failed, 3 passed in 4.08s ====\n"
    assert matrix.closing(quiet) == "1054 passed, 11 skipped"
    assert matrix.closing(serial) == "14 passed, 1 skipped"
    assert matrix.closing(framed) == "2 failed, 3 passed"
    assert matrix.closing("Traceback (most recent call last):\n") == ""
