"""pytest hooks of pytest-tprof: register options, fixture and marker; delegate to the plugin.

Module-level hooks only register things; the state lives in one :class:`TprofPlugin`,
registered in ``pytest_configure`` when ``--tprof`` (or ``--tprof-save``) is given.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Generator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from profiler import judge, store
from profiler import report as rpt
from profiler.errors import BaselineError, ConfigError, TprofError
from profiler.files import write_atomic
from profiler.markdown import markdown_summary
from profiler.results import ProfiledTest
from profiler.rule import Rule
from profiler.runner import Body, Runner
from profiler.verdicts import ERROR, REGRESSED, TestVerdict
from pytest_tprof import fresh, terminal
from pytest_tprof.fixture import RESULT_KEY, TprofFixture
from pytest_tprof.options import MARKER_HELP, Settings, add_options, marker_overrides, read_settings

PLUGIN_KEY = pytest.StashKey["TprofPlugin"]()
PROPERTY = "tprof_verdict"


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", MARKER_HELP)
    settings = read_settings(config)
    if not settings.enabled:
        return
    plugin = TprofPlugin(config, settings)
    config.stash[PLUGIN_KEY] = plugin
    config.pluginmanager.register(plugin, "tprof-plugin")
    if config.pluginmanager.hasplugin("xdist"):
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

    @property
    def runner(self) -> Runner:
        if self._runner is None:
            self._runner = Runner(
                self.settings.run, extra_soft=_benchmark_machine_info(self.config)
            )
        return self._runner

    # ------------------------------------------------------------------ profiling

    def profile(
        self, item: pytest.Item, body: Body, *, rounds: int | None, warmup: int | None
    ) -> tuple[Any, ProfiledTest]:
        """Profile and judge a test's body; a timing regression is confirmed in a new process."""
        counts, rule = marker_overrides(item, self.settings.run.rule)
        started = time.monotonic()
        value, result = self.runner.profile(
            item.nodeid,
            body,
            rounds=rounds if rounds is not None else counts.get("rounds"),
            warmup=warmup if warmup is not None else counts.get("warmup"),
            rule=rule,
        )
        verdict = result.verdict
        if self._confirm_fresh(verdict):
            child, why = fresh.verdict_in_fresh_process(
                self.config,
                self.settings.run,
                item.nodeid,
                timeout=60.0 + 5.0 * (time.monotonic() - started),
            )
            verdict = judge.after_fresh_process(verdict, child, why)
        verdict = judge.under_xdist(verdict, self.workers)
        return value, replace(result, verdict=verdict)

    def _confirm_fresh(self, verdict: TestVerdict) -> bool:
        return (
            judge.needs_fresh_process(verdict)
            and self.settings.run.confirm
            and not fresh.in_child()
        )

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
        if r.facts.get("cudnn_benchmark"):
            lines.append(
                "tprof: warning: torch.backends.cudnn.benchmark is on; kernel choice can vary"
            )
        if config.pluginmanager.hasplugin("xdist") and (
            config.getoption("numprocesses", None) or 0
        ):
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
    def pytest_runtest_call(self, item: pytest.Item) -> None:
        if "benchmark" in getattr(item, "fixturenames", ()):
            from pytest_tprof.benchmark import wrap

            wrap(item, self.profile)

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
        top = v.top_op()
        props: list[tuple[str, str]] = [(PROPERTY, v.verdict)]
        if top is not None:
            props.append(("tprof_top_op", f"{top.op} {top.delta_pct:+.0f}%"))
        if result.trace:
            props.append(("tprof_trace", result.trace))
        # The call report's for the status word; the item's because JUnit XML writes those of
        # the teardown report, which copies the item's.
        report.user_properties.extend(props)
        item.user_properties.extend(props)
        if report.passed and v.failing and not self.settings.run.save:
            report.outcome = "failed"
            verbose = self.config.get_verbosity() > 0
            report.longrepr = rpt.failure_text(result, verbose=verbose)
        return report

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if self.is_worker:
            workeroutput = getattr(self.config, "workeroutput", None)
            if workeroutput is not None:
                workeroutput["tprof"] = [r.to_dict() for r in self.results.values()]
            return
        if self.settings.run.save and session.exitstatus != pytest.ExitCode.INTERRUPTED:
            self._save()
            if self.save_failed:
                session.exitstatus = pytest.ExitCode.TESTS_FAILED
        else:
            self._stale()
        self._write_reports()

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if not self.is_worker:
            terminal.summary(
                terminalreporter,
                list(self.results.values()),
                self.messages,
                baseline_dir=self.runner.env_dir,
                trace_dir=self.settings.run.trace_dir,
            )

    # ------------------------------------------------------------------ helpers

    def add_results(self, dicts: list[dict[str, Any]]) -> None:
        for d in dicts:
            r = ProfiledTest.from_dict(d)
            self.results[r.nodeid] = r

    def _save(self) -> None:
        for nodeid, r in list(self.results.items()):
            if r.outcome != "passed":
                continue
            try:
                self.results[nodeid] = self.runner.save(r)
            except BaselineError as exc:
                self.messages.append(f"save failed: {exc}")
                self.save_failed = True

    def _stale(self) -> None:
        """List baselines of tests that no longer exist: their test is gone from a collected
        file, or their test file is gone from disk."""
        env_dir = self.runner.env_dir
        if not env_dir.is_dir():
            return
        known_slugs = {store.slug(n) for n in self.known}
        root = self.settings.rootdir
        # Tests named by node id, or --lf (which drops a file's passing tests while collecting
        # it), leave collected files collected in part: their other tests still exist.
        partial = bool(self.config.getoption("lf", False)) or any(
            "::" in str(arg) for arg in self.config.args
        )
        for path in store.iter_baselines(env_dir):
            if path.stem in known_slugs:
                continue
            nodeid = store.read_nodeid(path)
            if nodeid is None:
                continue
            test_file = nodeid.split("::", 1)[0]
            gone = not (root / test_file).exists()
            if gone or (test_file in self.collected_files and not partial):
                self.messages.append(f"stale baseline (its test no longer exists): {path}")

    def _write_reports(self) -> None:
        tests = list(self.results.values())
        env = self.runner.fingerprint.to_dict() if self._runner or tests else {}
        if self.settings.json_path is not None:
            doc = rpt.json_report(
                tests, environment=env, extra={"reduction": self.runner.reduction}
            )
            _write_text(self.settings.json_path, json.dumps(doc, indent=2, sort_keys=True) + "\n")
            self.messages.append(f"JSON report: {self.settings.json_path}")
        md_target = self.settings.markdown_path
        step_summary = os.environ.get("GITHUB_STEP_SUMMARY")
        if md_target is not None or (step_summary and tests):
            text = markdown_summary(tests)
            if md_target is not None:
                _write_text(md_target, text)
                self.messages.append(f"Markdown summary: {md_target}")
            if step_summary and tests:
                with open(step_summary, "a", encoding="utf-8") as f:
                    f.write(text)


def _write_text(path: Path, text: str) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, text)
    except OSError as exc:
        raise TprofError(f"{path}: can't write the report ({exc.strerror})") from None


def _benchmark_machine_info(config: pytest.Config) -> dict[str, Any]:
    """Soft fingerprint keys from pytest-benchmark's machine info, when it is installed."""
    try:
        from pytest_benchmark.plugin import pytest_benchmark_generate_machine_info
    except ImportError:
        return {}
    try:
        info = pytest_benchmark_generate_machine_info()
    except Exception:  # its probes of the machine must never break a test run
        return {}
    cpu = info.get("cpu") or {}
    return {
        "machine_node": info.get("node"),
        "processor": info.get("processor"),
        "python_implementation": info.get("python_implementation"),
        "cpu_brand": cpu.get("brand_raw") if isinstance(cpu, dict) else None,
    }
