"""pytest-benchmark's rounds, borrowed: its own timer calls run under one profiler session."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from torch.profiler import profile, record_function

from tprof_engine.capture import settings as torch_settings
from tprof_engine.capture import torch_api
from tprof_engine.capture.backends import detect, with_family
from tprof_engine.capture.export import TraceWrite, metadata_for_trace, trace_writer
from tprof_engine.capture.facts import REDUCTION_PATH, profiler_active
from tprof_engine.capture.in_round import Probe, closing_sync
from tprof_engine.capture.kineto import (
    events_from_kineto,
    kineto_lines_dropped,
    table_from_function_events,
)
from tprof_engine.capture.load import LoadMeter, round_counters, round_readings
from tprof_engine.capture.session import CaptureResult, warmup_settled
from tprof_engine.model.costs import Stopwatch
from tprof_engine.model.errors import CaptureError
from tprof_engine.model.records import (
    OpTable,
    RoundLoad,
)
from tprof_engine.reduce.ops import (
    PROBE_PREFIX,
    ROUND_PREFIX,
    drop_leading_rounds,
    keep_rounds,
    reduce_events,
)


class BorrowedRounds:
    """A profiler session over another harness's round loop (pytest-benchmark's).

    The harness calls its body exactly as it would unprofiled; tprof only opens the session,
    wraps each of the harness's rounds in a ``ProfilerStep#N`` annotation (with the drift probe
    first, outside the harness's timer) and is told which rounds the harness kept in its
    figures.  After ``budget`` kept rounds the session stops, so later rounds run unprofiled.
    """

    def __init__(
        self,
        *,
        budget: int,
        probe: bool,
        record_shapes: bool,
        before_start: Callable[[], None] | None = None,
        write_trace: TraceWrite | None = None,
    ) -> None:
        self.budget = budget
        self._write_trace = write_trace  # the store's writer (None: no trace)
        self._before_start = before_start  # waits for the trace writer: no export beside rounds
        self.device = detect()
        self.iterations = 1
        self._probe = Probe(self.device) if probe else None
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
        if self._before_start is not None:
            self._before_start()
        self.iterations = iterations
        activities = self.device.activities()
        self._prof = profile(activities=activities, record_shapes=self._record_shapes)
        with (
            kineto_lines_dropped(),
            torch_api.own_warnings_quiet(),
            torch_api.inductor_left_unloaded(),
        ):
            self._prof.__enter__()
        self._meter = LoadMeter(self.device.meter())
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
                    self.device.synchronize()
            assert self._meter is not None  # opened with the session
            self._meter.before()
            t0 = time.perf_counter_ns()
            try:
                yield
            finally:
                closing_sync(self.device, r)
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
            with kineto_lines_dropped(), torch_api.own_warnings_quiet():
                self._prof.__exit__(None, None, None)
        if self._meter is not None:
            self._load = self._meter.result()
            self._starts_ns = self._meter.starts_ns
            self._meter.close()
            self._meter = None

    @property
    def kept_rounds(self) -> int:
        return len(self._kept)

    def _reduced(self) -> OpTable:
        """The profile's rounds as a table, by the reduction this build uses."""
        assert self._prof is not None
        if REDUCTION_PATH == "raw-events":
            events = events_from_kineto(self._prof, self.device.activity_kind)
            return reduce_events(events, wall_us=self._walls_us)
        return table_from_function_events(self._prof, wall_us=self._walls_us)

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
        watch = Stopwatch()
        with watch.stage("reduce"):
            table = keep_rounds(replace(self._reduced(), load=self._load), self._kept)
            table = with_family(table, self.device)
            dropped = min(warmup, len(self._kept) - 2)
            settled = warmup_settled(table, dropped)
            table = drop_leading_rounds(table, dropped)
        if not table.calls.any():
            raise CaptureError("the benchmarked function ran no torch ops")
        meta = metadata_for_trace(dropped, table.rounds, self.iterations, trace_metadata)
        if self._load is not None:
            meta["tprof_rounds"] = round_readings(self._walls_us, self._load)
        with torch_api.own_warnings_quiet():
            for key, val in meta.items():
                self._prof.add_metadata_json(key, json.dumps(val, sort_keys=True))
        counters = round_counters(self._starts_ns, self._walls_us, self._load)
        later = trace_writer(self._prof, counters, self._write_trace)
        written: Path | None = None
        problem = ""
        if trace_path is not None and later is not None:
            with watch.stage("export"):
                written, problem = later(trace_path)
        return CaptureResult(
            table=table,
            warmup_used=dropped,
            iterations=self.iterations,
            trace_path=written,
            trace_problem=problem,
            reduction=REDUCTION_PATH,
            costs=watch.costs(),
            device_family=table.device_family,
            warmup_settled=settled,
            meta={"events": table.meta.get("events", 0)},
            settings=torch_settings.current(),
            write_trace=later,
        )
