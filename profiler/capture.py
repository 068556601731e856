"""Run a callable for warm-up and measured rounds under one torch.profiler session.

This is the only module that imports torch.  Everything it returns is plain data
(:class:`~tprof_engine.records.OpTable`, numbers, paths): torch objects never leave it.
"""

from __future__ import annotations

import contextlib
import errno
import gzip
import inspect
import json
import math
import os
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import torch
from torch.profiler import ProfilerActivity, profile, record_function

from tprof_engine import files
from tprof_engine.busy import LoadMeter
from tprof_engine.checks import ROUNDS_LIMIT, WARMUP_LIMIT, number_problem
from tprof_engine.errors import CaptureError, ConfigError
from tprof_engine.records import (
    KIND_ANNOTATION,
    KIND_ASYNC,
    KIND_DEVICE,
    KIND_IGNORED,
    KIND_MEMORY,
    KIND_OP,
    KIND_SYNC,
    EventArrays,
    FloatArray,
    IntArray,
    OpTable,
    RoundLoad,
)
from tprof_engine.reduce import (
    FILTERED_NAMES,
    PROBE_PREFIX,
    ROUND_PREFIX,
    drop_leading_rounds,
    keep_rounds,
    reduce_events,
)
from tprof_engine.store import MAX_ITERATIONS

_CPU = torch.autograd.DeviceType.CPU  # type: ignore[attr-defined]
_BoolArray = npt.NDArray[np.bool_]
MAX_WARMUP = 50  # bound on the automatic warm-up extension
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
    capture_s: float
    reduce_s: float
    cuda: bool
    warmup_settled: bool  # the last warm-up round called the ops of the first measured one
    meta: Mapping[str, Any] = field(default_factory=dict)


@contextlib.contextmanager
def intra_op_threads(n: int) -> Iterator[None]:
    """Run with ``n`` intra-op threads (0 = leave torch's setting), restoring it afterwards.

    On a shared machine a thread pool's barrier waits for its slowest worker, and a worker
    that loses its core stalls the op for a whole time slice: rounds 1000x slower appear.
    One thread measures each op's own work, which is what a regression changes.
    """
    if n <= 0:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def cuda_available() -> bool:
    return bool(torch.cuda.is_available())


def profiler_active() -> bool:
    """Whether a torch profiler (ours or the user's) is collecting right now."""
    return bool(torch.autograd.profiler._is_profiler_enabled)


def raw_events_supported() -> bool:
    """Whether this torch exposes the raw kineto events the fast reduction reads."""
    try:
        from torch._C._autograd import _KinetoEvent
    except ImportError:
        return False
    needed = (
        "name",
        "start_ns",
        "end_ns",
        "start_thread_id",
        "end_thread_id",
        "device_type",
        "correlation_id",
        "linked_correlation_id",
        "is_user_annotation",
        "is_async",
    )
    return all(hasattr(_KinetoEvent, n) for n in needed)


REDUCTION_PATH = "raw-events" if raw_events_supported() else "key_averages"


class _Probe:
    """A fixed CPU workload (≈200 µs single-threaded) timed in every round to track drift."""

    def __init__(self, cuda: bool) -> None:
        g = torch.Generator().manual_seed(0)
        self.a = torch.randn(96, 96, generator=g)
        self.b = torch.randn(96, 96, generator=g)
        self.cuda = cuda
        if cuda:
            self.ga = self.a.cuda()
            self.gb = self.b.cuda()

    def __call__(self) -> None:
        x = self.a
        for _ in range(4):
            x = torch.tanh(torch.mm(x, self.b) * 0.01)
        if self.cuda:
            y = self.ga
            for _ in range(4):
                y = torch.tanh(torch.mm(y, self.gb) * 0.01)


def _sync(cuda: bool) -> None:
    if cuda:
        torch.cuda.synchronize()


