"""A device is a backend and one spec entry: a fake Intel XPU, its kernels from a fixture and no
device behind it, is profiled, judged and reported under its own family and label, with nothing
else of the engine told about it."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch
from torch.profiler import ProfilerActivity
from tprof_testing import dev, event_arrays, op, step
from tprof_testing import table as op_table

from tprof_engine.capture import session, torch_api
from tprof_engine.capture.backends import CPU, DeviceBackend, detect, with_family
from tprof_engine.decide.judge import with_noise_check
from tprof_engine.decide.timing.compare import compare
from tprof_engine.decide.timing.rule import Rule
from tprof_engine.model import family_specs
from tprof_engine.model.family_specs import FamilySpec
from tprof_engine.model.records import OpTable
from tprof_engine.model.results import ProfiledTest
from tprof_engine.model.verdicts import REGRESSED, UNCHANGED, TestVerdict
from tprof_engine.reduce.ops import reduce_events
from tprof_engine.render.report import failure_text

# The one spec entry: an XPU's kernel time, judged as CUDA's is.
XPU = FamilySpec(
    name="xpu",
    label="XPU",
    role="device",
    column="self_device_us",
    unit="device µs per round",
    min_floor=0.03,
    gates_without_device=False,
)


class FakeXpu:
    """The backend: what a capture asks of an XPU, answered without one."""

    family: str | None = "xpu"
    label = "XPU"
    visible_devices: str | None = "ZE_AFFINITY_MASK"

    def __init__(self) -> None:
        self.syncs = 0
        self.ranges: list[str] = []
        self.open_ranges = 0

    def version(self) -> str | None:
        return "fake-1.0"

    def activities(self) -> list[ProfilerActivity]:
        return [ProfilerActivity.CPU]  # no device to record: its events come from the fixture

    def experimental_config(self) -> Any:
        return None

    def synchronize(self) -> None:
        self.syncs += 1

    def to_device(self, tensor: torch.Tensor) -> torch.Tensor | None:
        return tensor.clone()  # the probe's device half, here on the CPU

    def ranges_available(self) -> bool:
        return True

    def push_range(self, name: str) -> None:
        self.ranges.append(name)
        self.open_ranges += 1

    def pop_range(self) -> None:
        self.open_ranges -= 1

    def meter(self) -> None:
        return None

    def activity_kind(self, event: Any) -> str:
        return "gpu_memcpy" if event.name.startswith("Memcpy") else "kernel"

    def rng_states(self) -> list[bytes] | None:
        return None

    def set_rng_states(self, raws: list[bytes]) -> None:
        raise ValueError("no XPU generators")


@pytest.fixture
def xpu_family(monkeypatch: pytest.MonkeyPatch) -> FamilySpec:
    monkeypatch.setitem(family_specs.FAMILIES, "xpu", XPU)
    return XPU


# Two rounds of an XPU's events: the matmul's kernel runs 3 µs in each.
XPU_EVENTS = [
    step(0, 0, 10_000),
    op("aten::mm", 1_000, 2_000, corr=1),
    dev("gemm_xe", 3_000, 6_000, link=1, launch=1_500),
    step(1, 10_000, 20_000),
    op("aten::mm", 11_000, 12_000, corr=2),
    dev("gemm_xe", 13_000, 16_000, link=2, launch=11_500),
]

OPS = {"aten::mm": (400.0, 2), "aten::add": (150.0, 3)}


def xpu_table(*, seed: int, device: float = 1.0) -> OpTable:
    """Rounds whose device column an XPU filled (capture names its family)."""
    table = op_table(
        OPS,
        seed=seed,
        cv=0.04,
        probe=500.0,
        device={name: 0.5 * us * device for name, (us, _) in OPS.items()},
        device_cv=0.005,
    )
    return with_family(table, FakeXpu())


def judged(current: OpTable, base: list[OpTable]) -> TestVerdict:
    return with_noise_check(compare(base, current), Rule())


def test_the_fake_is_a_device_backend_and_the_real_ones_are_too() -> None:
    assert isinstance(FakeXpu(), DeviceBackend)
    assert isinstance(CPU, DeviceBackend) and isinstance(detect(), DeviceBackend)
    assert CPU.family is None and CPU.activities() == [ProfilerActivity.CPU]


def test_capture_asks_the_backend_for_its_sync_ranges_and_activities() -> None:
    xpu = FakeXpu()
    result = session.capture(
        torch.relu, (torch.ones(8),), rounds=3, warmup=1, device=xpu, nvtx_label="tprof:t"
    )
    rounds = ["warmup0", "round0", "round1", "round2"]
    assert xpu.ranges == ["tprof:t", *(f"tprof:t:{r}" for r in rounds)]
    assert xpu.open_ranges == 0
    # each profiled round's probe and its closing wait: the warm-up round and 3 measured
    assert xpu.syncs == 2 * (1 + 3)
    assert not result.table.has_device and result.device_family is None  # no events recorded


def test_what_a_device_event_is_the_backend_reads() -> None:
    events = [SimpleNamespace(name=n) for n in ("gemm_xe", "Memcpy HtoD", "gemm_xe", "aten::mm")]
    name_idx = np.array([0, 1, 0, 2])
    on_device = np.array([True, True, True, False])
    kinds = torch_api.device_activities(
        events, name_idx, on_device, kind_of=FakeXpu().activity_kind
    )
    assert kinds.tolist() == ["kernel", "gpu_memcpy", "kernel", ""]


def test_its_events_reduce_to_a_table_of_its_family(xpu_family: FamilySpec) -> None:
    table = with_family(reduce_events(event_arrays(XPU_EVENTS)), FakeXpu())
    assert table.device_family == "xpu" and table.has_device
    mm = table.index()["aten::mm"]
    assert table.self_device_us[mm].tolist() == [3.0, 3.0]
    assert with_family(replace(table, has_device=False), FakeXpu()).device_family is None


def test_a_slower_xpu_kernel_fails_under_its_family_and_label(xpu_family: FamilySpec) -> None:
    base = [xpu_table(seed=s) for s in range(3)]
    v = judged(xpu_table(seed=9, device=1.1), base)
    assert v.verdict == REGRESSED
    assert [f.family for f in v.families if f.gates] == ["xpu", "host"]
    assert not any(f.family == family_specs.device_spec().name for f in v.families)
    xpu = next(f for f in v.families if f.family == "xpu")
    assert xpu.timing_regressed and xpu.floor_pct == pytest.approx(100 * XPU.min_floor)
    assert v.reason.startswith("XPU: total op time +")
    text = failure_text(ProfiledTest(nodeid="t.py::test_mm", verdict=v), verbose=True)
    assert "XPU" in text and "CUDA" not in text


def test_an_unchanged_xpu_passes_and_its_host_drift_is_only_reported(
    xpu_family: FamilySpec,
) -> None:
    base = [xpu_table(seed=s) for s in range(3)]
    current = xpu_table(seed=9)
    slower_host = replace(current, self_cpu_us=current.self_cpu_us * 1.4)
    v = judged(slower_host, base)
    assert v.verdict == UNCHANGED
    cpu = next(f for f in v.families if f.family == "cpu")
    assert not cpu.gates
    assert any("timing judged on XPU total op time" in n for n in v.notes)
    assert np.all(current.self_device_us >= 0)


def test_a_device_family_name_not_in_the_table_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match=r"'device family' must be one of cuda \(got 'npu'\)"):
        family_specs.device_spec("npu")
