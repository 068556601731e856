"""The device side of a verdict: idle time that grew, host waits on the device, and the
per-op device rows that moved (kernels, copies, syncs).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tprof_engine.model.arrays import FloatArray
from tprof_engine.model.device_delta import DEVICE_ROWS_PER_OP, DeviceRowDelta
from tprof_engine.model.device_tables import DeviceTable
from tprof_engine.reduce.device import blocks_host


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
            changes.append(
                HostWait(
                    op=key[0], kind=key[1], name=key[2], baseline=base, current=calls, bytes=size
                )
            )
    return sorted(changes, key=lambda w: not w.more)


def _blocking_calls(table: DeviceTable, metric: str = "calls") -> dict[tuple[str, str, str], Any]:
    """(op, kind, name) → per-round ``metric`` of the rows that make the host wait."""
    values = getattr(table, metric)
    return {
        (table.ops[i], table.kinds[i], table.names[i]): values[i]
        for i in range(len(table.ops))
        if blocks_host(table.kinds[i], table.names[i])
    }


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
    return DeviceRowDelta(
        op=op,
        kind=key[0],
        name=key[1],
        calls_baseline=b[0],
        calls_current=c[0],
        baseline_us=b[1],
        current_us=c[1],
        bytes_baseline=b[2],
        bytes_current=c[2],
    )
