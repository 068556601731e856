"""A test's outcome: what its verdict does.  :func:`outcome_of` turns everything a test
produced (its verdict, with every confirmation merged in by :mod:`.policy`) into whether the
pytest test fails, the causes that decided it, typed, and what to do next; the plugin, the
xdist controller and the CLI only carry that out.

The words no judgement gives come from here too: no baseline (an error when one is
required), a stored baseline that can't be read, one only for another environment, a
recording, a test a recording run didn't record, a test that couldn't be profiled.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from tprof_engine.model.results import ProfiledTest
from tprof_engine.model.verdicts import (
    ERROR,
    INCOMPARABLE,
    INCONCLUSIVE,
    NO_BASELINE,
    NOT_SAVED,
    REGRESSED,
    SAVED,
    Cause,
    TestVerdict,
    TestWord,
)

__all__ = [
    "Outcome",
    "base_of_pair",
    "next_steps",
    "no_baseline",
    "not_profiled",
    "not_saved",
    "only_elsewhere",
    "outcome_of",
    "recorded",
    "unreadable",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class Outcome:
    """What a test's verdict does: its word, whether the pytest test fails on it, the causes
    that decided it (typed: timing, calls, work, compile, memory, busy, communication,
    settings) and the next steps its failure message ends with."""

    word: TestWord
    fails: bool
    causes: tuple[Cause, ...] = ()
    next_steps: tuple[str, ...] = ()


def outcome_of(
    test: ProfiledTest, *, recording: bool = False, record_args: Sequence[str] = ()
) -> Outcome:
    """The outcome of a profiled test.  A failing word (regressed, error) fails the pytest
    test, except in a recording run (``--tprof-save``), which judges nothing;
    ``record_args``: what the command that records it must repeat."""
    v = test.verdict
    return Outcome(
        word=v.verdict,
        fails=v.failing and not recording,
        causes=v.all_causes(),
        next_steps=tuple(next_steps(test, record_args=record_args)),
    )


def next_steps(test: ProfiledTest, *, record_args: Sequence[str] = ()) -> list[str]:
    """What to do about a regression: accept it if it was meant, else find where it is."""
    v = test.verdict
    if v.verdict != REGRESSED:
        return []
    given = "".join(f" {shlex.quote(a)}" for a in record_args)
    out = [
        "meant it? record it as the new baseline: "
        f'pytest --tprof-save --tprof-reset{given} "{test.nodeid}"'
    ]
    if test.paired_base is not None:  # tprof ab: nothing stored to accept
        out = [
            "meant it? nothing is stored: the next change is measured against a base that has "
            "it (in CI, accept it on the pull request: docs/ab.md in pytest-tprof)",
            f'again, alone: tprof ab {shlex.quote(test.paired_base)} -- "{test.nodeid}"',
        ]
    # Source lines come with the census's rows: offered when a census ran without them and
    # the failure names rows (work that moved, flagged ops), not time outside any op alone.
    named = v.work_regressed or bool(v.flagged_ops())
    if named and v.work is not None and not any(r.source for r in v.work.rows):
        out.append("which line of your code: re-run with --tprof --tprof-collect=stack")
    trace = test.side_by_side or test.trace
    if trace:
        out.append(f"see the ops in time: open {_shown_path(trace)} in https://ui.perfetto.dev")
    if test.trace and not test.side_by_side and (v.timing_regressed or v.structure_regressed):
        out.append("see it beside the baseline's rounds: record baselines with --tprof-save-trace")
    return out


def _shown_path(path: str) -> str:
    """A path as the user can open it: relative to the folder the run started in when it is
    under it (a CI runner's absolute path means nothing on the user's machine)."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd().resolve()))
    except (ValueError, OSError):
        return path


# ---------------------------------------------------------------- words no judgement gives

NO_BASELINE_REASON = "no baseline recorded for this test; record one with --tprof-save"


def no_baseline(*, required: bool) -> TestVerdict:
    """No baseline for the test: none yet, or an error under ``--tprof-require-baseline``."""
    if required:
        return TestVerdict(verdict=ERROR, reason=f"{NO_BASELINE_REASON} (--tprof-require-baseline)")
    return TestVerdict(verdict=NO_BASELINE, reason=NO_BASELINE_REASON)


def unreadable(error: str) -> TestVerdict:
    """A stored baseline that couldn't be read: the test errors, naming the file and why."""
    return TestVerdict(verdict=ERROR, reason=error)


def only_elsewhere(environment: str, differences: Sequence[str]) -> TestVerdict:
    """Only a baseline for another environment (its folder name; what differs)."""
    return TestVerdict(
        verdict=INCOMPARABLE,
        reason=f"only a baseline for another environment ({environment}): "
        + ", ".join(differences or ["environment folder differs"]),
        differences=tuple(differences),
    )


def recorded(notes: Sequence[str] = ()) -> TestVerdict:
    """A recording run's test: saved once the run ends (the save itself comes then)."""
    return TestVerdict(verdict=SAVED, reason="recorded for the baseline", notes=tuple(notes))


def base_of_pair() -> TestVerdict:
    """tprof ab's base side: its rounds go to the head, which judges them."""
    return TestVerdict(verdict=SAVED, reason="measured as the base of tprof ab")


def not_saved(test: ProfiledTest, why: str) -> ProfiledTest:
    """A test a ``--tprof-save`` run didn't record, saying why."""
    verdict = replace(test.verdict, verdict=NOT_SAVED, reason=why)
    return replace(test, verdict=verdict, save_note="")


def not_profiled(nodeid: str, why: str, *, recording: bool) -> ProfiledTest:
    """A test tprof meant to profile and couldn't (pytest-benchmark skipped its rounds): not
    saved in a recording run, else inconclusive; its line says why."""
    word: TestWord = NOT_SAVED if recording else INCONCLUSIVE
    return ProfiledTest(
        nodeid=nodeid, verdict=TestVerdict(verdict=word, reason=why), benchmark=True
    )
