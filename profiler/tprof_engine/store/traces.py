"""Read Chrome traces written by torch.profiler / kineto into events and op tables (no torch).

A trace holds the same events the live reduction sees, in JSON: complete (``"ph": "X"``)
events whose ``cat`` says what they are, times in microseconds.  Kernels are tied to the
runtime call that launched them by ``args.correlation``; the CPU op that launched them is the
innermost CPU op around that runtime call on its thread.  That also holds for older kineto
traces, whose kernels carry the runtime's correlation as their ``External id`` instead of
the launching op's.
"""

from __future__ import annotations

import gzip
import io
import json
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from tprof_engine.model.arrays import IntArray
from tprof_engine.model.errors import TraceError
from tprof_engine.model.records import (
    KIND_ANNOTATION,
    KIND_DEVICE,
    KIND_IGNORED,
    KIND_OP,
    KIND_SYNC,
    EventArrays,
    OpTable,
)
from tprof_engine.reduce.nesting import nesting
from tprof_engine.reduce.ops import FILTERED_NAMES, drop_leading_rounds, reduce_events
from tprof_engine.store import files

# Kineto activity categories (libkineto ActivityType names) that launch device work.
_LAUNCH_CATEGORIES = frozenset(
    {
        "cuda_runtime",
        "cuda_driver",
        "xpu_runtime",
        "xpu_driver",
        "privateuse1_runtime",
        "privateuse1_driver",
    }
)


_CATEGORY_KIND: dict[str, int] = {
    "cpu_op": KIND_OP,
    "user_annotation": KIND_ANNOTATION,
    "kernel": KIND_DEVICE,
    "Kernel": KIND_DEVICE,  # older exporters, for legacy TensorBoard
    "gpu_memcpy": KIND_DEVICE,
    "gpu_memset": KIND_DEVICE,
    "cuda_sync": KIND_SYNC,
    **dict.fromkeys(_LAUNCH_CATEGORIES, KIND_OP),
}


_GZIP_MAGIC = b"\x1f\x8b"
_REEXPORT = "re-export the trace"


# The most JSON a trace may hold, gzipped or not.  A trace is ≈ 250 bytes per event and parses
# to ≈ 4x its size in Python objects; tprof's largest measured trace (105k events) is ≈ 27 MB.
MAX_TRACE_BYTES = 256 * 2**20


@dataclass(frozen=True, slots=True, kw_only=True)
class TraceData:
    """One Chrome trace file, parsed.

    ``events`` holds the trace's complete (``"X"``) events; flow, instant, counter and
    metadata records carry no duration and are left out.  Times are integer nanoseconds
    (the trace's microseconds, rounded).  ``thread`` numbers each distinct (pid, tid) pair
    (kineto writes string pids and negative tids).  ``corr`` is a row id (index + 1) and a device
    event's ``link`` is the row id of the CPU op that launched it (0 when unknown).
    ``metadata`` is every top-level key except ``traceEvents`` (``deviceProperties``,
    ``distributedInfo``, ``tprof``, ...).
    """

    path: Path
    events: EventArrays
    metadata: Mapping[str, Any] = field(default_factory=dict)
    device_names: tuple[str, ...] = ()


def read_trace(path: str | Path) -> TraceData:
    """Parse a Chrome trace (``.json`` or ``.json.gz``; gzip is recognised by its content)."""
    path = Path(path)
    doc = _load_json(path)
    if isinstance(doc, list):  # the Chrome trace "JSON Array Format": events only
        raw_events: Any = doc
        metadata: dict[str, Any] = {}
    elif isinstance(doc, dict) and isinstance(doc.get("traceEvents"), list):
        raw_events = doc["traceEvents"]
        metadata = {k: v for k, v in doc.items() if k != "traceEvents"}
    else:
        raise TraceError(
            f"{path}: no 'traceEvents' list at the top level, so it is not a Chrome trace; "
            "pass a trace written by torch.profiler (export_chrome_trace) or by pytest --tprof"
        )
    return TraceData(
        path=path,
        events=_event_arrays(path, raw_events),
        metadata=metadata,
        device_names=_device_names(metadata),
    )


