"""Run a body for warm-up and measured rounds under one ``torch.profiler`` session.

Each round is a ``ProfilerStep#N`` annotation holding the drift probe then the body, its calls
bracketed by :class:`~tprof_engine.capture.load.LoadMeter`'s readings; the events come back as
plain records (:class:`~tprof_engine.model.records.OpTable`, numbers, paths): torch objects
never leave this stage.
"""

from __future__ import annotations

import inspect
import json
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
from torch.profiler import ProfilerActivity, profile, record_function

from tprof_engine.capture import settings as torch_settings
from tprof_engine.capture import torch_api
from tprof_engine.capture.backends import (
    CPU,
    DeviceBackend,
    device_range,
    with_family,
)
from tprof_engine.capture.backends import (
    detect as detect,  # this process's device, for the runner's round specs
)
from tprof_engine.capture.export import TraceWrite, metadata_for_trace, trace_writer
from tprof_engine.capture.facts import REDUCTION_PATH, profiler_active
from tprof_engine.capture.in_round import Probe, closing_sync, probe, turn_arguments
from tprof_engine.capture.kineto import (
    events_from_kineto,
    started_quietly,
    table_from_function_events,
)
from tprof_engine.capture.load import LoadMeter, round_counters, round_readings
from tprof_engine.model.arrays import FloatArray
from tprof_engine.model.costs import Costs, Stopwatch
from tprof_engine.model.errors import CaptureError, ConfigError
from tprof_engine.model.limits import MAX_ITERATIONS, ROUNDS_LIMIT, WARMUP_LIMIT, number_problem
from tprof_engine.model.records import (
    OpTable,
    RoundLoad,
)
from tprof_engine.reduce.ops import (
    ROUND_PREFIX,
    drop_leading_rounds,
    reduce_events,
)

MAX_WARMUP = 50  # bound on the automatic warm-up extension
# Warm-up rounds run under the profiler: the last one, whose ops warmup_settled compares with
# the first measured round's, and which takes the profiler's own first-round costs. The
# earlier ones run before it starts: their events were read and dropped (2 of 23 rounds).
PROFILED_WARMUP = 1
PROBE_VERSION = "cpu-mm96x4-v1"


@dataclass(frozen=True, slots=True, kw_only=True)
class CaptureResult:
    """What one profiled run produced: the op table, the trace, and how it was obtained."""

    table: OpTable
    value: Any = None
    warmup_used: int
    iterations: int
    trace_path: Path | None
    trace_problem: str = ""  # why the trace asked for wasn't written (trace_path is then None)
    reduction: str  # "raw-events" or "key_averages"
    costs: Costs  # rounds, profiler start and stop, reduction, export
    device_family: str | None  # the family spec key of its device times (None: CPU alone)
    warmup_settled: bool  # the last warm-up round called the ops of the first measured one
    meta: Mapping[str, Any] = field(default_factory=dict)
    # The numeric settings in force at the rounds' end (model.settings; empty: not read).
    settings: Mapping[str, Any] = field(default_factory=dict)
    # Writes this capture's trace to a path, later (once the verdict says it is wanted):
    # (the path written or None, why not).  It holds the profiler session's events.
    write_trace: Callable[[Path], tuple[Path | None, str]] | None = field(
        default=None, repr=False, compare=False
    )
    # Whether ``write_trace`` may run later, on the trace writer's thread (False: a distributed
    # test's rank traces, which sit in a scratch folder its source removes when it is done).
    trace_later: bool = True


def start_up_profiler() -> float:
    """Seconds to start and stop one empty profiler session: what a process's first session
    costs beyond its rounds (kineto's own set-up), paid here instead of in a test's stages."""
    t0 = time.perf_counter()
    if not profiler_active():
        with started_quietly(profile(activities=[ProfilerActivity.CPU])):
            pass
    return time.perf_counter() - t0


def calibrate_iterations(
    fn: Callable[[], Any],
    *,
    min_round_us: float,
    max_iterations: int = MAX_ITERATIONS,
    device: DeviceBackend = CPU,
) -> int:
    """Calls of ``fn`` per round so a round lasts at least ``min_round_us`` (unprofiled timing),
    rounded up to the 1-2-5 series (1, 2, 5, 10, 20, …): two machines of somewhat different
    speed then choose the same count, so their sessions share a protocol and merge."""
    if min_round_us <= 0:
        return 1
    fn()
    device.synchronize()
    best = math.inf
    for _ in range(3):
        t0 = time.perf_counter_ns()
        fn()
        device.synchronize()
        best = min(best, (time.perf_counter_ns() - t0) / 1000.0)
    if best >= min_round_us:
        return 1
    return min(max_iterations, on_grid(math.ceil(min_round_us / max(best, 0.01))))


