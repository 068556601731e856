"""The gates as entries: each finding joined to a verdict the one same way, by its fields;
each gate's exactness carried by its cause; and a new gate, written as docs/design.md says,
picked up by the judge from its one line in the list."""

from __future__ import annotations

import importlib
import re
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from tprof_testing import table

from tprof_engine.decide import judge, outcome, policy
from tprof_engine.decide.gates import registry
from tprof_engine.decide.gates.finding import Finding, Gate, applied
from tprof_engine.decide.gates.registry import GATES, findings
from tprof_engine.decide.gates.settings import settings_finding
from tprof_engine.decide.timing.compare import NOTHING_CHANGED, says_nothing
from tprof_engine.decide.timing.rule import Rule
from tprof_engine.decide.timing.sides import Recorded, Sides
from tprof_engine.model.results import ProfiledTest
from tprof_engine.model.verdicts import (
    CHANGED,
    IMPROVED,
    MEMORY,
    REGRESSED,
    SETTINGS,
    UNCHANGED,
    FamilyResult,
    TestVerdict,
)

QUIET = TestVerdict(verdict=UNCHANGED, reason=NOTHING_CHANGED)
DESIGN = Path(__file__).resolve().parents[3] / "docs" / "design.md"


def test_every_gate_names_a_kind_of_its_own_and_says_whether_it_is_exact() -> None:
    kinds = [g.kind for g in GATES]
    assert len(set(kinds)) == len(kinds)
    exact = {g.kind for g in GATES if g.exact}
    assert exact == {"work", "compile", "memory", "communication"}


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


def test_whether_the_timing_said_nothing_is_read_from_fields_not_from_the_reason() -> None:
    """An unchanged verdict whose families give no reason is replaced by a finding's text,
    whatever its reason's words; one whose reported family said something is kept."""
    worded = TestVerdict(verdict=UNCHANGED, reason="any words at all")
    assert says_nothing(worded)
    assert applied(worded, Finding(word=CHANGED, text="settings: x")).reason == "settings: x"
    reported = TestVerdict(
        verdict=UNCHANGED,
        reason=f"{NOTHING_CHANGED} | CPU (timing reported, not gated): x +9%",
        families=(replace(FAMILY_SLOWER, verdict=UNCHANGED, reasons=("x +9%",), gates=False),),
    )
    assert not says_nothing(reported)
    joined = applied(reported, Finding(word=CHANGED, text="settings: x")).reason
    assert joined == f"settings: x | {reported.reason}"


def test_a_new_gate_plugs_in_as_an_entry_and_its_exact_failure_skips_the_remeasurement() -> None:
    """An entry of one's own, run beside the registry's: the policy reads the failing
    cause as exact, so a timing regression beside it is not measured again."""
    exact = Gate(kind=MEMORY, exact=True, find=lambda s: exact.said(REGRESSED, "MEMORY: +1"))
    t = table({"aten::mm": (1000.0, 2)}, seed=1)
    sides = Sides(
        baseline=Recorded(tables=(t,)),
        current=Recorded(tables=(t,)),
        base_tables=(t,),
        current_table=t,
        per_call=1,
        rule=Rule(),
    )
    found = findings(sides, (*GATES, exact))
    assert len(found) == len(GATES) + 1
    assert all(f.word == UNCHANGED and not f.text for f in found[:-1])
    slower = TestVerdict(verdict=REGRESSED, reason="CPU total +30%", families=(FAMILY_SLOWER,))
    assert policy.next_step(slower) == policy.REMEASURE
    both = applied(slower, found[-1])
    assert both.exact_regressed and policy.next_step(both) == policy.DONE


def test_settings_are_not_exact_so_a_timing_regression_beside_them_is_remeasured() -> None:
    said = settings_finding({"intra_op_threads": 1}, {"intra_op_threads": 2})
    assert said.cause is not None and said.cause.kind == SETTINGS and not said.cause.failing
    slower = TestVerdict(verdict=REGRESSED, reason="CPU total +30%", families=(FAMILY_SLOWER,))
    assert policy.next_step(applied(slower, said)) == policy.REMEASURE


def test_an_improved_exact_gate_does_not_fail_the_test() -> None:
    better = applied(QUIET, Finding(word=IMPROVED, text="compile: fewer graph breaks"))
    assert better.verdict == IMPROVED and not better.failing


def _documented_gate() -> str:
    """The example gate module of docs/design.md's "Adding a gate", as written there."""
    text = DESIGN.read_text(encoding="utf-8")
    found = re.search(r"<!-- new-gate example[^\n]*-->\n```python\n(.*?)```", text, re.S)
    assert found is not None, "docs/design.md lost its new-gate example"
    return found.group(1)


def test_a_gate_written_as_the_docs_say_is_judged_from_its_one_line_in_the_list(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The docs' example, written as a module of its own (no other gate's file touched) and
    added to the list, joins the judge's verdict: its text in the reason, its exact cause
    failing the test, kept through the JSON report's form."""
    (tmp_path / "ops_gate.py").write_text(_documented_gate(), encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    ops = importlib.import_module("ops_gate")
    base = table({"aten::mm": (1000.0, 2)}, seed=1)
    wider = table({"aten::mm": (1000.0, 2), "aten::relu": (5.0, 1)}, seed=2)
    sides = (Recorded(tables=(base,)), Recorded(tables=(wider,)))
    before = judge.judge(*sides, Rule())
    assert all(c.kind != "ops" for c in before.causes)

    monkeypatch.setattr(registry, "GATES", (*registry.GATES, ops.GATE))  # the one line
    verdict = judge.judge(*sides, Rule())
    (cause,) = [c for c in verdict.causes if c.kind == "ops"]
    assert cause.text == "ops: 1 → 2 distinct ops" and cause.failing and cause.exact
    assert verdict.verdict == REGRESSED and verdict.reason.startswith("ops: 1 → 2 distinct ops")
    assert TestVerdict.from_dict(verdict.to_dict()).exact_regressed
    said = outcome.outcome_of(ProfiledTest(nodeid="t.py::test", verdict=verdict))
    assert said.fails and "ops: 1 → 2 distinct ops" in [c.text for c in said.causes]
    assert judge.judge(*reversed(sides), Rule()).causes == ()
    del sys.modules["ops_gate"]


FAMILY_SLOWER = FamilyResult(
    family="cpu",
    verdict=REGRESSED,
    baseline_total_us=1000.0,
    current_total_us=1300.0,
    delta_pct=30.0,
    p_value=0.001,
    floor_pct=5.0,
    floor_source="learned",
    mde_pct=5.0,
    timing_regressed=True,
    op_gate=(),
    structure_added_us=0.0,
    structure_regressed=False,
    reasons=("CPU total +30%",),
)