def table_from_trace(trace: str | Path | TraceData) -> OpTable:
    """Reduce a trace to an :class:`OpTable`, without the warm-up rounds tprof recorded.

    Rounds are the trace's ``ProfilerStep#N`` annotations (a trace without them is one
    round).  A trace written by tprof says in its ``tprof`` metadata how many leading
    rounds were warm-up; those are dropped.  Traces from other tools keep every round.
    """
    data = trace if isinstance(trace, TraceData) else read_trace(trace)
    meta = {
        "source": "trace",
        "path": str(data.path),
        "device_names": list(data.device_names),
    }
    table = reduce_events(data.events, meta=meta)
    warmup = _recorded_warmup(data, table.rounds)
    return drop_leading_rounds(table, warmup)


def _load_json(path: Path) -> Any:
    raw = _read_bytes(path)
    if raw.startswith(_GZIP_MAGIC):
        raw = _gunzip(path, raw)
    if not raw.strip():
        raise TraceError(f"{path}: empty file, no trace in it; {_REEXPORT}")
    try:
        return json.loads(raw)
    except json.JSONDecodeError as exc:
        raise TraceError(
            f"{path}: not valid JSON ({exc.msg} at line {exc.lineno} col {exc.colno}); {_REEXPORT}"
        ) from None
    except UnicodeDecodeError:
        raise TraceError(f"{path}: not a JSON text file (undecodable bytes); {_REEXPORT}") from None


def _read_bytes(path: Path) -> bytes:
    """The file's bytes: a regular file of at most :data:`MAX_TRACE_BYTES`."""
    try:
        return files.read_regular(path, limit=MAX_TRACE_BYTES)
    except FileNotFoundError:
        raise TraceError(f"{path}: no such trace file; check the path") from None
    except files.NotRegularFileError as exc:
        raise TraceError(
            f"{path}: is a {exc.kind}, not a trace file; pass a trace written by torch.profiler "
            "or pytest --tprof"
        ) from None
    except files.FileTooLargeError:
        raise TraceError(
            f"{path}: larger than {MAX_TRACE_BYTES // 2**20} MiB, more than tprof reads; "
            "pass a trace of fewer rounds or steps"
        ) from None
    except OSError as exc:
        raise TraceError(f"{path}: can't read the trace ({exc.strerror}); check the path") from None


def _gunzip(path: Path, raw: bytes) -> bytes:
    """The gzip stream decompressed, stopping past :data:`MAX_TRACE_BYTES` (a small file can
    expand to GBs)."""
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(raw)) as f:
            out = f.read(MAX_TRACE_BYTES + 1)
    except EOFError:
        raise TraceError(f"{path}: truncated gzip stream; {_REEXPORT}") from None
    except (gzip.BadGzipFile, zlib.error) as exc:
        raise TraceError(f"{path}: corrupt gzip stream ({exc}); {_REEXPORT}") from None
    if len(out) > MAX_TRACE_BYTES:
        raise TraceError(
            f"{path}: expands to more than {MAX_TRACE_BYTES // 2**20} MiB of JSON, more than "
            "tprof reads; pass a trace of fewer rounds or steps"
        )
    return out


class _Columns(NamedTuple):
    """A trace's complete events as parallel lists, in file order."""

    names: dict[str, int]  # name → its index, in order of first use
    name_idx: list[int]
    thread: list[int]
    kind: list[int]
    ts: list[Any]
    dur: list[Any]
    launch_corr: list[int]  # runtime calls: their correlation; device events: theirs
    nbytes: list[int]  # copies and fills: their bytes; 0 elsewhere


