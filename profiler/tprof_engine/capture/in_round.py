"""What runs in or beside each measured round besides the body: the drift probe at its start,
the closing wait for the device's kernels, and tprof ab's unmeasured call of the body before a
round that follows the peer's rounds.  Each is annotated so the reduction knows it: the probe's
time goes to the probe, the sync's and the re-warm's nowhere."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.profiler import record_function

from tprof_engine.capture.backends import DeviceBackend
from tprof_engine.reduce.ops import PROBE_PREFIX, REWARM_PREFIX, SYNC_PREFIX


class Probe:
    """A fixed CPU workload (≈200 µs single-threaded) timed in every round to track drift."""

    def __init__(self, device: DeviceBackend) -> None:
        g = torch.Generator().manual_seed(0)
        self.a = torch.randn(96, 96, generator=g)
        self.b = torch.randn(96, 96, generator=g)
        self.ga, self.gb = device.to_device(self.a), device.to_device(self.b)

    def __call__(self) -> None:
        x = self.a
        for _ in range(4):
            x = torch.tanh(torch.mm(x, self.b) * 0.01)
        if self.ga is not None and self.gb is not None:
            y = self.ga
            for _ in range(4):
                y = torch.tanh(torch.mm(y, self.gb) * 0.01)


def closing_sync(device: DeviceBackend, r: int) -> None:
    """The round's closing wait for its kernels, annotated ``tprof::sync#r``: the plugin's
    own, so the reduction counts it in no family (the round's wall time keeps it)."""
    if device.family is not None:
        with record_function(f"{SYNC_PREFIX}{r}"):
            device.synchronize()


def turn_arguments(call: Any, pace: Any, j: int, device: DeviceBackend, r: int) -> Any:
    """Round ``r``'s arguments (``call.arguments()``) once its turn comes (``pace.before(j)``;
    its setup runs on this side's turn too); after the peer's rounds, the body once first."""
    opens_turn = pace.before(j)
    args, kwargs = call.arguments()
    if opens_turn:
        rewarm(call.fn, args, kwargs, device, r)
    return args, kwargs


def rewarm(fn: Callable[..., Any], args: Any, kwargs: Any, device: DeviceBackend, r: int) -> None:
    """One unmeasured call of the body before round ``r``, outside its step annotation (the
    reduction counts nothing there), annotated ``tprof::rewarm#r`` for a trace's reader."""
    with record_function(f"{REWARM_PREFIX}{r}"):
        fn(*args, **kwargs)
        device.synchronize()


def probe(drift_probe: Probe | None, device: DeviceBackend, r: int) -> None:
    """Round ``r``'s drift probe, in its own annotation (none without a probe)."""
    if drift_probe is not None:
        with record_function(f"{PROBE_PREFIX}{r}"):
            drift_probe()
            device.synchronize()
