"""kineto's events as :class:`~tprof_engine.model.records.EventArrays` (one pass, numpy columns),
the ``key_averages`` fallback, and kineto's own stderr lines kept out of the user's output.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import torch
from torch.profiler import ProfilerActivity, profile

from tprof_engine.capture import torch_api
from tprof_engine.model.arrays import FloatArray, IntArray
from tprof_engine.model.records import (
    KIND_ANNOTATION,
    KIND_ASYNC,
    KIND_DEVICE,
    KIND_IGNORED,
    KIND_MEMORY,
    KIND_OP,
    KIND_SYNC,
    EventArrays,
    OpTable,
)
from tprof_engine.reduce.ops import (
    FILTERED_NAMES,
    PROBE_PREFIX,
    ROUND_PREFIX,
    SYNC_PREFIX,
)

_CPU = torch.autograd.DeviceType.CPU  # type: ignore[attr-defined]
_BoolArray = npt.NDArray[np.bool_]
KINETO_LINE_PREFIXES = (b"USDT:",)  # kineto's own start/stop markers, written to fd 2
# A CUDA build on a machine without a GPU: kineto's complaint as a session stops (torch 2.6-2.12).
KINETO_NO_GPU = b"gpuGetDeviceCount failed"


@contextlib.contextmanager
def started_quietly(prof: profile) -> Iterator[profile]:
    """Start and stop ``prof`` without kineto's ``USDT:`` lines reaching the user's stderr.

    torch 2.13's kineto writes one such line to file descriptor 2 when a session starts and
    one when it stops, whatever ``KINETO_LOG_LEVEL`` says; in a failing test they read as the
    test's own stderr.  Only the start and the stop are filtered, and the warnings torch
    raises there kept from the user's filters: what the body writes or warns while profiled
    passes untouched.
    """
    with kineto_lines_dropped(), torch_api.own_warnings_quiet(), torch_api.inductor_left_unloaded():
        prof.__enter__()
    try:
        yield prof
    finally:
        with kineto_lines_dropped(), torch_api.own_warnings_quiet():
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
            kept = b"".join(line for line in scratch if not _kinetos_own(line))
            while kept:
                kept = kept[os.write(2, kept) :]


def _kinetos_own(line: bytes) -> bool:
    """A line kineto writes of itself as a session starts or stops, not the user's."""
    no_gpu = line.startswith(b"ERROR:") and KINETO_NO_GPU in line
    return no_gpu or line.startswith(KINETO_LINE_PREFIXES)


def events_from_kineto(prof: profile, kind_of: Callable[[Any], str] | None = None) -> EventArrays:
    """The session's raw kineto events as arrays, each attribute read with one ``map`` (pybind
    calls are the cost); ``kind_of``: the backend's ``activity_kind`` (None: torch_api's)."""
    events = torch_api.kineto_events(prof)
    n = len(events)
    if n == 0:
        return _no_events()
    ke = type(events[0])

    def col(getter: Callable[[Any], Any], dtype: Any) -> Any:
        return np.fromiter(map(getter, events), dtype=dtype, count=n)

    index, name_idx = _name_index(list(map(ke.name, events)))
    names = tuple(index)
    flag, is_cpu = _readers(prof, events, name_idx, col)
    thread = col(ke.start_thread_id, np.int64)
    kind = _kineto_kinds(
        names,
        name_idx,
        is_cpu=is_cpu,
        is_async=col(ke.is_async, bool) | (thread != col(ke.end_thread_id, np.int64)),
        is_annotation=flag(ke.is_user_annotation, bool),
        is_hidden=_hidden(ke, flag),
    )
    corr = link = np.zeros(n, dtype=np.int64)
    start_ns = col(ke.start_ns, np.int64)
    device: _DeviceColumns | None = None
    if not is_cpu.all():  # correlation ids only matter when there is device work
        corr = col(ke.correlation_id, np.int64)
        link = col(ke.linked_correlation_id, np.int64)
        device = _device_columns(
            events, ke, name_idx, kind_of, is_cpu=is_cpu, corr=corr, link=link, start_ns=start_ns
        )
        kind[device.is_sync] = KIND_SYNC
        on_host = is_cpu | (name_idx == index.get(_MEMORY_EVENT, -1))
        thread = np.where(on_host, thread, device.stream)
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