def calibrate_iterations(
    fn: Callable[[], Any],
    *,
    min_round_us: float,
    max_iterations: int = MAX_ITERATIONS,
    cuda: bool = False,
) -> int:
    """Calls of ``fn`` per round so a round lasts at least ``min_round_us`` (unprofiled timing)."""
    if min_round_us <= 0:
        return 1
    fn()
    _sync(cuda)
    best = math.inf
    for _ in range(3):
        t0 = time.perf_counter_ns()
        fn()
        _sync(cuda)
        best = min(best, (time.perf_counter_ns() - t0) / 1000.0)
    if best >= min_round_us:
        return 1
    return int(min(max_iterations, math.ceil(min_round_us / max(best, 0.01))))


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
    use_cuda: bool | None = None,
    probe: bool = True,
    trace_metadata: Mapping[str, Any] | None = None,
    nvtx_label: str | None = None,
    profile_memory: bool = False,
) -> CaptureResult:
    """Profile ``fn(*args, **kwargs)`` for ``warmup`` + ``rounds`` rounds in one session.

    Each round is a ``ProfilerStep#N`` annotation (so trace tools see iterations); inside it
    the drift probe runs first (``tprof::probe#N``), then ``iterations`` calls of the body,
    then a device synchronize when CUDA is profiled.  ``setup`` runs before each round,
    outside the round, and may return ``(args, kwargs)`` for it.  If the ops called in the
    last warm-up round differ from those of the first measured round, warm-up is extended
    (up to ``MAX_WARMUP`` rounds) by profiling again.  With ``nvtx_label`` the capture is
    an NVTX range of that name and each round one named ``<label>:round<N>`` (warm-up rounds
    ``<label>:warmup<N>``), for Nsight; see :func:`nvtx_available`.
    """
    for key, value, low, high in (
        ("rounds", rounds, 2, ROUNDS_LIMIT),
        ("warmup", warmup, 0, WARMUP_LIMIT),
    ):
        if (problem := number_problem(value, minimum=low, maximum=high, integer=True)) is not None:
            raise ConfigError(f"'{key}' {problem}")
    if iterations < 1:
        raise ConfigError(f"'iterations' must be >= 1 (got {iterations})")
    if profiler_active():
        raise CaptureError(
            "a torch profiler is already running; tprof opens its own profiler session, "
            "so call tprof outside any torch.profiler.profile() block"
        )
    cuda = cuda_available() if use_cuda is None else use_cuda
    kwargs = dict(kwargs or {})
    warm = warmup
    while True:
        with _nvtx_range(nvtx_label):
            result = _capture_once(
                fn, args, kwargs, rounds=rounds, warmup=warm, setup=setup,
                iterations=iterations, trace_path=trace_path, record_shapes=record_shapes,
                cuda=cuda, probe=probe, trace_metadata=trace_metadata, nvtx_label=nvtx_label,
                profile_memory=profile_memory,
            )  # fmt: skip
        if result.warmup_settled or warm >= MAX_WARMUP or (warm == 0 and warmup == 0):
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


def _capture_once(
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    *,
    rounds: int,
    warmup: int,
    setup: Callable[[], Any] | None,
    iterations: int,
    trace_path: Path | None,
    record_shapes: bool,
    cuda: bool,
    probe: bool,
    trace_metadata: Mapping[str, Any] | None,
    nvtx_label: str | None = None,
    profile_memory: bool = False,
) -> CaptureResult:
    drift_probe = _Probe(cuda) if probe else None
    metadata = _trace_metadata(warmup, rounds, iterations, trace_metadata)
    t_start = time.perf_counter()
    prof, wall_us, (load, starts_ns), value = _profile_rounds(
        fn, args, kwargs, rounds=warmup + rounds, setup=setup, iterations=iterations, cuda=cuda,
        drift_probe=drift_probe, record_shapes=record_shapes, metadata=metadata,
        nvtx_rounds=_nvtx_round_names(nvtx_label, warmup, rounds),
        profile_memory=profile_memory,
    )  # fmt: skip
    capture_s = time.perf_counter() - t_start

    t_reduce = time.perf_counter()
    if REDUCTION_PATH == "raw-events":
        table = reduce_events(events_from_kineto(prof), wall_us=wall_us)
    else:
        table = table_from_function_events(prof, wall_us=wall_us)
    table = replace(table, load=load)
    settled = _settled(table, warmup)
    table = drop_leading_rounds(table, warmup)
    reduce_s = time.perf_counter() - t_reduce

    counters = round_counters(starts_ns, wall_us, load)
    written, problem = (
        (None, "") if trace_path is None else _write_trace(prof, Path(trace_path), counters)
    )
    return CaptureResult(
        table=table,
        value=value,
        warmup_used=warmup,
        iterations=iterations,
        trace_path=written,
        trace_problem=problem,
        reduction=REDUCTION_PATH,
        capture_s=capture_s,
        reduce_s=reduce_s,
        cuda=cuda,
        warmup_settled=settled,
        meta={"events": table.meta.get("events", 0)},
    )


