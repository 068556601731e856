"""The time outside any op in stored mode is judged at the test's scale: its change must move
the whole round by the rule's minimum floor (decide.timing.families, Rule.round_floor).
Paired rounds keep the host time's own floor: pairing cancels the drift between processes.
And a slowdown in probe units must be one in raw µs too (samples.raw_follows)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from tprof_testing import paired_verdict
from tprof_testing import table as op_table

from tprof_engine.decide.judge import with_noise_check
from tprof_engine.decide.timing.compare import compare
from tprof_engine.decide.timing.rule import Rule
from tprof_engine.model.records import OpTable
from tprof_engine.model.verdicts import REGRESSED, UNCHANGED, FamilyResult, TestVerdict

OPS = {"aten::mm": (700.0, 2), "aten::add": (200.0, 3), "aten::relu": (100.0, 1)}
HOST_US = 80.0  # 7 % of a round of about 1,070 µs


def table(*, seed: int, host: float = HOST_US, cv: float = 0.03) -> OpTable:
    """Rounds of OPS with ``host`` µs outside any op in each (``cv`` noise on both)."""
    t = op_table(OPS, seed=seed, cv=cv, probe=500.0)
    gaps = host * np.exp(np.random.default_rng(seed + 1000).normal(0, cv, t.rounds))
    return replace(t, wall_us=t.wall_us + gaps)


def host(v: TestVerdict) -> FamilyResult:
    return next(f for f in v.families if f.family == "host")


BASE = [table(seed=s) for s in range(3)]


def stored(current: OpTable) -> TestVerdict:
    return with_noise_check(compare(BASE, current), Rule())


def test_a_host_time_that_moved_half_again_but_a_few_percent_of_the_round_is_unchanged() -> None:
    v = stored(table(seed=7, host=HOST_US * 1.5))  # +40 µs: under 4 % of the round
    assert v.verdict == UNCHANGED, v.reason
    h = host(v)
    assert h.delta_pct > 40 and not h.timing_regressed
    # The floor says why: the change that moves the round 10 %, over the host time.
    assert h.floor_pct == pytest.approx(100 * 0.10 * 1070 / HOST_US, rel=0.05)
    assert h.floor_source.startswith("at the test's scale: 10% of its ")


def test_a_python_loop_that_moves_the_round_beyond_its_floor_fails_the_test() -> None:
    v = stored(table(seed=7, host=HOST_US + 300.0))  # +300 µs: 28 % of the round
    assert v.verdict == REGRESSED, v.reason
    assert host(v).timing_regressed
    assert "time outside any op" in v.reason and "at the test's scale" in v.reason


def test_a_host_dominated_test_keeps_its_learned_floor() -> None:
    """Where the host time is most of the round the round's floor is below the learned one,
    which stays (and says it was learned)."""
    levels = (4000.0, 4700.0, 3700.0)  # sessions that disagree: a learned floor over 40 %
    base = [table(seed=s, host=h) for s, h in enumerate(levels)]
    v = with_noise_check(compare(base, table(seed=7, host=4000.0 * 1.8)), Rule())
    assert v.verdict == REGRESSED, v.reason
    assert host(v).floor_source.startswith("learned from 3 baseline sessions")


def test_a_configured_floor_is_the_rounds_floor_too() -> None:
    rule = Rule(rel_floor=0.05)
    v = with_noise_check(compare(BASE, table(seed=7, host=HOST_US + 120.0), rule), rule)
    assert host(v).floor_pct == pytest.approx(100 * 0.05 * 1070 / HOST_US, rel=0.05)
    assert v.verdict == REGRESSED, v.reason  # +120 µs: 11 % of the round


def test_paired_rounds_keep_the_host_times_own_floor() -> None:
    v = paired_verdict(table(seed=1), table(seed=2, host=HOST_US * 1.5))
    assert v.verdict == REGRESSED, v.reason
    assert host(v).floor_source == "paired with the base's rounds"


def faster_probe(t: OpTable, by: float) -> OpTable:
    """``t`` with a drift probe that ran ``by`` faster (the ops' raw µs as they were)."""
    return replace(t, probe_cpu_us=t.probe_cpu_us * (1.0 - by))


def test_a_probe_that_ran_faster_cannot_make_unchanged_raw_times_a_slowdown() -> None:
    """The probe 18 % faster, the ops and the host time as they were: +22 % in probe units
    for every family, under 1 % in raw µs."""
    v = stored(faster_probe(table(seed=7), 0.18))
    assert v.verdict == UNCHANGED, v.reason
    assert v.probe_shift_pct == pytest.approx(-18, abs=3)
    assert any(n.startswith("CPU +2") and "in raw µs: the drift probe ran" in n for n in v.notes)
    assert not any(o.verdict == REGRESSED for o in v.ops)


def test_a_slowdown_in_raw_us_beside_a_faster_probe_still_fails() -> None:
    slower = op_table({k: (us * 1.3, c) for k, (us, c) in OPS.items()}, seed=7, cv=0.03, probe=500)
    v = stored(faster_probe(slower, 0.18))
    assert v.verdict == REGRESSED, v.reason
    assert not any("in raw µs: the drift probe ran" in n for n in v.notes)
