"""The confirmation policy as data: what a verdict needs before it stands, and how each
confirmation's outcome merges into it.

:func:`next_step` is the one place the policy is decided; the runner (a second capture in the
same process) and the pytest glue (a fresh process, now or once xdist's workers finish) carry
its answer out and merge what comes back with the functions below.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Final, Literal

from tprof_engine.model.verdicts import (
    INCONCLUSIVE,
    REGRESSED,
    UNCHANGED,
    TestVerdict,
    worst,
)

# What to do with a verdict before it stands: the confirmation policy's answers.
Step = Literal["done", "remeasure", "fresh-process", "after-workers"]
DONE: Final = "done"
REMEASURE: Final = "remeasure"  # capture the rounds again in this process, judge again
FRESH_PROCESS: Final = "fresh-process"  # run the test alone in a new pytest process
AFTER_WORKERS: Final = "after-workers"  # under xdist: that, once every worker has finished


def next_step(
    verdict: TestVerdict,
    *,
    confirm: bool = True,
    remeasured: bool = False,
    in_fresh_process: bool = False,
    workers: int = 1,
) -> Step:
    """The confirmation policy: what a verdict needs before it stands.

    A timing regression is measured again in the same process (unless the work already fails
    the test); one that survives that is run in a fresh process, which confirms nothing
    further itself; under xdist that process runs once the workers have finished, so other
    workers' load can't confirm it.  ``confirm=False`` (``--no-tprof-confirm``) takes every
    verdict as it is.  The runner and the plugin carry the steps out; the merges are
    :func:`after_remeasurement`, :func:`after_fresh_process`, :func:`awaiting_serial_confirmation`
    and :func:`after_serial_confirmation`.
    """
    if not confirm:
        return DONE
    if not remeasured:
        return REMEASURE if needs_remeasurement(verdict) else DONE
    if in_fresh_process or not needs_fresh_process(verdict):
        return DONE
    return AFTER_WORKERS if workers > 1 else FRESH_PROCESS


def needs_remeasurement(verdict: TestVerdict) -> bool:
    """A timing regression is measured again before it fails a test, unless the work the
    test does already fails it: work doesn't drift, so it needs no second look."""
    return verdict.timing_regressed and not verdict.exact_regressed


def after_remeasurement(again: TestVerdict) -> TestVerdict:
    """The verdict of the second measurement, saying whether it repeated the first.

    A second measurement on a busy machine judges no timing: it confirms nothing, and the
    test reads inconclusive (machine busy), as its verdict says."""
    if again.timing_regressed:
        return again.with_notes("confirmed by a second measurement")
    if again.busy is not None:
        return again.with_notes(
            "a first measurement looked slower; the machine was busy when it was measured again"
        )
    return again.with_notes("a first measurement looked slower; the re-measurement did not")


def needs_fresh_process(verdict: TestVerdict) -> bool:
    """A timing regression (and no structural or work one) is confirmed in a fresh process."""
    return (
        verdict.regressed
        and verdict.timing_regressed
        and not verdict.structure_regressed
        and not verdict.exact_regressed
    )


def after_fresh_process(
    verdict: TestVerdict, child: TestVerdict | None, why: str = ""
) -> TestVerdict:
    """Merge the fresh process's verdict (None: it gave none, and ``why`` says why).

    The regression stands only if the fresh process repeats it; a process that gave no
    verdict leaves it standing, with a note.  One that found the machine busy judged no
    timing: the regression is confirmed by nothing, and the test is inconclusive.
    """
    if child is not None and child.verdict == REGRESSED:
        return verdict.with_notes("confirmed in a fresh process")
    if child is None:
        return verdict.with_notes(f"not re-run in a fresh process: {why}")
    work_word = UNCHANGED if verdict.work is None else verdict.work.verdict
    busy_there = child.busy
    if busy_there is not None:
        return replace(
            verdict,
            verdict=worst([INCONCLUSIVE, work_word]),
            reason=f"slower in this process; not confirmed: the fresh process found the "
            f"{busy_there.text} | {verdict.reason}",
        ).with_cause(busy_there)
    return replace(
        verdict,
        verdict=worst([INCONCLUSIVE, work_word]),
        reason=f"slower in this process, not in a fresh one ({child.verdict} there): "
        f"{verdict.reason}",
        notes=(
            *verdict.notes,
            "this test's speed depends on the process; record more sessions "
            "(--tprof-save) so its floor learns that",
        ),
    )


def awaiting_serial_confirmation(verdict: TestVerdict, workers: int) -> TestVerdict:
    """Under xdist, a timing regression waits for the workers to finish: other workers'
    load makes one process slower than another, so it is confirmed in a fresh process run
    alone afterwards, and gates no worse than a serial run.  Meanwhile it is inconclusive."""
    return replace(
        verdict,
        verdict=worst([INCONCLUSIVE, UNCHANGED if verdict.work is None else verdict.work.verdict]),
        reason=f"slower beside {workers - 1} other worker(s); confirmed alone once the workers "
        f"finish: {verdict.reason}",
    )


def after_serial_confirmation(
    pending: TestVerdict, child: TestVerdict | None, why: str = ""
) -> TestVerdict:
    """The verdict of a regression found under xdist, once a fresh process ran it alone."""
    return after_fresh_process(pending, child, why).with_notes(
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
