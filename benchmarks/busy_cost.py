"""What knowing a busy machine costs: the per-round readings, and a test's capture with them.

Each measured round is bracketed by ``busy.LoadMeter``'s readings (the thread's CPU time, the
run-queue wait of every thread of the process from ``/proc/self/task/*/schedstat``, context
switches from ``getrusage(RUSAGE_THREAD)``, runnable tasks from ``/proc/loadavg`` at both
ends).  They run
inside the round's ``ProfilerStep`` annotation but outside its timed interval and outside every
op, so no op's figures hold them; this script measures what they add to a round's time all the
same, side by side in one run:

1. ``readings``: ``before()`` + ``after()`` alone, in a tight loop (µs per round);
2. ``round``: a ~1 ms body (the calibrated minimum round) timed with and without the readings
   around it, alternating, and their ratio;
3. ``capture``: ``session.capture()`` of an MLP step, 20 rounds + 3 warm-up, against the same
   rounds with the meter's readings replaced by no-ops, alternating; the ratio of medians.

    python benchmarks/busy_cost.py [--repeat 15]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any
from unittest import mock

import torch

from tprof_engine.capture import facts, session
from tprof_engine.capture import load as busy


def per_reading_us(n: int = 20_000) -> float:
    with busy.LoadMeter() as meter:
        t0 = time.perf_counter_ns()
        for _ in range(n):
            meter.before()
            meter.after()
        return (time.perf_counter_ns() - t0) / n / 1000.0


def body_of_about(target_us: float) -> Callable[[], Any]:
    x = torch.randn(128, 128)
    w = torch.randn(128, 128)

    def step() -> Any:
        return torch.tanh(x @ w)

    t0 = time.perf_counter_ns()
    for _ in range(50):
        step()
    one_us = (time.perf_counter_ns() - t0) / 50 / 1000.0
    calls = max(1, round(target_us / one_us))

    def body() -> Any:
        for _ in range(calls):
            step()

    return body


def round_us(body: Callable[[], Any], meter: busy.LoadMeter | None, n: int = 200) -> float:
    times = []
    for _ in range(n):
        t0 = time.perf_counter_ns()
        if meter is not None:
            meter.before()
        body()
        if meter is not None:
            meter.after()
        times.append((time.perf_counter_ns() - t0) / 1000.0)
    return statistics.median(times)


class _Silent(busy.LoadMeter):
    """The meter with its readings replaced by nothing (the capture without them)."""

    def before(self) -> None:
        self.starts_ns.append(time.time_ns())

    def after(self) -> None:
        self._cpu.append(0)
        self._queued.append(0)
        self._switches.append(0)
        self._blocks.append(0)
        self._neighbours.append(0)


def capture_s(silent: bool) -> float:
    model = torch.nn.Sequential(
        torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 64)
    )
    x = torch.randn(32, 256)
    patch = mock.patch.object(session, "LoadMeter", _Silent) if silent else mock.MagicMock()
    with patch, facts.intra_op_threads(1):
        t0 = time.perf_counter()
        session.capture(lambda: model(x), rounds=20, warmup=3, iterations=4)
        return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    torch.set_num_threads(1)

    readings = [per_reading_us() for _ in range(5)]
    body = body_of_about(1000.0)
    plain, metered = [], []
    with busy.LoadMeter() as meter:
        for _ in range(args.repeat):
            plain.append(round_us(body, None))
            metered.append(round_us(body, meter))
    cap_plain, cap_metered = [], []
    for _ in range(args.repeat):
        cap_plain.append(capture_s(silent=True))
        cap_metered.append(capture_s(silent=False))

    med = statistics.median
    print(f"{'what':<44} {'without':>12} {'with':>12} {'ratio':>8}")
    print(f"{'readings per round (before + after), µs':<44} {'':>12} {med(readings):>12.2f}")
    print(
        f"{'a ~1 ms round, median µs':<44} {med(plain):>12.1f} {med(metered):>12.1f} "
        f"{med(metered) / med(plain):>8.3f}"
    )
    print(
        f"{'capture of an MLP step (23 rounds), s':<44} {med(cap_plain):>12.4f} "
        f"{med(cap_metered):>12.4f} {med(cap_metered) / med(cap_plain):>8.3f}"
    )
    print(f"per test (23 rounds): {23 * med(readings):.0f} µs of readings")


if __name__ == "__main__":
    main()