def _profile_rounds(
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    *,
    rounds: int,
    setup: Callable[[], Any] | None,
    iterations: int,
    cuda: bool,
    drift_probe: _Probe | None,
    record_shapes: bool,
    metadata: Mapping[str, Any],
    nvtx_rounds: tuple[str, ...] = (),
    profile_memory: bool = False,
) -> tuple[profile, FloatArray, tuple[RoundLoad, list[int]], Any]:
    """Run ``rounds`` rounds in one profiler session.

    Returns the session, each round's wall time in µs, what the machine let each round run
    (with each round's start on the wall clock), and the body's last value; ``metadata``
    goes into the session's trace, one JSON value per key, and so do the rounds' readings
    (``tprof_rounds``).
    """
    activities = [ProfilerActivity.CPU]
    if cuda:
        activities.append(ProfilerActivity.CUDA)
    wall_us = np.zeros(rounds)
    value: Any = None
    with (
        LoadMeter() as meter,
        started_quietly(
            profile(
                activities=activities,
                record_shapes=record_shapes,
                profile_memory=profile_memory,
                experimental_config=_device_config(cuda),
            )
        ) as prof,
    ):
        for r in range(rounds):
            call_args, call_kwargs = args, kwargs
            if setup is not None:
                prepared = setup()
                if prepared is not None:
                    call_args, call_kwargs = _split_setup(prepared)
            with (
                _nvtx_range(nvtx_rounds[r] if nvtx_rounds else None),
                record_function(f"{ROUND_PREFIX}{r}"),
            ):
                if drift_probe is not None:
                    with record_function(f"{PROBE_PREFIX}{r}"):
                        drift_probe()
                        _sync(cuda)
                meter.before()
                t0 = time.perf_counter_ns()
                for _ in range(iterations):
                    value = fn(*call_args, **call_kwargs)
                _sync(cuda)
                wall_us[r] = (time.perf_counter_ns() - t0) / 1000.0
                meter.after()
        load = meter.result()
        for key, val in {**metadata, "tprof_rounds": round_readings(wall_us, load)}.items():
            prof.add_metadata_json(key, json.dumps(val, sort_keys=True))
    return prof, wall_us, (load, meter.starts_ns), value


def round_counters(
    starts_ns: list[int], wall_us: Any, load: RoundLoad | None
) -> list[tuple[int, dict[str, Any]]]:
    """Each round's readings as a counter sample at its start, for the trace's counter track."""
    if load is None:
        return []
    rows = round_readings(wall_us, load)
    keys = ("wall_us", "cpu_us", "queued_us", "neighbours")
    return [
        (start, {k: row[k] for k in keys if k in row})
        for start, row in zip(starts_ns, rows, strict=False)
    ]


def round_readings(wall_us: Any, load: RoundLoad) -> list[dict[str, Any]]:
    """Each round's readings as the trace's ``tprof_rounds`` metadata (warm-up rounds first)."""
    parts = load.to_dict()
    out = []
    for r in range(len(wall_us)):
        row = {"round": r, "wall_us": round(float(wall_us[r]), 3)}
        row.update({key: values[r] for key, values in parts.items() if isinstance(values, list)})
        out.append(row)
    return out


KINETO_LINE_PREFIXES = (b"USDT:",)  # kineto's own start/stop markers, written to fd 2


@contextlib.contextmanager
def started_quietly(prof: profile) -> Iterator[profile]:
    """Start and stop ``prof`` without kineto's ``USDT:`` lines reaching the user's stderr.

    torch 2.13's kineto writes one such line to file descriptor 2 when a session starts and
    one when it stops, whatever ``KINETO_LOG_LEVEL`` says; in a failing test they read as the
    test's own stderr.  Only the start and the stop are filtered: what the body writes while
    profiled passes untouched.
    """
    with kineto_lines_dropped():
        prof.__enter__()
    try:
        yield prof
    finally:
        with kineto_lines_dropped():
            prof.__exit__(None, None, None)


