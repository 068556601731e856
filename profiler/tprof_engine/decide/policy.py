"""The re-measure policy as data: when a capture is taken again on a busy machine
(:func:`capture_again`), what a verdict needs before it stands (:func:`next_step`), and how
each confirmation's outcome merges into it (:func:`evidence` says what it showed).

One loop (:mod:`tprof_engine.confirm`) carries its answers out over an executor: the engine
captures again in this process, the glue runs a fresh process (a fresh pair, or once xdist's
workers finish); nothing else decides to measure again.  The runner takes the busy retries.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Final, Literal

from tprof_engine.decide import again
from tprof_engine.decide.timing import pooling
from tprof_engine.decide.timing.busy import Reference, busy_of
from tprof_engine.decide.timing.rule import Rule
from tprof_engine.model.family_specs import FAMILIES
from tprof_engine.model.records import OpTable
from tprof_engine.model.verdicts import (
    IMPROVED,
    INCONCLUSIVE,
    UNCHANGED,
    FamilyResult,
    OpVerdict,
    TestVerdict,
    worst,
)

# What to do with a verdict before it stands: the confirmation policy's answers.
Step = Literal["done", "remeasure", "fresh-process", "after-workers", "measure-again"]
DONE: Final = "done"
REMEASURE: Final = "remeasure"  # capture the rounds again in this process, judge again
FRESH_PROCESS: Final = "fresh-process"  # run the test alone in a new pytest process
AFTER_WORKERS: Final = "after-workers"  # under xdist: that, once every worker has finished
# a verdict short of its floor, measured again (a fresh process; on a side of tprof ab a
# fresh pair) and judged on both looks pooled (decide.again)
MEASURE_AGAIN: Final = "measure-again"


def busy_retries(retries: int, *, recording: bool, judged: bool, paired: bool) -> int:
    """How many times a busy machine's capture of a test may be taken again (``retries``:
    ``--tprof-busy-retries``): a recording's and a run's judged against a stored baseline,
    up to ``retries``; none for a run with nothing to judge against, nor for a side of tprof
    ab, whose rounds are paced with the other side's and kept, disturbed or not."""
    if paired or not (recording or judged):
        return 0
    return retries


def capture_again(
    tables: Sequence[OpTable],
    rule: Rule,
    *,
    retries: int,
    reference: Reference | None = None,
) -> bool:
    """Whether a busy machine's capture is taken again: while too few of the rounds so far
    were undisturbed to judge timing, up to ``retries`` more times; ``reference``: the
    baseline's quiet readings, which the judge reads rounds beside other processes against
    (``busy.quiet_reference``).  Device and memory captures are not (their device and
    memory tables aren't joined across captures)."""
    first = tables[0]
    if len(tables) > retries or first.device is not None or first.memory is not None:
        return False
    return _quiet(tables, rule, reference) < rule.quiet_rounds_needed(first.rounds)


def _quiet(tables: Sequence[OpTable], rule: Rule, reference: Reference | None) -> int:
    """Rounds of ``tables`` that weren't disturbed (all of them, without readings)."""
    found = 0
    for t in tables:
        disturbed = busy_of(t, rule, reference)
        found += t.rounds if disturbed is None else disturbed.quiet
    return found


def next_step(
    verdict: TestVerdict,
    *,
    confirm: bool = True,
    in_process: bool = True,
    in_fresh_process: bool = False,
    workers: int = 1,
    again_rule: Rule | None = None,
) -> Step:
    """The confirmation policy: what a verdict needs before it stands.

    A timing regression is measured again in the same process (unless the work already fails
    the test); one that survives that is run in a fresh process, which confirms nothing
    further itself; under xdist that process runs once the workers have finished, so other
    workers' load can't confirm it.  ``confirm=False`` (``--no-tprof-confirm``) takes every
    verdict as it is.

    ``in_process``: whether a second capture in this process is still open: closed once it
    was taken, and for the sources that can't be captured again here: pytest-benchmark's
    rounds (the benchmark owns them) and tprof ab's pairs (the base side would have to run
    again in step), which go straight to a fresh process (for a pair, a fresh pair).
    ``again_rule``: the rule a verdict whose families landed short of their floor
    (:func:`.again.short_families`) is measured again under, in a fresh process (a fresh
    pair), under xdist once the workers have finished (the test run alone, judged as a serial
    run would judge it); None: it stands as it is.
    :mod:`tprof_engine.confirm` carries the steps out; the merges are
    :func:`after_remeasurement`, :func:`after_fresh_process`,
    :func:`awaiting_serial_confirmation`, :func:`after_serial_confirmation`,
    :func:`.again.after_looks` and :func:`.again.after_dispute`.
    """
    if not confirm:
        return DONE
    if in_process and needs_remeasurement(verdict):
        return REMEASURE
    if in_fresh_process:
        return DONE
    if needs_fresh_process(verdict):
        return AFTER_WORKERS if workers > 1 else FRESH_PROCESS
    if again_rule is not None and again.short_families(verdict, again_rule):
        return MEASURE_AGAIN if workers == 1 else AFTER_WORKERS
    return DONE


