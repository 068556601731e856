"""pytest hooks of pytest-tprof: register options, fixture and marker; delegate to the roles.

Module-level hooks only register things.  When ``--tprof`` (or ``--tprof-save``) is given,
``pytest_configure`` registers the profiling role (:class:`TprofPlugin`) in every process that
runs tests, and the controller's (:class:`pytest_tprof.controller.Controller`) where no xdist
worker runs; both share one :class:`~pytest_tprof.controller.RunState`.
"""

from __future__ import annotations

import contextlib
import os
import pickle
from collections.abc import Generator
from typing import Any

import pytest

from pytest_tprof import ab_side, fresh, terminal
from pytest_tprof.controller import Controller, RunState, SharesState
from pytest_tprof.fixture import RESULT_KEY, TprofFixture
from pytest_tprof.marker import MARKER_HELP, marker_overrides
from pytest_tprof.options import add_options, read_settings, requested_early
from pytest_tprof.xdist import assign_worker_gpu, device_header
from tprof_engine.api import (
    VERDICT_PROPERTY,
    Rule,
    apply_torch_settings,
    failure_text,
    junit_properties,
    machine_now,
    not_profiled,
    random_state,
    restore_random_state,
    with_written,
)
from tprof_engine.config import Body
from tprof_engine.model.environment import line_tracer
from tprof_engine.model.errors import ConfigError
from tprof_engine.model.results import ProfiledTest
from tprof_engine.model.verdicts import ERROR, REGRESSED
from tprof_engine.ranked import DistributedBody, profile_distributed
from tprof_engine.runner import Runner
from tprof_engine.torch_support import torch_problem

PLUGIN_KEY = pytest.StashKey["TprofPlugin"]()
PROPERTY = VERDICT_PROPERTY


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
    plugin = TprofPlugin(config, RunState(settings=settings))
    config.stash[PLUGIN_KEY] = plugin
    config.pluginmanager.register(plugin, "tprof-plugin")
    if not plugin.is_worker:  # the run's results, save, reports and summary
        controller = Controller(config, plugin.state, plugin)
        config.pluginmanager.register(controller, "tprof-controller")
        if _has_xdist(config):
            from pytest_tprof.xdist import XdistHooks

            hooks = XdistHooks(controller.add_results, plugin.fresh_steps.random_states)
            config.pluginmanager.register(hooks, "tprof-xdist")
    plugin.ab = ab_side.register(config, plugin)  # a side of `tprof ab`


def pytest_unconfigure(config: pytest.Config) -> None:
    plugin = config.stash.get(PLUGIN_KEY, None)
    if plugin is not None:
        del config.stash[PLUGIN_KEY]
        for name in ("tprof-plugin", "tprof-controller", "tprof-xdist", "tprof-ab-side"):
            registered = config.pluginmanager.get_plugin(name)
            if registered is not None:
                config.pluginmanager.unregister(registered)


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