@contextlib.contextmanager
def kineto_lines_dropped() -> Iterator[None]:
    """Send fd 2 to a scratch file for the block, then pass on every line but kineto's."""
    sys.stderr.flush()
    try:
        saved = os.dup(2)
    except OSError:  # no fd 2 to redirect (a closed stderr): nothing can be printed anyway
        yield
        return
    with tempfile.TemporaryFile() as scratch:
        os.dup2(scratch.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            scratch.seek(0)
            kept = b"".join(line for line in scratch if not line.startswith(KINETO_LINE_PREFIXES))
            while kept:
                kept = kept[os.write(2, kept) :]


def nvtx_available() -> bool:
    """Whether this torch can emit NVTX ranges (CUDA builds; the CPU build raises)."""
    try:
        torch.cuda.nvtx.range_push("tprof:check")
    except RuntimeError:  # "NVTX functions not installed. Are you sure you have a CUDA build?"
        return False
    torch.cuda.nvtx.range_pop()
    return True


@contextlib.contextmanager
def _nvtx_range(name: str | None) -> Iterator[None]:
    """An NVTX range named ``name`` around the block; nothing when ``name`` is None."""
    if name is None:
        yield
        return
    torch.cuda.nvtx.range_push(name)
    try:
        yield
    finally:
        torch.cuda.nvtx.range_pop()


def _nvtx_round_names(label: str | None, warmup: int, rounds: int) -> tuple[str, ...]:
    """The NVTX name of each round of a capture: warm-up rounds first, then measured ones."""
    if label is None:
        return ()
    return tuple(f"{label}:warmup{r}" for r in range(warmup)) + tuple(
        f"{label}:round{r}" for r in range(rounds)
    )


def _device_config(cuda: bool) -> Any:
    """Kineto's sync events (which op made the host wait) and each copy's metadata (its
    bytes), on device runs only; None where this torch has no such options."""
    config = getattr(torch._C._profiler, "_ExperimentalConfig", None)
    if not cuda or config is None:
        return None
    try:
        return config(enable_cuda_sync_events=True, expose_kineto_event_metadata=True)
    except TypeError:  # an older torch without one of them
        return None


def _trace_metadata(
    warmup: int, rounds: int, iterations: int, test: Mapping[str, Any] | None
) -> dict[str, Any]:
    """The trace's top-level keys that say how it was recorded (and of which test)."""
    meta: dict[str, Any] = {
        "tprof": {"warmup": warmup, "rounds": rounds, "iterations": iterations},
        "distributedInfo": {"rank": 0, "world_size": 1},
    }
    if test:
        meta["tprof_test"] = dict(test)
    return meta


def _write_trace(
    prof: profile, path: Path, counters: list[tuple[int, dict[str, Any]]] | None = None
) -> tuple[Path | None, str]:
    """Write the session's Chrome trace to ``path``, gzipped, atomically; or say why not.

    A trace that can't be written (no permission, a file where its folder should be, a full
    disk) doesn't fail the test: no path, the reason, and no temp file left behind.
    """
    try:
        _export_gzipped(prof, path, counters or [])
    except OSError as exc:
        blocking = files.file_in_the_way(path.parent)
        if blocking is not None:
            return None, (
                f"{path}: trace not written: {blocking} is a file, not a folder; move it away "
                "or pass another --tprof-trace-dir"
            )
        return None, (
            f"{path}: trace not written ({exc.strerror or exc}); free space on or fix the "
            f"permissions of {path.parent}, or pass another --tprof-trace-dir"
        )
    return path, ""


def _export_gzipped(prof: profile, path: Path, counters: list[tuple[int, dict[str, Any]]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    # torch gzips its export line by line in Python (3.2 s for 105k events); the native
    # export plus one gzip pass costs a tenth of that.
    with (
        files.scratch_dir(path) as scratch,
        files.atomic_path(path, mode_like_existing=False) as tmp,
    ):
        plain = scratch / "trace.json"
        prof.export_chrome_trace(str(plain))
        if not _whole_json(plain):  # kineto logs a failed write and returns as if it had written
            raise OSError(errno.EIO, "the profiler's export failed; is the disk full?")
        with open(plain, "rb") as src, gzip.open(tmp, "wb", compresslevel=6) as dst:
            at, extra = _counter_events(src, counters)
            src.seek(0)
            if at is None:
                shutil.copyfileobj(src, dst, 1 << 20)
                return
            _copy_bytes(src, dst, at)
            dst.write(extra)
            shutil.copyfileobj(src, dst, 1 << 20)


# The exporter's top-level keys: the time base of every "ts", and the key after traceEvents.
_BASE_TIME = re.compile(rb'"baseTimeNanoseconds":\s*(\d+)')
_AFTER_EVENTS = b'],"traceName"'


def _counter_events(
    src: Any, counters: list[tuple[int, dict[str, Any]]]
) -> tuple[int | None, bytes]:
    """Where in the exported trace to add the rounds' counter events (the end of its
    ``traceEvents``) and their JSON; no place when the export doesn't read as expected."""
    if not counters:
        return None, b""
    head = _head_before_events(src)
    src.seek(0, os.SEEK_END)
    size = src.tell()
    src.seek(max(0, size - 65536))
    tail = src.read()
    base, end = _BASE_TIME.search(head), tail.rfind(_AFTER_EVENTS)
    if base is None or end < 0:
        return None, b""
    t0, pid = int(base.group(1)), os.getpid()
    events = [
        {
            "ph": "C",
            "name": "tprof round",
            "pid": pid,
            "tid": 0,
            "ts": round((start - t0) / 1000.0, 3),
            "args": args,
        }
        for start, args in counters
    ]
    text = "".join(",\n  " + json.dumps(e, sort_keys=True) for e in events)
    return max(0, size - 65536) + end, text.encode()


def _head_before_events(src: Any, limit: int = 1 << 26) -> bytes:
    """The exported trace up to its ``traceEvents`` key: the top-level keys kineto writes
    first (the metadata, ``tprof_rounds`` among them, then the time base)."""
    head = bytearray()
    while len(head) < limit:
        chunk = src.read(1 << 16)
        if not chunk:
            break
        seen = len(head)
        head += chunk
        if head.find(b'"traceEvents"', max(0, seen - 16)) >= 0:
            break
    return bytes(head)


def _copy_bytes(src: Any, dst: Any, count: int) -> None:
    while count > 0:
        chunk = src.read(min(count, 1 << 20))
        if not chunk:
            return
        dst.write(chunk)
        count -= len(chunk)


def _whole_json(path: Path) -> bool:
    """Whether an exported trace ends as a whole JSON object or array does."""
    try:
        with open(path, "rb") as f:
            size = f.seek(0, os.SEEK_END)
            f.seek(max(0, size - 64))
            tail = f.read().rstrip()
    except OSError:
        return False
    return tail.endswith((b"}", b"]"))


class BorrowedRounds:
    """A profiler session over another harness's round loop (pytest-benchmark's).

    The harness calls its body exactly as it would unprofiled; tprof only opens the session,
    wraps each of the harness's rounds in a ``ProfilerStep#N`` annotation (with the drift probe
    first, outside the harness's timer) and is told which rounds the harness kept in its
    figures.  After ``budget`` kept rounds the session stops, so later rounds run unprofiled.
    """

    def __init__(self, *, budget: int, probe: bool, record_shapes: bool) -> None:
        self.budget = budget
        self.cuda = cuda_available()
        self.iterations = 1
        self._probe = _Probe(self.cuda) if probe else None
        self._record_shapes = record_shapes
        self._prof: profile | None = None
        self._open = False
        self._walls_us: list[float] = []
        self._meter: LoadMeter | None = None
        self._load: RoundLoad | None = None
        self._starts_ns: list[int] = []
        self._kept: list[int] = []
        self._last: int | None = None
        self.problem = ""

    def start(self, iterations: int) -> None:
        """Open the session before the harness's first round of ``iterations`` calls."""
        if self._prof is not None:
            return
        if profiler_active():
            self.problem = "a torch profiler was already running, so tprof could not open one"
            return
        self.iterations = iterations
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self.cuda else [])
        self._prof = profile(activities=activities, record_shapes=self._record_shapes)
        with kineto_lines_dropped():
            self._prof.__enter__()
        self._meter = LoadMeter()
        self._open = True

    @contextlib.contextmanager
    def round(self) -> Iterator[None]:
        """One round of the harness, annotated while the session is open."""
        if not self._open:
            yield
            return
        r = len(self._walls_us)
        with record_function(f"{ROUND_PREFIX}{r}"):
            if self._probe is not None:
                with record_function(f"{PROBE_PREFIX}{r}"):
                    self._probe()
                    _sync(self.cuda)
            assert self._meter is not None  # opened with the session
            self._meter.before()
            t0 = time.perf_counter_ns()
            try:
                yield
            finally:
                _sync(self.cuda)
                self._walls_us.append((time.perf_counter_ns() - t0) / 1000.0)
                self._meter.after()
        self._last = r

    def kept(self) -> None:
        """The harness kept its last round in its figures (its warm-up rounds it doesn't)."""
        if self._last is not None:
            self._kept.append(self._last)
            self._last = None
        if len(self._kept) >= self.budget:
            self.stop()

    def stop(self) -> None:
        if self._open and self._prof is not None:
            self._open = False
            with kineto_lines_dropped():
                self._prof.__exit__(None, None, None)
        if self._meter is not None:
            self._load = self._meter.result()
            self._starts_ns = self._meter.starts_ns
            self._meter.close()
            self._meter = None

    @property
    def kept_rounds(self) -> int:
        return len(self._kept)

    def result(
        self, *, warmup: int, trace_path: Path | None, trace_metadata: Mapping[str, Any]
    ) -> CaptureResult:
        """The kept rounds as a table, the first ``warmup`` of them dropped while two are left
        (a baseline needs two rounds)."""
        self.stop()
        if self._prof is None or len(self._kept) < 2:
            raise CaptureError(
                self.problem
                or f"the benchmark kept {len(self._kept)} round(s) while profiled; "
                "tprof needs at least 2 (e.g. pedantic(rounds=2) or more)"
            )
        t0 = time.perf_counter()
        if REDUCTION_PATH == "raw-events":
            table = reduce_events(events_from_kineto(self._prof), wall_us=self._walls_us)
        else:
            table = table_from_function_events(self._prof, wall_us=self._walls_us)
        table = keep_rounds(replace(table, load=self._load), self._kept)
        dropped = min(warmup, len(self._kept) - 2)
        settled = _settled(table, dropped)
        table = drop_leading_rounds(table, dropped)
        if not table.calls.any():
            raise CaptureError("the benchmarked function ran no torch ops")
        meta = _trace_metadata(dropped, table.rounds, self.iterations, trace_metadata)
        if self._load is not None:
            meta["tprof_rounds"] = round_readings(self._walls_us, self._load)
        for key, val in meta.items():
            self._prof.add_metadata_json(key, json.dumps(val, sort_keys=True))
        written, problem = (
            (None, "")
            if trace_path is None
            else _write_trace(
                self._prof,
                trace_path,
                round_counters(self._starts_ns, self._walls_us, self._load),
            )
        )
        return CaptureResult(
            table=table, warmup_used=dropped, iterations=self.iterations, trace_path=written,
            trace_problem=problem, reduction=REDUCTION_PATH, capture_s=0.0,
            reduce_s=time.perf_counter() - t0, cuda=self.cuda, warmup_settled=settled,
            meta={"events": table.meta.get("events", 0)},
        )  # fmt: skip


def _split_setup(prepared: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
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


def _settled(table: OpTable, warmup: int) -> bool:
    """Whether the last warm-up round called the same ops as the first measured round."""
    if warmup == 0 or table.rounds <= warmup:
        return True
    return bool(np.array_equal(table.calls[:, warmup - 1], table.calls[:, warmup]))


def events_from_kineto(prof: profile) -> EventArrays:
    """The session's raw kineto events as arrays (no FunctionEvent objects are built).

    Each attribute is read with one ``map`` of the unbound accessor over all events: the
    pybind calls are the cost here, so no Python frame per event is added around them.
    """
    events = prof.profiler.kineto_results.events()  # type: ignore[union-attr]
    n = len(events)
    if n == 0:
        empty = np.zeros(0, dtype=np.int64)
        return EventArrays(names=(), name_idx=empty, start_ns=empty, end_ns=empty, thread=empty,
                           kind=np.zeros(0, dtype=np.int8), corr=empty, link=empty)  # fmt: skip
    ke = type(events[0])

    def col(getter: Callable[[Any], Any], dtype: Any) -> Any:
        return np.fromiter(map(getter, events), dtype=dtype, count=n)

    raw_names = list(map(ke.name, events))
    index = {nm: i for i, nm in enumerate(dict.fromkeys(raw_names))}
    names = tuple(index)
    name_idx = np.fromiter(map(index.__getitem__, raw_names), dtype=np.int64, count=n)
    is_cpu = col(ke.device_type, object) == _CPU
    thread = col(ke.start_thread_id, np.int64)
    kind = _kineto_kinds(
        names,
        name_idx,
        is_cpu=is_cpu,
        is_async=col(ke.is_async, bool) | (thread != col(ke.end_thread_id, np.int64)),
        is_annotation=col(ke.is_user_annotation, bool),
        is_hidden=col(ke.is_hidden_event, bool) if hasattr(ke, "is_hidden_event") else None,
    )
    corr = np.zeros(n, dtype=np.int64)
    link = corr
    start_ns = col(ke.start_ns, np.int64)
    device: _DeviceColumns | None = None
    if not is_cpu.all():  # correlation ids only matter when there is device work
        corr = col(ke.correlation_id, np.int64)
        link = col(ke.linked_correlation_id, np.int64)
        device = _device_columns(events, ke, is_cpu=is_cpu, corr=corr, link=link, start_ns=start_ns)
        kind[device.is_sync] = KIND_SYNC
        thread = np.where(
            is_cpu | (name_idx == index.get(_MEMORY_EVENT, -1)), thread, device.stream
        )
        corr = np.where(link > 0, 0, corr)  # runtime calls link to their op; only ops own kernels
    nbytes = _memory_bytes(events, names, name_idx, kind, None if device is None else device.nbytes)
    return EventArrays(
        names=names,
        name_idx=name_idx,
        start_ns=start_ns,
        end_ns=col(ke.end_ns, np.int64),
        thread=thread,
        kind=kind,
        corr=corr,
        link=link,
        nbytes=nbytes,
        launch_ns=None if device is None else device.launch_ns,
    )


_MEMORY_EVENT = "[memory]"  # profile_memory's allocation (nbytes > 0) and free (< 0) events


def _memory_bytes(
    events: Any, names: tuple[str, ...], name_idx: IntArray, kind: Any, nbytes: Any
) -> Any:
    """Mark profile_memory's events ``KIND_MEMORY`` (on any device) and put their sizes into
    ``nbytes`` (made when None); ``nbytes`` unchanged when there are none."""
    if _MEMORY_EVENT not in names:
        return nbytes
    at = np.flatnonzero(name_idx == names.index(_MEMORY_EVENT))
    kind[at] = KIND_MEMORY
    out = np.zeros(len(events), dtype=np.int64) if nbytes is None else nbytes
    out[at] = np.fromiter((events[i].nbytes() for i in at.tolist()), dtype=np.int64, count=at.size)
    return out


@dataclass(frozen=True, slots=True)
class _DeviceColumns:
    is_sync: _BoolArray
    stream: Any  # device index and stream id in one number
    nbytes: Any
    launch_ns: Any


_BYTES = re.compile(r'"bytes":\s*(\d+)')


def _device_columns(
    events: Any, ke: Any, *, is_cpu: _BoolArray, corr: Any, link: Any, start_ns: Any
) -> _DeviceColumns:
    """What the device table needs of device events: sync or not, stream, bytes, launch time.

    A device event's correlation id is its runtime call's; the runtime call starts the launch.
    """
    activity = np.asarray([str(a) for a in map(ke.activity_type, events)], dtype=object)
    on_device = ~is_cpu
    stream = np.fromiter(map(ke.device_index, events), dtype=np.int64, count=len(events)) << 32
    stream += np.fromiter(map(ke.device_resource_id, events), dtype=np.int64, count=len(events))
    nbytes = np.zeros(len(events), dtype=np.int64)
    for i in np.flatnonzero(on_device & ((activity == "gpu_memcpy") | (activity == "gpu_memset"))):
        found = _BYTES.search(events[i].metadata_json())
        nbytes[i] = int(found.group(1)) if found else 0
    runtime = np.flatnonzero(is_cpu & (link > 0))
    order = np.argsort(corr[runtime], kind="stable")
    r_corr, r_start = corr[runtime][order], start_ns[runtime][order]
    dev = np.flatnonzero(on_device)
    pos = np.minimum(np.searchsorted(r_corr, corr[dev]), max(r_corr.size - 1, 0))
    launch_ns = np.zeros(len(events), dtype=np.int64)
    if r_corr.size:
        hit = r_corr[pos] == corr[dev]
        launch_ns[dev[hit]] = r_start[pos[hit]]
    return _DeviceColumns(
        is_sync=on_device & (activity == "cuda_sync"),
        stream=stream,
        nbytes=nbytes,
        launch_ns=launch_ns,
    )


def _kineto_kinds(
    names: tuple[str, ...],
    name_idx: IntArray,
    *,
    is_cpu: _BoolArray,
    is_async: _BoolArray,
    is_annotation: _BoolArray,
    is_hidden: _BoolArray | None,
) -> npt.NDArray[np.int8]:
    """Each kineto event's ``KIND_*`` code."""
    filtered = np.fromiter((nm in FILTERED_NAMES for nm in names), dtype=bool, count=len(names))
    kind = np.full(name_idx.shape[0], KIND_OP, dtype=np.int8)
    kind[is_annotation] = KIND_ANNOTATION
    kind[is_cpu & is_async] = KIND_ASYNC
    kind[~is_cpu] = KIND_DEVICE
    # GPU-side annotations mirror record_function ranges; torch leaves them out of device time.
    kind[~is_cpu & is_annotation] = KIND_IGNORED
    kind[is_cpu & filtered[name_idx]] = KIND_IGNORED
    if is_hidden is not None:
        kind[is_hidden] = KIND_IGNORED
    return kind


def table_from_function_events(prof: profile, *, wall_us: Any) -> OpTable:
    """Fallback reduction through torch's own FunctionEvents (slow, but any torch has it)."""
    fevents = prof.events()
    rounds = [e for e in fevents if e.name.startswith(ROUND_PREFIX) or e.name == "ProfilerStep*"]
    rounds.sort(key=lambda e: e.time_range.start)
    probes = sorted(
        (e for e in fevents if e.name.startswith(PROBE_PREFIX)), key=lambda e: e.time_range.start
    )
    acc, probe_cpu, probe_dev, has_device = _sum_function_events(
        fevents, _time_ranges(rounds), _time_ranges(probes)
    )
    names = tuple(sorted(acc))
    stack = np.stack([acc[n] for n in names], axis=1) if names else np.zeros((5, 0, len(rounds)))
    return OpTable(
        names=names,
        calls=stack[0].astype(np.int64),
        self_cpu_us=stack[1],
        total_cpu_us=stack[2],
        self_device_us=stack[3],
        total_device_us=stack[4],
        wall_us=np.asarray(wall_us, dtype=np.float64),
        probe_cpu_us=probe_cpu,
        probe_device_us=probe_dev,
        has_device=has_device,
        meta={"events": len(fevents)},
    )


def _time_ranges(events: list[Any]) -> tuple[Any, Any]:
    """Start and end times (µs) of ``events``, as arrays."""
    return (
        np.asarray([e.time_range.start for e in events]),
        np.asarray([e.time_range.end for e in events]),
    )


def _sum_function_events(
    fevents: Any, rounds: tuple[Any, Any], probes: tuple[Any, Any]
) -> tuple[dict[str, FloatArray], FloatArray, FloatArray, bool]:
    """FunctionEvents summed per op and round, the probe's apart.

    Returns per op a 5 × rounds array (calls, self CPU, total CPU, self device, total
    device µs), the probe's self CPU and device µs per round, and whether any event ran on
    a device.
    """
    (r_start, r_end), (p_start, p_end) = rounds, probes
    n_rounds = len(r_start)
    acc: dict[str, FloatArray] = {}
    probe_cpu = np.zeros(n_rounds)
    probe_dev = np.zeros(n_rounds)
    has_device = False
    for e in fevents:
        if e.device_type != _CPU:
            has_device = True
            continue
        if (
            e.is_async
            or e.name.startswith((ROUND_PREFIX, PROBE_PREFIX))
            or e.name == "ProfilerStep*"
        ):
            continue
        t = e.time_range.start
        r = int(np.searchsorted(r_start, t, side="right")) - 1
        if r < 0 or t >= r_end[r]:
            continue
        p = int(np.searchsorted(p_start, t, side="right")) - 1
        vals = (
            1.0,
            e.self_cpu_time_total,
            e.cpu_time_total,
            e.self_device_time_total,
            e.device_time_total,
        )
        if p >= 0 and t < p_end[p]:
            probe_cpu[r] += vals[1]
            probe_dev[r] += vals[3]
            continue
        row = acc.setdefault(e.name, np.zeros((5, n_rounds)))
        row[:, r] += vals
    return acc, probe_cpu, probe_dev, has_device


def compile_log() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """What torch.compile has logged in this process so far: each graph break as ``reason
    (file:line)`` (the user's frame torch gives), and each guard failure's reason.  Empty when
    Dynamo was never imported: nothing was compiled."""
    if "torch._dynamo" not in sys.modules:
        return (), ()
    from torch._dynamo import utils

    breaks = tuple(_graph_break_text(r) for r in list(utils.graph_break_reasons))
    guards = tuple(str(g) for failures in list(utils.guard_failures.values()) for g in failures)
    return breaks, guards


def _graph_break_text(reason: Any) -> str:
    text = str(getattr(reason, "reason", reason)).strip()
    first = text.splitlines()[0] if text else "unknown reason"
    stack = getattr(reason, "user_stack", None) or []
    if not stack:
        return first
    frame = stack[-1]
    return f"{first} ({Path(frame.filename).name}:{frame.lineno})"


def torch_facts() -> dict[str, Any]:
    """The torch / CUDA facts of this process that the environment fingerprint needs."""
    cuda = bool(torch.cuda.is_available())
    facts: dict[str, Any] = {
        "torch": str(torch.__version__),
        "cuda_available": cuda,
        "cuda": torch.version.cuda if cuda else None,
        "cudnn": None,
        "gpus": [],
        "threads": int(torch.get_num_threads()),
        "deterministic": bool(torch.are_deterministic_algorithms_enabled()),
        "tf32_matmul": bool(torch.backends.cuda.matmul.allow_tf32),
        "tf32_cudnn": bool(torch.backends.cudnn.allow_tf32),
        "cudnn_benchmark": bool(torch.backends.cudnn.benchmark),
    }
    if cuda:
        cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
        facts["cudnn"] = str(cudnn) if cudnn else None
        facts["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        facts["gpu_index"] = torch.cuda.current_device()
        facts["gpu_used"] = torch.cuda.get_device_name(facts["gpu_index"])
    return facts
