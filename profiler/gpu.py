"""The device's side of a profile: per-op device rows, idle time and queue depth (no torch).

:func:`device_table` reduces the device events that :mod:`tprof_engine.reduce` attributed to ops
and rounds into a :class:`~tprof_engine.records.DeviceTable` with arrays, never per-event objects.
Idle time follows the idea of torch.profiler's ``_utils.BasicEvaluation``: within a round, the
device is idle where no stream runs a kernel, copy or fill; queue depth counts the activities
launched and not yet finished when another is launched.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from tprof_engine.records import (
    DEVICE_KINDS,
    KIND_SYNC,
    DeviceTable,
    EventArrays,
    FloatArray,
    IntArray,
)

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


def idle_growth(baseline: Sequence[DeviceTable], current: DeviceTable) -> list[tuple[str, float]]:
    """Ops by how much longer the device waited for their activities than in the baseline
    (median µs per round, the baseline's rounds pooled), largest first; growth only."""
    before: dict[str, list[FloatArray]] = {}
    for b in baseline:
        for i, op in enumerate(b.idle_ops):
            before.setdefault(op, []).append(b.idle_before_us[i])
    rounds = sum(int(b.idle_us.size) for b in baseline)
    grown = []
    for i, op in enumerate(current.idle_ops):
        base = np.concatenate(before[op]) if op in before else np.zeros(0)
        base = np.concatenate([base, np.zeros(rounds - base.size)])  # rounds it had no wait
        delta = float(np.median(current.idle_before_us[i]) - np.median(base))
        if delta > 0:
            grown.append((op, delta))
    return sorted(grown, key=lambda x: -x[1])


def idle_ranking(table: DeviceTable) -> list[tuple[str, float]]:
    """Ops by the device idle time that ended at their activities (median µs per round),
    largest first; ops with none are left out."""
    medians = np.median(table.idle_before_us, axis=1) if table.idle_ops else np.zeros(0)
    ranked = sorted(zip(table.idle_ops, medians.tolist(), strict=True), key=lambda x: -x[1])
    return [(op, us) for op, us in ranked if us > 0]


# --------------------------------------------------------------------------- against a baseline


@dataclass(frozen=True, slots=True, kw_only=True)
class HostWait:
    """A change in how often an op makes the host wait for the device (a DtoH copy, a sync).

    ``baseline`` is the most calls per round in any baseline round, ``current`` the median
    calls per round now; ``bytes`` the current median bytes per round (copies).
    """

    op: str
    kind: str
    name: str
    baseline: int
    current: int
    bytes: int

    @property
    def more(self) -> bool:
        return self.current > self.baseline

    def describe(self) -> str:
        size = f", {self.bytes:,} B" if self.bytes else ""
        what = "now waits" if self.more else "waits less"
        return (
            f"{self.op}: {self.name} {self.baseline} → {self.current} per round{size} "
            f"(the host {what} for the device)"
        )


def host_waits(baseline: Sequence[DeviceTable], current: DeviceTable) -> list[HostWait]:
    """The ops whose DtoH copies or host syncs per round changed, more first.

    More than any baseline round had is a new wait; fewer than every baseline round had is
    one gone.  Exact counts: how often the host waits doesn't drift.
    """
    sessions = [_blocking_calls(b) for b in baseline]
    keys = {key for calls in sessions for key in calls}
    most = {k: max(int(c[k].max()) if k in c else 0 for c in sessions) for k in keys}
    least = {k: min(int(c[k].min()) if k in c else 0 for c in sessions) for k in keys}
    now = _blocking_calls(current)
    now_bytes = {k: int(np.median(v)) for k, v in _blocking_calls(current, "bytes").items()}
    changes: list[HostWait] = []
    for key in sorted(keys | set(now)):
        calls = int(np.median(now[key])) if key in now else 0
        size = now_bytes.get(key, 0)
        base_most, base_least = most.get(key, 0), least.get(key, 0)
        if calls > base_most or calls < base_least:
            base = base_most if calls > base_most else base_least
            changes.append(HostWait(op=key[0], kind=key[1], name=key[2], baseline=base,
                                    current=calls, bytes=size))  # fmt: skip
    return sorted(changes, key=lambda w: not w.more)


def _blocking_calls(table: DeviceTable, metric: str = "calls") -> dict[tuple[str, str, str], Any]:
    """(op, kind, name) → per-round ``metric`` of the rows that make the host wait."""
    values = getattr(table, metric)
    return {
        (table.ops[i], table.kinds[i], table.names[i]): values[i]
        for i in range(len(table.ops))
        if blocks_host(table.kinds[i], table.names[i])
    }


DEVICE_ROWS_PER_OP = 8  # an op's device rows a verdict keeps, largest move first


@dataclass(frozen=True, slots=True, kw_only=True)
class DeviceRowDelta:
    """One kernel (copy, fill) of a flagged op against the baseline: medians per round.

    Device µs are raw, not in probe units: this row says which kernel moved, the op's
    verdict says whether the move counts.
    """

    op: str
    kind: str
    name: str
    calls_baseline: float
    calls_current: float
    baseline_us: float
    current_us: float
    bytes_baseline: int
    bytes_current: int

    @property
    def delta_us(self) -> float:
        return self.current_us - self.baseline_us

    def to_dict(self) -> dict[str, Any]:
        return {
            "op": self.op,
            "kind": self.kind,
            "name": self.name,
            "calls_baseline": self.calls_baseline,
            "calls_current": self.calls_current,
            "baseline_us": round(self.baseline_us, 3),
            "current_us": round(self.current_us, 3),
            "delta_us": round(self.delta_us, 3),
            "bytes_baseline": self.bytes_baseline,
            "bytes_current": self.bytes_current,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> DeviceRowDelta:
        return cls(
            op=str(d["op"]),
            kind=str(d["kind"]),
            name=str(d["name"]),
            calls_baseline=float(d["calls_baseline"]),
            calls_current=float(d["calls_current"]),
            baseline_us=float(d["baseline_us"]),
            current_us=float(d["current_us"]),
            bytes_baseline=int(d.get("bytes_baseline", 0)),
            bytes_current=int(d.get("bytes_current", 0)),
        )


def row_deltas(
    ops: Sequence[str], baseline: Sequence[DeviceTable], current: DeviceTable
) -> list[DeviceRowDelta]:
    """Each op's kernels, copies and fills against the baseline, the largest move first
    (at most :data:`DEVICE_ROWS_PER_OP` per op, ops in the order given)."""
    rounds = sum(int(b.span_us.size) for b in baseline)
    out: list[DeviceRowDelta] = []
    for op in dict.fromkeys(ops):
        base = _pooled_rows(op, baseline, rounds)
        now = _pooled_rows(op, [current], int(current.span_us.size))
        rows = [
            _row_delta(op, key, base.get(key), now.get(key)) for key in sorted(set(base) | set(now))
        ]
        rows.sort(key=lambda r: -abs(r.delta_us))
        out.extend(rows[:DEVICE_ROWS_PER_OP])
    return out


_Pooled = dict[tuple[str, str], tuple[float, float, int]]  # (kind, name) → calls, µs, bytes


def _pooled_rows(op: str, tables: Sequence[DeviceTable], rounds: int) -> _Pooled:
    """Median calls, device µs and bytes per round of an op's timed rows, rounds pooled
    (a session without the row counts as rounds of none)."""
    parts: dict[tuple[str, str], list[FloatArray]] = {}
    for t in tables:
        for i in t.rows_of(op):
            if t.kinds[i] != "sync":
                parts.setdefault((t.kinds[i], t.names[i]), []).append(
                    np.stack([t.calls[i], t.device_us[i], t.bytes[i]]).astype(np.float64)
                )
    out: _Pooled = {}
    for key, arrays in parts.items():
        joined = np.concatenate(arrays, axis=1)
        joined = np.pad(joined, ((0, 0), (0, rounds - joined.shape[1])))
        calls, us, size = np.median(joined, axis=1).tolist()
        out[key] = (calls, round(us, 3), int(size))  # the profiler's 1 ns, as stored
    return out


def _row_delta(
    op: str,
    key: tuple[str, str],
    base: tuple[float, float, int] | None,
    now: tuple[float, float, int] | None,
) -> DeviceRowDelta:
    b = base or (0.0, 0.0, 0)
    c = now or (0.0, 0.0, 0)
    return DeviceRowDelta(op=op, kind=key[0], name=key[1], calls_baseline=b[0],
                          calls_current=c[0], baseline_us=b[1], current_us=c[1],
                          bytes_baseline=b[2], bytes_current=c[2])  # fmt: skip