def _event_arrays(path: Path, raw_events: list[Any]) -> EventArrays:
    cols = _columns(path, raw_events)
    names = tuple(str(n) for n in cols.names)
    kind_arr = np.asarray(cols.kind, dtype=np.int8)
    filtered = np.fromiter((n in FILTERED_NAMES for n in names), dtype=bool, count=len(names))
    idx_arr = np.asarray(cols.name_idx, dtype=np.int64)
    cpu_side = (kind_arr == KIND_OP) | (kind_arr == KIND_ANNOTATION)
    kind_arr[cpu_side & filtered[idx_arr]] = KIND_IGNORED
    start_ns, end_ns = _to_ns(path, cols.ts, cols.dur)
    thread_arr = np.asarray(cols.thread, dtype=np.int64)
    corr_arr = np.asarray(cols.launch_corr, dtype=np.int64)
    # Only launch and device events got a correlation; a filtered name is no launch.
    is_launch = (kind_arr == KIND_OP) & (corr_arr > 0)
    n = len(cols.kind)
    link, launch_ns = _launching_ops(kind_arr, is_launch, corr_arr, thread_arr, start_ns, end_ns)
    return EventArrays(
        names=names,
        name_idx=idx_arr,
        start_ns=start_ns,
        end_ns=end_ns,
        thread=thread_arr,
        kind=kind_arr,
        corr=np.arange(1, n + 1, dtype=np.int64),
        link=link,
        nbytes=np.asarray(cols.nbytes, dtype=np.int64),
        launch_ns=launch_ns,
    )


def _columns(path: Path, raw_events: list[Any]) -> _Columns:
    """The complete (``"X"``) events of ``raw_events``; a malformed one is an error naming it."""
    name_of: dict[str, int] = {}
    thread_of: dict[tuple[Any, Any], int] = {}
    name_idx: list[int] = []
    thread: list[int] = []
    kinds: list[int] = []
    ts: list[Any] = []
    dur: list[Any] = []
    launch_corr: list[int] = []
    nbytes: list[int] = []
    category_kind = _CATEGORY_KIND
    k = -1
    try:
        for k in range(len(raw_events)):
            e = raw_events[k]
            if e.get("ph") != "X":
                continue
            cat = e.get("cat")
            kind = category_kind.get(cat, KIND_IGNORED) if isinstance(cat, str) else KIND_IGNORED
            name = e["name"]
            i = name_of.get(name)
            if i is None:
                i = name_of[name] = len(name_of)
            key = (e.get("pid"), e.get("tid"))
            t = thread_of.get(key)
            if t is None:
                t = thread_of[key] = len(thread_of)
            corr = size = 0
            if kind == KIND_DEVICE or kind == KIND_SYNC or cat in _LAUNCH_CATEGORIES:
                args = e.get("args")
                if isinstance(args, dict):
                    corr = int(args.get("correlation", 0))
                    size = max(0, int(args.get("bytes", 0))) if kind == KIND_DEVICE else 0
            name_idx.append(i)
            thread.append(t)
            kinds.append(kind)
            ts.append(e["ts"])
            dur.append(e.get("dur", 0))
            launch_corr.append(corr)
            nbytes.append(size)
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        raise TraceError(
            f"{path}: traceEvents[{k}] is not a well-formed trace event ({_describe(exc)}); "
            f"{_REEXPORT}"
        ) from None
    return _Columns(name_of, name_idx, thread, kinds, ts, dur, launch_corr, nbytes)


def _describe(exc: Exception) -> str:
    if isinstance(exc, KeyError):
        return f"no {exc.args[0]!r}"
    return str(exc)


