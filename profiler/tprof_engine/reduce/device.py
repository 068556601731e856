"""The device's side of a table: each op's kernels, copies and syncs per round, idle time and
queue depth, from events :mod:`.ops` attributed to ops and rounds.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from tprof_engine.model.arrays import IntArray
from tprof_engine.model.device_tables import DEVICE_KINDS, DeviceTable
from tprof_engine.model.records import KIND_SYNC, EventArrays

_KERNEL, _MEMCPY, _MEMSET, _SYNC = (DEVICE_KINDS.index(k) for k in DEVICE_KINDS)


# Kineto names a copy "Memcpy HtoD (Pageable -> Device)" and a fill "Memset (Device)".
_MEMCPY_PREFIX = "Memcpy "
_MEMSET_PREFIX = "Memset "


# Copies and syncs that make the host wait for the device: a new one per round is structure.
BLOCKING_COPY = "DtoH"


# Kineto's cuda_sync kinds; "Stream Wait Event" orders two streams and blocks no host thread.
HOST_SYNCS = frozenset({"Stream Sync", "Context Sync", "Event Sync"})


def copy_direction(name: str) -> str:
    """``HtoD``, ``DtoH``, ``DtoD``, ... of a kineto copy name; ``""`` for anything else."""
    if not name.startswith(_MEMCPY_PREFIX):
        return ""
    return name[len(_MEMCPY_PREFIX) :].split(" ", 1)[0]


def blocks_host(kind: str, name: str) -> bool:
    """Whether a device row makes the host wait: a device-to-host copy or a host sync."""
    if kind == "memcpy":
        return copy_direction(name) == BLOCKING_COPY
    return kind == "sync" and name in HOST_SYNCS


def _name_kinds(names: Sequence[str]) -> npt.NDArray[np.int64]:
    return np.fromiter(
        (
            _MEMCPY
            if n.startswith(_MEMCPY_PREFIX)
            else _MEMSET
            if n.startswith(_MEMSET_PREFIX)
            else _KERNEL
            for n in names
        ),
        dtype=np.int64,
        count=len(names),
    )


def device_table(
    ev: EventArrays,
    rows: IntArray,
    op_idx: IntArray,
    round_idx: IntArray,
    op_names: Sequence[str],
    n_rounds: int,
) -> DeviceTable | None:
    """The device table of the device and sync events ``rows`` of ``ev``.

    ``op_idx`` indexes ``op_names`` with each event's launching op, ``round_idx`` its round
    (-1 where the op is not counted: outside the rounds, in the drift probe, unlinked).
    None when no counted device event is left.
    """
    keep = round_idx >= 0
    rows, op_idx, round_idx = rows[keep], op_idx[keep], round_idx[keep]
    if rows.size == 0:
        return None
    kind = _name_kinds(ev.names)[ev.name_idx[rows]]
    kind[ev.kind[rows] == KIND_SYNC] = _SYNC
    dur = (ev.end_ns[rows] - ev.start_ns[rows]).astype(np.float64)
    nbytes = np.zeros(rows.size, dtype=np.int64) if ev.nbytes is None else ev.nbytes[rows]
    n_names = len(ev.names)
    key = (op_idx * len(DEVICE_KINDS) + kind) * n_names + ev.name_idx[rows]
    uniq, row_of = np.unique(key, return_inverse=True)
    cells = row_of * n_rounds + round_idx
    size = uniq.size * n_rounds
    shape = (uniq.size, n_rounds)
    name_of, rest = uniq % n_names, uniq // n_names
    kind_of, op_of = rest % len(DEVICE_KINDS), rest // len(DEVICE_KINDS)
    busy = kind != _SYNC
    idle = _idle(ev, rows[busy], op_idx[busy], round_idx[busy], n_rounds)
    idle_ops = np.flatnonzero(idle.before.any(axis=1))
    return DeviceTable(
        ops=tuple(op_names[i] for i in op_of.tolist()),
        kinds=tuple(DEVICE_KINDS[k] for k in kind_of.tolist()),
        names=tuple(ev.names[i] for i in name_of.tolist()),
        calls=np.bincount(cells, minlength=size).reshape(shape).astype(np.int64),
        device_us=np.bincount(cells, weights=dur, minlength=size).reshape(shape) / 1000.0,
        bytes=np.bincount(cells, weights=nbytes, minlength=size).reshape(shape).astype(np.int64),
        span_us=idle.span_ns / 1000.0,
        idle_us=idle.idle_ns / 1000.0,
        queue_depth=idle.queue_depth,
        idle_ops=tuple(op_names[i] for i in idle_ops.tolist()),
        idle_before_us=idle.before[idle_ops] / 1000.0,
    )


class _Idle:
    """Per round: span, idle time and mean queue depth; per op and round: idle before it."""

    def __init__(self, n_rounds: int, n_ops: int) -> None:
        self.span_ns = np.zeros(n_rounds)
        self.idle_ns = np.zeros(n_rounds)
        self.queue_depth = np.full(n_rounds, np.nan)
        self.before = np.zeros((n_ops, n_rounds))


def _idle(
    ev: EventArrays, rows: IntArray, op_idx: IntArray, round_idx: IntArray, n_rounds: int
) -> _Idle:
    """Idle intervals between the device activities of each round, on all streams at once."""
    out = _Idle(n_rounds, int(op_idx.max(initial=-1)) + 1)
    order = np.lexsort((ev.start_ns[rows], round_idx))
    rows, op_idx, round_idx = rows[order], op_idx[order], round_idx[order]
    bounds = np.searchsorted(round_idx, np.arange(n_rounds + 1))
    for r in range(n_rounds):
        lo, hi = int(bounds[r]), int(bounds[r + 1])
        if hi == lo:
            continue
        start, end = ev.start_ns[rows[lo:hi]], ev.end_ns[rows[lo:hi]]
        busy_until = np.maximum.accumulate(end)
        # The device is idle from the last end so far to the next start, when that is later.
        gaps = np.maximum(start[1:] - busy_until[:-1], 0).astype(np.float64)
        out.span_ns[r] = float(busy_until[-1] - start[0])
        out.idle_ns[r] = float(gaps.sum())
        np.add.at(out.before[:, r], op_idx[lo + 1 : hi], gaps)
        if ev.launch_ns is not None:
            out.queue_depth[r] = _queue_depth(ev.launch_ns[rows[lo:hi]], end)
    return out


def _queue_depth(launch: IntArray, end: IntArray) -> float:
    """Mean count of launched, unfinished activities at each launch (itself included)."""
    known = launch > 0
    if not known.any():
        return float("nan")
    launch, end = np.sort(launch[known]), np.sort(end[known])
    launched = np.searchsorted(launch, launch, side="right")
    finished = np.searchsorted(end, launch, side="right")
    return float(np.mean(launched - finished))
