"""pytest hooks of pytest-tprof: register options, fixture and marker; delegate to the plugin.

Module-level hooks only register things; the state lives in one :class:`TprofPlugin`,
registered in ``pytest_configure`` when ``--tprof`` (or ``--tprof-save``) is given.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Generator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from pytest_tprof import ab_side, fresh, reports, terminal
from pytest_tprof.fixture import RESULT_KEY, TprofFixture
from pytest_tprof.options import (
    MARKER_HELP,
    Settings,
    add_options,
    marker_overrides,
    read_settings,
    requested_early,
)
from pytest_tprof.xdist import assign_worker_gpu, device_header
from tprof_engine.capture import load
from tprof_engine.config import Body
from tprof_engine.decide import busy, policy
from tprof_engine.decide.rule import Rule
from tprof_engine.model.environment import line_tracer
from tprof_engine.model.errors import BaselineError, ConfigError
from tprof_engine.model.results import ProfiledTest
from tprof_engine.model.verdicts import (
    ERROR,
    INCONCLUSIVE,
    NOT_SAVED,
    REGRESSED,
    TestVerdict,
    TestWord,
)
from tprof_engine.ranked import DistributedBody, profile_distributed
from tprof_engine.render import report as rpt
from tprof_engine.runner import Runner
from tprof_engine.store import paths, reading, trace_files
from tprof_engine.torch_support import torch_problem

PLUGIN_KEY = pytest.StashKey["TprofPlugin"]()
PROPERTY = rpt.VERDICT_PROPERTY


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser)


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config) -> None:
    # The earliest hook a worker runs this plugin's code in: before conftests, which may
    # initialise CUDA (`torch.cuda.is_available()` at import), after which the choice is fixed.
    if requested_early(early_config):
        assign_worker_gpu(os.environ)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", MARKER_HELP)
    settings = read_settings(config)
    if not settings.enabled:
        return
    problem = torch_problem()
    if problem is not None:
        raise pytest.UsageError(problem)
    plugin = TprofPlugin(config, settings)
    config.stash[PLUGIN_KEY] = plugin
    config.pluginmanager.register(plugin, "tprof-plugin")
    plugin.ab = ab_side.register(config, plugin)  # a side of `tprof ab`
    if _has_xdist(config):
        from pytest_tprof.xdist import XdistHooks

        config.pluginmanager.register(XdistHooks(plugin.add_results), "tprof-xdist")


def pytest_unconfigure(config: pytest.Config) -> None:
    plugin = config.stash.get(PLUGIN_KEY, None)
    if plugin is not None:
        del config.stash[PLUGIN_KEY]
        config.pluginmanager.unregister(plugin)


@pytest.fixture
def tprof(request: pytest.FixtureRequest) -> TprofFixture:
    """Profile a callable per op under torch.profiler: ``tprof(fn, *args, **kwargs)``."""
    plugin = request.config.stash.get(PLUGIN_KEY, None)
    item = request.node
    assert isinstance(item, pytest.Item)
    problem = None
    try:  # a mistyped marker keyword errors the test at setup, with or without --tprof
        marker_overrides(item, Rule())
    except ConfigError as exc:
        problem = str(exc)
    if problem is not None:
        pytest.fail(problem, pytrace=False)
    return TprofFixture(item, None if plugin is None else plugin.profile)


def pytest_report_teststatus(report: pytest.TestReport, config: pytest.Config) -> Any:
    if report.when != "call" or not report.failed:
        return None
    verdict = dict(report.user_properties).get(PROPERTY)
    if verdict == REGRESSED:
        return "failed", "R", ("REGRESSED", {"red": True})
    if verdict == ERROR:
        return "failed", "T", ("TPROF-ERROR", {"red": True})
    return None


class TprofPlugin:
    """State of one pytest-tprof session and the hooks that need it."""

    def __init__(self, config: pytest.Config, settings: Settings) -> None:
        self.config = config
        self.settings = settings
        self.is_worker = hasattr(config, "workerinput")
        workerinput = getattr(config, "workerinput", None) or {}
        self.workers = int(workerinput.get("workercount", 1))
        self.results: dict[str, ProfiledTest] = {}
        self.known: set[str] = set()
        self.collected_files: set[str] = set()
        self.messages: list[str] = []
        self._runner: Runner | None = None
        self.save_failed = False
        self.ab: Any = None  # this process's ab_side.AbSide when `tprof ab` started it

    @property
    def runner(self) -> Runner:
        if self._runner is None:
            self._runner = Runner(self.settings.run)
        return self._runner

    # ------------------------------------------------------------------ profiling

    def profile(
        self,
        item: pytest.Item,
        body: Body | DistributedBody,
        *,
        rounds: int | None,
        warmup: int | None,
    ) -> tuple[Any, ProfiledTest]:
        """Profile and judge a test's body (or its ranks'); a timing regression is confirmed
        in a new process."""
        counts, rule = marker_overrides(item, self.settings.run.rule)
        started = time.monotonic()
        rounds = rounds if rounds is not None else counts.get("rounds")
        warmup = warmup if warmup is not None else counts.get("warmup")
        if isinstance(body, DistributedBody):
            value, result = profile_distributed(
                self.runner, item.nodeid, body, rounds=rounds, warmup=warmup, rule=rule
            )
        else:
            value, result = self.runner.profile(
                item.nodeid, body, rounds=rounds, warmup=warmup, rule=rule
            )
        return value, self._confirmed(item, result, started)

    def borrowed_rounds(self, item: pytest.Item) -> Any:
        """A profiler session for the rounds of the test's pytest-benchmark fixture."""
        counts, _ = marker_overrides(item, self.settings.run.rule)
        return self.runner.borrowed_rounds(rounds=counts.get("rounds"), warmup=counts.get("warmup"))

    def judge_borrowed(self, item: pytest.Item, borrowed: Any) -> ProfiledTest:
        """The verdict on pytest-benchmark's profiled rounds, confirmed like :meth:`profile`'s."""
        counts, rule = marker_overrides(item, self.settings.run.rule)
        started = time.monotonic()
        result = self.runner.judge_borrowed(
            item.nodeid, borrowed, warmup=counts.get("warmup"), rule=rule
        )
        return self._confirmed(item, result, started)

    def profiling_threads(self) -> Any:
        return self.runner.threads()

    def not_profiled(self, item: pytest.Item, why: str) -> None:
        """A test tprof meant to profile and couldn't: its line says why (and nothing saved)."""
        word: TestWord = NOT_SAVED if self.settings.run.save else INCONCLUSIVE
        item.stash[RESULT_KEY] = ProfiledTest(
            nodeid=item.nodeid, verdict=TestVerdict(verdict=word, reason=why), benchmark=True
        )

    def _confirmed(self, item: pytest.Item, result: ProfiledTest, started: float) -> ProfiledTest:
        """The test once the confirmation policy's next step is taken on its verdict (under
        xdist: left pending, to be confirmed alone once the workers finish)."""
        verdict, pending = result.verdict, None
        step = policy.next_step(
            verdict,
            confirm=self.settings.run.confirm,
            remeasured=True,
            in_fresh_process=fresh.in_child(),
            workers=self.workers,
        )
        if step == policy.AFTER_WORKERS:
            pending = verdict
            verdict = policy.awaiting_serial_confirmation(verdict, self.workers)
        elif step == policy.FRESH_PROCESS:
            self._progress("[tprof: slower; confirming in a fresh process]")
            self.runner.traces.quiet()  # no trace export beside the fresh process's rounds
            child = fresh.verdict_in_fresh_process(
                self.config,
                self.settings,
                item.nodeid,
                timeout=60.0 + 5.0 * (time.monotonic() - started),
                torch_in_force=result.settings,
                pair=None if self.ab is None else self.ab.config,  # tprof ab: a fresh pair
            )
            verdict = policy.after_fresh_process(verdict, *child)
        return replace(result, verdict=policy.under_xdist(verdict, self.workers), pending=pending)

    # ------------------------------------------------------------------ hooks

    def pytest_report_header(self, config: pytest.Config) -> list[str]:
        run = self.settings.run
        r = self.runner
        cuda = "on" if r.facts["cuda_available"] else "not available"
        mode = "recording baselines (--tprof-save)" if run.save else "comparing with baselines"
        lines = [
            f"tprof: {mode}; {run.rounds} rounds + {run.warmup} warm-up; "
            f"reduction: {r.reduction}; CUDA: {cuda}",
            f"tprof: baselines {r.env_dir}; traces {run.trace_dir}",
        ]
        machine = load.machine_now()
        if machine:
            lines.append(f"tprof: {machine}")
        coverage = terminal.coverage_line(
            line_tracer(), pytest_cov=self.settings.pytest_cov, save=run.save
        )
        if coverage:
            lines.append(coverage)
        lines += [f"tprof: {note}" for note in r.environment_notes]
        if r.facts.get("cudnn_benchmark"):
            lines.append(
                "tprof: warning: torch.backends.cudnn.benchmark is on; kernel choice can vary"
            )
        workers = _xdist_workers(config)
        if workers:
            lines += device_header(workers, os.environ)
            lines.append(
                "tprof: under xdist, concurrent workers add timing noise: calls gate as usual, "
                "timing verdicts carry a note"
            )
        return lines

    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        for item in items:
            self.known.add(item.nodeid)
            self.collected_files.add(item.nodeid.split("::", 1)[0])

    def pytest_deselected(self, items: list[pytest.Item]) -> None:
        # Deselected (-k, -m, --deselect, --sw) tests still exist: their baselines aren't stale.
        self.known.update(item.nodeid for item in items)

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        """In a fresh process confirming a regression: the torch settings the parent's capture
        ran under, set before the test's own code runs (see pytest_tprof.fresh)."""
        wanted = self.settings.torch_settings
        if wanted:
            from tprof_engine.capture import settings as torch_settings

            refused = torch_settings.apply(wanted)
            if refused:
                self.messages.append(
                    "tprof: could not set the parent's torch settings " + ", ".join(refused)
                )

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_call(self, item: pytest.Item) -> None:
        if "benchmark" in getattr(item, "fixturenames", ()):
            from pytest_tprof.benchmark import wrap

            wrap(item, self)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        report = yield
        if call.when != "call":
            return report
        result = item.stash.get(RESULT_KEY, None)
        if result is None:
            return report
        result = result.with_outcome(report.outcome)
        self.results[item.nodeid] = result
        v = result.verdict
        props = rpt.junit_properties(result)
        # The call report's for the status word; the item's because JUnit XML writes those of
        # the teardown report, which copies the item's.
        report.user_properties.extend(props)
        item.user_properties.extend(props)
        if report.passed and v.failing and not self.settings.run.save:
            report.outcome = "failed"
            verbose = self.config.get_verbosity() > 0
            report.longrepr = rpt.failure_text(
                result, verbose=verbose, record_args=self.settings.record_args
            )
            self.results[item.nodeid] = result.with_outcome("failed")  # as the reports say
        return report

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        self._traces_written()
        if self.is_worker:
            workeroutput = getattr(self.config, "workeroutput", None)
            if workeroutput is not None:
                workeroutput["tprof"] = [r.to_dict() for r in self.results.values()]
            return
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
        self._bound_traces()
        # A report asked for and not written fails the run as a failed save does: CI that
        # publishes it must not go green on a stale or missing file.  An earlier status stays.
        if not self._write_reports() and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def _traces_written(self) -> None:
        """Wait for the traces still being written; a test whose trace couldn't be says so."""
        if self._runner is None:
            return
        for w in self._runner.traces.finish():
            result = self.results.get(w.nodeid)
            if w.problem and result is not None and result.trace == str(w.path):
                self.results[w.nodeid] = trace_files.with_written(result, w.written, w.problem)
                self.messages.append(f"tprof: {w.problem}")
        pruned = len(self._runner.traces.pruned)
        if pruned:
            keep = self.settings.run.trace_runs
            self.messages.append(
                f"tprof: {pruned} older trace(s) removed: each test keeps its last {keep} runs' "
                "(--tprof-trace-keep), a failing one all until it passes"
            )

    def _bound_traces(self) -> None:
        """The trace folder held to its bound, oldest first; this run's traces stay."""
        folder = self.settings.run.trace_dir
        if folder is None or not Path(folder).is_dir():
            return
        named = [p for r in self.results.values() for p in (r.trace, r.side_by_side) if p]
        trace_files.bounded(Path(folder), keep=[Path(p) for p in named])

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if not self.is_worker:
            results = list(self.results.values())
            machine = busy.run_summary(
                [(r.nodeid, r.table) for r in results if r.table is not None],
                self.settings.run.rule,
                saving=self.settings.run.save,
                paired=self.ab is not None,
            )
            terminal.summary(
                terminalreporter,
                results,
                [*machine, *self.messages],
                baseline_dir=self.runner.env_dir,
                trace_dir=self.settings.run.trace_dir,
            )

    # ------------------------------------------------------------------ helpers

    def add_results(self, dicts: list[dict[str, Any]]) -> None:
        for d in dicts:
            r = ProfiledTest.from_dict(d)
            self.results[r.nodeid] = r

    def _progress(self, text: str) -> None:
        """A note on the progress line while a test runs: written past pytest's capture, or
        it would land in the test's "Captured stdout call" section instead."""
        tr = self.config.pluginmanager.get_plugin("terminalreporter")
        if tr is None or self.is_worker:
            return
        capture = self.config.pluginmanager.get_plugin("capturemanager")
        with capture.global_and_fixture_disabled() if capture else contextlib.nullcontext():
            tr.write(f" {text} ", yellow=True, flush=True)

    def _confirm_serially(self) -> bool:
        """Re-run alone each timing regression the xdist workers found; True if one failed."""
        pending = sorted(r.nodeid for r in self.results.values() if r.pending is not None)
        tr = self.config.pluginmanager.get_plugin("terminalreporter")
        if pending and tr is not None:
            tr.line("")  # after the progress line
            tr.write_line(
                f"tprof: confirming {len(pending)} timing regression(s) found under xdist, "
                "each alone in a fresh process"
            )
        failed = False
        for nodeid in pending:
            r = self.results[nodeid]
            assert r.pending is not None
            child = fresh.verdict_in_fresh_process(
                self.config, self.settings, nodeid, timeout=_SERIAL_TIMEOUT_S,
                torch_in_force=r.settings,
            )  # fmt: skip
            r = replace(r, verdict=policy.after_serial_confirmation(r.pending, *child))
            r = replace(r, pending=None)
            if r.verdict.failing and r.outcome == "passed":
                r = r.with_outcome("failed")
                self._log_failure(r, tr)
                failed = True
            self.results[nodeid] = r
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
            longrepr=rpt.failure_text(
                result,
                verbose=self.config.get_verbosity() > 0,
                record_args=self.settings.record_args,
            ),
            when="call",
            user_properties=[(PROPERTY, result.verdict.verdict)],
        )
        self.config.hook.pytest_runtest_logreport(report=report)

    def _save(self) -> None:
        for nodeid, r in list(self.results.items()):
            if r.outcome != "passed":
                self.results[nodeid] = r.not_saved(f"the test {_OUTCOME.get(r.outcome, r.outcome)}")
                continue
            try:
                self.results[nodeid] = self.runner.save(r)
            except BaselineError as exc:
                self.messages.append(f"save failed: {exc}")
                self.results[nodeid] = r.not_saved("the save failed (see below)")
                self.save_failed = True

    def _not_saved(self, why: str) -> None:
        for nodeid, r in list(self.results.items()):
            self.results[nodeid] = r.not_saved(why)

    def _stale(self) -> None:
        """List baselines of tests that no longer exist: their test is gone from a collected
        file, or their test file is gone from disk."""
        env_dir = self.runner.env_dir
        if not env_dir.is_dir():
            return
        known_slugs = {paths.slug(n) for n in self.known}
        root = self.settings.rootdir
        # Tests named by node id, or --lf (which drops a file's passing tests while collecting
        # it), leave collected files collected in part: their other tests still exist.
        partial = bool(self.config.getoption("lf", False)) or any(
            "::" in str(arg) for arg in self.config.args
        )
        for path in paths.iter_baselines(env_dir):
            if path.stem in known_slugs:
                continue
            nodeid = reading.read_nodeid(path)
            if nodeid is None:
                continue
            test_file = nodeid.split("::", 1)[0]
            gone = not (root / test_file).exists()
            if gone or (test_file in self.collected_files and not partial):
                self.messages.append(f"stale baseline (its test no longer exists): {path}")

    def _write_reports(self) -> bool:
        """Write the reports asked for; False when one couldn't be (its message says why)."""
        tests = list(self.results.values())
        env = self.runner.fingerprint.to_dict() if self._runner or tests else {}
        extra = (
            {"reduction": self.runner.reduction, "startup_s": self.runner.startup_s}
            if self.settings.json_path
            else {}
        ) | ({"ab": self.ab.described()} if self.ab is not None else {})
        messages, written = reports.write_reports(self.settings, tests, env, extra)
        self.messages += messages
        return written


def _has_xdist(config: pytest.Config) -> bool:
    # "xdist" when loaded from its entry point; its module's name with -p xdist.plugin
    # (the form for a run with plugin autoloading off on any pytest)
    return any(config.pluginmanager.hasplugin(name) for name in ("xdist", "xdist.plugin"))


def _xdist_workers(config: pytest.Config) -> int:
    """The xdist workers this controller starts (0 without xdist or without ``-n``)."""
    if not _has_xdist(config):
        return 0
    workers = config.getoption("numprocesses", None)
    return workers if isinstance(workers, int) else 0


_OUTCOME = {"failed": "failed", "skipped": "was skipped"}
_SERIAL_TIMEOUT_S = 600.0  # one test re-run alone after the workers: generous, it runs once
