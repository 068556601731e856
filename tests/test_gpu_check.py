"""benchmarks/gpu_check.py, run as a later engineer runs it, on this machine's CPU torch."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "gpu_check.py"


def test_the_gpu_check_passes_its_cpu_self_test(tmp_path: Path) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("with CUDA the check runs on the GPU: run benchmarks/gpu_check.py itself")
    # --floor: the self-test checks the flow and the work census, not timing on a busy machine
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--floor=2", f"--keep={tmp_path / 'run'}"],
        capture_output=True, text=True, timeout=540, cwd=tmp_path,
    )  # fmt: skip
    out = done.stdout
    assert done.returncode == 0, out + done.stderr[-3000:]
    lines = out.splitlines()
    wider = next(line for line in lines if line.startswith("wider "))
    assert wider.split()[:4] == ["wider", "test_matmul", "yes", "work"]
    assert "total FLOPs +25.0% (536,870,912 → 671,088,640)" in wider
    for plant, test in (("d2h", "test_copy_back"), ("sync", "test_loss_step")):
        assert f"{plant:<7} {test:<15} -       -       skipped: needs a CUDA device" in out
    assert "false failures in 1 unchanged runs: 0 of 3 test-runs (none)" in lines
    assert "kernel attribution: n/a (no device time in the traces)" in lines
    from tprof_engine.capture import facts

    nvtx = (  # a CUDA build has NVTX without a GPU
        "ranges emitted (see them with nsys profile)"
        if facts.nvtx_available()
        else "--tprof-collect=nvtx: this torch has no NVTX (a build without CUDA); profiling "
        "without NVTX ranges"
    )
    assert f"--tprof-collect=nvtx: ok: {nvtx}" in lines
    assert any(line.startswith("python -m tprof_engine show: ok: exit 0: ") for line in lines)
    assert lines[-1] == "result: passed"
