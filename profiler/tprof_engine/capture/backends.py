"""The device a capture profiles, as one object: the one module that knows a device's API.

A :class:`DeviceBackend` says what the profiler records (its activities), how the host waits
for the device (its sync), how a range is named for the vendor's timeline tool (NVTX), which
environment variable lists the devices a process may use, what meters the device's clock and
throttling, what kind of device activity an event is, how its random generators are saved, and
the family spec key of its times (``model.family_specs``).  Capture asks the backend; decide and
render ask the family spec's role.  Adding a device is a backend here and one spec entry.

:func:`detect` picks this process's: :class:`CudaBackend` where torch sees a CUDA or ROCm device
(``torch.version.hip`` tells them apart; both record through the CUDA activity and are one
family), else :data:`CPU`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any, Protocol, runtime_checkable

import torch
from torch.profiler import ProfilerActivity

from tprof_engine.capture import gpu_state, torch_api
from tprof_engine.model.environment import VISIBLE_DEVICES
from tprof_engine.model.records import OpTable

__all__ = [
    "CPU",
    "CpuBackend",
    "CudaBackend",
    "DeviceBackend",
    "NvtxRanges",
    "detect",
    "device_range",
    "with_family",
]


@runtime_checkable
class DeviceBackend(Protocol):
    """A device a capture profiles beside the CPU (the CPU alone: :class:`CpuBackend`)."""

    @property
    def family(self) -> str | None:
        """The family spec key of its device times; None: no device times at all."""

    @property
    def label(self) -> str:
        """How the run header names it (``CUDA``, ``ROCm``, ``CPU``)."""

    @property
    def visible_devices(self) -> str | None:
        """The environment variable listing the devices a process may use (None: none)."""

    def version(self) -> str | None:
        """Its runtime's version, which baselines must share (None: no device runtime)."""

    def activities(self) -> list[ProfilerActivity]:
        """What the profiler session records: the CPU's and the device's activities."""

    def experimental_config(self) -> Any:
        """The profiler's experimental config for this device (None: torch's default)."""

    def synchronize(self) -> None:
        """Wait for every queued device operation (nothing without a device)."""

    def to_device(self, tensor: torch.Tensor) -> torch.Tensor | None:
        """``tensor`` on the device, for the drift probe's device half (None: no device)."""

    def ranges_available(self) -> bool:
        """Whether named ranges for the vendor's timeline tool can be emitted."""

    def push_range(self, name: str) -> None:
        """Open a named range (NVTX-like) on this thread."""

    def pop_range(self) -> None:
        """Close the innermost range opened by :meth:`push_range`."""

    def meter(self) -> gpu_state.GpuMeter | None:
        """A meter of the device's clock and throttling (None: none can be read)."""

    def activity_kind(self, event: Any) -> str:
        """What a device event is as kineto names it (``kernel``, ``gpu_memcpy``, …)."""

    def rng_states(self) -> list[bytes] | None:
        """Its random generators' states (None: none in use)."""

    def set_rng_states(self, raws: list[bytes]) -> None:
        """Set the random generators to ``raws`` (a ValueError when they can't be)."""


class NvtxRanges:
    """Ranges as NVTX, the CUDA toolkit's: a build of torch with CUDA emits them for Nsight's
    CPU timeline too, with no GPU; a build without it raises, so none are emitted."""

    def ranges_available(self) -> bool:
        try:
            torch.cuda.nvtx.range_push("tprof:check")
        except RuntimeError:  # "NVTX functions not installed. Are you sure you have a CUDA build?"
            return False
        torch.cuda.nvtx.range_pop()
        return True

    def push_range(self, name: str) -> None:
        torch.cuda.nvtx.range_push(name)

    def pop_range(self) -> None:
        torch.cuda.nvtx.range_pop()


class CpuBackend(NvtxRanges):
    """No device: the profiler records the CPU; syncs and meters are nothing (ranges are the
    build's NVTX, as Nsight traces the CPU alone too)."""

    family: str | None = None
    label = "CPU"
    visible_devices: str | None = None

    def version(self) -> str | None:
        return None

    def activities(self) -> list[ProfilerActivity]:
        return [ProfilerActivity.CPU]

    def experimental_config(self) -> Any:
        return None

    def synchronize(self) -> None:
        return None

    def to_device(self, tensor: torch.Tensor) -> torch.Tensor | None:
        return None

    def meter(self) -> gpu_state.GpuMeter | None:
        return None

    def activity_kind(self, event: Any) -> str:
        return ""

    def rng_states(self) -> list[bytes] | None:
        return None

    def set_rng_states(self, raws: list[bytes]) -> None:
        raise ValueError("no device to set random generators on")


class CudaBackend(NvtxRanges):
    """An NVIDIA GPU through CUDA, or an AMD one through ROCm (torch's HIP build, which
    answers ``torch.cuda`` and records through the CUDA activity)."""

    family: str | None = "cuda"
    visible_devices: str | None = VISIBLE_DEVICES

    @property
    def label(self) -> str:
        return "ROCm" if getattr(torch.version, "hip", None) else "CUDA"

    def version(self) -> str | None:
        return torch.version.cuda  # None on ROCm, whose baselines were keyed without it

    def activities(self) -> list[ProfilerActivity]:
        return [ProfilerActivity.CPU, ProfilerActivity.CUDA]

    def experimental_config(self) -> Any:
        return torch_api.experimental_config(True)

    def synchronize(self) -> None:
        torch.cuda.synchronize()

    def to_device(self, tensor: torch.Tensor) -> torch.Tensor | None:
        return tensor.cuda()

    def meter(self) -> gpu_state.GpuMeter | None:
        return gpu_state.meter_of_current_gpu()

    def activity_kind(self, event: Any) -> str:
        return torch_api.device_activity(event)

    def rng_states(self) -> list[bytes] | None:
        if not torch.cuda.is_initialized():
            return None
        return [s.numpy().tobytes() for s in torch.cuda.get_rng_state_all()]

    def set_rng_states(self, raws: list[bytes]) -> None:
        if len(raws) != torch.cuda.device_count():
            raise ValueError("another number of CUDA devices")
        states = [torch.frombuffer(bytearray(r), dtype=torch.uint8) for r in raws]
        torch.cuda.set_rng_state_all(states)


CPU: DeviceBackend = CpuBackend()


def detect() -> DeviceBackend:
    """This process's device: CUDA (or ROCm) where torch sees one, else the CPU alone."""
    return CudaBackend() if torch.cuda.is_available() else CPU


@contextmanager
def device_range(backend: DeviceBackend, name: str | None) -> Iterator[None]:
    """A range named ``name`` around the block on ``backend``; nothing when ``name`` is None."""
    if name is None:
        yield
        return
    backend.push_range(name)
    try:
        yield
    finally:
        backend.pop_range()


def with_family(table: OpTable, backend: DeviceBackend) -> OpTable:
    """``table`` with its device columns' family named: the backend's, where it has any."""
    return replace(table, device_family=backend.family if table.has_device else None)