def with_exact_note(verdict: TestVerdict) -> TestVerdict:
    """A timing regression that an exact gate already fails is not re-measured: say so."""
    if verdict.timing_regressed and verdict.exact_regressed:
        return verdict.with_notes(
            "timing not re-measured: an exact gate (calls, work, memory, compiled graphs or "
            "collectives) already fails the test"
        )
    return verdict


def needs_remeasurement(verdict: TestVerdict) -> bool:
    """A timing regression is measured again before it fails a test, unless an exact cause
    (calls, work, memory, compiled graphs, collectives) already fails it: counts don't drift,
    so they need no second look."""
    return verdict.timing_regressed and not verdict.exact_regressed


# What a confirmation says of a timing regression: it repeats it, it judged the same families
# and found them not slower, or it could judge none of them (no evidence either way).
Evidence = Literal["confirms", "refutes", "no-evidence"]
CONFIRMS: Final = "confirms"
REFUTES: Final = "refutes"
NO_EVIDENCE: Final = "no-evidence"


def slower_families(verdict: TestVerdict) -> list[str]:
    """The gating families whose timing fails the test."""
    return [f.family for f in verdict.families if f.gates and (f.timing_regressed or f.op_gate)]


# The rule's α, which the blocks' significance is read at when the caller names none.
DEFAULT_ALPHA = Rule().alpha
# The share of its floor an op pooled on itself must show by itself in the newest block, and a
# family in another context must still lean slower by: the part of the floor the rule's U
# tests shift by.
SHIFT_SHARE = Rule().shift_share


def evidence(
    first: TestVerdict,
    again: TestVerdict,
    other_settings: Sequence[str] = (),
    *,
    alpha: float = DEFAULT_ALPHA,
) -> tuple[Evidence, str]:
    """What ``again`` (a second measurement, here or in a fresh process) says of ``first``'s
    timing regression, and why.

    Each measurement is a block of rounds, and the blocks are pooled (:mod:`.pooling`): the
    regression is confirmed while one of the families that failed fails again (on its time or
    on a slower kernel path: calls that changed and time that rose), or its change pooled over
    both blocks is still beyond the floor and ``again`` is not by itself significantly inside
    it; it is refuted only when ``again`` judged one of those families and the pooled change
    fell inside the floor, or ``again`` itself ruled it out.  A measurement that ran under
    other settings, on a busy machine, without comparable timings or without those families
    judged is no evidence: the first verdict stands.
    """
    if other_settings:
        return NO_EVIDENCE, "it ran under other settings (" + ", ".join(other_settings) + ")"
    slower = slower_families(first)
    judged = {f.family: f for f in again.families if f.family in slower and f.gates}
    if any(f.fails for f in judged.values()):
        return CONFIRMS, ""
    if again.busy is not None:
        return NO_EVIDENCE, f"the {again.busy.text}"
    if not again.timing_compared:
        shown = ", ".join(again.differences) or "no comparable timings"
        return NO_EVIDENCE, f"it compared no timings ({shown})"
    if not [f for f in judged.values() if not f.too_noisy]:
        names = "/".join(_label(n) for n in slower)
        return NO_EVIDENCE, f"it could not judge {names} time ({again.verdict} there)"
    pooled = [
        _pooled(first, again, f, judged[f.family], alpha)
        for f in first.families
        if f.family in judged
    ]
    standing = [text for text, still in pooled if still]
    if standing:
        return CONFIRMS, "; ".join(standing)
    faster = _faster_elsewhere(first, again)
    if faster:
        return NO_EVIDENCE, faster
    return REFUTES, "; ".join(text for text, _ in pooled)


def _faster_elsewhere(first: TestVerdict, child: TestVerdict) -> str:
    """Why ``child`` measured another context, when it did: a family it read significantly
    faster than every baseline session that ``first`` read slower, while another family
    ``first`` read slower still leans slower there (beyond the rule's share of its floor).
    A test run alone in a fresh process can run faster than in the suite its baselines were
    recorded in (HF Llama ``generate``: −23 % CPU and host time alone, unchanged in its
    suite), and that shift can't take back a slowdown that still shows through it (its
    decoding-loop plant: host +75 % in the suite, +13 % alone, where CPU read −18 %); empty
    otherwise.  A child that reads every family ``first`` found slower no slower is evidence:
    the slowdown was the parent process's (Llama ``generate`` unchanged read CPU +26 % and
    host +17 % in one process and −19 % alone, and it failed its test)."""
    slower = {f.family: f for f in again.failed_totals(first)}
    still = [
        f
        for f in child.families
        if f.gates and f.family in slower and f.delta_pct > SHIFT_SHARE * f.floor_pct
    ]
    for f in child.families:
        if f.gates and f.verdict == IMPROVED and f.family in slower and still:
            label, shows = _label(f.family), still[0]
            return (
                f"it read {label} time {f.delta_pct:+.0f}% against the baseline where this "
                f"process read {slower[f.family].delta_pct:+.0f}%, and {_label(shows.family)} "
                f"time still {shows.delta_pct:+.0f}%: it ran in another context (alone, a "
                "test can run faster than in the suite its baseline was recorded in)"
            )
    return ""