class TprofPlugin(SharesState):
    """The profiling role, in every process that runs tests (an xdist worker, or the one
    process): each test's profile, its confirmation and its report; its results go to the
    controller (:mod:`pytest_tprof.controller`), here or through xdist."""

    def __init__(self, config: pytest.Config, state: RunState) -> None:
        self.config = config
        self.state = state
        self.is_worker = hasattr(config, "workerinput")
        workerinput = getattr(config, "workerinput", None) or {}
        self.workers = int(workerinput.get("workercount", 1))
        self._runner: Runner | None = None
        self.ab: Any = None  # this process's ab_side.AbSide when `tprof ab` started it
        # the confirmation steps the engine's loop asks of the glue (tprof_engine.confirm)
        self.fresh_steps = fresh.Steps(
            config,
            lambda: self.settings,
            workers=self.workers,
            pair=lambda: None if self.ab is None else self.ab.config,  # a fresh pair
            before=self._fresh_starts,
        )

    @property
    def runner_made(self) -> bool:
        return self._runner is not None

    @property
    def runner(self) -> Runner:
        if self._runner is None:
            self._runner = Runner(self.settings.run)
            self._runner.fresh_steps = self.fresh_steps
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
        """Profile and judge a test's body (or its ranks'), confirmed as the engine's loop
        asks (:mod:`tprof_engine.confirm`; the fresh processes are :attr:`fresh_steps`)."""
        counts, rule = marker_overrides(item, self.settings.run.rule)
        self.fresh_steps.started(item.nodeid)
        rounds = rounds if rounds is not None else counts.get("rounds")
        warmup = warmup if warmup is not None else counts.get("warmup")
        if isinstance(body, DistributedBody):
            return profile_distributed(
                self.runner, item.nodeid, body, rounds=rounds, warmup=warmup, rule=rule
            )
        return self.runner.profile(item.nodeid, body, rounds=rounds, warmup=warmup, rule=rule)

    def borrowed_rounds(self, item: pytest.Item) -> Any:
        """A profiler session for the rounds of the test's pytest-benchmark fixture."""
        counts, _ = marker_overrides(item, self.settings.run.rule)
        return self.runner.borrowed_rounds(rounds=counts.get("rounds"), warmup=counts.get("warmup"))

    def judge_borrowed(self, item: pytest.Item, borrowed: Any) -> ProfiledTest:
        """The verdict on pytest-benchmark's profiled rounds, confirmed like :meth:`profile`'s."""
        counts, rule = marker_overrides(item, self.settings.run.rule)
        self.fresh_steps.started(item.nodeid)
        return self.runner.judge_borrowed(
            item.nodeid, borrowed, warmup=counts.get("warmup"), rule=rule
        )

    def profiling_threads(self) -> Any:
        return self.runner.threads()

    def not_profiled(self, item: pytest.Item, why: str) -> None:
        """A test tprof meant to profile and couldn't: its line says why (and nothing saved)."""
        item.stash[RESULT_KEY] = not_profiled(item.nodeid, why, recording=self.settings.run.save)

    def _fresh_starts(self) -> None:
        """Before a fresh process: said on the progress line, no trace export beside it."""
        self._progress("[tprof: slower; confirming in a fresh process]")
        self.runner.traces.quiet()

    # ------------------------------------------------------------------ hooks

    def pytest_report_header(self, config: pytest.Config) -> list[str]:
        run = self.settings.run
        r = self.runner
        label = r.facts.get("device_label", "CPU")  # CUDA or ROCm where torch sees a GPU
        device = f"{label}: on" if r.facts["cuda_available"] else "CUDA: not available"
        mode = "recording baselines (--tprof-save)" if run.save else "comparing with baselines"
        folders = f"tprof: baselines {r.env_dir}; traces {run.trace_dir}"
        if self.ab is not None:  # tprof ab: the pairs decide; a stored baseline only if there
            mode, folders = self.ab.header_words(r.env_dir, run.trace_dir)
        lines = [
            f"tprof: {mode}; {run.rounds} rounds + {run.warmup} warm-up; "
            f"reduction: {r.reduction}; {device}",
            folders,
        ]
        machine = machine_now()
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

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        """In a fresh process confirming a regression: the torch settings the parent's capture
        ran under and the random state its test started from, set before the test's own code
        runs (see pytest_tprof.fresh).  In a run that may confirm one: that random state."""
        wanted, state = self.settings.torch_settings, self.settings.random_state
        refused = apply_torch_settings(wanted) if wanted else []
        refused += restore_random_state(state) if state is not None else []
        if refused:
            self.messages.append(
                "tprof: could not set the parent's torch settings or random state "
                + ", ".join(refused)
            )
        run = self.settings.run
        confirms = run.confirm and not run.save and not fresh.in_child()
        if confirms and "tprof" in getattr(item, "fixturenames", ()):
            self.fresh_steps.started(item.nodeid, random_state())

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
        props = junit_properties(result)
        # The call report's for the status word; the item's because JUnit XML writes those of
        # the teardown report, which copies the item's.
        report.user_properties.extend(props)
        item.user_properties.extend(props)
        said = self.outcome(result)
        if report.passed and said.fails:
            report.outcome = "failed"
            verbose = self.config.get_verbosity() > 0
            report.longrepr = failure_text(result, verbose=verbose, steps=said.next_steps)
            self.results[item.nodeid] = result.with_outcome("failed")  # as the reports say
        return report

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self) -> None:
        """The traces written before the controller saves and reports; a worker's results
        handed to the controller."""
        self._traces_written()
        workeroutput = getattr(self.config, "workeroutput", None)
        if self.is_worker and workeroutput is not None:
            workeroutput["tprof"] = [r.to_dict() for r in self.results.values()]
            # the serial re-run starts each pending test from the random state it started from
            states = self.fresh_steps.random_states
            workeroutput["tprof-random"] = {
                n: pickle.dumps(states[n])
                for n, r in self.results.items()
                if r.pending is not None and n in states
            }

    def _traces_written(self) -> None:
        """Wait for the traces still being written; a test whose trace couldn't be says so."""
        if self._runner is None:
            return
        for w in self._runner.traces.finish():
            result = self.results.get(w.nodeid)
            if w.problem and result is not None and result.trace == str(w.path):
                self.results[w.nodeid] = with_written(result, w.written, w.problem)
                self.messages.append(f"tprof: {w.problem}")
        pruned = len(self._runner.traces.pruned)
        if pruned:
            keep = self.settings.run.trace_runs
            self.messages.append(
                f"tprof: {pruned} older trace(s) removed: each test keeps its last {keep} runs' "
                "(--tprof-trace-keep), a failing one all until it passes"
            )

    # ------------------------------------------------------------------ helpers

    def _progress(self, text: str) -> None:
        """A note on the progress line while a test runs: written past pytest's capture, or
        it would land in the test's "Captured stdout call" section instead."""
        tr = self.config.pluginmanager.get_plugin("terminalreporter")
        if tr is None or self.is_worker:
            return
        capture = self.config.pluginmanager.get_plugin("capturemanager")
        with capture.global_and_fixture_disabled() if capture else contextlib.nullcontext():
            tr.write(f" {text} ", yellow=True, flush=True)


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
