"""The device's and the allocator's tables of a capture: per op and round, arrays only."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from tprof_engine.model.arrays import FloatArray, IntArray, checked_table, per_round, rounded


@dataclass(frozen=True, slots=True, kw_only=True)
class MemoryTable:
    """Memory of one profiled test, per round: ``alloc_bytes`` and ``allocs`` per op
    (``(len(ops), rounds)``: what the op itself allocated, on any device) and ``peak_bytes``,
    the most the round held above what it started with."""

    ops: tuple[str, ...]
    alloc_bytes: IntArray
    allocs: IntArray
    peak_bytes: IntArray

    def rounds_slice(self, keep: Any) -> MemoryTable:
        return replace(
            self,
            alloc_bytes=self.alloc_bytes[:, keep],
            allocs=self.allocs[:, keep],
            peak_bytes=self.peak_bytes[keep],
        )

    def per_iteration(self, iterations: int) -> MemoryTable:
        """Allocations per call of the body; the peak stays the round's."""
        return replace(
            self, alloc_bytes=self.alloc_bytes // iterations, allocs=self.allocs // iterations
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "ops": {
                op: {
                    "alloc_bytes": [int(b) for b in self.alloc_bytes[i]],
                    "allocs": [int(n) for n in self.allocs[i]],
                }
                for i, op in enumerate(self.ops)
            },
            "peak_bytes": [int(b) for b in self.peak_bytes],
        }

    @classmethod
    def from_dict(cls, data: Any, rounds: int) -> MemoryTable:
        """Inverse of :meth:`to_dict`, checked: a malformed part is a ``ValueError`` naming it."""
        if not isinstance(data, Mapping) or not isinstance(data.get("ops"), Mapping):
            raise ValueError("must be an object with an 'ops' object")
        ops = data["ops"]
        for op, entry in ops.items():
            if not isinstance(entry, Mapping):
                raise ValueError(f"'ops[{op!r}]' must be an object")
        peak = checked_table([data.get("peak_bytes")], rounds, np.int64, "peak_bytes")
        return cls(
            ops=tuple(str(op) for op in ops),
            alloc_bytes=checked_table(
                [e.get("alloc_bytes") for e in ops.values()], rounds, np.int64, "alloc_bytes"
            ),
            allocs=checked_table(
                [e.get("allocs") for e in ops.values()], rounds, np.int64, "allocs"
            ),
            peak_bytes=peak[0],
        )


# What a device row is: its ``kinds`` entry.  A kernel, a copy, a fill, a synchronisation.
DEVICE_KINDS = ("kernel", "memcpy", "memset", "sync")


