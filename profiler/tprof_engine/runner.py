"""Profile one test end to end: baseline lookup, capture, judging, confirmation, saving.

The runner holds the run's state (settings, environment fingerprint, traces, the pairing of
tprof ab, the glue's confirmation steps) and three rooms work on it: :mod:`.recording`
captures a test's rounds, :mod:`.judging` judges and confirms them (the plan's loop:
:mod:`.confirm`), :mod:`.saving` saves them as a baseline session.

The pytest glue calls this; so can any other harness.  torch is imported lazily, on the
first capture, through :mod:`tprof_engine.capture`.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol

from tprof_engine import confirm, judging, paired_run, recording, saving
from tprof_engine.capture import counters  # ctypes only; the rest of capture loads torch
from tprof_engine.config import Body, RunConfig
from tprof_engine.decide import outcome
from tprof_engine.decide.gates import compiled as compile_gate
from tprof_engine.decide.timing.busy import quiet_reference
from tprof_engine.decide.timing.rule import Rule
from tprof_engine.found import Found
from tprof_engine.in_process import InProcess
from tprof_engine.model.costs import Stopwatch
from tprof_engine.model.environment import Fingerprint, device_of, line_tracer
from tprof_engine.model.errors import BaselineError
from tprof_engine.model.results import ProfiledTest
from tprof_engine.model.verdicts import TestVerdict
from tprof_engine.model.work import WorkTable
from tprof_engine.store import baselines, files, paths, run_traces, schema, trace_gzip


class Source(Protocol):
    """Where a test's rounds are captured and its census taken: this process
    (:class:`_InProcess`), or the ranks of a distributed test (:mod:`tprof_engine.ranked`)."""

    def iterations(self, baseline: schema.Baseline | None) -> int:
        """Calls of the body per round (0: the capture calibrates them itself)."""
        ...

    def capture(self, spec: Any) -> Any:
        """The rounds of ``spec`` captured: a ``session.CaptureResult``."""
        ...

    def census(self) -> tuple[WorkTable | None, tuple[str, ...]]:
        """The work census (or none) and notes on it."""
        ...

    @property
    def pairable(self) -> bool:
        """Whether its rounds can take turns with another process's (tprof ab)."""
        ...


class FreshSteps(Protocol):
    """The confirmation steps the glue carries out (:class:`tprof_engine.confirm.Executor`'s
    fresh processes), and whether they are open in this process."""

    @property
    def fresh_open(self) -> bool:
        """False in a process that is itself a fresh one (it confirms nothing further)."""
        ...

    @property
    def workers(self) -> int:
        """xdist's workers in the run (1 without xdist)."""
        ...

    def fresh_process(self, test: ProfiledTest) -> confirm.Look: ...

    def after_workers(self, test: ProfiledTest) -> confirm.Look: ...


