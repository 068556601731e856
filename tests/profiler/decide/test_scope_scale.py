"""A user annotation's own time (a ``record_function`` scope: Python inside it, outside any
op) is judged in stored mode at the test's scale, as the time outside any op is: its change
must move the test's op time by the rule's minimum floor (samples.at_test_scale).  Paired
rounds keep the op's own floor: pairing cancels the drift between processes."""

from __future__ import annotations

from dataclasses import replace

import pytest
from tprof_testing import paired_verdict
from tprof_testing import table as op_table

from tprof_engine.decide.judge import with_noise_check
from tprof_engine.decide.timing.compare import compare
from tprof_engine.decide.timing.rule import Rule
from tprof_engine.model.records import OpTable
from tprof_engine.model.verdicts import REGRESSED, UNCHANGED, OpVerdict, TestVerdict

SCOPE = "Optimizer.step#AdamW.step"
OPS = {"aten::mm": (700.0, 2), "aten::add": (200.0, 3), SCOPE: (100.0, 1)}  # 1,000 µs a round


def table(*, seed: int, scope_us: float = 100.0, scoped: bool = True) -> OpTable:
    """Rounds of OPS with the scope's own time at ``scope_us``, marked a scope if ``scoped``."""
    t = op_table({**OPS, SCOPE: (scope_us, 1)}, seed=seed, cv=0.03, probe=500.0)
    return replace(t, scopes=frozenset({SCOPE}) if scoped else frozenset())


def stored(current: OpTable, *, scoped: bool = True) -> TestVerdict:
    base = [table(seed=s, scoped=scoped) for s in range(3)]
    return with_noise_check(compare(base, current), Rule())


def scope_row(v: TestVerdict) -> OpVerdict:
    return next(o for o in v.ops if o.op == SCOPE and o.family == "cpu")


def test_an_optimizer_steps_python_that_moved_a_third_but_4_percent_of_the_test_is_unchanged():
    v = stored(table(seed=7, scope_us=136.0))
    assert v.verdict == UNCHANGED, v.reason
    row = scope_row(v)
    assert row.delta_pct > 30 and row.verdict == UNCHANGED
    # The floor is the change that moves the test's 1,000 µs by 10 %, over the scope's 100 µs.
    assert row.floor_pct == pytest.approx(100.0, rel=0.08)
    assert row.note.startswith("a user annotation's own time (Python in it, outside any op)")


def test_the_same_rise_in_an_op_that_is_no_annotation_fails_the_test():
    v = stored(table(seed=7, scope_us=136.0, scoped=False), scoped=False)
    assert v.verdict == REGRESSED, v.reason
    assert scope_row(v).verdict == REGRESSED


def test_a_scope_whose_python_moves_the_test_beyond_its_floor_fails_it():
    v = stored(table(seed=7, scope_us=330.0))  # +230 µs: 23 % of the round
    assert v.verdict == REGRESSED, v.reason
    assert SCOPE in v.reason


def test_a_current_run_that_knows_its_scopes_sets_the_floor_against_an_older_baseline():
    """Baselines saved before tables named their scopes: the current run's names are enough."""
    base = [table(seed=s, scoped=False) for s in range(3)]
    v = with_noise_check(compare(base, table(seed=7, scope_us=136.0)), Rule())
    assert v.verdict == UNCHANGED, v.reason


def test_paired_rounds_keep_the_scopes_own_floor():
    v = paired_verdict(table(seed=1), table(seed=2, scope_us=136.0))
    assert v.verdict == REGRESSED, v.reason
    assert scope_row(v).floor_pct < 20.0
