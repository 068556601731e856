"""The GPU's own state around each round, read from the NVIDIA driver (NVML), like the
machine's readings of :mod:`tprof_engine.capture.load`: the clock-event reasons (why the
clocks are held down), the SM clock, and the other processes holding a context on the GPU.

NVML is read through ``ctypes`` (no package needed, nothing initialised in CUDA); where there
is no driver, the reading is simply absent.  Each reading costs microseconds and is taken
outside the round's timed interval.
"""

from __future__ import annotations

import ctypes
import functools
from typing import Any

import numpy as np

from tprof_engine.model.arrays import IntArray

_NVML_CLOCK_SM = 1
_NVML_SUCCESS = 0
_NVML_INSUFFICIENT_SIZE = 7


class GpuMeter:
    """Per-round readings of one GPU (found by its UUID, else its index) through an
    initialised NVML, or none at all.

    :meth:`before` and :meth:`after` go around each round, as the load meter's do; a call that
    fails leaves that round's reading 0, and a driver that can't be opened leaves no reading.
    """

    def __init__(self, nvml: Any, *, uuid: str | None, index: int) -> None:
        self._nvml = nvml
        self._handle = ctypes.c_void_p()
        self._start_reasons = 0
        self.slowed: list[int] = []
        self.sm_mhz: list[int] = []
        self.others: list[int] = []
        # the clock-event reasons' call, named "throttle reasons" by older drivers
        self._read_reasons = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or (
            nvml.nvmlDeviceGetCurrentClocksThrottleReasons
        )
        self.open = self._opened(uuid, index)

    def _opened(self, uuid: str | None, index: int) -> bool:
        ref = ctypes.byref(self._handle)
        if uuid and self._nvml.nvmlDeviceGetHandleByUUID(uuid.encode(), ref) == _NVML_SUCCESS:
            return True
        return bool(
            self._nvml.nvmlDeviceGetHandleByIndex_v2(ctypes.c_uint(index), ref) == _NVML_SUCCESS
        )

    def _reasons(self) -> int:
        bits = ctypes.c_ulonglong(0)
        status = self._read_reasons(self._handle, ctypes.byref(bits))
        return int(bits.value) if status == _NVML_SUCCESS else 0

    def _sm_mhz(self) -> int:
        mhz = ctypes.c_uint(0)
        status = self._nvml.nvmlDeviceGetClockInfo(
            self._handle, ctypes.c_uint(_NVML_CLOCK_SM), ctypes.byref(mhz)
        )
        return int(mhz.value) if status == _NVML_SUCCESS else 0

    def _processes(self) -> int:
        """Processes with a compute context on the GPU, counted without reading them (a
        buffer of none: NVML answers with the count)."""
        count = ctypes.c_uint(0)
        status = self._nvml.nvmlDeviceGetComputeRunningProcesses_v3(
            self._handle, ctypes.byref(count), None
        )
        return int(count.value) if status in (_NVML_SUCCESS, _NVML_INSUFFICIENT_SIZE) else 0

    def before(self) -> None:
        if self.open:
            self._start_reasons = self._reasons()

    def after(self) -> None:
        if not self.open:
            return
        self.slowed.append(self._start_reasons | self._reasons())
        self.sm_mhz.append(self._sm_mhz())
        self.others.append(max(0, self._processes() - 1))  # this process holds one

    def result(self) -> tuple[IntArray, IntArray, IntArray] | None:
        """Per round: the clock-event reason bits, the SM clock, the other processes."""
        if not self.open:
            return None
        return (
            np.asarray(self.slowed, dtype=np.int64),
            np.asarray(self.sm_mhz, dtype=np.int64),
            np.asarray(self.others, dtype=np.int64),
        )

    def close(self) -> None:
        self.open = False  # NVML stays initialised for the process (see driver())


@functools.cache
def driver() -> Any | None:
    """NVML, initialised once per process (its start-up can take tens of ms), or None
    without an NVIDIA driver that answers."""
    try:
        nvml = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return None
    return nvml if nvml.nvmlInit_v2() == _NVML_SUCCESS else None


def meter_of_current_gpu() -> GpuMeter | None:
    """A meter of the GPU this process profiles on, or None (no driver answers)."""
    nvml = driver()
    if nvml is None:
        return None
    import torch

    index = torch.cuda.current_device()
    uuid = getattr(torch.cuda.get_device_properties(index), "uuid", None)
    meter = GpuMeter(nvml, uuid=nvml_uuid(uuid), index=index)
    return meter if meter.open else None


def nvml_uuid(uuid: object) -> str | None:
    """torch's device UUID as NVML names it (``GPU-…``); the index is used without one.  Under
    ``CUDA_VISIBLE_DEVICES`` torch's index isn't NVML's: the UUID finds the right GPU."""
    if uuid is None:
        return None
    text = str(uuid)
    return text if text.startswith(("GPU-", "MIG-")) else f"GPU-{text}"