def _label(family: str) -> str:
    return FAMILIES[family].label if family in FAMILIES else family


def _pooled(
    first: TestVerdict,
    again: TestVerdict,
    family: FamilyResult,
    judged: FamilyResult,
    alpha: float,
) -> tuple[str, bool]:
    """One family's two blocks pooled on what it failed on, and whether its regression stands:
    its total when that regressed; else each op that failed it on its own, by its own change
    or against the rest of its test (it stands while one of them does).  A family that failed
    on one op never had its total beyond the floor: pooling the total would take back what
    the first block never claimed (a custom op +25 % against the rest of its test, the test
    +11 % under a 19 % floor, read "process-dependent" once a fresh process read +5 %)."""
    label = _label(family.family)
    if family.timing_regressed or not family.op_gate:
        blocks = [pooling.block_of(f, alpha) for f in (family, judged)]
        return _pooled_text(label, blocks, family.floor_pct, f" ({_p(judged.p_value)})", alpha)
    said = [_pooled_op(name, family.family, first, again, alpha) for name in family.op_gate]
    return "; ".join(text for text, _ in said), any(still for _, still in said)


def _pooled_op(
    name: str, family: str, first: TestVerdict, again: TestVerdict, alpha: float
) -> tuple[str, bool]:
    """One op that failed its family on its own, pooled over both blocks; it stands only if
    the newest block by itself shows it slower too: the first block picked it out of all the
    test's ops, so its reading leans high (simulated with 5 % per-op drift per process,
    pooling an op without that failed 4.4 % of unchanged tests; ``sequence.py``)."""
    was, now = _op(first, name, family), _op(again, name, family)
    if was is None or now is None:
        return f"{name}: no change to pool", False
    if was.vs_rest_only:
        blocks = [_vs_rest_block(o, alpha) for o in (was, now)]
        label = f"{name} against the rest of the test"
        return _pooled_text(label, blocks, was.vs_rest_floor_pct or 0.0, "", alpha, repeat=True)
    blocks = [pooling.block(o.delta_pct, o.mde_pct, alpha, p=o.p_value) for o in (was, now)]
    return _pooled_text(name, blocks, was.floor_pct, "", alpha, repeat=True)


def _op(verdict: TestVerdict, name: str, family: str) -> OpVerdict | None:
    return next((o for o in verdict.ops if o.op == name and o.family == family), None)


def _vs_rest_block(op: OpVerdict, alpha: float) -> pooling.Block | None:
    """An op's change against the rest of its test as a block (None: not judged so there)."""
    if op.vs_rest_pct is None:
        return None
    return pooling.block(op.vs_rest_pct, op.vs_rest_mde_pct, alpha)


def _pooled_text(
    label: str,
    blocks: Sequence[pooling.Block | None],
    floor_pct: float,
    p: str,
    alpha: float,
    *,
    repeat: bool = False,
) -> tuple[str, bool]:
    """Two blocks of one change pooled: what they read, and whether the regression stands
    (with ``repeat``, only if the newest block by itself shows a slowdown too)."""
    sure = [b for b in blocks if b is not None]
    if len(sure) < 2:
        return f"{label}: no change to pool", False
    together = pooling.pooled(sure)
    still = pooling.stands(together, sure[-1], floor_pct, alpha)
    if repeat:
        still = still and pooling.shows_itself(sure[-1], SHIFT_SHARE * floor_pct, alpha)
    text = (
        f"{label} {sure[0].pct:+.0f}% then {sure[1].pct:+.0f}%{p}; "
        f"pooled {together.pct:+.0f}%, floor {floor_pct:.0f}%"
    )
    if together.q_p < alpha:
        text += f"; the two disagree beyond their noise ({_p(together.q_p)})"
        if still:
            text += ": process-dependent, its size moves with the process"
    return text, still


def _p(p: float) -> str:
    return "p<1e-6" if p < 1e-6 else f"p={p:.2g}"


def second_is_kept(said: Evidence, again: TestVerdict) -> bool:
    """Whether the second measurement's verdict (and rounds) replace the first's, given what
    it ``said`` (:func:`evidence`): it refuted the regression, or failed itself; a regression
    that stands on the pooled blocks keeps the first, which found it."""
    return said == REFUTES or (said == CONFIRMS and again.regressed)