def on_grid(n: int) -> int:
    """The smallest of 1, 2, 5, 10, 20, 50, … that is at least ``n``."""
    scale = 1
    while True:
        for step in (1, 2, 5):
            if step * scale >= n:
                return step * scale
        scale *= 10


@dataclass(frozen=True, slots=True, kw_only=True)
class Call:
    """The body as each round calls it: ``setup`` runs before each round, outside it, and may
    return ``(args, kwargs)`` for that round."""

    fn: Callable[..., Any]
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    setup: Callable[[], Any] | None = None

    def arguments(self) -> tuple[tuple[Any, ...], Mapping[str, Any]]:
        if self.setup is not None:
            prepared = self.setup()
            if prepared is not None:
                return split_setup(prepared)
        return self.args, self.kwargs


@dataclass(frozen=True, slots=True, kw_only=True)
class RoundSpec:
    """What a capture's rounds are, in one place: how many, what each holds and records, and
    where the trace goes."""

    rounds: int
    warmup: int
    iterations: int = 1  # calls of the body per round
    # The device profiled beside the CPU, synchronized at each round's end (CPU: none).
    device: DeviceBackend = CPU
    probe: bool = True  # the drift probe at each round's start
    record_shapes: bool = False
    profile_memory: bool = False
    nvtx_label: str | None = None  # an NVTX range per capture and round, for Nsight
    trace_path: Path | None = None
    trace_metadata: Mapping[str, Any] = field(default_factory=dict)
    # Called before the profiled rounds start: waits for the trace writer, whose exports must
    # not share a round's CPU, memory bandwidth and GIL (store.trace_writer).
    before_rounds: Callable[[], None] | None = field(default=None, compare=False)
    # Paces the rounds with another process's (tprof ab: tprof_engine.pairing.Pacer): before(j)
    # and after(j) around each (j < 0: a profiled warm-up round), finish() after the last.
    # before(j) says whether round j follows the peer's rounds: the body then runs once first,
    # unmeasured.
    pace: Any = field(default=None, compare=False)
    # Writes the trace (store.trace_gzip.write_gzipped, handed in by the caller; None: none).
    write_trace: TraceWrite | None = field(default=None, compare=False)

    def check(self) -> None:
        """A ConfigError naming the first count out of range."""
        for key, value, low, high in (
            ("rounds", self.rounds, 2, ROUNDS_LIMIT),
            ("warmup", self.warmup, 0, WARMUP_LIMIT),
        ):
            problem = number_problem(value, minimum=low, maximum=high, integer=True)
            if problem is not None:
                raise ConfigError(f"'{key}' {problem}")
        if self.iterations < 1:
            raise ConfigError(f"'iterations' must be >= 1 (got {self.iterations})")
        if self.trace_path is not None and self.write_trace is None:
            raise ConfigError(
                f"'trace_path' ({self.trace_path}) needs 'write_trace', the function that "
                "writes it: pass write_trace=tprof_engine.store.trace_gzip.write_gzipped"
            )


# A capture of one process alone: its rounds paced by nothing.
_NOT_PACED = SimpleNamespace(before=lambda j: False, after=lambda j: None, finish=lambda: None)


def capture(
    fn: Callable[..., Any],
    args: tuple[Any, ...] = (),
    kwargs: Mapping[str, Any] | None = None,
    *,
    rounds: int,
    warmup: int,
    setup: Callable[[], Any] | None = None,
    iterations: int = 1,
    trace_path: Path | None = None,
    record_shapes: bool = False,
    device: DeviceBackend | None = None,
    probe: bool = True,
    trace_metadata: Mapping[str, Any] | None = None,
    nvtx_label: str | None = None,
    profile_memory: bool = False,
    write_trace: TraceWrite | None = None,
) -> CaptureResult:
    """Profile ``fn(*args, **kwargs)`` for ``warmup`` + ``rounds`` rounds in one session.

    Each round is a ``ProfilerStep#N`` annotation (so trace tools see iterations); inside it
    the drift probe runs first (``tprof::probe#N``), then ``iterations`` calls of the body,
    then a device synchronize when a device is profiled (``tprof::sync#N``, in no family).
    ``setup`` runs before each round,
    outside the round, and may return ``(args, kwargs)`` for it.  If the ops called in the
    last warm-up round differ from those of the first measured round, warm-up is extended
    (up to ``MAX_WARMUP`` rounds) by profiling again.  With ``nvtx_label`` the capture is
    an NVTX range of that name and each round one named ``<label>:round<N>`` (warm-up rounds
    ``<label>:warmup<N>``), for Nsight; see :func:`nvtx_available`.  ``device`` is the
    backend profiled beside the CPU (None: this process's, :func:`~.backends.detect`).  The
    trace goes to ``trace_path`` through ``write_trace`` (``store.trace_gzip.write_gzipped``).
    """
    spec = RoundSpec(
        rounds=rounds,
        warmup=warmup,
        iterations=iterations,
        device=detect() if device is None else device,
        probe=probe,
        record_shapes=record_shapes,
        profile_memory=profile_memory,
        nvtx_label=nvtx_label,
        trace_path=trace_path,
        trace_metadata=dict(trace_metadata or {}),
        write_trace=write_trace,
    )
    return capture_rounds(Call(fn=fn, args=args, kwargs=dict(kwargs or {}), setup=setup), spec)


