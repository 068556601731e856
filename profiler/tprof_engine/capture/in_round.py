"""What runs in or beside each measured round besides the body: the drift probe at its start,
the closing wait for the device's kernels, and tprof ab's unmeasured calls of the body before a
round that follows the peer's rounds.  Each is annotated so the reduction knows it: the probe's
time goes to the probe, the sync's and the re-warm's nowhere."""

from __future__ import annotations

import math
import time
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


def turn_arguments(
    call: Any, pace: Any, j: int, device: DeviceBackend, r: int, warm_us: float | None = None
) -> Any:
    """Round ``r``'s arguments (``call.arguments()``) once its turn comes (``pace.before(j)``;
    its setup runs on this side's turn too); after the peer's rounds, the body first until it
    runs warm again (:func:`rewarm`; ``warm_us``: a call's time in this side's last round)."""
    opens_turn = pace.before(j)
    args, kwargs = call.arguments()
    if opens_turn:
        rewarm(call.fn, args, kwargs, device, r, warm_us)
    return args, kwargs


# A re-warm stops at a call no more than this much slower than a warm one of this side ...
WARM_AGAIN = 1.1
# ... or at one no faster than this share of the call before it (the body has stopped warming
# up, or each of its calls waits for the device, which its rounds' calls don't) ...
STILL_WARMING = 0.97
# ... and after this many calls whatever they read.
REWARM_MAX_CALLS = 8


def rewarm(
    fn: Callable[..., Any],
    args: Any,
    kwargs: Any,
    device: DeviceBackend,
    r: int,
    warm_us: float | None = None,
) -> int:
    """Unmeasured calls of the body before round ``r``, outside its step annotation (the
    reduction counts nothing there), annotated ``tprof::rewarm#r`` for a trace's reader; how
    many it made.

    One call is not always enough: after the peer's round of lookups into its own 128 MB
    table, an EmbeddingBag's calls took 912, 624, 379, 357, 278, 228 µs before settling at
    180 (this machine's L3 refills over several passes), so the round after one re-warm call
    read 1.8x its side's next round and the pairs' floor reached 35-53 % (``ab_reruns.py``).
    So the calls go on until one runs within :data:`WARM_AGAIN` of ``warm_us`` (a call of
    this side's last round, which followed its own) or stops getting faster."""
    calls, last = 0, math.inf
    with record_function(f"{REWARM_PREFIX}{r}"):
        while calls < REWARM_MAX_CALLS:
            t0 = time.perf_counter_ns()
            fn(*args, **kwargs)
            device.synchronize()
            took = (time.perf_counter_ns() - t0) / 1000.0
            calls += 1
            if _warm(took, last, warm_us):
                break
            last = took
    return calls


def _warm(took: float, last: float, warm_us: float | None) -> bool:
    """Whether a re-warm call of ``took`` µs, after one of ``last``, ran warm."""
    near_warm = warm_us is not None and took <= WARM_AGAIN * warm_us
    return near_warm or took >= STILL_WARMING * last


def probe(drift_probe: Probe | None, device: DeviceBackend, r: int) -> None:
    """Round ``r``'s drift probe, in its own annotation (none without a probe)."""
    if drift_probe is not None:
        with record_function(f"{PROBE_PREFIX}{r}"):
            drift_probe()
            device.synchronize()
