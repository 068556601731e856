"""The runner's third room: a test's rounds saved as a new session of its baseline
(docs/design.md §7): under the file's lock, joining its window, with what the save did and
how the session differs from the window it joins said."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from tprof_engine import judging, window
from tprof_engine.decide import judge
from tprof_engine.decide.timing.busy import busy_of
from tprof_engine.found import Found
from tprof_engine.model.costs import Stopwatch
from tprof_engine.model.errors import BaselineError
from tprof_engine.model.results import ProfiledTest
from tprof_engine.store import baselines, paths, schema, trace_files


def save(runner: Any, test: ProfiledTest) -> ProfiledTest:
    """Record the test's table as a new session of its baseline (atomic write)."""
    if test.table is None:
        return test
    watch = Stopwatch()
    with watch.stage("save"):
        saved = _save(runner, test)
    return replace(saved, costs=saved.costs.plus(watch.costs()))


def _save(runner: Any, test: ProfiledTest) -> ProfiledTest:
    assert test.table is not None
    cfg, path = runner.config, runner.baseline_path(test.nodeid)
    if test.tracer is not None:  # its slowed timings would teach every later run's floors
        raise BaselineError(
            f"{path}: not recorded: its timings are the tracer's ({test.tracer}); "
            "record baselines without coverage (drop --cov or add --no-cov; "
            "not under `coverage run`)"
        )
    with paths.locked(path):  # read under the lock: a concurrent save's session is kept
        what = _joined(runner, test, path)
    if cfg.save_trace and test.trace and Path(test.trace).is_file():
        trace_files.keep_beside_baseline(Path(test.trace), runner.baseline_trace_path(test.nodeid))
        what += " (with its trace)"
    disturbed = busy_of(test.table, cfg.rule)
    test = replace(test, save_note=f"{what}: {path}")
    if disturbed is not None and disturbed.disturbed:
        note = f"recorded on a busy machine: {disturbed.describe()}; judging leaves those out"
        test = replace(test, verdict=test.verdict.with_notes(note))
    return test


def _joined(runner: Any, test: ProfiledTest, path: Path) -> str:
    """Write the test's session into its baseline's window (the lock held); what it did."""
    assert test.table is not None
    cfg = runner.config
    session = schema.Session(
        table=test.table,
        recorded_at=baselines.now_iso(),
        warmup_used=test.warmup_used,
        soft=dict(runner.fingerprint.soft),
        work=test.work,
        settings=dict(test.settings),
    )
    protocol = {k: v for k, v in test.protocol.items() if k != "warmup_used"}
    existing, error = runner.load(test.nodeid)
    unlike = _unlike_window(runner, existing, test)
    updated, what = window.with_session(
        None if cfg.reset else existing,
        nodeid=test.nodeid,
        fingerprint=runner.fingerprint,
        protocol=protocol,
        session=session,
        window=cfg.window,
    )
    what = baselines.save_note(
        what,
        existing,
        len(updated.sessions),
        damaged=error is not None,
        reset=cfg.reset,
        unlike=unlike,
        nodeid=test.nodeid,
    )
    holders = judge.census_holders(test.table.meta.get("parents", {}), test.work)
    baselines.save_baseline(path, replace(updated, holders=holders))
    return what


def _unlike_window(runner: Any, existing: schema.Baseline | None, test: ProfiledTest) -> str | None:
    """How the session about to be saved differs in timing from the window it joins; not
    asked of a window of fewer sessions than advised, whose floors are still narrow."""
    if test.table is None or existing is None:
        return None
    if len(existing.sessions) < baselines.SESSIONS_ADVISED:
        return None
    current = judging.current_of(runner, test, hosts=(runner.fingerprint.soft.get("host"),))
    found = Found(baseline=existing, error=None)
    verdict = judging.verdict_of(runner, test.nodeid, found, current, runner.config.rule)
    return judge.unlike_window(verdict)
