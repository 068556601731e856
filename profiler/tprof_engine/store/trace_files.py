"""The folder of Chrome traces (``.tprof/traces``): which runs leave a trace, its name, and how
long it stays.

- Every profiled test leaves its trace (a save, a compare, a first run, an inconclusive or
  busy one), written off the test's path (``store.trace_writer``); ``--no-tprof-traces``
  keeps only those a report needs: the tests whose ops moved (regressed, changed, improved)
  and a recording's kept beside its baseline.
- Each trace is named by its test and the run (``<test>.<run>.pt.trace.json.gz``), so the
  next run of the test doesn't overwrite it.  A test keeps the traces of its last
  ``--tprof-trace-keep`` runs (:func:`prune_runs`); a failing run prunes nothing, so a
  failure's trace, and its side-by-side one, stay until the test passes again.
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
from collections.abc import Iterable
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
_STAMP = r"\d{8}T\d{6}\.\d{6}"  # a run's name (run_stamp)
_TAIL = rf"(?P<beside>{re.escape(BESIDE)})?{re.escape(SUFFIX)}"
_RUN_PART = re.compile(rf"(\.{_STAMP})?{_TAIL}")


# The verdicts whose ops moved: the tests whose trace a report points to.
TRACED: Final = frozenset({REGRESSED, CHANGED, IMPROVED})


def wanted(verdict: str, *, every: bool, save_trace: bool) -> bool:
    """Whether a test with this verdict leaves its trace: every test does, unless the run
    asked for fewer (``every`` False), and then one whose ops moved, or a recording that
    keeps its trace beside the baseline."""
    if every:
        return True
    if verdict == SAVED:
        return save_trace
    return verdict in TRACED


def with_written(test: ProfiledTest, written: Path | None, problem: str) -> ProfiledTest:
    """The test naming the trace written for it, or saying in a note why none was."""
    verdict = test.verdict.with_notes(problem) if problem else test.verdict
    trace = None if written is None else str(written)
    return replace(test, trace=trace, trace_problem=problem, verdict=verdict)


def prunes(verdict: str) -> bool:
    """Whether a run with this verdict prunes its test's older traces: a failing one keeps
    them all, so the failure's traces stay until the test passes."""
    return verdict not in FAILING


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


_RUN_TRACE = re.compile(rf"(?P<stem>.+)\.(?P<run>{_STAMP}){_TAIL}")


def one_per_test(found: Iterable[Path]) -> list[Path]:
    """The files of a folder that stand for its tests, one each: a run's trace folder holds
    each test's newest run (not its older runs, nor a side-by-side trace, which holds two
    runs), and a baseline folder its baselines (not the traces ``--tprof-save-trace`` keeps
    beside them)."""
    found = sorted(found)
    names = {p.with_suffix("") for p in found if p.suffix == ".json"}  # baselines, by stem
    newest: dict[tuple[Path, str], Path] = {}
    out = []
    for p in found:
        run = _RUN_TRACE.fullmatch(p.name)
        if run is None:
            if not (p.name.endswith(SUFFIX) and p.with_name(p.name[: -len(SUFFIX)]) in names):
                out.append(p)
            continue
        if run["beside"] is None:  # in name order: a later run replaces an earlier one
            newest[(p.parent, run["stem"])] = p
    return sorted([*out, *newest.values()])


def _run_of(path: Path, stem: str) -> str:
    """The run a trace of the test belongs to: its stamp ("" for a trace named without one)."""
    name = path.parent.name + SUFFIX if _RANK_NAME.fullmatch(path.name) else path.name
    found = _RUN_PART.fullmatch(name[len(stem) :])
    return (found.group(1) or "") if found else ""


def prune_runs(folder: Path, nodeid: str, runs: int) -> list[Path]:
    """Remove the test's traces but those of its newest ``runs`` runs (a run's side-by-side
    and rank traces go with it).  Returns what went."""
    stem = paths.slug(nodeid)
    found = traces_of(folder, nodeid)
    newest = sorted({_run_of(p, stem) for p in found}, reverse=True)[: max(runs, 0)]
    return _remove(p for p in found if _run_of(p, stem) not in newest)


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
