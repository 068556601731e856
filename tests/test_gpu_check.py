"""benchmarks/gpu_check.py, run as a later engineer runs it, on this machine's CPU torch."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "gpu_check.py"


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    path = list(sys.path)
    try:
        spec.loader.exec_module(module)
    finally:  # it puts the working tree first on the path, for its own pytest runs
        sys.path[:] = path
    return module


gpu_check = _script()


@pytest.mark.slow
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
    skipped = [line.split()[:2] for line in lines if line.endswith("skipped: needs a CUDA device")]
    assert skipped == [[p, spec.test] for p, spec in gpu_check.PLANTS.items() if spec.needs_device]
    assert "false failures in 1 unchanged runs: 0 of 8 test-runs (none)" in lines
    assert any(
        line.startswith("--tprof-collect=memory: ok: 8 of 8 tests allocate: ") for line in lines
    )
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


def entry(name: str, verdict: str = "regressed", **extra: object) -> dict[str, object]:
    """A JSON report test entry, as a GPU run writes it."""
    return {"nodeid": f"test_gpu_suite.py::{name}", "verdict": verdict, "reason": "r",
            "device": "cuda:0 NVIDIA H100", "timing_compared": True, "families": [],
            "causes": [], "device_rows": [], "work": None, **extra}  # fmt: skip


def family(name: str, *, slower: bool = False, noisy: bool = False) -> dict[str, object]:
    return {"family": name, "gates": name in ("cuda", "host"), "timing_regressed": slower,
            "op_gate": [], "too_noisy": noisy, "structure_regressed": False}  # fmt: skip


TF32 = {"kind": "settings", "text": "settings: float32 matmul precision high → highest",
        "failing": False}  # fmt: skip
KERNEL = [{"name": "sm90_xmma_gemm_f32f32_f32f32", "op": "aten::mm"}]


def test_a_timing_plant_is_caught_on_its_family_naming_its_kernel_and_setting() -> None:
    caught = gpu_check.verdict_of(
        entry("test_gemm_fp32", families=[family("cuda", slower=True), family("cpu")],
              device_rows=KERNEL, causes=[TF32])
    )  # fmt: skip
    assert (caught.layer, caught.families, caught.kernel) == (
        "timing",
        ("cuda",),
        "sm90_xmma_gemm_f32f32_f32f32",
    )
    assert gpu_check.plant_problems("tf32_off", caught, cuda=True) == []
    # CPU time alone fails nothing on a device test; a host slowdown is not a CUDA catch
    on_host = gpu_check.verdict_of(entry("test_gemm_fp32", families=[family("host", slower=True)]))
    assert gpu_check.plant_problems("tf32_off", on_host, cuda=True) == [
        "plant tf32_off not caught on cuda time (('host',))",
        "plant tf32_off: no kernel named",
        "plant tf32_off: setting not named (none)",
    ]
    missed = gpu_check.verdict_of(entry("test_elementwise", "changed"))
    assert gpu_check.plant_problems("noncontig", missed, cuda=True) == [
        "plant noncontig not caught"
    ]


def test_the_leak_check_wants_every_later_test_to_name_the_setting() -> None:
    named = {n: gpu_check.verdict_of(entry(n, "changed", causes=[TF32])) for n in gpu_check.TESTS}
    run = gpu_check.Run("plant-tf32_off", named, [], 1)
    check = gpu_check.leak_check({"tf32_off": run})
    assert check is not None and check[:2] == ("settings leak", True)
    named["test_conv_fp32"] = gpu_check.verdict_of(entry("test_conv_fp32", "unchanged"))
    check = gpu_check.leak_check({"tf32_off": run})
    assert check is not None and check[1] is False and check[2].startswith("7 of 8")


def test_device_timing_is_judged_when_compared_gating_and_not_too_noisy() -> None:
    judged = gpu_check.verdict_of(entry("t", "unchanged", families=[family("cuda")]))
    noisy = gpu_check.verdict_of(entry("t", "unchanged", families=[family("cuda", noisy=True)]))
    untimed = gpu_check.verdict_of(
        entry("t", "unchanged", families=[family("cuda")], timing_compared=False)
    )
    assert [v.device_judged for v in (judged, noisy, untimed)] == [True, False, False]
    found = gpu_check.Findings(
        cuda=True, unchanged=[gpu_check.Run("u", {"a": judged, "b": noisy}, [], 0)]
    )
    assert found.device_judged() == (1, 2)
    assert found.problems() == ["device timing judged in only 1 of 2 test-runs"]
