"""The suite ``gpu_check.py`` writes and runs: its test file, its tests, the plants with what must
catch each one, and one test's verdict read from the JSON report.

The tests and plants are described in ``gpu_check.py``'s docstring.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

FAILED = ("regressed", "error")

SUITE = '''
"""GPU tests of the kinds users write, profiled with pytest-tprof's ``tprof`` fixture."""

import os
import time

import pytest
import torch

PLANT = os.environ.get("TPROF_PLANT", "")
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
BIG = DEVICE == "cuda"  # device-sized shapes on a GPU, small ones for the CPU self-test
# TF32 for fp32 GEMMs, as many training codebases set it at import
torch.set_float32_matmul_precision("high")


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def test_a_sets_precision():
    # Runs first and profiles nothing: an earlier test that changes a process-wide setting
    # every later test inherits (the settings-leak plant).
    if PLANT == "tf32_off":
        torch.set_float32_matmul_precision("highest")


def test_matmul(tprof):
    hidden = 1280 if PLANT == "wider" else 1024
    x = torch.randn(256, 512, device=DEVICE)
    w1 = torch.randn(512, hidden, device=DEVICE)
    w2 = torch.randn(hidden, 512, device=DEVICE)
    tprof(lambda: torch.relu(x @ w1) @ w2)


def test_copy_back(tprof):
    x = torch.randn(256, 256, device=DEVICE)
    w = torch.randn(256, 256, device=DEVICE)

    def step():
        y = torch.tanh(x @ w)
        if PLANT == "d2h":
            return y.cpu()
        return y

    tprof(step)


def test_loss_step(tprof):
    model = torch.nn.Sequential(
        torch.nn.Linear(128, 256), torch.nn.GELU(), torch.nn.Linear(256, 10)
    ).to(DEVICE)
    x = torch.randn(64, 128, device=DEVICE)
    y = torch.randint(0, 10, (64,), device=DEVICE)

    def step():
        model.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        if PLANT == "sync":
            return loss.item()
        return loss

    tprof(step)


def test_gemm_fp32(tprof):
    n = 2048 if BIG else 64
    a = torch.randn(n, n, device=DEVICE)
    b = torch.randn(n, n, device=DEVICE)
    tprof(lambda: a @ b)


def test_elementwise(tprof):
    n = 4096 if BIG else 64
    a = torch.randn(n, n, device=DEVICE)
    b = torch.randn(n, n, device=DEVICE)
    if PLANT == "noncontig":  # the same values' shape, read across rows: a transposed view
        b = torch.randn(n, n, device=DEVICE).t()
    tprof(lambda: torch.sigmoid(a * b + a))


def test_gemm_bf16(tprof):
    n = 4096 if BIG else 64
    a = torch.randn(n, n, device=DEVICE, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=DEVICE, dtype=torch.bfloat16)
    if PLANT == "misalign":  # the same shape at an odd address: no 16-byte-aligned kernel
        held = torch.empty(n * n + 1, device=DEVICE, dtype=torch.bfloat16)
        a = held[1:].view(n, n).copy_(a)
    tprof(lambda: a @ b)


def test_conv_fp32(tprof):
    if PLANT == "cudnn_tf32_off":
        torch.backends.cudnn.conv.fp32_precision = "ieee"
    channels, size = (64, 56) if BIG else (4, 8)
    conv = torch.nn.Conv2d(channels, channels, 3, padding=1).to(DEVICE)
    x = torch.randn(32 if BIG else 2, channels, size, size, device=DEVICE)

    def step():
        conv.zero_grad()
        conv(x).sum().backward()

    tprof(step)


def test_launch_bound(tprof):
    x = torch.randn(64, 64, device=DEVICE)

    def step():
        y = x
        for _ in range(12):
            y = torch.softmax(y, dim=-1)
        if PLANT == "hostloop":  # ~300 µs of Python per step, between the launches
            end = time.perf_counter() + 300e-6
            while time.perf_counter() < end:
                pass
        return y

    tprof(step)
