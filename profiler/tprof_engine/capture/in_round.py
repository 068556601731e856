"""What runs in or beside each measured round besides the body: the drift probe at its start
and its overhead half just before it, the closing wait for the device's kernels, and tprof
ab's unmeasured call of the body before a round that follows the peer's rounds.  Each is
annotated so the reduction knows it: the probe's time goes to the probe, the overhead half's
to the round's load readings, the sync's and the re-warm's nowhere."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch
from torch.profiler import record_function

from tprof_engine.capture.backends import DeviceBackend
from tprof_engine.reduce.ops import OVERHEAD_PREFIX, PROBE_PREFIX, REWARM_PREFIX, SYNC_PREFIX

# The overhead half: the least of OVERHEAD_RUNS runs of OVERHEAD_STEPS steps of tiny ops.  Short
# runs, many of them: between the rounds of an MLP step under the profiler (2-core VM, quiet),
# the least of six runs of three steps read its 90th percentile round 5 % above its lower
# quartile and passed the 15 % bar (``Rule.probe_slowed``) in 0 % of rounds; the least of three
# runs of six steps, 36 % above and in 29 % of rounds (benchmarks/probe_halves.py).
OVERHEAD_RUNS = 6
OVERHEAD_STEPS = 3


class Probe:
    """A fixed CPU workload timed in every round to track drift: its compute half (≈100 µs of
    small matrix products, single-threaded) in the round, and its overhead half (tiny ops,
    whose time is the per-op cost of dispatch and the profiler, not of arithmetic) just before
    it.  Beside another process the two move apart: the ops of an MLP whose time is all
    overhead (``aten::t``, ``aten::linear``, ``aten::relu``) ran 70-105 % slower while its
    ``aten::addmm`` and the compute half moved 1-8 % (docs/design.md §16)."""

    def __init__(self, device: DeviceBackend) -> None:
        g = torch.Generator().manual_seed(0)
        self.a = torch.randn(96, 96, generator=g)
        self.b = torch.randn(96, 96, generator=g)
        self.small = torch.randn(8, 8, generator=g)
        self.ga, self.gb = device.to_device(self.a), device.to_device(self.b)

    def overhead_us(self, r: int) -> float:
        """Round ``r``'s overhead half, in its own annotation outside the round: the least
        wall time (µs) of :data:`OVERHEAD_RUNS` runs of tiny ops on an 8 × 8 tensor."""
        least = float("inf")
        with record_function(f"{OVERHEAD_PREFIX}{r}"):
            for _ in range(OVERHEAD_RUNS):
                t0 = time.perf_counter_ns()
                y = self.small
                for _ in range(OVERHEAD_STEPS):
                    y = torch.add(y.t(), 0.5).relu().unsqueeze(0).squeeze(0)
                least = min(least, (time.perf_counter_ns() - t0) / 1000.0)
        return least

    def __call__(self) -> None:
        x = self.a
        for _ in range(4):
            x = torch.tanh(torch.mm(x, self.b) * 0.01)
        if self.ga is not None and self.gb is not None:
            y = self.ga
            for _ in range(4):
                y = torch.tanh(torch.mm(y, self.gb) * 0.01)


def overhead(drift_probe: Probe | None, r: int) -> float | None:
    """Round ``r``'s overhead half (µs; None without a probe), run just before the round."""
    return None if drift_probe is None else drift_probe.overhead_us(r)


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