def _hidden(ke: Any, flag: Callable[[Callable[[Any], Any], Any], Any]) -> _BoolArray | None:
    """Which events torch hides; None where its events carry no such flag."""
    return flag(ke.is_hidden_event, bool) if torch_api.event_features(ke).hidden_flag else None


def _readers(
    prof: profile, events: Any, name_idx: IntArray, col: Callable[[Callable[[Any], Any], Any], Any]
) -> tuple[Callable[[Callable[[Any], Any], Any], Any], _BoolArray]:
    """How to read a flag of each event, and which events are on the host."""
    activities = getattr(prof, "activities", None)  # unknown: read every event's own
    if activities and set(activities) <= {ProfilerActivity.CPU}:
        return _per_name(events, name_idx), np.ones(len(events), bool)
    return col, col(type(events[0]).device_type, object) == _CPU


def _per_name(events: Any, name_idx: IntArray) -> Callable[[Callable[[Any], Any], Any], Any]:
    """A column reader that reads each name's first event and gives every event its name's.

    For a session of the CPU alone: it has only host events, and there a name is one kind of
    event (a ``record_function`` range or an op), so whether it is a user annotation or hidden
    is read once per name; no device is read at all.
    """
    _, first = np.unique(name_idx, return_index=True)  # names are numbered as first seen
    picked = [events[i] for i in first.tolist()]

    def col(getter: Callable[[Any], Any], dtype: Any) -> Any:
        return np.fromiter(map(getter, picked), dtype=dtype, count=len(picked))[name_idx]

    return col


def _no_events() -> EventArrays:
    empty = np.zeros(0, dtype=np.int64)
    return EventArrays(
        names=(),
        name_idx=empty,
        start_ns=empty,
        end_ns=empty,
        thread=empty,
        kind=np.zeros(0, dtype=np.int8),
        corr=empty,
        link=empty,
    )


def _name_index(raw_names: list[str]) -> tuple[dict[str, int], IntArray]:
    """Each distinct name's index, in first-seen order, and each event's name index."""
    index = {nm: i for i, nm in enumerate(dict.fromkeys(raw_names))}
    count = len(raw_names)
    return index, np.fromiter(map(index.__getitem__, raw_names), dtype=np.int64, count=count)


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


def _device_columns(
    events: Any,
    ke: Any,
    name_idx: IntArray,
    kind_of: Callable[[Any], str] | None,
    *,
    is_cpu: _BoolArray,
    corr: Any,
    link: Any,
    start_ns: Any,
) -> _DeviceColumns:
    """What the device table needs of device events: sync or not, stream, bytes, launch time.

    A device event's correlation id is its runtime call's; the runtime call starts the launch.
    """
    on_device = ~is_cpu
    activity = torch_api.device_activities(events, name_idx, on_device, kind_of=kind_of)
    stream = np.fromiter(map(ke.device_index, events), dtype=np.int64, count=len(events)) << 32
    stream += np.fromiter(map(ke.device_resource_id, events), dtype=np.int64, count=len(events))
    nbytes = np.zeros(len(events), dtype=np.int64)
    for i in np.flatnonzero(on_device & ((activity == "gpu_memcpy") | (activity == "gpu_memset"))):
        nbytes[i] = torch_api.copy_bytes(events[i])
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
    with torch_api.own_warnings_quiet():
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


def _in_closing_sync(e: Any) -> bool:
    """Whether a FunctionEvent ran in a round's closing synchronize (the plugin's own)."""
    parent = getattr(e, "cpu_parent", None)
    return parent is not None and str(parent.name).startswith(SYNC_PREFIX)


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
            or e.name.startswith((ROUND_PREFIX, PROBE_PREFIX, SYNC_PREFIX))
            or e.name == "ProfilerStep*"
            or _in_closing_sync(e)
        ):
            continue
        t = e.time_range.start
        r = int(np.searchsorted(r_start, t, side="right")) - 1
        if r < 0 or t >= r_end[r]:
            continue
        p = int(np.searchsorted(p_start, t, side="right")) - 1
        self_dev, total_dev = torch_api.function_event_device_us(e)
        vals = (1.0, e.self_cpu_time_total, e.cpu_time_total, self_dev, total_dev)
        if p >= 0 and t < p_end[p]:
            probe_cpu[r] += vals[1]
            probe_dev[r] += vals[3]
            continue
        row = acc.setdefault(e.name, np.zeros((5, n_rounds)))
        row[:, r] += vals
    return acc, probe_cpu, probe_dev, has_device
