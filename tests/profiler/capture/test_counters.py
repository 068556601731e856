"""Hardware instruction counts: per round from per-call counts; unavailable machines say why."""

from __future__ import annotations

import itertools
from pathlib import Path

from tprof_engine.capture.counters import (
    InstructionCounter,
    counting_calls,
    instructions_note,
    per_round,
    unavailable_reason,
)
from tprof_engine.config import Body, RunConfig
from tprof_engine.runner import Runner


def test_per_round_sums_each_rounds_calls_of_the_last_capture() -> None:
    # an extended warm-up called the body 2 more times before the 2 warm-up + 3 measured
    # rounds of 2 calls each that the last capture made
    counts = [9, 9] + [5, 5] * 2 + [10, 11, 12, 13, 14, 15]
    assert per_round(counts, rounds=3, iterations=2) == [21, 25, 29]
    assert per_round([7], rounds=2, iterations=1) == [7, 0]


def test_the_note_gives_the_median_and_the_spread() -> None:
    assert instructions_note([1_000_000, 1_001_000, 999_000]) == (
        "CPU instructions per round: 1,000,000 (median of 3; range 0.20% of it; not gated)"
    )


class SteppingCounter(InstructionCounter):
    """Reads 100 more at each read: the wrapper's arithmetic, without hardware."""

    def __init__(self) -> None:
        self.values = itertools.count(0, 100)

    def read(self) -> int:
        return next(self.values)


def test_each_call_of_the_wrapped_body_adds_its_count_and_keeps_its_value() -> None:
    counts: list[int] = []
    wrapped = counting_calls(lambda x, y=1: x + y, SteppingCounter(), counts)
    assert wrapped(2, y=3) == 5
    assert wrapped(1) == 2
    assert counts == [100, 100]


def test_the_counter_counts_more_for_more_work_or_says_why_it_cant() -> None:
    reason = unavailable_reason()
    if reason is not None:  # this machine (a VM without a virtual PMU, or a strict kernel)
        assert reason.startswith("perf_event_open failed: "), reason
        return
    counter = InstructionCounter()
    try:
        first = counter.read()
        sum(range(1_000))
        small = counter.read() - first
        sum(range(1_000_000))
        large = counter.read() - first - small
    finally:
        counter.close()
    assert 0 < small < large


def test_a_profiled_test_notes_its_measured_rounds_counts(tmp_path: Path) -> None:
    import torch

    config = RunConfig(
        rounds=3, warmup=1, baseline_dir=tmp_path, trace_dir=None, min_round_us=0.0,
        census=False, counters=True,
    )  # fmt: skip
    runner = Runner(config)
    runner.counter = SteppingCounter()  # this machine may have no counter: the runner's part
    _, test = runner.profile("t.py::test_relu", Body(fn=torch.relu, args=(torch.ones(4),)))
    assert test.iterations == 1
    assert "CPU instructions per round: 100 (median of 3; range 0.00% of it; not gated)" in (
        test.verdict.notes
    )
