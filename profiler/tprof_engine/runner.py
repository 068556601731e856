"""Profile one test end to end: baseline lookup, capture, judging, confirmation, saving.

The pytest glue calls this; so can any other harness.  torch is imported lazily, on the
first capture, through :mod:`tprof_engine.capture`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol

from tprof_engine import paired_run, window
from tprof_engine.capture import counters  # ctypes only; the rest of capture loads torch
from tprof_engine.config import Body, RunConfig
from tprof_engine.decide import judge, outcome, policy
from tprof_engine.decide.gates import compiled as compile_gate
from tprof_engine.decide.timing.busy import busy_of, probe_reference, quietest
from tprof_engine.decide.timing.rule import Rule
from tprof_engine.found import Found, verdict_on, without_baseline
from tprof_engine.in_process import InProcess
from tprof_engine.model.costs import Stopwatch
from tprof_engine.model.environment import Fingerprint, device_of, line_tracer
from tprof_engine.model.errors import BaselineError
from tprof_engine.model.records import concat_rounds
from tprof_engine.model.results import ProfiledTest
from tprof_engine.model.verdicts import (
    NO_BASELINE,
    TestVerdict,
)
from tprof_engine.model.work import WorkTable
from tprof_engine.store import (
    baselines,
    files,
    paths,
    run_traces,
    schema,
    trace_files,
    trace_gzip,
)


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
            every=config.all_traces, save_trace=config.save_trace, keep_runs=config.trace_runs,
        )  # fmt: skip
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
        """One test end to end, its rounds captured and its census taken by ``source``."""
        cfg = self.config
        watch = Stopwatch()
        with watch.stage("load"):
            baseline, error = self.load(nodeid)
        pairing = paired_run.active(self.pairing, source)
        with watch.stage("calibrate"):
            iterations, rounds = paired_run.plan(pairing, source, baseline, rounds)
        spec = self._round_spec(nodeid, iterations, rounds=rounds, warmup=warmup, pairing=pairing)
        tracer = line_tracer()  # per test: pytest-cov's no_cover marker pauses coverage
        latest: list[Any] = []  # the newest capture, whose trace is written if wanted

        def run() -> Any:
            # a source that calibrates in its own processes fixes the count on its first capture
            agreed = latest[0].iterations if latest else spec.iterations
            result = source.capture(replace(spec, iterations=agreed))
            watch.merge(result.costs)
            latest[:] = [result]
            return result

        judged_by = rule or cfg.rule  # a pair is paced, never captured again
        ref = probe_reference(baseline.tables) if baseline else None
        result = self._captured(run, judged_by, spec.rounds, ref, bool(baseline), pairing)
        protocol = self.protocol(
            rounds=spec.rounds, warmup=spec.warmup, iterations=result.iterations
        )
        with watch.stage("census"):
            work, notes = source.census()
        test = replace(self._tested(nodeid, result, protocol), work=work, tracer=tracer)
        if cfg.save or paired_run.is_base(pairing):
            return result.value, self._recorded(test, error, notes, latest[0], watch, pairing)
        current = judge.Recorded(
            tables=(result.table,), fingerprint=self.fingerprint, protocol=protocol,
            work=test.work, hosts=(self.fingerprint.soft.get("host"),), tracer=tracer,
            settings=test.settings,
        )  # fmt: skip
        found = self._found(Found(baseline=baseline, error=error), pairing)
        again = functools.partial(self._quiet_enough, run, judged_by, cfg.busy_retries, ref)
        test = self._confirmed(test, found, current, judged_by, again, watch)
        test = paired_run.labelled(test, self.pairing, found)
        return result.value, self._finished(test, notes, latest[0], watch)

    def _found(self, on_disk: Found, pairing: Any) -> Found:
        """What the test is judged against: what is on disk, or on tprof ab's head side the
        base's rounds of it, with what is on disk beside them."""
        paired = paired_run.base_side(pairing, self.fingerprint)
        if paired is None:
            return on_disk
        return Found(
            baseline=None, error=None, paired=paired[0], stored=on_disk, paired_trace=paired[1]
        )

    def _recorded(
        self, test: ProfiledTest, error: str | None, notes: tuple[str, ...], capture: Any,
        watch: Stopwatch, pairing: Any = None,
    ) -> ProfiledTest:  # fmt: skip
        """A recording's test, its verdict "saved" (the save itself comes at the run's end);
        on tprof ab's base side, its rounds handed to the head, which judges them."""
        if pairing is not None:  # its trace named before the head gets it
            test = replace(test, verdict=outcome.base_of_pair())
            return paired_run.handed_over(pairing, self._finished(test, notes, capture, watch))
        note = ("the damaged file will be replaced",) if error else ()
        verdict = outcome.recorded((*note, *notes))
        test = self._kept_trace(replace(test, verdict=verdict), capture, watch)
        return replace(test, costs=watch.costs())

    def _finished(
        self, test: ProfiledTest, notes: tuple[str, ...], capture: Any, watch: Stopwatch
    ) -> ProfiledTest:
        """The judged test with its notes, its trace when the verdict wants one (and a
        side-by-side one when it regressed), and what its stages cost."""
        test = replace(test, verdict=test.verdict.with_notes(*notes))
        test = self._kept_trace(test, capture, watch)
        if test.verdict.regressed:
            with watch.stage("judge"):
                test = self.side_by_side(test)
        return replace(test, costs=watch.costs())

    def _round_spec(
        self, nodeid: str, iterations: int, *, rounds: int | None, warmup: int | None,
        pairing: Any = None,
    ) -> Any:  # fmt: skip
        """What this test's rounds are: the marker's or the run's counts, the iterations,
        what each round records, and (tprof ab) how they take turns with the other side's."""
        cfg = self.config
        rounds = cfg.rounds if rounds is None else rounds
        return self._session.RoundSpec(
            rounds=rounds, pace=None if pairing is None else pairing.pacer(rounds),
            warmup=cfg.warmup if warmup is None else warmup,
            iterations=iterations,
            device=self._session.detect(), probe=cfg.probe,
            record_shapes=cfg.record_shapes, profile_memory=cfg.profile_memory,
            nvtx_label=f"tprof:{nodeid}" if self.nvtx else None,
            trace_metadata={"nodeid": nodeid},  # the trace is written once judged
            before_rounds=self.traces.quiet,  # no trace export beside the profiled rounds
            write_trace=trace_gzip.write_gzipped,
        )  # fmt: skip

    def _confirmed(
        self,
        test: ProfiledTest,
        found: Found,
        current: judge.Recorded,
        rule: Rule,
        again: Callable[[], Any],
        watch: Stopwatch,
    ) -> ProfiledTest:
        """The test judged, and judged once more on a second capture when the confirmation
        policy asks for it (``again`` takes it)."""
        with watch.stage("judge"):
            verdict = self.judge(test.nodeid, found, current, rule)
        verdict = policy.with_exact_note(verdict)
        # a pair is not captured again here: the base side would have to run again in step
        step = policy.next_step(verdict, confirm=self.config.confirm, in_process=not found.paired)
        if step == policy.REMEASURE:
            second = again()
            current = replace(current, tables=(second.table,), settings=second.settings)
            with watch.stage("judge"):
                repeat = self.judge(test.nodeid, found, current, rule)
            said = policy.evidence(verdict, repeat)[0]
            kept = second.table if policy.second_is_kept(said, repeat) else test.table
            test = replace(test, table=kept, confirmed=said != policy.NO_EVIDENCE)
            verdict = policy.after_remeasurement(verdict, repeat)
        return replace(test, verdict=verdict)

    def _captured(
        self, run: Callable[[], Any], rule: Rule, rounds: int, ref: float | None, judged: bool,
        pairing: Any,
    ) -> Any:  # fmt: skip
        """:meth:`_quiet_enough`, as often as ``policy.busy_retries`` allows; a recording keeps
        ``rounds`` of the rounds, undisturbed ones first, so later runs can judge against it."""
        cfg = self.config
        retries = policy.busy_retries(
            cfg.busy_retries, recording=cfg.save, judged=judged, paired=pairing is not None
        )
        result = self._quiet_enough(run, rule, retries, ref)
        if self.config.save:
            return replace(result, table=quietest(result.table, rule, rounds))
        return result

    def _quiet_enough(self, run: Callable[[], Any], rule: Rule, retries: int, ref: Any) -> Any:
        """A capture with enough undisturbed rounds to judge timing: captured again while
        ``policy.capture_again`` asks (``ref``: the baseline's quiet probe, which the judge
        reads rounds beside other processes against), all rounds joined in one table."""
        result = run()
        tables = [result.table]
        while policy.capture_again(tables, rule, retries=retries, reference=ref):
            tables.append(run().table)
        if len(tables) == 1:
            return result
        return replace(result, table=concat_rounds(tables))

    def borrowed_rounds(self, *, rounds: int | None, warmup: int | None) -> Any:
        """A profiler session for another harness's rounds (a ``borrowed.BorrowedRounds``):
        it profiles up to ``warmup + rounds`` of the rounds that harness keeps."""
        cfg = self.config
        budget = (cfg.rounds if rounds is None else rounds) + (
            cfg.warmup if warmup is None else warmup
        )
        return self._borrowed.BorrowedRounds(
            budget=budget, probe=cfg.probe, record_shapes=cfg.record_shapes,
            before_start=self.traces.quiet, write_trace=trace_gzip.write_gzipped,
        )  # fmt: skip

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
        test = replace(self._tested(nodeid, result, protocol), tracer=line_tracer())
        notes = ("no work census: it would call the benchmarked function more often",)
        if cfg.save:
            verdict = outcome.recorded(notes)
            return self._kept_trace(replace(test, verdict=verdict), result, watch)
        baseline, error = self.load(nodeid)
        if paired_run.active(self.pairing) is not None:  # pytest-benchmark owns its rounds
            self.pairing.solo(nodeid, "pytest-benchmark's rounds are not paired")
        current = judge.Recorded(
            tables=(result.table,), fingerprint=self.fingerprint, protocol=protocol,
            tracer=test.tracer, settings=test.settings,
        )  # fmt: skip
        found = Found(baseline=baseline, error=error)
        verdict = self.judge(nodeid, found, current, rule or cfg.rule).with_notes(*notes)
        test = paired_run.labelled(replace(test, verdict=verdict), self.pairing, None)
        test = self._kept_trace(test, result, watch)
        return self.side_by_side(test) if verdict.regressed else test

    def _tested(self, nodeid: str, result: Any, protocol: Mapping[str, Any]) -> ProfiledTest:
        """The record of a capture, before any verdict."""
        return ProfiledTest(
            nodeid=nodeid,
            verdict=TestVerdict(verdict=NO_BASELINE, reason=""),
            table=result.table,
            trace=None if result.trace_path is None else str(result.trace_path),
            trace_problem=result.trace_problem,
            baseline=str(self.baseline_path(nodeid)),
            warmup_used=result.warmup_used,
            iterations=result.iterations,
            rounds=result.table.rounds,
            reduction=result.reduction,
            environment=self.fingerprint.to_dict(),
            protocol={**protocol, "warmup_used": result.warmup_used},
            settings=dict(result.settings),
        )

    def _kept_trace(self, test: ProfiledTest, capture: Any, watch: Stopwatch) -> ProfiledTest:
        """The test naming its trace when its verdict wants one (``store.run_traces``)."""
        return self.traces.kept(test, capture.write_trace, watch, later=capture.trace_later)

    def side_by_side(self, test: ProfiledTest) -> ProfiledTest:
        """With the baseline's trace kept, write both runs into one trace, regressed ops marked."""
        return trace_files.with_side_by_side(test, self.baseline_trace_path(test.nodeid))

    def judge(self, nodeid: str, found: Found, current: judge.Recorded, rule: Rule) -> TestVerdict:
        """The verdict on the current run given what was found for the test."""
        return verdict_on(
            found, current, rule,
            lambda: without_baseline(self.config, self.env_key, current, nodeid, rule),
        )  # fmt: skip

    def save(self, test: ProfiledTest) -> ProfiledTest:
        """Record the test's table as a new session of its baseline (atomic write)."""
        if test.table is None:
            return test
        watch = Stopwatch()
        with watch.stage("save"):
            saved = self._save(test)
        return replace(saved, costs=saved.costs.plus(watch.costs()))

    def _save(self, test: ProfiledTest) -> ProfiledTest:
        assert test.table is not None
        path = self.baseline_path(test.nodeid)
        if test.tracer is not None:  # its slowed timings would teach every later run's floors
            raise BaselineError(
                f"{path}: not recorded: its timings are the tracer's ({test.tracer}); "
                "record baselines without coverage (drop --cov or add --no-cov; "
                "not under `coverage run`)"
            )
        session = schema.Session(
            table=test.table,
            recorded_at=baselines.now_iso(),
            warmup_used=test.warmup_used,
            soft=dict(self.fingerprint.soft),
            work=test.work,
            settings=dict(test.settings),
        )
        protocol = {k: v for k, v in test.protocol.items() if k != "warmup_used"}
        with paths.locked(path):  # read under the lock: a concurrent save's session is kept
            existing, error = self.load(test.nodeid)
            unlike = self._unlike_window(existing, test, protocol)
            updated, what = window.with_session(
                None if self.config.reset else existing,
                nodeid=test.nodeid,
                fingerprint=self.fingerprint,
                protocol=protocol,
                session=session,
                window=self.config.window,
            )
            what = baselines.save_note(
                what, existing, len(updated.sessions), damaged=error is not None,
                reset=self.config.reset, unlike=unlike, nodeid=test.nodeid,
            )  # fmt: skip
            holders = judge.census_holders(test.table.meta.get("parents", {}), test.work)
            baselines.save_baseline(path, replace(updated, holders=holders))
        if self.config.save_trace and test.trace and Path(test.trace).is_file():
            trace_files.keep_beside_baseline(
                Path(test.trace), self.baseline_trace_path(test.nodeid)
            )
            what += " (with its trace)"
        disturbed = busy_of(test.table, self.config.rule)
        test = replace(test, save_note=f"{what}: {path}")
        if disturbed is not None and disturbed.disturbed:
            note = f"recorded on a busy machine: {disturbed.describe()}; judging leaves those out"
            test = replace(test, verdict=test.verdict.with_notes(note))
        return test

    def _unlike_window(
        self, existing: schema.Baseline | None, test: ProfiledTest, protocol: Mapping[str, Any]
    ) -> str | None:
        """How the session about to be saved differs in timing from the window it joins; not
        asked of a window of fewer sessions than advised, whose floors are still narrow."""
        if test.table is None or existing is None:
            return None
        if len(existing.sessions) < baselines.SESSIONS_ADVISED:
            return None
        current = judge.Recorded(
            tables=(test.table,), fingerprint=self.fingerprint, protocol=protocol,
            work=test.work, hosts=(self.fingerprint.soft.get("host"),), settings=test.settings,
        )  # fmt: skip
        found = Found(baseline=existing, error=None)
        return judge.unlike_window(self.judge(test.nodeid, found, current, self.config.rule))
