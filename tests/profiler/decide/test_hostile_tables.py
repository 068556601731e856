"""Values that look valid and aren't: limits of settings, baselines whose times can't carry a
comparison, rows of ops never called (no torch)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tprof_engine import window
from tprof_engine.decide.timing.compare import compare
from tprof_engine.model.environment import Fingerprint
from tprof_engine.model.errors import BaselineError
from tprof_engine.model.limits import ROUNDS_LIMIT, number_problem
from tprof_engine.model.records import OpTable
from tprof_engine.model.verdicts import NEW, UNCHANGED
from tprof_engine.reduce.ops import drop_leading_rounds
from tprof_engine.render import fmt
from tprof_engine.store import baselines, schema

NODEID = "tests/test_m.py::test_a"
RERECORD = "re-record it with --tprof-save"
ROUNDS = 8


def table(
    times: dict[str, float],
    *,
    calls: dict[str, list[int]] | None = None,
    probe: float = 200.0,
    seed: int = 0,
) -> OpTable:
    """Ops with about ``times`` µs each round (one call each unless ``calls`` says)."""
    rng = np.random.default_rng(seed)
    names = tuple(sorted(times))
    self_cpu = np.array([times[n] * (1 + 0.02 * rng.random(ROUNDS)) for n in names])
    given = calls or {}
    return OpTable(
        names=names,
        calls=np.array([given.get(n, [1] * ROUNDS) for n in names], dtype=np.int64),
        self_cpu_us=self_cpu,
        total_cpu_us=self_cpu,
        self_device_us=np.zeros_like(self_cpu),
        total_device_us=np.zeros_like(self_cpu),
        wall_us=np.full(ROUNDS, 500.0),
        probe_cpu_us=np.full(ROUNDS, probe),
        probe_device_us=np.zeros(ROUNDS),
    )


def saved(tmp_path: Path, *tables: OpTable) -> Path:
    sessions = tuple(schema.Session(table=t, recorded_at="t", warmup_used=1) for t in tables)
    baseline = schema.Baseline(
        nodeid=NODEID,
        fingerprint=Fingerprint(hard={"torch": "2.13.0"}),
        protocol={"rounds": ROUNDS, "iterations": 1, "probe": "cpu-mm96x4-v1"},
        sessions=sessions,
    )
    return baselines.save_baseline(tmp_path / "b.json", baseline)


def load_error(path: Path) -> str:
    with pytest.raises(BaselineError) as info:
        baselines.load_baseline(path, expected_nodeid=NODEID)
    return str(info.value)


# --------------------------------------------------------------------------- limits


@pytest.mark.parametrize(
    ("value", "kwargs", "problem"),
    [
        (float("nan"), {}, "must be a finite number >= 0 (got nan)"),
        (float("inf"), {}, "must be a finite number >= 0 (got inf)"),
        (-1, {}, "must be >= 0 (got -1)"),
        (10, {"below_maximum": True}, "must be < 10 (got 10)"),
        (11, {}, "must be <= 10 (got 11)"),
        ("3", {}, "must be a number (got '3')"),
        (True, {}, "must be a number (got True)"),
        (None, {"integer": True}, "must be an integer (got None)"),
        (3.0, {"integer": True}, "must be an integer (got 3.0)"),
        (10**5000, {"integer": True}, "must be <= 10 (got a huge number)"),
        (0, {}, None),
        (9.5, {"below_maximum": True}, None),
        (10, {"integer": True}, None),
    ],
    ids=lambda v: "10**5000" if isinstance(v, int) and v > 10**100 else None,  # str() can't
)
def test_a_setting_is_a_finite_number_within_its_range(
    value: Any, kwargs: dict[str, Any], problem: str | None
) -> None:
    assert number_problem(value, minimum=0, maximum=10, **kwargs) == problem


def test_the_rounds_limit_names_its_bound() -> None:
    assert number_problem(10**9, minimum=2, maximum=ROUNDS_LIMIT, integer=True) == (
        "must be <= 10000 (got 1000000000)"
    )


# --------------------------------------------------------------------------- item 2: times


def test_a_probe_of_a_nanosecond_is_an_error_naming_the_file_and_the_fix(tmp_path: Path) -> None:
    path = saved(tmp_path, table({"aten::mm": 100.0}), table({"aten::mm": 100.0}, probe=0.001))
    assert load_error(path) == (
        f"{path}: 'sessions[1].probe_cpu_us' has a median of 0.001 µs, but the drift probe "
        f"takes >= 1 µs, so these times can't support a comparison; {RERECORD}"
    )


def test_a_probe_missing_from_half_the_rounds_is_an_error(tmp_path: Path) -> None:
    broken = table({"aten::mm": 100.0})
    broken.probe_cpu_us[: ROUNDS // 2 + 1] = 0.0
    path = saved(tmp_path, broken)
    assert load_error(path) == (
        f"{path}: 'sessions[0].probe_cpu_us' has a median of 0 µs, but the drift probe "
        f"takes >= 1 µs, so these times can't support a comparison; {RERECORD}"
    )


def test_a_session_without_a_probe_reads_as_before(tmp_path: Path) -> None:
    path = saved(tmp_path, table({"aten::mm": 100.0}, probe=0.0))
    assert baselines.load_baseline(path).tables[0].probe_cpu_us.tolist() == [0.0] * ROUNDS


def test_a_round_of_calls_without_time_is_an_error_naming_the_round(tmp_path: Path) -> None:
    timeless = table({"aten::add": 5.0, "aten::mm": 100.0})
    timeless.self_cpu_us[:, 2] = 0.0
    path = saved(tmp_path, table({"aten::add": 5.0, "aten::mm": 100.0}), timeless)
    assert load_error(path) == (
        f"{path}: 'sessions[1]' has op calls but no self CPU time in round 2, so these times "
        f"can't support a comparison; {RERECORD}"
    )


def test_one_op_without_time_is_no_error(tmp_path: Path) -> None:
    # A wrapper op whose child covers all of it has no self time of its own.
    path = saved(tmp_path, table({"aten::linear": 0.0, "aten::addmm": 100.0}))
    assert baselines.load_baseline(path).tables[0].names == ("aten::addmm", "aten::linear")


def test_an_op_called_on_both_sides_from_zero_time_is_not_new() -> None:
    base = table({"aten::linear": 0.0, "aten::addmm": 100.0})
    current = table({"aten::linear": 3.0, "aten::addmm": 100.0}, seed=1)
    verdict = compare([base, base], current)
    [linear] = [o for o in verdict.ops if o.op == "aten::linear"]
    assert (linear.verdict, linear.calls_baseline, linear.calls_current) == (UNCHANGED, 1, 1)
    assert math.isnan(linear.delta_pct)
    assert fmt.pct(linear.delta_pct, linear.verdict) == "-"
    assert linear.to_dict()["delta_pct"] is None
    fresh = compare([base], table({"aten::addmm": 100.0, "aten::relu": 4.0, "aten::linear": 0.0}))
    [relu] = [o for o in fresh.ops if o.op == "aten::relu"]
    assert (relu.verdict, fmt.pct(relu.delta_pct, relu.verdict)) == (NEW, "new")


# --------------------------------------------------------------------------- item 12: warm-up ops

WARMUP_ONLY = {"aten::zeros_like": [1, 0, 0, 0, 0, 0, 0, 0]}


def test_dropping_warm_up_rounds_drops_the_ops_only_they_called() -> None:
    first = table({"aten::mm": 100.0, "aten::zeros_like": 2.0}, calls=WARMUP_ONLY)
    first.self_cpu_us[1, 1:] = 0.0
    later = drop_leading_rounds(first, 3)
    assert later.names == ("aten::mm",)
    assert later.calls.shape == later.self_cpu_us.shape == (1, ROUNDS - 3)
    assert later.rounds == ROUNDS - 3


def test_a_row_of_no_calls_from_an_older_save_does_not_restart_the_window() -> None:
    older = table({"aten::mm": 100.0, "aten::zeros_like": 0.0}, calls={"aten::zeros_like": [0] * 8})
    clean = table({"aten::mm": 100.0})
    fp = Fingerprint(hard={"torch": "2.13.0"})
    protocol = {"rounds": ROUNDS}
    session = schema.Session(table=older, recorded_at="t", warmup_used=3)
    existing, what = window.with_session(
        None, nodeid=NODEID, fingerprint=fp, protocol=protocol, session=session
    )
    for expected in ("appended (2 sessions)", "appended (3 sessions)"):
        session = schema.Session(table=clean, recorded_at="t", warmup_used=3)
        existing, what = window.with_session(
            existing, nodeid=NODEID, fingerprint=fp, protocol=protocol, session=session
        )
        assert what == expected


def test_a_row_of_no_calls_in_the_baseline_is_no_op_of_the_comparison() -> None:
    older = table({"aten::mm": 100.0, "aten::zeros_like": 0.0}, calls={"aten::zeros_like": [0] * 8})
    verdict = compare([older, older], table({"aten::mm": 100.0}, seed=1))
    assert [o.op for o in verdict.ops] == ["aten::mm"]