class Runner:
    """Holds the environment fingerprint and profiles tests against their baselines."""

    def __init__(self, config: RunConfig) -> None:
        # torch, only once a test is profiled
        from tprof_engine.capture import borrowed, census, facts, session

        self.config = config
        # The capture stage's modules, held so nothing else in this module imports torch.
        self._borrowed, self._census_of = borrowed, census
        self._facts, self._session = facts, session
        self.facts = facts.torch_facts()
        self.fingerprint = Fingerprint.collect(self.facts)
        self.reduction = facts.REDUCTION_PATH
        self.traces = run_traces.RunTraces(
            None if config.trace_dir is None else Path(config.trace_dir),
            every=config.all_traces,
            save_trace=config.save_trace,
            keep_runs=config.trace_runs,
        )
        self.startup_s: float | None = None  # the process's first profiler start (once)
        self.nvtx = config.nvtx and facts.nvtx_available()
        # asked for, not given here: said once
        self.environment_notes = facts.torch_notes(bool(self.facts["cuda_available"]))
        if config.nvtx and not self.nvtx:
            self.environment_notes += (
                "--tprof-collect=nvtx: this torch has no NVTX (a build without CUDA); "
                "profiling without NVTX ranges",
            )
        self._last_read: tuple[Any, schema.Baseline] | None = None  # see load()
        self.pairing: Any = None  # tprof ab: this side's tprof_engine.pairing.Pairing
        # the glue's confirmation steps (a fresh process, a fresh pair, after the workers);
        # None: a harness without them, whose verdicts stand once re-measured here
        self.fresh_steps: FreshSteps | None = None
        self.counter, counter_note = counters.instruction_counter(config.counters)
        self.environment_notes += (counter_note,) if counter_note else ()

    @property
    def env_key(self) -> str:
        return self.fingerprint.key

    @property
    def env_dir(self) -> Path:
        return Path(self.config.baseline_dir) / self.env_key

    def baseline_path(self, nodeid: str) -> Path:
        return paths.baseline_path(self.config.baseline_dir, self.env_key, nodeid)

    def baseline_trace_path(self, nodeid: str) -> Path:
        return self.baseline_path(nodeid).with_suffix(".pt.trace.json.gz")

    def trace_path(self, nodeid: str) -> Path | None:
        """Where this run writes the test's trace, when it writes one."""
        return self.traces.path(nodeid)

    def protocol(self, *, rounds: int, warmup: int, iterations: int) -> dict[str, Any]:
        # profile_memory is written only when on: baselines without it were taken without it.
        memory = {"profile_memory": True} if self.config.profile_memory else {}
        return {
            **memory,
            "rounds": rounds,
            "warmup": warmup,
            "iterations": iterations,
            "activities": list(dict.fromkeys(["cpu", device_of(self.facts)])),
            "record_shapes": self.config.record_shapes,
            "probe": self._session.PROBE_VERSION if self.config.probe else None,
        }

    def load(self, nodeid: str) -> tuple[schema.Baseline | None, str | None]:
        """The test's baseline (its newest window of sessions), or the error that stands for it.

        The last one read is kept while its file is unchanged: a save reads its test's file
        again under the lock, and it is mostly as the run found it."""
        path = self.baseline_path(nodeid)
        if not path.exists():
            return None, paths.folder_error(path)
        state = (path, files.file_state(path), nodeid)  # the window is the run's, fixed
        if self._last_read is not None and self._last_read[0] == state and state[1] is not None:
            return self._last_read[1], None
        try:
            found = baselines.load_baseline(path, expected_nodeid=nodeid, keep=self.config.window)
        except BaselineError as exc:
            return None, str(exc)
        self._last_read = (state, found)
        return found, None

    def profile(
        self,
        nodeid: str,
        body: Body,
        *,
        rounds: int | None = None,
        warmup: int | None = None,
        rule: Rule | None = None,
    ) -> tuple[Any, ProfiledTest]:
        """Capture the body for the rounds, judge it, confirm a timing regression."""
        self.startup_s = self.startup_s or self._session.start_up_profiler()
        before = self._facts.compile_log()
        with self._facts.intra_op_threads(self.config.threads):
            value, test = self._profile(nodeid, body, rounds=rounds, warmup=warmup, rule=rule)
        seen = compile_gate.compile_notes(before, self._facts.compile_log())
        return value, replace(test, verdict=test.verdict.with_notes(*seen)) if seen else test

    def _profile(
        self,
        nodeid: str,
        body: Body,
        *,
        rounds: int | None,
        warmup: int | None,
        rule: Rule | None,
    ) -> tuple[Any, ProfiledTest]:
        counts: list[int] = []  # instructions per call of the body, with counters collected
        source = InProcess(self, body, counts)
        value, test = self.profile_source(nodeid, source, rounds=rounds, warmup=warmup, rule=rule)
        notes = counters.instructions_of(
            counts, rounds=int(test.protocol["rounds"]), iterations=test.iterations
        )
        return value, replace(test, verdict=test.verdict.with_notes(*notes))

    def profile_source(
        self,
        nodeid: str,
        source: Source,
        *,
        rounds: int | None,
        warmup: int | None,
        rule: Rule | None,
    ) -> tuple[Any, ProfiledTest]:
        """One test end to end, its rounds captured and its census taken by ``source``:
        recorded (:mod:`.recording`), then judged and confirmed (:mod:`.judging`)."""
        watch = Stopwatch()
        with watch.stage("load"):
            baseline, error = self.load(nodeid)
        pairing = paired_run.active(self.pairing, source)
        with watch.stage("calibrate"):
            iterations, rounds = paired_run.plan(pairing, source, baseline, rounds)
        spec = recording.round_spec(
            self, nodeid, iterations, rounds=rounds, warmup=warmup, pairing=pairing
        )
        tracer = line_tracer()  # per test: pytest-cov's no_cover marker pauses coverage
        judged_by = rule or self.config.rule  # a pair is paced, never captured again
        ref = quiet_reference(baseline.tables) if baseline else None
        capture = recording.Capture(source, spec, watch, ref)
        result = capture.first(
            self.config, judged_by, judged=bool(baseline), paired=pairing is not None
        )
        protocol = self.protocol(
            rounds=spec.rounds, warmup=spec.warmup, iterations=result.iterations
        )
        with watch.stage("census"):
            work, notes = source.census()
        test = replace(recording.tested(self, nodeid, result, protocol), work=work, tracer=tracer)
        if self.config.save or paired_run.is_base(pairing):
            test = judging.recorded(self, test, error, notes, capture.latest, watch, pairing)
            return result.value, test
        found = judging.found_for(self, Found(baseline=baseline, error=error), pairing)
        current = judging.current_of(
            self, test, hosts=(self.fingerprint.soft.get("host"),), tracer=tracer
        )
        steps = judging.Steps(self, found, current, judged_by, capture)
        test = judging.judged(test, steps, watch, in_process=not found.paired)
        test = paired_run.labelled(test, self.pairing, found)
        return result.value, judging.finished(self, test, notes, capture.latest, watch)

    def borrowed_rounds(self, *, rounds: int | None, warmup: int | None) -> Any:
        """A profiler session for another harness's rounds (a ``borrowed.BorrowedRounds``):
        it profiles up to ``warmup + rounds`` of the rounds that harness keeps."""
        cfg = self.config
        budget = (cfg.rounds if rounds is None else rounds) + (
            cfg.warmup if warmup is None else warmup
        )
        return self._borrowed.BorrowedRounds(
            budget=budget,
            probe=cfg.probe,
            record_shapes=cfg.record_shapes,
            before_start=self.traces.quiet,
            write_trace=trace_gzip.write_gzipped,
        )

    def threads(self) -> Any:
        """The intra-op threads tprof profiles with, as a context manager."""
        return self._facts.intra_op_threads(self.config.threads)

    def judge_borrowed(
        self, nodeid: str, borrowed: Any, *, warmup: int | None, rule: Rule | None = None
    ) -> ProfiledTest:
        """Judge (or record) the rounds another harness ran under ``borrowed``.

        Neither the work census nor a re-measurement is taken: both would call the body more
        often than that harness does.  Raises ``CaptureError`` when no round was profiled.
        """
        cfg = self.config
        watch = Stopwatch()
        result = borrowed.result(
            warmup=cfg.warmup if warmup is None else warmup,
            trace_path=None,  # written once judged, if wanted
            trace_metadata={"nodeid": nodeid},
        )
        watch.merge(result.costs)
        protocol = self.protocol(
            rounds=result.table.rounds, warmup=result.warmup_used, iterations=result.iterations
        )
        # Checked after the rounds: a tracer that was on for them is still on at their end.
        test = replace(recording.tested(self, nodeid, result, protocol), tracer=line_tracer())
        notes = ("no work census: it would call the benchmarked function more often",)
        if cfg.save:
            test = judging.under_xdist(self, replace(test, verdict=outcome.recorded(notes)))
            return judging.kept_trace(self, test, result, watch)
        baseline, error = self.load(nodeid)
        if paired_run.active(self.pairing) is not None:  # pytest-benchmark owns its rounds
            self.pairing.solo(nodeid, "pytest-benchmark's rounds are not paired")
        current = judging.current_of(self, test, tracer=test.tracer)
        found = Found(baseline=baseline, error=error)
        steps = judging.Steps(self, found, current, rule or cfg.rule, None)
        test = judging.judged(test, steps, watch, in_process=False)
        test = replace(test, verdict=test.verdict.with_notes(*notes))
        test = paired_run.labelled(test, self.pairing, None)
        test = judging.kept_trace(self, test, result, watch)
        return judging.side_by_side(self, test) if test.verdict.regressed else test

    def judge(self, nodeid: str, found: Found, current: Any, rule: Rule) -> TestVerdict:
        """The verdict on the current run given what was found for the test."""
        return judging.verdict_of(self, nodeid, found, current, rule)

    def side_by_side(self, test: ProfiledTest) -> ProfiledTest:
        """With the baseline's trace kept, write both runs into one trace, regressed ops marked."""
        return judging.side_by_side(self, test)

    def save(self, test: ProfiledTest) -> ProfiledTest:
        """Record the test's table as a new session of its baseline (atomic write)."""
        return saving.save(self, test)