@dataclass(frozen=True, slots=True, kw_only=True)
class DeviceTable:
    """The device's side of one profiled test, per round (times in µs of device time).

    Rows are (launching op, kind, name): the kernels an op launched by kernel name, its copies
    by their kineto name (``Memcpy DtoH (Device -> Pageable)``), its fills, and the
    synchronisations it waited on (``Stream Sync``).  Per row and round: ``calls``,
    ``device_us`` and ``bytes`` (copies and fills), each ``(rows, rounds)``.

    Per round: ``span_us`` from the first device activity's start to the last one's end,
    ``idle_us`` the time within it when no stream ran anything, ``queue_depth`` the mean
    number of launched, unfinished activities at each launch (NaN when launches are unknown).
    ``idle_before_us`` is ``(len(idle_ops), rounds)``: the idle time that ended when one of
    the op's activities started, so the device waited for that op.
    """

    ops: tuple[str, ...]
    kinds: tuple[str, ...]
    names: tuple[str, ...]
    calls: IntArray
    device_us: FloatArray
    bytes: IntArray
    span_us: FloatArray
    idle_us: FloatArray
    queue_depth: FloatArray
    idle_ops: tuple[str, ...] = ()
    idle_before_us: FloatArray = field(default_factory=lambda: np.zeros((0, 0)))

    @property
    def idle_fraction(self) -> FloatArray:
        """Per round, the idle share of the device span (0 for a round with no device work)."""
        span = np.where(self.span_us > 0, self.span_us, 1.0)
        return np.where(self.span_us > 0, self.idle_us / span, 0.0)

    def rows_of(self, op: str, kind: str | None = None) -> list[int]:
        """Row indices of one op (of one kind), in row order."""
        return [
            i for i, o in enumerate(self.ops) if o == op and (kind is None or self.kinds[i] == kind)
        ]

    def rounds_slice(self, keep: Any) -> DeviceTable:
        """The same table for some of its rounds (warm-up dropped after capture)."""
        return DeviceTable(
            ops=self.ops,
            kinds=self.kinds,
            names=self.names,
            calls=self.calls[:, keep],
            device_us=self.device_us[:, keep],
            bytes=self.bytes[:, keep],
            span_us=self.span_us[keep],
            idle_us=self.idle_us[keep],
            queue_depth=self.queue_depth[keep],
            idle_ops=self.idle_ops,
            idle_before_us=self.idle_before_us[:, keep],
        )

    def per_iteration(self, iterations: int) -> DeviceTable:
        """Calls, times and bytes per call of the body when a round ran it ``iterations``
        times; a row called at all keeps at least one call, as op calls do."""
        calls = np.rint(self.calls / iterations).astype(np.int64)
        return replace(
            self,
            calls=np.where(self.calls > 0, np.maximum(calls, 1), 0),
            device_us=self.device_us / iterations,
            bytes=self.bytes // iterations,
            span_us=self.span_us / iterations,
            idle_us=self.idle_us / iterations,
            idle_before_us=self.idle_before_us / iterations,
        )

    def to_dict(self) -> dict[str, Any]:
        """Builtin-only form; rows as a list so one op's kernels read together in a diff."""
        rows = [
            {
                "op": self.ops[i],
                "kind": self.kinds[i],
                "name": self.names[i],
                "calls": [int(c) for c in self.calls[i]],
                "device_us": rounded(self.device_us[i]),
                "bytes": [int(b) for b in self.bytes[i]],
            }
            for i in range(len(self.ops))
        ]
        return {
            "rows": rows,
            "span_us": rounded(self.span_us),
            "idle_us": rounded(self.idle_us),
            "queue_depth": [None if np.isnan(q) else round(float(q), 3) for q in self.queue_depth],
            "idle_before_us": {
                op: rounded(self.idle_before_us[i]) for i, op in enumerate(self.idle_ops)
            },
        }

    @classmethod
    def from_dict(cls, data: Any, rounds: int) -> DeviceTable:
        """Inverse of :meth:`to_dict`, checked: a malformed part is a ``ValueError`` naming it."""
        if not isinstance(data, Mapping) or not isinstance(data.get("rows"), list):
            raise ValueError("must be an object with a 'rows' list")
        rows = data["rows"]
        for k, row in enumerate(rows):
            _check_row(row, k, rounds)
        idle_before = data.get("idle_before_us", {})
        if not isinstance(idle_before, Mapping):
            raise ValueError("'idle_before_us' must be an object of op name → per-round µs")
        return cls(
            ops=tuple(str(r["op"]) for r in rows),
            kinds=tuple(str(r["kind"]) for r in rows),
            names=tuple(str(r["name"]) for r in rows),
            calls=checked_table([r["calls"] for r in rows], rounds, np.int64, "calls"),
            device_us=checked_table(
                [r["device_us"] for r in rows], rounds, np.float64, "device_us"
            ),
            bytes=checked_table([r["bytes"] for r in rows], rounds, np.int64, "bytes"),
            span_us=per_round(data.get("span_us"), rounds, "span_us"),
            idle_us=per_round(data.get("idle_us"), rounds, "idle_us"),
            queue_depth=per_round(data.get("queue_depth"), rounds, "queue_depth", nan_ok=True),
            idle_ops=tuple(str(op) for op in idle_before),
            idle_before_us=checked_table(
                list(idle_before.values()), rounds, np.float64, "idle_before_us"
            ),
        )


def _check_row(row: Any, k: int, rounds: int) -> None:
    if not isinstance(row, Mapping):
        raise ValueError(f"'rows[{k}]' must be an object")
    for key in ("op", "kind", "name"):
        if not isinstance(row.get(key), str):
            raise ValueError(f"'rows[{k}].{key}' must be a string")
    if row["kind"] not in DEVICE_KINDS:
        raise ValueError(f"'rows[{k}].kind' must be one of {', '.join(DEVICE_KINDS)}")
    for key in ("calls", "device_us", "bytes"):
        values = row.get(key)
        if not isinstance(values, list) or len(values) != rounds:
            raise ValueError(f"'rows[{k}].{key}' must hold one number per round ({rounds})")
