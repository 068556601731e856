"""A line tracer (coverage.py) while profiling: found, and its timings reported but not gated."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from types import FrameType
from typing import Any

import numpy as np
import pytest

from tprof_engine.decide import judge
from tprof_engine.decide.timing.rule import Rule
from tprof_engine.model.environment import Fingerprint, line_tracer
from tprof_engine.model.records import OpTable
from tprof_engine.model.results import ProfiledTest
from tprof_engine.model.verdicts import INCONCLUSIVE, REGRESSED, SAVED, TestVerdict

COVERAGE = "coverage: coverage.py's CTracer traced every line while profiling"
OPS = {"aten::addmm": (800.0, 6), "aten::relu": (120.0, 3), "aten::add_": (90.0, 6)}
HARD = {"torch": "2.13.0", "device": "cpu", "cpu_model": "Test CPU", "threads": 1}


@contextmanager
def tracing(tracer: Callable[..., Any] | None) -> Iterator[None]:
    """``tracer`` as this thread's line tracer (an outer one, e.g. coverage's, comes back)."""
    before = sys.gettrace()
    sys.settrace(tracer)
    try:
        yield
    finally:
        sys.settrace(before)


def plain_tracer(frame: FrameType, event: str, arg: Any) -> None:
    return None


class CTracer:
    """Stands for coverage.py's C tracer: an instance of a class from its ``tracer`` module."""

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        return None


CTracer.__module__ = "coverage.tracer"


class PyTracer:
    """Stands for coverage.py's Python tracer, which traces with a bound method."""

    def _trace(self, frame: FrameType, event: str, arg: Any) -> None:
        return None


PyTracer.__module__ = "coverage.pytracer"


def test_no_tracer_is_none() -> None:
    with tracing(None):
        assert line_tracer() is None


def test_coverage_tracers_are_named_as_coverage() -> None:
    with tracing(CTracer()):
        assert line_tracer() == COVERAGE
    with tracing(PyTracer()._trace):
        assert line_tracer() == (
            "coverage: coverage.py's PyTracer traced every line while profiling"
        )


def test_another_tracer_is_named_by_its_function() -> None:
    with tracing(plain_tracer):
        assert line_tracer() == (
            f"line tracer: {__name__}.plain_tracer traced every line while profiling"
        )


def table(ops: dict[str, tuple[float, int]], *, seed: int) -> OpTable:
    """20 rounds with 3 % log-normal noise; ``ops`` maps name → (median µs, calls)."""
    rng = np.random.default_rng(seed)
    names = tuple(sorted(ops))
    medians = np.array([ops[n][0] for n in names])[:, None]
    cpu = medians * np.exp(rng.normal(0, 0.03, (len(names), 20)))
    return OpTable(
        names=names,
        calls=np.array([[ops[n][1]] * 20 for n in names], dtype=np.int64),
        self_cpu_us=cpu,
        total_cpu_us=cpu,
        self_device_us=np.zeros_like(cpu),
        total_device_us=np.zeros_like(cpu),
        wall_us=cpu.sum(axis=0),
        probe_cpu_us=1000.0 * np.exp(rng.normal(0, 0.03, 20)),
        probe_device_us=np.zeros(20),
        has_device=False,
    )


def sides(current_ops: dict[str, tuple[float, int]]) -> tuple[judge.Recorded, judge.Recorded]:
    fingerprint = Fingerprint(hard=HARD)
    baseline = judge.Recorded(
        tables=tuple(table(OPS, seed=100 + i) for i in range(3)), fingerprint=fingerprint
    )
    current = judge.Recorded(
        tables=(table(current_ops, seed=7),), fingerprint=fingerprint, tracer=COVERAGE
    )
    return baseline, current


def test_a_traced_run_reports_its_slower_timings_without_gating_them() -> None:
    slow = {k: (us * 3, calls) for k, (us, calls) in OPS.items()}
    baseline, current = sides(slow)
    untraced = judge.judge(baseline, replace(current, tracer=None), Rule())
    assert untraced.verdict == REGRESSED  # the same tables fail when no tracer ran
    v = judge.judge(baseline, current, Rule())
    assert v.verdict == INCONCLUSIVE  # calls and work unchanged, timing unknown
    assert not v.timing_compared
    assert v.differences == (COVERAGE,)
    assert f"timings not compared: {COVERAGE}" in v.notes
    addmm = next(o for o in v.ops if o.op == "aten::addmm")
    assert addmm.delta_pct == pytest.approx(200, abs=15)  # reported all the same


def test_a_traced_run_still_fails_on_calls() -> None:
    baseline, current = sides({**OPS, "aten::clone": (400.0, 1)})
    v = judge.judge(baseline, current, Rule())
    assert v.verdict == REGRESSED
    assert v.differences == (COVERAGE,)
    assert "aten::clone" in v.reason


def test_the_tracer_crosses_processes_with_the_test() -> None:
    """Under xdist the controller saves what a worker profiled: it must know it was traced."""
    test = ProfiledTest(nodeid="t.py::t", verdict=TestVerdict(verdict=SAVED, reason=""))
    assert ProfiledTest.from_dict(test.to_dict()).tracer is None
    traced = replace(test, tracer=COVERAGE)
    assert ProfiledTest.from_dict(traced.to_dict()).tracer == COVERAGE
