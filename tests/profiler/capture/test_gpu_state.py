"""The GPU's own state per round (NVML): read through a fake driver that answers as NVML does,
kept with the round's readings, and judged like the machine's: rounds on a GPU the machine
slowed are left out, a GPU that stays slowed is "GPU busy", sharing is said."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
from tprof_testing import ROUNDS, table

from tprof_engine.capture.gpu_state import GpuMeter, nvml_uuid
from tprof_engine.capture.load import LoadMeter
from tprof_engine.decide.judge import Recorded, judge
from tprof_engine.decide.timing import busy
from tprof_engine.decide.timing.rule import Rule
from tprof_engine.model.records import OpTable, RoundLoad
from tprof_engine.model.verdicts import INCONCLUSIVE, UNCHANGED

THERMAL, POWER_CAP, IDLE = 0x20, 0x4, 0x1
OPS = {"aten::mm": (900.0, 4), "aten::add": (100.0, 2)}


def _put(ref: Any, value: int) -> None:
    ref._obj.value = value  # what the C function writes through its pointer


class FakeNvml:
    """NVML as a driver answers: status codes, results through pointers."""

    def __init__(self, reasons: list[int], *, processes: int = 1, old_driver: bool = False) -> None:
        self.reasons = iter(reasons)
        self.processes = processes
        self.opened_by: str | None = None
        if not old_driver:
            self.nvmlDeviceGetCurrentClocksEventReasons = self._reasons

    def nvmlDeviceGetHandleByUUID(self, uuid: bytes, ref: Any) -> int:
        if uuid != b"GPU-1234":
            return 13  # NVML_ERROR_NOT_FOUND
        self.opened_by = "uuid"
        return 0

    def nvmlDeviceGetHandleByIndex_v2(self, index: Any, ref: Any) -> int:
        self.opened_by = f"index {index.value}"
        return 0

    def _reasons(self, handle: Any, ref: Any) -> int:
        _put(ref, next(self.reasons))
        return 0

    nvmlDeviceGetCurrentClocksThrottleReasons = _reasons  # drivers before the rename

    def nvmlDeviceGetClockInfo(self, handle: Any, clock: Any, ref: Any) -> int:
        _put(ref, 1980)
        return 0

    def nvmlDeviceGetComputeRunningProcesses_v3(self, handle: Any, ref: Any, infos: Any) -> int:
        assert infos is None
        _put(ref, self.processes)
        return 7 if self.processes else 0  # NVML_ERROR_INSUFFICIENT_SIZE when any


def test_each_round_keeps_the_reasons_seen_at_its_start_or_end_the_clock_and_the_others() -> None:
    nvml = FakeNvml([IDLE, THERMAL, 0, 0, POWER_CAP, 0], processes=2)
    meter = GpuMeter(nvml, uuid="GPU-1234", index=0)
    assert meter.open and nvml.opened_by == "uuid"
    with LoadMeter(meter) as load:
        for _ in range(3):
            load.before()
            load.after()
        found = load.result()
    assert found.gpu_slowed is not None and found.gpu_sm_mhz is not None
    assert found.gpu_slowed.tolist() == [IDLE | THERMAL, 0, POWER_CAP]
    assert found.gpu_sm_mhz.tolist() == [1980] * 3
    assert found.gpu_others is not None and found.gpu_others.tolist() == [1] * 3
    assert not meter.open  # closed with its load meter
    back = RoundLoad.from_dict(found.to_dict(), 3)
    assert back.gpu_slowed is not None and back.gpu_slowed.tolist() == found.gpu_slowed.tolist()


def test_an_older_driver_and_a_gpu_found_by_index() -> None:
    nvml = FakeNvml([THERMAL, 0], old_driver=True, processes=0)
    meter = GpuMeter(nvml, uuid="GPU-other", index=3)
    assert nvml.opened_by == "index 3"
    meter.before()
    meter.after()
    result = meter.result()
    assert result is not None and [a.tolist() for a in result] == [[THERMAL], [1980], [0]]


def test_a_gpu_the_driver_does_not_know_means_no_gpu_readings() -> None:
    class Unknown(FakeNvml):
        def nvmlDeviceGetHandleByIndex_v2(self, index: Any, ref: Any) -> int:
            return 2  # NVML_ERROR_INVALID_ARGUMENT

    meter = GpuMeter(Unknown([]), uuid=None, index=7)
    meter.before()
    meter.after()
    assert not meter.open and meter.result() is None


def on_gpu(t: OpTable, reasons: list[int], others: int = 0) -> OpTable:
    load = RoundLoad(
        cpu_us=t.wall_us.copy(),
        neighbours=np.zeros(t.rounds, dtype=np.int64),
        cpus=16,
        gpu_slowed=np.asarray(reasons, dtype=np.int64),
        gpu_sm_mhz=np.full(t.rounds, 1980, dtype=np.int64),
        gpu_others=np.full(t.rounds, others, dtype=np.int64),
    )
    return replace(t, load=load)


BASE = tuple(on_gpu(table(OPS, seed=s), [0] * ROUNDS) for s in (10, 11, 12))


def verdict_of(current: OpTable) -> Any:
    return judge(Recorded(tables=BASE), Recorded(tables=(current,)), Rule())


def test_rounds_on_a_gpu_the_machine_slowed_are_left_out_and_a_slowed_gpu_is_gpu_busy() -> None:
    some = [THERMAL if r < 5 else 0 for r in range(ROUNDS)]
    current = on_gpu(table(OPS, seed=1), some)
    found = busy.busy_of(current, Rule())
    assert found is not None and (found.gpu_slowed, found.disturbed) == (5, 5)
    assert verdict_of(current).verdict == UNCHANGED
    always = on_gpu(table(OPS, seed=1), [THERMAL] * ROUNDS)
    v = verdict_of(always)
    assert v.verdict == INCONCLUSIVE
    assert v.busy is not None and v.busy.text == (
        f"GPU busy: {ROUNDS} of {ROUNDS} ran while the GPU held its clocks down (thermal)"
    )
    # the software power cap is the test's own load (a large GEMM reaches it in every run)
    capped = on_gpu(table(OPS, seed=1), [POWER_CAP] * ROUNDS)
    assert verdict_of(capped).verdict == UNCHANGED


def test_a_shared_gpu_is_said_and_its_rounds_kept() -> None:
    shared = on_gpu(table(OPS, seed=1), [0] * ROUNDS, others=2)
    assert verdict_of(shared).verdict == UNCHANGED
    lines = busy.run_summary([("t.py::t", shared)], Rule())
    assert lines[1] == (
        f"GPU: {ROUNDS} of {ROUNDS} measured rounds ran while up to 2 other process(es) held a "
        "context on the GPU (kept: kernel time is judged; device idle time is reported)"
    )


def test_torch_s_device_uuid_is_named_as_nvml_names_it() -> None:
    assert (
        nvml_uuid("58fd7b2b-1c5e-4b7a-9f0a-0123456789ab")
        == "GPU-58fd7b2b-1c5e-4b7a-9f0a-0123456789ab"
    )
    assert nvml_uuid("GPU-58fd7b2b") == "GPU-58fd7b2b" and nvml_uuid("MIG-1") == "MIG-1"
    assert nvml_uuid(None) is None