'''

TESTS = (
    "test_matmul",
    "test_copy_back",
    "test_loss_step",
    "test_gemm_fp32",
    "test_elementwise",
    "test_gemm_bf16",
    "test_conv_fp32",
    "test_launch_bound",
)


@dataclass(frozen=True)
class Plant:
    """A planted change: its test, whether it needs a device, and what must catch it: the
    layer, and for a timing plant the family that fails and the setting named (if any)."""

    test: str
    needs_device: bool
    layer: str
    family: str = ""
    setting: str = ""


TF32_OFF = "float32 matmul precision high → highest"
CUDNN_TF32_OFF = "cuDNN conv fp32 precision tf32 → ieee"
PLANTS = {
    "wider": Plant("test_matmul", False, "work"),
    "d2h": Plant("test_copy_back", True, ""),  # any layer: calls, work or timing
    "sync": Plant("test_loss_step", True, ""),
    # timing-only: the same ops and work, slower kernels (or a slower host).  Any layer may
    # fail them too (another kernel can take other launch calls); the family must be named.
    "tf32_off": Plant("test_gemm_fp32", True, "", "cuda", TF32_OFF),
    "noncontig": Plant("test_elementwise", True, "", "cuda"),
    "misalign": Plant("test_gemm_bf16", True, "", "cuda"),
    "cudnn_tf32_off": Plant("test_conv_fp32", True, "", "cuda", CUDNN_TF32_OFF),
    "hostloop": Plant("test_launch_bound", True, "", "host"),
}


@dataclass(frozen=True)
class Verdict:
    """One test's verdict in one run, as the JSON report gives it."""

    verdict: str
    layer: str  # what failed it: work, calls, timing or error ("-" when it passed)
    reason: str
    device: str
    families: tuple[str, ...] = ()  # the families whose timing failed it
    kernel: str = ""  # the first kernel (copy, fill) row of its flagged ops
    settings: str = ""  # the settings cause, when its settings changed
    device_judged: bool = False  # its device time was judged (compared, gating, not noisy)
    has_device: bool = False  # it has a device family at all

    @property
    def failed(self) -> bool:
        return self.verdict in FAILED

    @property
    def shown(self) -> str:
        """The layer that failed the test, or the verdict of one that passed."""
        return self.layer if self.failed else f"({self.verdict})"


def layer_of(test: dict[str, Any]) -> str:
    """What failed a test: work, calls, timing or error ("-" when it passed)."""
    if test["verdict"] == "error":
        return "error"
    if test["verdict"] != "regressed":
        return "-"
    if (test.get("work") or {}).get("verdict") == "regressed":
        return "work"
    if any(f.get("structure_regressed") for f in test.get("families", [])):
        return "calls"
    return "timing"


def verdict_of(test: dict[str, Any]) -> Verdict:
    """A JSON report test entry as a :class:`Verdict`."""
    work = test.get("work") or {}
    families = test.get("families", [])
    layer = layer_of(test)
    # the reason of the layer that failed the test (the test's reason starts with timing's),
    # or what the census saw in a test that passed with other work
    census_says = layer == "work" or (layer == "-" and work.get("verdict") == "changed")
    reasons = work.get("reasons") if census_says else None
    reason = reasons[0] if reasons else str(test.get("reason", ""))
    cuda = [f for f in families if f["family"] == "cuda"]
    slower = tuple(
        f["family"]
        for f in families
        if f.get("gates", True) and (f.get("timing_regressed") or f.get("op_gate"))
    )
    causes = test.get("causes", [])
    judged = any(f.get("gates", True) and not f.get("too_noisy") for f in cuda)
    return Verdict(
        test["verdict"],
        layer,
        reason,
        str(test.get("device")),
        families=slower,
        kernel=next((r["name"] for r in test.get("device_rows", [])), ""),
        settings=next((c["text"] for c in causes if c["kind"] == "settings"), ""),
        device_judged=bool(test.get("timing_compared")) and judged,
        has_device=bool(cuda),
    )