def capture_rounds(
    call: Call, spec: RoundSpec, *, agree: Callable[[bool], bool] | None = None
) -> CaptureResult:
    """:func:`capture` of a call and a spec: warm-up extended while the ops still change.

    ``agree`` turns this process's "warm-up settled" into every process's (the ranks of a
    distributed test must extend it together, or their collectives stop matching)."""
    spec.check()
    if profiler_active():
        raise CaptureError(
            "a torch profiler is already running; tprof opens its own profiler session, "
            "so call tprof outside any torch.profiler.profile() block"
        )
    if agree is None and spec.pace is not None:  # tprof ab's two sides extend it together
        agree = spec.pace.agree
    warm = spec.warmup
    spent = Costs()
    while True:
        with device_range(spec.device, spec.nvtx_label):
            result = _capture_once(call, replace(spec, warmup=warm))
        spent = spent.plus(result.costs)
        settled = result.warmup_settled if agree is None else agree(result.warmup_settled)
        result = replace(result, costs=spent, warmup_settled=settled)
        if settled or warm >= MAX_WARMUP or (warm == 0 and spec.warmup == 0):
            break
        warm = min(MAX_WARMUP, max(2 * warm, warm + 2))
    if not result.table.calls.any():  # nothing to judge: every later run would read unchanged
        raise CaptureError(f"the profiled body ran no torch ops{_why_no_ops(result.value)}")
    return result


def _why_no_ops(value: Any) -> str:
    """Why a body that ran no ops may have run nothing at all, from what it returned."""
    if inspect.isgenerator(value):
        return (
            " (it returned a generator, which runs nothing until it is iterated: iterate it "
            "inside the body, e.g. list(gen()))"
        )
    if inspect.iscoroutine(value):
        return (
            " (it returned a coroutine, which runs nothing until it is awaited: profile a "
            "plain function)"
        )
    if callable(value):
        return " (it returned a callable: call it inside the body instead of returning it)"
    return "; profile a function that runs torch code"


def _capture_once(call: Call, spec: RoundSpec) -> CaptureResult:
    watch = Stopwatch()
    profiled = min(spec.warmup, PROFILED_WARMUP)
    prof, wall_us, (load, starts_ns), value = _profile_rounds(call, spec, watch, profiled)
    in_force = torch_settings.current()  # what the body chose, once it has run

    with watch.stage("reduce"):
        if REDUCTION_PATH == "raw-events":
            table = reduce_events(
                events_from_kineto(prof, spec.device.activity_kind), wall_us=wall_us
            )
        else:
            table = table_from_function_events(prof, wall_us=wall_us)
        table = with_family(replace(table, load=load), spec.device)
        settled = warmup_settled(table, profiled)
        table = drop_leading_rounds(table, profiled)

    later = trace_writer(prof, round_counters(starts_ns, wall_us, load), spec.write_trace)
    path = spec.trace_path
    with watch.stage("export"):
        written, problem = (None, "") if path is None or later is None else later(path)
    return CaptureResult(
        table=table,
        value=value,
        warmup_used=spec.warmup,
        iterations=spec.iterations,
        trace_path=written,
        trace_problem=problem,
        reduction=REDUCTION_PATH,
        costs=watch.costs(),
        device_family=table.device_family,
        warmup_settled=settled,
        meta={"events": table.meta.get("events", 0)},
        settings=in_force,
        write_trace=later,
    )