def _to_ns(path: Path, ts: list[Any], dur: list[Any]) -> tuple[IntArray, IntArray]:
    """Microsecond floats → integer nanoseconds, exact for kineto's 3-decimal timestamps."""
    try:
        ts_us = np.asarray(ts, dtype=np.float64)
        dur_us = np.asarray(dur, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise TraceError(f"{path}: a 'ts' or 'dur' is not a number ({exc}); {_REEXPORT}") from None
    if ts_us.size == 0:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty.copy()
    if not (np.isfinite(ts_us).all() and np.isfinite(dur_us).all()):
        raise TraceError(f"{path}: a 'ts' or 'dur' is not finite; {_REEXPORT}")
    # Subtracting a whole-µs base close to the timestamps is exact and keeps the nanosecond
    # digits that multiplying large epoch-µs values by 1000 would round away.
    base = float(np.floor(ts_us.min()))
    start = int(base) * 1000 + np.rint((ts_us - base) * 1000.0).astype(np.int64)
    end = start + np.rint(dur_us * 1000.0).astype(np.int64)
    return start, end


def _launching_ops(
    kind: np.ndarray,
    is_launch: np.ndarray,
    corr: IntArray,
    thread: IntArray,
    start_ns: IntArray,
    end_ns: IntArray,
) -> tuple[IntArray, IntArray]:
    """Row id of the CPU op that launched each device event (0 when it can't be found), and
    the start (ns) of the runtime call that launched it (0 likewise).

    The launch is the runtime call with the device event's correlation; its launching op is
    the innermost CPU op or annotation around it on the same thread.  A launch outside any
    op keeps the device time on the runtime call itself.  Syncs link as device events do.
    """
    n = kind.shape[0]
    link = np.zeros(n, dtype=np.int64)
    launch_ns = np.zeros(n, dtype=np.int64)
    device = np.flatnonzero(((kind == KIND_DEVICE) | (kind == KIND_SYNC)) & (corr > 0))
    launches = np.flatnonzero(is_launch & (corr > 0))
    if device.size == 0 or launches.size == 0:
        return link, launch_ns
    cpu_rows = np.flatnonzero((kind == KIND_OP) | (kind == KIND_ANNOTATION))
    parent_local, _ = nesting(thread[cpu_rows], start_ns[cpu_rows], end_ns[cpu_rows])
    parent = np.full(n, -1, dtype=np.int64)
    has_parent = parent_local >= 0
    parent[cpu_rows[has_parent]] = cpu_rows[parent_local[has_parent]]

    # Climb from each launch past enclosing runtime calls (a driver call inside a runtime one).
    owner = launches.copy()
    climbing = np.ones(owner.size, dtype=bool)
    while climbing.any():
        up = parent[owner[climbing]]
        found = up >= 0
        sel = np.flatnonzero(climbing)
        owner[sel[found]] = up[found]
        climbing[sel[~found]] = False
        climbing[sel[found]] = is_launch[up[found]]

    # Many device events may share one correlation (a CUDA graph launch); each launch has one.
    order = np.argsort(corr[launches], kind="stable")
    launch_corr = corr[launches][order]
    launch_owner = owner[order]
    wanted = corr[device]
    pos = np.searchsorted(launch_corr, wanted)
    ok = pos < launch_corr.size
    ok[ok] &= launch_corr[pos[ok]] == wanted[ok]
    link[device[ok]] = launch_owner[pos[ok]] + 1
    launch_ns[device[ok]] = start_ns[launches[order][pos[ok]]]
    return link, launch_ns


def _device_names(metadata: Mapping[str, Any]) -> tuple[str, ...]:
    props = metadata.get("deviceProperties")
    if not isinstance(props, list):
        return ()
    return tuple(str(p["name"]) for p in props if isinstance(p, dict) and "name" in p)


def _recorded_warmup(data: TraceData, rounds_in_trace: int) -> int:
    """Leading warm-up rounds per the trace's ``tprof`` metadata; 0 for other tools' traces."""
    info = data.metadata.get("tprof")
    if not isinstance(info, dict) or "warmup" not in info:
        return 0
    warmup = info["warmup"]
    rounds = info.get("rounds")
    if not isinstance(warmup, int) or warmup < 0:
        raise TraceError(
            f"{data.path}: 'tprof' metadata has 'warmup' {warmup!r}, expected an integer >= 0; "
            f"{_REEXPORT}"
        )
    if isinstance(rounds, int) and warmup + rounds != rounds_in_trace:
        raise TraceError(
            f"{data.path}: 'tprof' metadata says {warmup} warm-up + {rounds} measured rounds "
            f"but the trace holds {rounds_in_trace} ProfilerStep rounds; {_REEXPORT}"
        )
    if warmup >= rounds_in_trace:
        raise TraceError(
            f"{data.path}: 'tprof' metadata says {warmup} warm-up rounds but the trace holds "
            f"{rounds_in_trace} ProfilerStep rounds; {_REEXPORT}"
        )
    return warmup


_BASELINE_PID = 1_000_000
_CURRENT_PID = 2_000_000


def side_by_side(
    baseline: str | Path,
    current: str | Path,
    out: str | Path,
    *,
    flagged: Mapping[str, str],
    title: str = "",
) -> Path:
    """Write one Chrome trace holding the baseline run and the current run as two processes.

    Both runs start at time 0; the events of ``flagged`` ops (op name → label such as
    ``"regressed +41%"``) carry the label in ``args.tprof`` and a red colour, so one file in
    Perfetto or chrome://tracing shows both runs with the regressed ops marked.
    """
    out = Path(out)
    merged = [
        *_run_events(Path(baseline), _BASELINE_PID, "baseline", flagged),
        *_run_events(Path(current), _CURRENT_PID, "current", flagged),
    ]
    doc = {"traceEvents": merged, "displayTimeUnit": "ms", "tprof": {"side_by_side": title}}
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        with (
            files.atomic_path(out, mode_like_existing=False) as tmp,
            gzip.open(tmp, "wt", encoding="utf-8") as f,
        ):
            json.dump(doc, f)
    except OSError as exc:
        raise TraceError(
            f"{out}: side-by-side trace not written ({exc.strerror}); free space on or fix the "
            f"permissions of {out.parent}"
        ) from None
    return out


def _run_events(
    path: Path, first_pid: int, label: str, flagged: Mapping[str, str]
) -> list[dict[str, Any]]:
    """One run's events for the merged trace, copied: times from 0, pids from ``first_pid``.

    Its processes are named and labelled ``label``; events of ``flagged`` ops are marked.
    """
    data = _load_json(path)
    events = data.get("traceEvents") if isinstance(data, dict) else data
    if not isinstance(events, list):
        raise TraceError(f"{path}: no 'traceEvents' list at the top level; {_REEXPORT}")
    starts = [
        e["ts"] for e in events if isinstance(e, dict) and isinstance(e.get("ts"), (int, float))
    ]
    t0 = min(starts, default=0)
    pids: dict[Any, int] = {}
    copied: list[dict[str, Any]] = []
    for e in events:
        if not isinstance(e, dict):
            continue
        e = dict(e)
        pid = pids.setdefault(e.get("pid"), first_pid + len(pids))
        e["pid"] = pid
        if isinstance(e.get("ts"), (int, float)):
            e["ts"] = round(e["ts"] - t0, 3)
        if e.get("ph") == "X" and e.get("name") in flagged:
            e["args"] = {**(e.get("args") or {}), "tprof": flagged[e["name"]]}
            e["cname"] = "terrible"
        if e.get("ph") == "M" and e.get("name") == "process_name":
            name = (e.get("args") or {}).get("name", "")
            e["args"] = {"name": f"{label}: {name}"}
        copied.append(e)
    for pid in pids.values():
        copied.append(
            {"ph": "M", "name": "process_sort_index", "pid": pid, "args": {"sort_index": pid}}
        )
        copied.append(
            {
                "ph": "M",
                "name": "process_labels",
                "pid": pid,
                "args": {"labels": f"{label} ({path.name})"},
            }
        )
    return copied
