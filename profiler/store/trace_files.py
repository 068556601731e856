"""The folder of Chrome traces (``.tprof/traces``): which runs leave a trace, its name, and how
long it stays.

- A test's trace is written when its ops moved (it regressed, changed or improved), when its
  recording keeps its trace beside the baseline, or for every test when the run asks for all
  of them. A test that had nothing to compare against (no baseline, another environment's, a
  damaged one) has nothing to show in a trace that is worth its export (0.7–0.9 s for a
  160k-event test): the first run of a suite writes none.
- Each trace is named by its test and the run (``<test>.<run>.pt.trace.json.gz``), so the
  next run of the test doesn't overwrite it: a failure's trace, and its side-by-side one,
  stay until the test next passes, which removes the test's older traces.
- A distributed test's run keeps one trace per rank in a folder of its own
  (``<test>.<run>/rank<N>.pt.trace.json.gz``), as Holistic Trace Analysis loads them; the
  folder goes with its traces.
- The folder is bounded: past :data:`FOLDER_LIMIT_BYTES` of traces, the oldest go first.
  Only files named as traces are ever removed.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import time
from collections.abc import Callable, Iterable
from dataclasses import replace
from pathlib import Path
from typing import Final

from tprof_engine.model.errors import BaselineError, TprofError
from tprof_engine.model.results import ProfiledTest
from tprof_engine.model.verdicts import CHANGED, FAILING, IMPROVED, REGRESSED, SAVED
from tprof_engine.store import paths
from tprof_engine.store.files import atomic_path

SUFFIX = ".pt.trace.json.gz"
BESIDE = ".vs-baseline"  # the side-by-side trace: <test>.<run>.vs-baseline.pt.trace.json.gz
FOLDER_LIMIT_BYTES = 512 * 1024 * 1024
_RANK_GLOB = f"rank*{SUFFIX}"
_RANK_NAME = re.compile(r"rank\d+" + re.escape(SUFFIX))
_RUN_PART = re.compile(r"(\.\d{8}T\d{6}\.\d{6})?(\.vs-baseline)?\.pt\.trace\.json\.gz")


# The verdicts whose ops moved: the tests whose trace a report points to.
TRACED: Final = frozenset({REGRESSED, CHANGED, IMPROVED})


def wanted(verdict: str, *, every: bool, save_trace: bool) -> bool:
    """Whether a test with this verdict leaves its trace: one whose ops moved does; one with
    nothing to show (unchanged, inconclusive, or not compared at all) doesn't, unless every
    trace is asked for."""
    if every:
        return True
    if verdict == SAVED:
        return save_trace
    return verdict in TRACED


def with_trace(
    test: ProfiledTest,
    write: Callable[[Path], tuple[Path | None, str]],
    path: Path,
    *,
    every: bool,
    save_trace: bool,
) -> ProfiledTest:
    """The test with its trace written to ``path`` when its verdict wants one (a trace that
    can't be written is a note); a test that passed has its older traces removed."""
    if wanted(test.verdict.verdict, every=every, save_trace=save_trace):
        written, problem = write(path)
        verdict = test.verdict.with_notes(problem) if problem else test.verdict
        test = replace(
            test, trace=None if written is None else str(written), trace_problem=problem,
            verdict=verdict,
        )  # fmt: skip
    if test.verdict.verdict not in FAILING:
        forget_earlier(path.parent, test.nodeid, keep=[Path(test.trace or path)])
    return test


def with_side_by_side(test: ProfiledTest, baseline_trace: Path) -> ProfiledTest:
    """The test with one trace of the baseline's run and its own, regressed ops marked, when
    both traces are there."""
    from tprof_engine.store.traces import side_by_side

    if test.trace is None or not baseline_trace.is_file():
        return test
    flagged = {
        o.op: f"{o.verdict} {o.delta_pct:+.0f}% ({o.family})" for o in test.verdict.flagged_ops()
    }
    out = beside_path(Path(test.trace))
    try:
        side_by_side(baseline_trace, test.trace, out, flagged=flagged, title=test.nodeid)
    except TprofError as exc:
        return replace(test, verdict=test.verdict.with_notes(str(exc)))
    return replace(test, side_by_side=str(out))


def keep_beside_baseline(trace: Path, beside: Path) -> None:
    """A recording's trace copied next to its baseline (atomic)."""
    try:
        with atomic_path(beside, mode_like_existing=False) as tmp:
            shutil.copyfile(trace, tmp)
    except OSError as exc:
        raise BaselineError(f"{beside}: can't keep the baseline's trace ({exc.strerror})") from None


def run_stamp() -> str:
    """A name for this run, in time order: ``20261126T101502.123456``."""
    now = time.time()
    return time.strftime("%Y%m%dT%H%M%S", time.localtime(now)) + f".{int(now % 1 * 1e6):06d}"


def trace_path(folder: Path, nodeid: str, stamp: str) -> Path:
    return folder / f"{paths.slug(nodeid)}.{stamp}{SUFFIX}"


def beside_path(trace: Path) -> Path:
    """The side-by-side trace of a run's trace; a distributed run's (of rank 0's trace) goes
    beside its rank folder, which holds only the ranks' traces for Holistic Trace Analysis."""
    if _RANK_NAME.fullmatch(trace.name):
        return trace.parent.with_name(trace.parent.name + BESIDE + SUFFIX)
    return trace.with_name(trace.name[: -len(SUFFIX)] + BESIDE + SUFFIX)


def rank_folder(trace: Path) -> Path:
    """Where a distributed test's run keeps its ranks' traces: the run's trace name without
    its suffix (``<test>.<run>/``)."""
    return trace.with_name(trace.name[: -len(SUFFIX)])


def traces_of(folder: Path, nodeid: str) -> list[Path]:
    """The test's traces in ``folder``, its side-by-side ones and its runs' rank traces too,
    oldest run first (and the single file per test that runs without a run's name wrote)."""
    stem = paths.slug(nodeid)
    found = sorted(folder.glob(f"{stem}*{SUFFIX}"))
    runs = [p for p in found if _RUN_PART.fullmatch(p.name[len(stem) :])]
    ranks = sorted(folder.glob(f"{stem}.*/{_RANK_GLOB}"))
    return runs + [p for p in ranks if _RUN_PART.fullmatch(p.parent.name[len(stem) :] + SUFFIX)]


def forget_earlier(folder: Path, nodeid: str, keep: Iterable[Path] = ()) -> list[Path]:
    """Remove the test's traces but ``keep`` (and the other ranks of a kept rank trace): it
    passed.  Returns what went."""
    kept = {Path(p).resolve() for p in keep}
    kept_runs = {p.parent for p in kept if p.parent != folder.resolve()}
    return _remove(
        p
        for p in traces_of(folder, nodeid)
        if p.resolve() not in kept and p.resolve().parent not in kept_runs
    )


def bounded(
    folder: Path, limit_bytes: int = FOLDER_LIMIT_BYTES, keep: Iterable[Path] = ()
) -> list[Path]:
    """Remove the oldest traces but ``keep`` (the ones a run's reports name) until those left
    hold at most ``limit_bytes``.  Returns what went."""
    kept = {Path(p).resolve() for p in keep}
    sized = []
    for p in [*folder.glob(f"*{SUFFIX}"), *folder.glob(f"*/{_RANK_GLOB}")]:
        try:
            st = p.stat()
        except OSError:
            continue
        sized.append((st.st_mtime, p.name, p, st.st_size))
    total = sum(size for *_, size in sized)
    going = []
    for _, _, p, size in sorted(sized):
        if total <= limit_bytes:
            break
        if p.resolve() not in kept:
            going.append(p)
            total -= size
    return _remove(going)


def _remove(found: Iterable[Path]) -> list[Path]:
    gone = []
    for p in found:
        try:
            p.unlink(missing_ok=True)
        except OSError:
            continue  # read-only or in use: left for the next run
        gone.append(p)
        if _RANK_NAME.fullmatch(p.name):
            with contextlib.suppress(OSError):
                p.parent.rmdir()  # a run's rank folder, once its last trace went
    return gone
