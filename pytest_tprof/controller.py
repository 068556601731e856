"""The controller's part of a pytest-tprof run: the process that started it and hears every
test's result (pytest-xdist's controller, or the one process of a run without xdist).

It keeps what the whole run knows: every test's :class:`ProfiledTest` (from this process's
profiling, :class:`pytest_tprof.plugin.TprofPlugin`, or from the workers through
:mod:`pytest_tprof.xdist`), the tests collected; and at the session's end it carries out
what only it may: the serial confirmation of what the workers found, the save (the only
writer of baselines), the stale baselines, the trace folder's bound, the reports and the
terminal summary.  The profiling role runs in every process that runs tests.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import pytest

from pytest_tprof import fresh, reports, terminal
from pytest_tprof.options import Settings
from tprof_engine.api import (
    VERDICT_PROPERTY,
    Outcome,
    bounded,
    failure_text,
    found_none,
    iter_baselines,
    not_saved,
    outcome_of,
    paired_rule,
    read_nodeid,
    run_summary,
    slug,
    typed_nodeid,
)
from tprof_engine.confirm import Plan, confirmed, serial_words
from tprof_engine.model.errors import BaselineError
from tprof_engine.model.results import ProfiledTest
from tprof_engine.runner import Runner

PROPERTY = VERDICT_PROPERTY
_OUTCOME = {"failed": "failed", "skipped": "was skipped"}


@dataclass
class RunState:
    """What one pytest-tprof process holds for its run, shared by its two roles: the settings
    (a side of tprof ab narrows its reports), each test's result, the summary's messages,
    and what the reports say beside the tests (tprof ab's two sides)."""

    settings: Settings
    results: dict[str, ProfiledTest] = field(default_factory=dict)
    messages: list[str] = field(default_factory=list)
    report_extra: dict[str, Any] = field(default_factory=dict)


class SharesState:
    """A role of the run, reading the run's state through ``self.state``."""

    state: RunState

    @property
    def settings(self) -> Settings:
        return self.state.settings

    @settings.setter
    def settings(self, value: Settings) -> None:
        self.state.settings = value

    @property
    def results(self) -> dict[str, ProfiledTest]:
        return self.state.results

    @property
    def messages(self) -> list[str]:
        return self.state.messages

    def outcome(self, result: ProfiledTest) -> Outcome:
        """What the test's verdict does in this run (:mod:`tprof_engine.decide.outcome`)."""
        s = self.settings
        where = s.invocation_dir or s.rootdir
        return outcome_of(
            result,
            recording=s.run.save,
            record_args=s.record_args,
            typed_id=typed_nodeid(result.nodeid, s.rootdir, where),
        )


class Runners(Protocol):
    """Where the controller finds this process's runner (the profiling role makes it once a
    test is profiled; a save or a report may need one anyway)."""

    @property
    def runner(self) -> Runner: ...

    @property
    def runner_made(self) -> bool: ...

    @property
    def fresh_steps(self) -> fresh.Steps: ...


class Controller(SharesState):
    """The run's results, its session end and its summary (registered only where no xdist
    worker runs: the controller, or the one process)."""

    def __init__(self, config: pytest.Config, state: RunState, runners: Runners) -> None:
        self.config, self.state, self._runners = config, state, runners
        self.known: set[str] = set()
        self.collected_files: set[str] = set()
        self.save_failed = False

    @property
    def runner(self) -> Runner:
        return self._runners.runner

    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        for item in items:
            self.known.add(item.nodeid)
            self.collected_files.add(item.nodeid.split("::", 1)[0])

    def pytest_deselected(self, items: list[pytest.Item]) -> None:
        # Deselected (-k, -m, --deselect, --sw) tests still exist: their baselines aren't stale.
        self.known.update(item.nodeid for item in items)

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        """Once the profiling (here or in the workers) is done: the serial confirmations, the
        save or the stale baselines, the trace folder's bound and the reports."""
        interrupted = session.exitstatus == pytest.ExitCode.INTERRUPTED
        if not interrupted and self._confirm_serially():
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
        if self.settings.run.save and not interrupted:
            self._save()
            if self.save_failed:
                session.exitstatus = pytest.ExitCode.TESTS_FAILED
        else:
            if self.settings.run.save:
                self._not_saved("the run was interrupted before saving")
            self._stale()
            self._none_found()
        self._bound_traces()
        # A report asked for and not written fails the run as a failed save does: CI that
        # publishes it must not go green on a stale or missing file.  An earlier status stays.
        if not self._write_reports() and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def _bound_traces(self) -> None:
        """The trace folder held to its bound, oldest first; this run's traces stay."""
        folder = self.settings.run.trace_dir
        if folder is None or not Path(folder).is_dir():
            return
        named = [p for r in self.results.values() for p in (r.trace, r.side_by_side) if p]
        bounded(Path(folder), keep=[Path(p) for p in named])

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        results = list(self.results.values())
        paired = "ab" in self.state.report_extra  # the pair's own turns are no disturbance
        rule = self.settings.run.rule
        machine = run_summary(
            [(r.nodeid, r.table) for r in results if r.table is not None],
            paired_rule(rule) if paired else rule,
            saving=self.settings.run.save,
            paired=paired,
            unjudged=None
            if self.settings.run.save
            else [r.nodeid for r in results if r.verdict.busy is not None],
        )
        terminal.summary(
            terminalreporter,
            [(r, self.outcome(r)) for r in results],
            [*machine, *self.messages],
            baseline_dir=self._baselines_shown(),
            trace_dir=self.settings.run.trace_dir,
        )

    def _baselines_shown(self) -> Path | None:
        """The baseline folder the summary names: on tprof ab's head side only where it
        exists (the pairs decide; a stored baseline is read beside them when there is one)."""
        env_dir = self.runner.env_dir
        if "ab" in self.state.report_extra and not env_dir.is_dir():
            return None
        return env_dir

    def add_results(self, dicts: list[dict[str, Any]]) -> None:
        for d in dicts:
            r = ProfiledTest.from_dict(d)
            self.results[r.nodeid] = r

    def _confirm_serially(self) -> bool:
        """Re-run alone each timing regression the xdist workers found, and each verdict
        short of its floor; True if one failed."""
        waiting = sorted(
            (r for r in self.results.values() if r.pending is not None), key=lambda r: r.nodeid
        )
        tr = self.config.pluginmanager.get_plugin("terminalreporter")
        if waiting and tr is not None:
            tr.line("")  # after the progress line
            tr.write_line(f"tprof: {serial_words([r.pending for r in waiting if r.pending])}")
        failed = False
        steps = self._runners.fresh_steps
        rule = self.settings.run.rule
        plan = Plan(alpha=rule.alpha, again_rule=rule)
        for test in waiting:
            r = confirmed(test, steps, plan)
            if self.outcome(r).fails and r.outcome == "passed":
                r = r.with_outcome("failed")
                self._log_failure(r, tr)
                failed = True
            self.results[test.nodeid] = r
        return failed

    def _log_failure(self, result: ProfiledTest, tr: Any) -> None:
        """Turn a test that passed in its worker into the failure its confirmation found."""
        if tr is not None:  # its pass no longer counts
            passed = tr.stats.get("passed", [])
            tr.stats["passed"] = [x for x in passed if getattr(x, "nodeid", None) != result.nodeid]
        path, _, name = result.nodeid.partition("::")
        report = pytest.TestReport(
            nodeid=result.nodeid,
            location=(path, None, name or path),
            keywords={},
            outcome="failed",
            longrepr=failure_text(
                result,
                verbose=self.config.get_verbosity() > 0,
                steps=self.outcome(result).next_steps,
            ),
            when="call",
            user_properties=[(PROPERTY, result.verdict.verdict)],
        )
        self.config.hook.pytest_runtest_logreport(report=report)

    def _save(self) -> None:
        for nodeid, r in list(self.results.items()):
            if r.outcome != "passed":
                why = f"the test {_OUTCOME.get(r.outcome, r.outcome)}"
                self.results[nodeid] = not_saved(r, why)
                continue
            try:
                self.results[nodeid] = self.runner.save(r)
            except BaselineError as exc:
                self.messages.append(f"save failed: {exc}")
                self.results[nodeid] = not_saved(r, "the save failed (see below)")
                self.save_failed = True

    def _not_saved(self, why: str) -> None:
        for nodeid, r in list(self.results.items()):
            self.results[nodeid] = not_saved(r, why)

    def _none_found(self) -> None:
        """Say so when no profiled test found a baseline: a wrong folder or a missed cache."""
        run = self.settings.run
        if run.save or not self.results:
            return
        verdicts = [r.verdict for r in self.results.values()]
        note = found_none(verdicts, self.runner.env_dir.resolve(), required=run.require_baseline)
        if note is not None:
            self.messages.append(note)

    def _stale(self) -> None:
        """List baselines of tests that no longer exist: their test is gone from a collected
        file, or their test file is gone from disk."""
        env_dir = self.runner.env_dir
        if not env_dir.is_dir():
            return
        known_slugs = {slug(n) for n in self.known}
        root = self.settings.rootdir
        # Tests named by node id, or --lf (which drops a file's passing tests while collecting
        # it), leave collected files collected in part: their other tests still exist.
        partial = bool(self.config.getoption("lf", False)) or any(
            "::" in str(arg) for arg in self.config.args
        )
        for path in iter_baselines(env_dir):
            if path.stem in known_slugs:
                continue
            nodeid = read_nodeid(path)
            if nodeid is None:
                continue
            test_file = nodeid.split("::", 1)[0]
            gone = not (root / test_file).exists()
            if gone or (test_file in self.collected_files and not partial):
                self.messages.append(f"stale baseline (its test no longer exists): {path}")

    def _write_reports(self) -> bool:
        """Write the reports asked for; False when one couldn't be (its message says why)."""
        tests = list(self.results.values())
        env = self.runner.fingerprint.to_dict() if self._runners.runner_made or tests else {}
        extra = (
            {"reduction": self.runner.reduction, "startup_s": self.runner.startup_s}
            if self.settings.json_path
            else {}
        ) | dict(self.state.report_extra)
        messages, written = reports.write_reports(self.settings, tests, env, extra)
        self.messages.extend(messages)
        return written
