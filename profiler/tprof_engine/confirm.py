"""One loop that carries out the confirmation policy's plan (docs/design.md §5).

The policy (:mod:`tprof_engine.decide.policy`) says what a verdict needs before it stands:
re-measure here, a fresh process (on a side of tprof ab, a fresh pair), or the serial re-run
once xdist's workers finish; given each step's result it says the next, or the verdict.  This
loop asks it and carries each step out over an :class:`Executor`: the engine re-measures in
this process (:mod:`tprof_engine.runner`), the glue runs the fresh processes
(:mod:`pytest_tprof.fresh`).  Nothing else decides to measure a test again.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

from tprof_engine import sources
from tprof_engine.decide import again, policy
from tprof_engine.decide.timing.rule import Rule
from tprof_engine.model.errors import TprofError
from tprof_engine.model.family_specs import spec
from tprof_engine.model.records import OpTable
from tprof_engine.model.results import ProfiledTest
from tprof_engine.model.settings import differences
from tprof_engine.model.verdicts import TestVerdict


@dataclass(frozen=True, slots=True, kw_only=True)
class Look:
    """One step's result: the verdict it judged (None: it gave none, ``why`` says why), the
    torch settings it ran under that differ from the first capture's, and (a re-measurement
    here) the rounds it captured."""

    verdict: TestVerdict | None
    why: str = ""
    other_settings: tuple[str, ...] = ()
    table: OpTable | None = None


class Executor(Protocol):
    """What carries the steps out for one test."""

    def remeasure(self, test: ProfiledTest) -> Look:
        """Capture the rounds again in this process and judge them."""
        ...

    def fresh_process(self, test: ProfiledTest) -> Look:
        """Run the test alone in a new process (on tprof ab's head side: a fresh pair)."""
        ...

    def after_workers(self, test: ProfiledTest) -> Look:
        """Run the test alone in a new process once xdist's workers have finished."""
        ...


@dataclass(frozen=True, slots=True, kw_only=True)
class Plan:
    """Where a test's confirmation stands: which steps are open to it here."""

    confirm: bool = True  # False: --no-tprof-confirm takes every verdict as it is
    in_process: bool = True  # a second capture in this process is open
    fresh: bool = True  # a fresh process is open (False in one, or in a harness with none)
    workers: int = 1  # xdist's workers beside this one
    alpha: float = policy.DEFAULT_ALPHA  # the run's α, which the blocks are pooled at
    # the rule a verdict short of its floor is measured again under (in a fresh process; on a
    # side of tprof ab, a fresh pair, its pairs' rule); None: it stands as it is
    again_rule: Rule | None = None
    # the looks a verdict may get in all (the first included): a short one measured again, a
    # regression a fresh look took back measured a third time (3); 2: neither gets a third
    most_looks: int = again.MOST_LOOKS


def confirmed(test: ProfiledTest, steps: Executor, plan: Plan) -> ProfiledTest:
    """``test`` once every step its verdict needs is taken: a test left pending by xdist's
    workers is run alone; else the policy's steps in turn until the verdict stands (under
    xdist a fresh process waits for the workers, and the test is left pending)."""
    if test.pending is not None and not policy.needs_fresh_process(test.pending):
        return _short_after_workers(test, steps, plan)
    if test.pending is not None:
        look = steps.after_workers(test)
        verdict = policy.after_serial_confirmation(
            test.pending, look.verdict, look.why, look.other_settings, alpha=plan.alpha
        )
        return replace(test, verdict=verdict, pending=None)
    in_process = plan.in_process
    while True:
        step = policy.next_step(
            test.verdict,
            confirm=plan.confirm,
            in_process=in_process,
            in_fresh_process=not plan.fresh,
            workers=plan.workers,
            again_rule=plan.again_rule,
        )
        if step == policy.REMEASURE:
            test, in_process = _remeasured(test, steps.remeasure(test), plan.alpha), False
            continue
        if step == policy.AFTER_WORKERS:
            waiting = policy.awaiting_serial_confirmation(test.verdict, plan.workers)
            test = replace(test, verdict=waiting, pending=test.verdict)
        elif step == policy.FRESH_PROCESS:
            test = replace(test, verdict=_in_fresh_process(test, steps, plan))
        elif step == policy.MEASURE_AGAIN and plan.again_rule is not None:
            test = replace(test, verdict=_measured_again(test, steps, plan.again_rule, plan))
        return replace(test, verdict=policy.under_xdist(test.verdict, plan.workers))


def _short_after_workers(test: ProfiledTest, steps: Executor, plan: Plan) -> ProfiledTest:
    """A verdict short of its floor beside other xdist workers, once they finished: the test
    run alone in a fresh process, and that run's verdict taken through the steps a serial
    run's takes (confirmed in a fresh process if it regressed, measured again if short).  The
    first look is not pooled: other workers' load moved it, as they move a regression's."""
    first, rule = test.pending, plan.again_rule
    assert first is not None and rule is not None  # left pending as short under a rule
    look = steps.after_workers(test)
    said = again.no_evidence(look.verdict, rule, look.why, look.other_settings)
    if said or look.verdict is None:
        kept = first.with_notes(f"short of its floor beside other workers; {said}")
        return replace(test, verdict=kept, pending=None)
    alone = look.verdict.with_notes(
        f"short of its floor beside other xdist workers ({_short_words(first, rule)}); "
        "measured alone once they finished: this is that run's verdict"
    )
    lone = replace(test, verdict=alone, pending=None)
    return confirmed(lone, steps, replace(plan, in_process=False, workers=1))


def serial_words(pending: list[TestVerdict]) -> str:
    """What the serial pass after xdist's workers does with the verdicts left pending."""
    regressed = sum(policy.needs_fresh_process(v) for v in pending)
    parts = [f"confirming {regressed} timing regression(s)"] if regressed else []
    if len(pending) > regressed:
        parts.append(f"measuring {len(pending) - regressed} verdict(s) short of their floor again")
    return f"{' and '.join(parts)} found under xdist, each alone in a fresh process"


def _short_words(verdict: TestVerdict, rule: Rule) -> str:
    """The short families of a verdict, as ``CPU +7.8% (p=0.045)``."""
    return ", ".join(
        f"{spec(f.family).label} {f.delta_pct:+.1f}% (p={f.p_value:.2g})"
        for f in again.short_families(verdict, rule)
    )


def _in_fresh_process(test: ProfiledTest, steps: Executor, plan: Plan) -> TestVerdict:
    """A timing regression confirmed in a fresh process (a fresh pair); one that look took
    back is measured a third time where the rule breaks ties (:func:`.again.breaks_ties`), and
    judged on every look pooled (:func:`.again.after_dispute`)."""
    look = steps.fresh_process(test)
    merged = policy.after_fresh_process(
        test.verdict, look.verdict, look.why, look.other_settings, alpha=plan.alpha
    )
    rule = plan.again_rule
    if rule is None or look.verdict is None or plan.most_looks < again.MOST_LOOKS:
        return merged
    if not (policy.not_confirmed(merged.reason) and again.breaks_ties(test.verdict, rule)):
        return merged
    third = steps.fresh_process(test)
    if third.verdict is None:
        return merged.with_notes(f"not measured a third time: {third.why}")
    said = again.no_evidence(third.verdict, rule, other_settings=third.other_settings)
    if said:
        return merged.with_notes(f"measured a third time, no evidence: {said}")
    return again.after_dispute(test.verdict, merged, [look.verdict, third.verdict], rule)


def _measured_again(test: ProfiledTest, steps: Executor, rule: Rule, plan: Plan) -> TestVerdict:
    """A verdict short of its floor measured again, look by look, while
    :func:`.again.another_look` says so (up to ``plan.most_looks`` in all), and judged on
    every look pooled."""
    looks: list[TestVerdict] = []
    while True:
        look = steps.fresh_process(test)
        said = again.no_evidence(look.verdict, rule, look.why, look.other_settings)
        if said or look.verdict is None:
            if not looks:
                return test.verdict.with_notes(f"short of its floor; {said}")
            break
        looks.append(look.verdict)
        if not again.another_look(test.verdict, looks, rule, most=plan.most_looks):
            break
    return again.after_looks(test.verdict, looks, rule)


def _remeasured(test: ProfiledTest, look: Look, alpha: float) -> ProfiledTest:
    """The test once measured a second time here: the rounds of the measurement its verdict
    now rests on, and whether the second look was evidence either way."""
    repeat = look.verdict
    if repeat is None:  # nothing captured: the first verdict stands, as with no evidence
        why = look.why or "no second capture"
        return replace(test, verdict=test.verdict.with_notes(f"not re-measured: {why}"))
    said = policy.evidence(test.verdict, repeat, alpha=alpha)[0]
    kept = look.table if policy.second_is_kept(said, repeat) else test.table
    verdict = policy.after_remeasurement(test.verdict, repeat, alpha=alpha)
    return replace(test, table=kept, confirmed=said != policy.NO_EVIDENCE, verdict=verdict)


# What of a JSON report's test row a confirmation reads: the fields whose shape there is the
# verdict record's own (an op row keeps every field an op's pooling reads; work and device
# rows are trimmed for the report).
_VERDICT_FIELDS = (
    "verdict",
    "reason",
    "families",
    "timing_compared",
    "differences",
    "causes",
    "ops",
)


def look_in_report(
    report: Path, nodeid: str, torch_in_force: Mapping[str, Any], said: tuple[int, str]
) -> Look:
    """A fresh process's result, read back from its ``--tprof-json`` report with the records'
    own loaders (``said``: its exit code and output, for when it wrote none)."""
    try:
        doc = sources.load_report(report)
    except TprofError:
        tail = said[1].strip().splitlines()[-1:] or [""]
        return Look(
            verdict=None, why=f"the fresh process gave no verdict (exit {said[0]}: {tail[0]})"
        )
    for row in doc["tests"]:
        if row.get("nodeid") == nodeid:
            verdict = TestVerdict.from_dict({k: row[k] for k in _VERDICT_FIELDS if k in row})
            moved = differences(torch_in_force, row.get("settings") or {})
            return Look(verdict=verdict, other_settings=tuple(moved))
    return Look(verdict=None, why="the fresh process did not run the test")