def _profile_rounds(
    call: Call, spec: RoundSpec, watch: Stopwatch, profiled_warmup: int
) -> tuple[profile, FloatArray, tuple[RoundLoad, list[int]], Any]:
    """Run the spec's warm-up rounds, the last ``profiled_warmup`` of them and the measured
    rounds in one profiler session.  Returns the session, each profiled round's wall time in
    µs, what the machine let each run (with each one's start on the wall clock), and the
    body's last value; the spec's trace metadata goes into the session's trace, one JSON
    value per key, and so do the rounds' readings (``tprof_rounds``).  ``watch`` gets the
    rounds' seconds, the profiler's start and stop, and the wait for an earlier test's trace
    (``export``).
    """
    early = spec.warmup - profiled_warmup
    rounds = profiled_warmup + spec.rounds
    t_early = time.perf_counter()
    value, nvtx_rounds = _unprofiled_rounds(call, spec, early)
    drift_probe = Probe(spec.device) if spec.probe else None
    wall_us = np.zeros(rounds)
    waited = _writer_done(spec)
    t_start = time.perf_counter()
    watch.add("rounds", t_start - t_early - waited)
    watch.add("export", waited)
    with (
        LoadMeter(spec.device.meter()) as meter,
        started_quietly(_session(spec)) as prof,
    ):
        pace = spec.pace if spec.pace is not None else _NOT_PACED
        t_first = time.perf_counter()
        for r in range(rounds):
            warm_us = wall_us[r - 1] / spec.iterations if r > 0 else None
            args, kwargs = turn_arguments(call, pace, r - profiled_warmup, spec.device, r, warm_us)
            with (
                device_range(spec.device, nvtx_rounds[r] if nvtx_rounds else None),
                record_function(f"{ROUND_PREFIX}{r}"),
            ):
                probe(drift_probe, spec.device, r)
                meter.before()
                t0 = time.perf_counter_ns()
                for _ in range(spec.iterations):
                    value = call.fn(*args, **kwargs)
                closing_sync(spec.device, r)
                wall_us[r] = (time.perf_counter_ns() - t0) / 1000.0
                meter.after()
            pace.after(r - profiled_warmup)
        pace.finish()
        t_last = time.perf_counter()
        load = meter.result()
        _add_metadata(prof, spec, profiled_warmup, round_readings(wall_us, load))
    watch.add("rounds", t_last - t_first)
    watch.add("profiler", (t_first - t_start) + (time.perf_counter() - t_last))
    return prof, wall_us, (load, meter.starts_ns), value


def _unprofiled_rounds(call: Call, spec: RoundSpec, early: int) -> tuple[Any, tuple[str, ...]]:
    """The first ``early`` warm-up rounds, before the profiler starts (the body's calls alone):
    the last value, and the NVTX names of the rounds left to run."""
    names = _nvtx_round_names(spec.nvtx_label, spec.warmup, spec.rounds)
    value: Any = None
    for r in range(early):
        args, kwargs = call.arguments()
        with device_range(spec.device, names[r] if names else None):
            for _ in range(spec.iterations):
                value = call.fn(*args, **kwargs)
            spec.device.synchronize()
    return value, names[early:]


def _writer_done(spec: RoundSpec) -> float:
    """Seconds waited for ``spec.before_rounds`` (the trace writer's last export): no export
    shares a profiled round."""
    if spec.before_rounds is None:
        return 0.0
    t0 = time.perf_counter()
    spec.before_rounds()
    return time.perf_counter() - t0


def _add_metadata(
    prof: profile, spec: RoundSpec, profiled_warmup: int, readings: list[dict[str, Any]]
) -> None:
    """The trace's metadata: how it was recorded, of which test, and each round's readings."""
    metadata = metadata_for_trace(
        profiled_warmup, spec.rounds, spec.iterations, spec.trace_metadata
    )
    with torch_api.own_warnings_quiet():
        for key, val in {**metadata, "tprof_rounds": readings}.items():
            prof.add_metadata_json(key, json.dumps(val, sort_keys=True))


def _session(spec: RoundSpec) -> profile:
    return profile(
        activities=spec.device.activities(),
        record_shapes=spec.record_shapes,
        profile_memory=spec.profile_memory,
        experimental_config=spec.device.experimental_config(),
    )


def _nvtx_round_names(label: str | None, warmup: int, rounds: int) -> tuple[str, ...]:
    """The NVTX name of each round of a capture: warm-up rounds first, then measured ones."""
    if label is None:
        return ()
    return tuple(f"{label}:warmup{r}" for r in range(warmup)) + tuple(
        f"{label}:round{r}" for r in range(rounds)
    )


def split_setup(prepared: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    if (
        isinstance(prepared, tuple)
        and len(prepared) == 2
        and isinstance(prepared[0], tuple)
        and isinstance(prepared[1], dict)
    ):
        return prepared[0], prepared[1]
    raise ConfigError(
        f"'setup' must return None or (args_tuple, kwargs_dict) (got {type(prepared).__name__})"
    )


def warmup_settled(table: OpTable, warmup: int) -> bool:
    """Whether the last warm-up round called the same ops as the first measured round."""
    if warmup == 0 or table.rounds <= warmup:
        return True
    return bool(np.array_equal(table.calls[:, warmup - 1], table.calls[:, warmup]))
