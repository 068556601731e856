"""The runner's second room: a recorded test judged and confirmed (docs/design.md §3, §5).

What the test is judged against (:func:`found_for`), its verdict (:func:`verdict_of`), the
confirmation policy's plan carried out by :func:`tprof_engine.confirm.confirmed` over
:class:`Steps` (a re-measurement here, the glue's fresh processes), and the finished test with
its notes, its trace and its costs (:func:`finished`, :func:`recorded`).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from tprof_engine import confirm, paired_run
from tprof_engine.decide import judge, outcome, policy
from tprof_engine.decide.timing.rule import Rule, paired_rule
from tprof_engine.found import Found, verdict_on, without_baseline
from tprof_engine.model.costs import Stopwatch
from tprof_engine.model.results import ProfiledTest
from tprof_engine.model.verdicts import TestVerdict
from tprof_engine.store import trace_files


def verdict_of(
    runner: Any, nodeid: str, found: Found, current: judge.Recorded, rule: Rule
) -> TestVerdict:
    """The verdict on the current run given what was found for the test."""
    cfg, key = runner.config, runner.env_key
    return verdict_on(
        found, current, rule, lambda: without_baseline(cfg, key, current, nodeid, rule)
    )


def current_of(runner: Any, test: ProfiledTest, **more: Any) -> judge.Recorded:
    """The test's capture as the judge reads it (``more``: the hosts, the tracer)."""
    assert test.table is not None  # a captured test's
    return judge.Recorded(
        tables=(test.table,),
        fingerprint=runner.fingerprint,
        protocol={k: v for k, v in test.protocol.items() if k != "warmup_used"},
        work=test.work,
        settings=test.settings,
        **more,
    )


def found_for(runner: Any, on_disk: Found, pairing: Any) -> Found:
    """What the test is judged against: what is on disk, or on tprof ab's head side the
    base's rounds of it, with what is on disk beside them."""
    paired = paired_run.base_side(pairing, runner.fingerprint)
    if paired is None:
        return on_disk
    return Found(
        baseline=None, error=None, paired=paired[0], stored=on_disk, paired_trace=paired[1]
    )


class Steps:
    """The confirmation's executor for one test (:class:`tprof_engine.confirm.Executor`): a
    re-measurement here, by the test's own capture; the fresh processes, the glue's
    (``runner.fresh_steps``)."""

    def __init__(
        self, runner: Any, found: Found, current: judge.Recorded, rule: Rule, capture: Any
    ) -> None:
        self.runner, self.found, self.current = runner, found, current
        self.rule, self.capture = rule, capture

    def remeasure(self, test: ProfiledTest) -> confirm.Look:
        second = self.capture.again(self.rule, self.runner.config.busy_retries)
        current = replace(self.current, tables=(second.table,), settings=second.settings)
        with self.capture.watch.stage("judge"):
            repeat = verdict_of(self.runner, test.nodeid, self.found, current, self.rule)
        return confirm.Look(verdict=repeat, table=second.table)

    def fresh_process(self, test: ProfiledTest) -> confirm.Look:
        look: confirm.Look = self.runner.fresh_steps.fresh_process(test)
        return look

    def after_workers(self, test: ProfiledTest) -> confirm.Look:
        look: confirm.Look = self.runner.fresh_steps.after_workers(test)
        return look


def plan(runner: Any, rule: Rule, *, in_process: bool, paired: bool = False) -> confirm.Plan:
    """Which confirmation steps are open to a test of this run (``in_process``: a second
    capture here; the fresh processes where the glue runs them; ``paired``: a side of tprof
    ab).  A verdict short of its floor is measured again in a fresh process, on a side of
    tprof ab in a fresh pair, under that side's rule (:mod:`tprof_engine.decide.again`)."""
    glue = runner.fresh_steps
    return confirm.Plan(
        confirm=runner.config.confirm,
        in_process=in_process,
        fresh=glue is not None and glue.fresh_open,
        workers=1 if glue is None else glue.workers,
        alpha=rule.alpha,
        again_rule=paired_rule(rule) if paired else rule,
    )


def judged(test: ProfiledTest, steps: Steps, watch: Stopwatch, *, in_process: bool) -> ProfiledTest:
    """The test judged, then confirmed as the policy's plan asks (a pair is not captured
    again here: the base side would have to run again in step; a verdict short of its floor
    is measured again in a fresh process, or pair)."""
    with watch.stage("judge"):
        verdict = verdict_of(steps.runner, test.nodeid, steps.found, steps.current, steps.rule)
    test = replace(test, verdict=policy.with_exact_note(verdict))
    paired = steps.found.paired is not None
    chosen = plan(steps.runner, steps.rule, in_process=in_process, paired=paired)
    return confirm.confirmed(test, steps, chosen)


def recorded(
    runner: Any,
    test: ProfiledTest,
    error: str | None,
    notes: tuple[str, ...],
    capture: Any,
    watch: Stopwatch,
    pairing: Any = None,
) -> ProfiledTest:
    """A recording's test, its verdict "saved" (the save itself comes at the run's end);
    on tprof ab's base side, its rounds handed to the head, which judges them."""
    if pairing is not None:  # its trace named before the head gets it
        test = replace(test, verdict=outcome.base_of_pair())
        return paired_run.handed_over(pairing, finished(runner, test, notes, capture, watch))
    note = ("the damaged file will be replaced",) if error else ()
    test = replace(test, verdict=outcome.recorded((*note, *notes)))
    return replace(
        kept_trace(runner, under_xdist(runner, test), capture, watch), costs=watch.costs()
    )


def under_xdist(runner: Any, test: ProfiledTest) -> ProfiledTest:
    """A recording under xdist says that other workers ran beside it, as a verdict does."""
    glue = runner.fresh_steps
    workers = 1 if glue is None else glue.workers
    return replace(test, verdict=policy.under_xdist(test.verdict, workers))


def finished(
    runner: Any, test: ProfiledTest, notes: tuple[str, ...], capture: Any, watch: Stopwatch
) -> ProfiledTest:
    """The judged test with its notes, its trace when the verdict wants one (and a
    side-by-side one when it regressed), and what its stages cost."""
    test = replace(test, verdict=test.verdict.with_notes(*notes))
    test = kept_trace(runner, test, capture, watch)
    if test.verdict.regressed:
        with watch.stage("judge"):
            test = side_by_side(runner, test)
    return replace(test, costs=watch.costs())


def kept_trace(runner: Any, test: ProfiledTest, capture: Any, watch: Stopwatch) -> ProfiledTest:
    """The test naming its trace when its verdict wants one (``store.run_traces``)."""
    kept: ProfiledTest = runner.traces.kept(
        test, capture.write_trace, watch, later=capture.trace_later
    )
    return kept


def side_by_side(runner: Any, test: ProfiledTest) -> ProfiledTest:
    """With the baseline's trace kept, write both runs into one trace, regressed ops marked."""
    return trace_files.with_side_by_side(test, runner.baseline_trace_path(test.nodeid))
