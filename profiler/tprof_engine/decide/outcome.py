"""A test's outcome: what its verdict does.  :func:`outcome_of` turns everything a test
produced (its verdict, with every confirmation merged in by :mod:`.policy`) into whether the
pytest test fails, the causes that decided it, typed, and what to do next; the plugin, the
xdist controller and the CLI only carry that out.

The words no judgement gives come from here too: no baseline (an error when one is
required), a stored baseline that can't be read, one only for another environment, a
recording, a test a recording run didn't record, a test that couldn't be profiled.
"""

from __future__ import annotations

import os
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
    "found_none",
    "next_steps",
    "no_baseline",
    "not_profiled",
    "not_saved",
    "only_elsewhere",
    "outcome_of",
    "recorded",
    "typed_nodeid",
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
    test: ProfiledTest,
    *,
    recording: bool = False,
    record_args: Sequence[str] = (),
    typed_id: str | None = None,
) -> Outcome:
    """The outcome of a profiled test.  A failing word (regressed, error) fails the pytest
    test, except in a recording run (``--tprof-save``), which judges nothing;
    ``record_args``: what the command that records it must repeat; ``typed_id``: its node id
    as typed in the folder the run started in (:func:`typed_nodeid`)."""
    v = test.verdict
    return Outcome(
        word=v.verdict,
        fails=v.failing and not recording,
        causes=v.all_causes(),
        next_steps=tuple(next_steps(test, record_args=record_args, typed_id=typed_id)),
    )


def typed_nodeid(nodeid: str, rootdir: Path, invocation_dir: Path) -> str:
    """A node id (relative to pytest's rootdir) as it is typed in ``invocation_dir``, where a
    pasted command runs: ``tests/test_m.py::test_a`` is ``test_m.py::test_a`` in tests/."""
    path, sep, rest = nodeid.partition("::")
    if not path or rootdir == invocation_dir:
        return nodeid
    return Path(os.path.relpath(rootdir / path, invocation_dir)).as_posix() + sep + rest


def next_steps(
    test: ProfiledTest, *, record_args: Sequence[str] = (), typed_id: str | None = None
) -> list[str]:
    """What to do about a regression: accept it if it was meant, else find where it is; each a
    command that runs as it is pasted where the run started (``typed_id``: the node id
    there)."""
    v = test.verdict
    if v.verdict != REGRESSED:
        return []
    nodeid = f'"{typed_id or test.nodeid}"'
    collect = [a for a in record_args if a.startswith("--tprof-collect=")]
    given = "".join(f" {shlex.quote(a)}" for a in record_args if a not in collect)
    stack = ",".join(["stack", *(a.partition("=")[2] for a in collect)])
    if test.paired_base is not None:  # tprof ab: nothing stored to accept
        ab = f"tprof ab {shlex.quote(test.paired_base)} --{given}"
        out = [
            "meant it? nothing is stored: the next change is measured against a base that has "
            "it (in CI, accept it on the pull request: docs/ab.md in pytest-tprof)",
            f"again, alone: {ab}{_collect(collect)} {nodeid}",
        ]
        where = f"{ab} --tprof-collect={stack} {nodeid}"
    else:
        out = [
            "meant it? record it as the new baseline: "
            f"pytest --tprof-save --tprof-reset{given}{_collect(collect)} {nodeid}"
        ]
        where = f"pytest --tprof{given} --tprof-collect={stack} {nodeid}"
    # Source lines come with the census's rows: offered when a census ran without them and
    # the failure names rows (work that moved, flagged ops), not time outside any op alone.
    named = v.work_regressed or bool(v.flagged_ops())
    if named and v.work is not None and not any(r.source for r in v.work.rows):
        out.append(f"which line of your code: {where}")
    return out + _trace_steps(test)


def _collect(collect: Sequence[str]) -> str:
    return "".join(f" {shlex.quote(a)}" for a in collect)


def _trace_steps(test: ProfiledTest) -> list[str]:
    """Which traces to open: the run's (or its side-by-side one), and tprof ab's base side's;
    against a stored baseline, how to keep its trace for a side-by-side one."""
    v = test.verdict
    trace = test.side_by_side or test.trace
    out = []
    if trace and test.paired_trace:
        out.append(
            f"see the ops in time: open {_shown_path(trace)} (this tree's) and "
            f"{_shown_path(test.paired_trace)} (the base's) in {PERFETTO}"
        )
    elif trace:
        out.append(f"see the ops in time: open {_shown_path(trace)} in {PERFETTO}")
    stored = test.paired_base is None
    if (
        stored
        and test.trace
        and not test.side_by_side
        and (v.timing_regressed or v.structure_regressed)
    ):
        out.append("see it beside the baseline's rounds: record baselines with --tprof-save-trace")
    return out


PERFETTO = "https://ui.perfetto.dev"


def _shown_path(path: str) -> str:
    """A path as the user can open it: relative to the folder the run started in when it is
    under it (a CI runner's absolute path means nothing on the user's machine)."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd().resolve()))
    except (ValueError, OSError):
        return path


# ---------------------------------------------------------------- words no judgement gives

NO_BASELINE_REASON = "no baseline recorded for this test; record one with --tprof-save"
# What to do when the folder a run reads its baselines from holds none for its tests.
BASELINE_FOLDER_FIX = (
    "restore that folder (from git, or the CI cache or artifact that keeps it), check "
    "--tprof-baseline-dir, or record baselines with pytest --tprof-save"
)


def no_baseline(*, required: bool, folder: Path | None = None) -> TestVerdict:
    """No baseline for the test: none yet, or under ``--tprof-require-baseline`` an error
    naming the ``folder`` it was looked for in and what to do."""
    if required:
        where = "" if folder is None else f" in {folder}"
        return TestVerdict(
            verdict=ERROR,
            reason=f"no baseline for this test{where} (--tprof-require-baseline): "
            + BASELINE_FOLDER_FIX,
        )
    return TestVerdict(verdict=NO_BASELINE, reason=NO_BASELINE_REASON)


def found_none(verdicts: Sequence[TestVerdict], folder: Path, *, required: bool) -> str | None:
    """The run's note when a compare run found no baseline for any profiled test (every one
    read no-baseline, or errors for it under ``--tprof-require-baseline``): a wrong baseline
    folder or a missed cache, not a run of new tests.  None when one test found one."""
    if not verdicts or not all(_without_baseline(v) for v in verdicts):
        return None
    state = "" if folder.is_dir() else ", which does not exist"
    word = "error" if required else "warning"
    return f"{word}: no profiled test found a baseline in {folder}{state}; {BASELINE_FOLDER_FIX}"


def _without_baseline(verdict: TestVerdict) -> bool:
    return verdict.verdict == NO_BASELINE or (
        verdict.verdict == ERROR and verdict.reason.startswith("no baseline for this test")
    )


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


def judged_elsewhere(environment: str) -> str:
    """The note on a test judged against another torch's or Python's baseline."""
    return (
        f"judged against the baseline recorded in {environment}: calls and work compared, "
        "timings not (record this environment's with --tprof-save)"
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