def after_remeasurement(
    first: TestVerdict, again: TestVerdict, *, alpha: float = DEFAULT_ALPHA
) -> TestVerdict:
    """The verdict once measured a second time in this process: the second measurement's when
    it fails too or refutes the first; the first's, with the pooled figures, when the pooled
    blocks keep it standing; else the first's, with a note saying why (``alpha``: the run's)."""
    said, why = evidence(first, again, alpha=alpha)
    if said == CONFIRMS and again.regressed:
        return again.with_notes("confirmed by a second measurement")
    if said == CONFIRMS:
        return first.with_notes(f"confirmed by a second measurement pooled with it: {why}")
    if said == REFUTES:
        return again.with_notes(
            f"a first measurement looked slower; the re-measurement did not: {why}"
        )
    return first.with_notes(f"a second measurement neither confirmed nor refuted it: {why}")


def needs_fresh_process(verdict: TestVerdict) -> bool:
    """A timing regression (and no exact one: calls, work, …) is confirmed in a fresh process."""
    return verdict.regressed and verdict.timing_regressed and not verdict.exact_regressed


# The reason of a timing regression a fresh process (a fresh pair) did not repeat: its timing
# was judged, and not confirmed (not "never judged").
NOT_CONFIRMED = "slower in this process, not in a fresh one"


def not_confirmed(reason: str) -> bool:
    """Whether a verdict's reason is that of a regression a fresh process did not repeat."""
    return reason.startswith(NOT_CONFIRMED)


def after_fresh_process(
    verdict: TestVerdict,
    child: TestVerdict | None,
    why: str = "",
    other_settings: Sequence[str] = (),
    *,
    alpha: float = DEFAULT_ALPHA,
) -> TestVerdict:
    """Merge the fresh process's verdict (None: it gave none, and ``why`` says why).

    The regression is taken back only if the fresh process refutes it (:func:`evidence`:
    judged the families that failed, and found them not slower); one that repeats it confirms
    it, and one that gave no verdict or no evidence (other settings, a busy machine, those
    families not judged) leaves it standing, with a note.
    """
    if child is None:
        return verdict.with_notes(f"not re-run in a fresh process: {why}")
    said, figures = evidence(verdict, child, other_settings, alpha=alpha)
    if said == CONFIRMS:
        pooled = f" pooled with this one: {figures}" if figures else ""
        return verdict.with_notes(f"confirmed in a fresh process{pooled}")
    if said == NO_EVIDENCE:
        return verdict.with_notes(f"a fresh process neither confirmed nor refuted it: {figures}")
    work_word = UNCHANGED if verdict.work is None else verdict.work.verdict
    return replace(
        verdict,
        verdict=worst([INCONCLUSIVE, work_word]),
        reason=f"{NOT_CONFIRMED} ({child.verdict} there): {verdict.reason}",
        notes=(
            *verdict.notes,
            f"process-dependent: {figures}",
            "this test's speed depends on the process; record more sessions "
            "(--tprof-save) so its floor learns that",
        ),
    )


def awaiting_serial_confirmation(verdict: TestVerdict, workers: int) -> TestVerdict:
    """Under xdist, a timing regression waits for the workers to finish: other workers'
    load makes one process slower than another, so it is confirmed in a fresh process run
    alone afterwards, and gates no worse than a serial run.  Meanwhile it is inconclusive.
    A verdict short of its floor keeps its word while it waits to be measured alone."""
    if not needs_fresh_process(verdict):
        return verdict.with_notes(
            f"short of its floor beside {workers - 1} other worker(s): measured alone once the "
            "workers finish"
        )
    return replace(
        verdict,
        verdict=worst([INCONCLUSIVE, UNCHANGED if verdict.work is None else verdict.work.verdict]),
        reason=f"slower beside {workers - 1} other worker(s); confirmed alone once the workers "
        f"finish: {verdict.reason}",
    )


def after_serial_confirmation(
    pending: TestVerdict,
    child: TestVerdict | None,
    why: str = "",
    other_settings: Sequence[str] = (),
    *,
    alpha: float = DEFAULT_ALPHA,
) -> TestVerdict:
    """The verdict of a regression found under xdist, once a fresh process ran it alone."""
    return after_fresh_process(pending, child, why, other_settings, alpha=alpha).with_notes(
        "found beside other xdist workers; re-run alone once they finished"
    )


def under_xdist(verdict: TestVerdict, workers: int) -> TestVerdict:
    """What the header promises under xdist: timing verdicts say other workers ran beside."""
    if workers <= 1:
        return verdict
    return verdict.with_notes(
        f"measured under xdist beside {workers - 1} other worker(s): "
        "timings are noisier than in a serial run"
    )
