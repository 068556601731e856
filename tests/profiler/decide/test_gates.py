"""The gates as entries: each finding joined to a verdict the one same way, and every gate's
kind known to the model's cause specs (exactness read from there, not from the policy)."""

from __future__ import annotations

from typing import get_args

from tprof_testing import table

from tprof_engine.decide import gates, policy
from tprof_engine.decide.gates import GATES, Finding, Gate, applied, findings
from tprof_engine.decide.rule import Rule
from tprof_engine.decide.sides import Recorded, Sides
from tprof_engine.decide.timing import NOTHING_CHANGED
from tprof_engine.model.verdicts import (
    CAUSE_SPECS,
    CHANGED,
    EXACT_CAUSES,
    IMPROVED,
    MEMORY,
    REGRESSED,
    SETTINGS,
    UNCHANGED,
    Cause,
    CauseKind,
    FamilyResult,
    TestVerdict,
)

QUIET = TestVerdict(verdict=UNCHANGED, reason=NOTHING_CHANGED)


def test_every_cause_kind_has_a_spec_and_every_gate_a_known_kind() -> None:
    assert set(CAUSE_SPECS) == set(get_args(CauseKind))
    assert {g.kind for g in GATES} <= set(CAUSE_SPECS)
    assert EXACT_CAUSES == {"calls", "work", "compile", "memory", "communication"}


def test_a_finding_is_alone_first_or_after_by_how_urgent_its_word_is() -> None:
    said = Finding(word=CHANGED, text="settings: x")
    assert applied(QUIET, said).reason == "settings: x"
    assert applied(QUIET, said).verdict == CHANGED
    slower = TestVerdict(verdict=REGRESSED, reason="CPU total +30%")
    assert applied(slower, said).reason == "CPU total +30% | settings: x"
    assert applied(slower, said).verdict == REGRESSED
    fails = Finding(word=REGRESSED, text="MEMORY: more")
    assert applied(slower, fails).reason == "MEMORY: more | CPU total +30%"
    noted = applied(slower, Finding(notes=("a note",)))
    assert noted.reason == slower.reason and noted.notes == ("a note",)


def test_a_new_gate_plugs_in_as_an_entry_and_its_exact_failure_skips_the_remeasurement() -> None:
    """An entry of one's own, run beside the registry's: the policy reads the failing
    memory cause as exact, so a timing regression beside it is not measured again."""
    exact = Gate(MEMORY, lambda s: Finding(
        word=REGRESSED, text="MEMORY: +1 MiB",
        cause=Cause(kind=MEMORY, text="MEMORY: +1 MiB", failing=True),
    ))  # fmt: skip
    t = table({"aten::mm": (1000.0, 2)}, seed=1)
    sides = Sides(
        baseline=Recorded(tables=(t,)), current=Recorded(tables=(t,)), base_tables=(t,),
        current_table=t, per_call=1, rule=Rule(),
    )  # fmt: skip
    found = findings(sides, (*GATES, exact))
    assert len(found) == len(GATES) + 1
    assert all(f.word == UNCHANGED and not f.text for f in found[:-1])
    slower = TestVerdict(
        verdict=REGRESSED, reason="CPU total +30%",
        families=(FAMILY_SLOWER,),
    )  # fmt: skip
    assert policy.next_step(slower) == policy.REMEASURE
    both = applied(slower, found[-1])
    assert both.exact_regressed and policy.next_step(both) == policy.DONE


def test_settings_are_not_exact_so_a_timing_regression_beside_them_is_remeasured() -> None:
    said = gates.settings_finding({"intra_op_threads": 1}, {"intra_op_threads": 2})
    assert said.cause is not None and said.cause.kind == SETTINGS and not said.cause.failing
    slower = TestVerdict(verdict=REGRESSED, reason="CPU total +30%", families=(FAMILY_SLOWER,))
    assert policy.next_step(applied(slower, said)) == policy.REMEASURE


def test_an_improved_exact_gate_does_not_fail_the_test() -> None:
    better = applied(QUIET, Finding(word=IMPROVED, text="compile: fewer graph breaks"))
    assert better.verdict == IMPROVED and not better.failing


FAMILY_SLOWER = FamilyResult(
    family="cpu", verdict=REGRESSED, baseline_total_us=1000.0, current_total_us=1300.0,
    delta_pct=30.0, p_value=0.001, floor_pct=5.0, floor_source="learned", mde_pct=5.0,
    timing_regressed=True, op_gate=(), structure_added_us=0.0, structure_regressed=False,
    reasons=("CPU total +30%",),
)  # fmt: skip
