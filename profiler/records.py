"""Value objects that cross the capture boundary: plain numbers and numpy arrays, no torch."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

# Per-op metrics of an OpTable, each a (n_ops, n_rounds) array; the unit is in the name.
METRICS = ("calls", "self_cpu_us", "total_cpu_us", "self_device_us", "total_device_us")


@dataclass(frozen=True, slots=True, kw_only=True)
class EventArrays:
    """Profiler events as parallel arrays: the one shape every event source is turned into.

    Times are integer nanoseconds on one clock.  ``kind`` is one of the ``KIND_*`` codes.
    For CPU-side events ``corr`` is the event's own correlation id; for device events
    (kernels, memcpy, memset) ``link`` is the correlation id of the CPU op that launched them.
    """

    names: tuple[str, ...]  # distinct names; ``name_idx`` indexes into it
    name_idx: IntArray
    start_ns: IntArray
    end_ns: IntArray
    thread: IntArray
    kind: npt.NDArray[np.int8]
    corr: IntArray
    link: IntArray
    # Device events only (0 elsewhere; None when the source has none): a memcpy's or memset's
    # bytes, and the start of the runtime call that launched the event (for queue depth).
    nbytes: IntArray | None = None
    launch_ns: IntArray | None = None

    def __len__(self) -> int:
        return int(self.start_ns.shape[0])


KIND_OP = 0  # an op or runtime call on a CPU thread: counted
KIND_ANNOTATION = 1  # a user annotation (record_function) on a CPU thread: counted, unless a marker
KIND_DEVICE = 2  # a kernel / memcpy / memset on the device: attributed to its launching op
KIND_IGNORED = 3  # hidden, memory or profiler-internal events
KIND_ASYNC = 4  # a CPU op that ends on another thread: counted, never nested, no self time
KIND_SYNC = 5  # a device synchronisation (kineto's cuda_sync): linked like a kernel, no device time
KIND_MEMORY = 6  # an allocation (nbytes > 0) or free (< 0) on a CPU thread (profile_memory)


@dataclass(frozen=True, slots=True, kw_only=True)
class OpTable:
    """Per-op, per-round samples of one profiled test (one profiler session).

    Every per-op array has shape ``(len(names), rounds)``; times are in microseconds.
    ``probe_cpu_us`` / ``probe_device_us`` are the drift probe's times in each round.
    """

    names: tuple[str, ...]
    calls: IntArray
    self_cpu_us: FloatArray
    total_cpu_us: FloatArray
    self_device_us: FloatArray
    total_device_us: FloatArray
    wall_us: FloatArray
    probe_cpu_us: FloatArray
    probe_device_us: FloatArray
    has_device: bool = False
    # Per op and round: the time outside any op just before the op (µs), for the body's
    # outermost ops; where the round's host time is spent.  None in older baselines.
    host_before_us: FloatArray | None = None
    meta: Mapping[str, Any] = field(default_factory=dict)
    # What the device did for each op (kernels, copies, syncs) and its idle time; None when the
    # run had no device work or the baseline predates it.
    device: DeviceTable | None = None
    # Bytes each op allocated per round and each round's peak (profile_memory runs only).
    memory: MemoryTable | None = None
    # What the machine let each round run (CPU time, run-queue wait); None in older baselines
    # and in traces.
    load: RoundLoad | None = None

    @property
    def rounds(self) -> int:
        return int(self.wall_us.shape[0])

    def index(self) -> dict[str, int]:
        return {name: i for i, name in enumerate(self.names)}

    @property
    def host_us(self) -> FloatArray:
        """Each round's time outside any op: the body's wall time less the time ops covered
        (their self times add up to it), never below 0.  Python between ops, hooks, the
        harness's own loop: what no op row shows."""
        host: FloatArray = np.maximum(self.wall_us - self.self_cpu_us.sum(axis=0), 0.0)
        return host

    def with_rounds(self, keep: IntArray) -> OpTable:
        """The same table for the rounds ``keep`` (indices, in that order); ops that none of
        them called go (lazy first-step work: a row of no calls would read as a change)."""
        keep = np.asarray(keep, dtype=np.int64)
        called = np.flatnonzero(self.calls[:, keep].any(axis=1))
        rows = np.ix_(called, keep)
        return replace(
            self,
            names=tuple(self.names[i] for i in called.tolist()),
            **{m: getattr(self, m)[rows] for m in METRICS},
            wall_us=self.wall_us[keep],
            probe_cpu_us=self.probe_cpu_us[keep],
            probe_device_us=self.probe_device_us[keep],
            host_before_us=None if self.host_before_us is None else self.host_before_us[rows],
            device=None if self.device is None else self.device.rounds_slice(keep),
            memory=None if self.memory is None else self.memory.rounds_slice(keep),
            load=None if self.load is None else self.load.rounds_slice(keep),
        )

    def op(self, name: str) -> dict[str, FloatArray | IntArray]:
        """The per-round arrays of one op, by metric name."""
        i = self.index()[name]
        return {m: getattr(self, m)[i] for m in METRICS}

    def to_dict(self) -> dict[str, Any]:
        """Builtin-only form (lists and numbers) for baselines and for xdist transport."""
        ops: dict[str, Any] = {}
        for i, name in enumerate(self.names):
            entry: dict[str, Any] = {"calls": [int(c) for c in self.calls[i]]}
            for m in ("self_cpu_us", "total_cpu_us"):
                entry[m] = _rounded(getattr(self, m)[i])
            if self.has_device:
                for m in ("self_device_us", "total_device_us"):
                    entry[m] = _rounded(getattr(self, m)[i])
            ops[name] = entry
        out: dict[str, Any] = {
            "wall_us": _rounded(self.wall_us),
            "probe_cpu_us": _rounded(self.probe_cpu_us),
            "has_device": self.has_device,
            "ops": ops,
        }
        if self.has_device:
            out["probe_device_us"] = _rounded(self.probe_device_us)
        if self.device is not None:
            out["device"] = self.device.to_dict()
        if self.memory is not None:
            out["memory"] = self.memory.to_dict()
        if self.load is not None:
            out["load"] = self.load.to_dict()
        if self.host_before_us is not None:
            out["host_before_us"] = {
                name: _rounded(self.host_before_us[i])
                for i, name in enumerate(self.names)
                if self.host_before_us[i].any()
            }
        return out

    @classmethod
    def from_dict(
        cls, data: Mapping[str, Any], *, meta: Mapping[str, Any] | None = None
    ) -> OpTable:
        """Inverse of :meth:`to_dict`; the caller has validated shapes and values, except the
        ``device`` part's, which :meth:`DeviceTable.from_dict` checks (``ValueError``)."""
        ops = data["ops"]
        names = tuple(sorted(ops))
        rounds = len(data["wall_us"])
        has_device = bool(data.get("has_device", False))

        def arr(metric: str, dtype: type) -> Any:
            if not names:
                return np.zeros((0, rounds), dtype=dtype)
            rows = [ops[n].get(metric, [0] * rounds) for n in names]
            return np.asarray(rows, dtype=dtype).reshape(len(names), rounds)

        zeros = np.zeros(rounds)
        return cls(
            names=names,
            calls=arr("calls", np.int64),
            self_cpu_us=arr("self_cpu_us", np.float64),
            total_cpu_us=arr("total_cpu_us", np.float64),
            self_device_us=arr("self_device_us", np.float64),
            total_device_us=arr("total_device_us", np.float64),
            wall_us=np.asarray(data["wall_us"], dtype=np.float64),
            probe_cpu_us=np.asarray(data.get("probe_cpu_us", zeros), dtype=np.float64),
            probe_device_us=np.asarray(data.get("probe_device_us", zeros), dtype=np.float64),
            has_device=has_device,
            meta=dict(meta or {}),
            device=None
            if data.get("device") is None
            else DeviceTable.from_dict(data["device"], rounds),
            memory=None
            if data.get("memory") is None
            else MemoryTable.from_dict(data["memory"], rounds),
            load=None if data.get("load") is None else RoundLoad.from_dict(data["load"], rounds),
            host_before_us=host_before_from_dict(data.get("host_before_us"), names, rounds),
        )

    def session_totals(self) -> dict[str, dict[str, float]]:
        """Per-op session totals (sum over rounds), keyed like ``key_averages()`` columns."""
        out: dict[str, dict[str, float]] = {}
        for i, name in enumerate(self.names):
            out[name] = {m: float(getattr(self, m)[i].sum()) for m in METRICS}
        return out


def host_before_from_dict(data: Any, names: tuple[str, ...], rounds: int) -> FloatArray | None:
    """The ``host_before_us`` part of a table's dict as an op × round array (ops it doesn't
    name had no time before them); a malformed one is a ``ValueError`` saying what is wrong."""
    if data is None:
        return None
    if not isinstance(data, Mapping):
        raise ValueError("must be an object of op name → per-round µs")
    at = {n: i for i, n in enumerate(names)}
    out = np.zeros((len(names), rounds))
    for op, values in data.items():
        if op not in at:
            raise ValueError(f"names {str(op)[:80]!r}, which is not one of the session's ops")
        out[at[op]] = _per_round(values, rounds, f"{str(op)[:80]}")
    return out


@dataclass(frozen=True, slots=True, kw_only=True)
class RoundLoad:
    """What the machine let each measured round run, read around the body's calls.

    ``cpu_us``: CPU time the profiling thread got during the round (its wall time less this
    is time off the CPU: waiting for one, stolen by a hypervisor, or blocked).  Linux only,
    else None: ``queued_us``, the time the thread waited in the run queue for a CPU
    (``/proc/thread-self/schedstat``); ``switches`` and ``blocks``, involuntary and voluntary
    context switches (``getrusage(RUSAGE_THREAD)``); ``neighbours``, other runnable tasks on
    the machine at the round's end (``/proc/loadavg``).  Each array has one value per round.
    """

    cpu_us: FloatArray
    queued_us: FloatArray | None = None
    switches: IntArray | None = None
    blocks: IntArray | None = None  # voluntary context switches: the thread blocked itself
    neighbours: IntArray | None = None
    cpus: int = 1  # the machine's CPUs, which the neighbours shared

    def rounds_slice(self, keep: Any) -> RoundLoad:
        def part(a: Any) -> Any:
            return None if a is None else a[keep]

        return RoundLoad(
            cpu_us=self.cpu_us[keep],
            queued_us=part(self.queued_us),
            switches=part(self.switches),
            blocks=part(self.blocks),
            neighbours=part(self.neighbours),
            cpus=self.cpus,
        )

    def per_iteration(self, iterations: int) -> RoundLoad:
        """Times per call of the body, as the round's other times; counts stay the round's."""
        return replace(
            self,
            cpu_us=self.cpu_us / iterations,
            queued_us=None if self.queued_us is None else self.queued_us / iterations,
        )

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"cpu_us": _rounded(self.cpu_us), "cpus": self.cpus}
        if self.queued_us is not None:
            out["queued_us"] = _rounded(self.queued_us)
        for key in ("switches", "blocks", "neighbours"):
            values = getattr(self, key)
            if values is not None:
                out[key] = [int(v) for v in values]
        return out

    @classmethod
    def from_dict(cls, data: Any, rounds: int) -> RoundLoad:
        """Inverse of :meth:`to_dict`, checked: a malformed part is a ``ValueError`` naming it."""
        if not isinstance(data, Mapping):
            raise ValueError("must be an object of per-round arrays")
        known = {"cpu_us", "queued_us", "switches", "blocks", "neighbours", "cpus"}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown key {unknown[0]!r}")
        cpus = data.get("cpus", 1)
        if isinstance(cpus, bool) or not isinstance(cpus, int) or not 1 <= cpus <= 1 << 20:
            raise ValueError(f"'cpus' must be a count of CPUs >= 1 (got {cpus!r})")

        def counts(key: str) -> IntArray | None:
            if data.get(key) is None:
                return None
            values = _per_round(data[key], rounds, key)
            if (values != np.floor(values)).any():
                raise ValueError(f"'{key}' must hold whole numbers")
            return values.astype(np.int64)

        return cls(
            cpu_us=_per_round(data.get("cpu_us"), rounds, "cpu_us"),
            queued_us=None
            if data.get("queued_us") is None
            else _per_round(data["queued_us"], rounds, "queued_us"),
            switches=counts("switches"),
            blocks=counts("blocks"),
            neighbours=counts("neighbours"),
            cpus=cpus,
        )


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
        peak = _table([data.get("peak_bytes")], rounds, np.int64, "peak_bytes")
        return cls(
            ops=tuple(str(op) for op in ops),
            alloc_bytes=_table(
                [e.get("alloc_bytes") for e in ops.values()], rounds, np.int64, "alloc_bytes"
            ),
            allocs=_table([e.get("allocs") for e in ops.values()], rounds, np.int64, "allocs"),
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
                "device_us": _rounded(self.device_us[i]),
                "bytes": [int(b) for b in self.bytes[i]],
            }
            for i in range(len(self.ops))
        ]
        return {
            "rows": rows,
            "span_us": _rounded(self.span_us),
            "idle_us": _rounded(self.idle_us),
            "queue_depth": [None if np.isnan(q) else round(float(q), 3) for q in self.queue_depth],
            "idle_before_us": {
                op: _rounded(self.idle_before_us[i]) for i, op in enumerate(self.idle_ops)
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
            calls=_table([r["calls"] for r in rows], rounds, np.int64, "calls"),
            device_us=_table([r["device_us"] for r in rows], rounds, np.float64, "device_us"),
            bytes=_table([r["bytes"] for r in rows], rounds, np.int64, "bytes"),
            span_us=_per_round(data.get("span_us"), rounds, "span_us"),
            idle_us=_per_round(data.get("idle_us"), rounds, "idle_us"),
            queue_depth=_per_round(data.get("queue_depth"), rounds, "queue_depth", nan_ok=True),
            idle_ops=tuple(str(op) for op in idle_before),
            idle_before_us=_table(list(idle_before.values()), rounds, np.float64, "idle_before_us"),
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


def _table(rows: list[Any], rounds: int, dtype: type, what: str) -> Any:
    if not rows:
        return np.zeros((0, rounds), dtype=dtype)
    try:
        out: Any = np.asarray(rows, dtype=dtype)
    except (TypeError, ValueError):
        raise ValueError(f"'{what}' must hold numbers only") from None
    if out.shape != (len(rows), rounds) or (out.dtype.kind == "f" and not np.isfinite(out).all()):
        raise ValueError(f"'{what}' must hold one finite number per round ({rounds})")
    if (out < 0).any():
        raise ValueError(f"'{what}' must not be negative")
    return out


def _per_round(values: Any, rounds: int, what: str, *, nan_ok: bool = False) -> FloatArray:
    if not isinstance(values, list) or len(values) != rounds:
        raise ValueError(f"'{what}' must hold one number per round ({rounds})")
    try:
        out = np.asarray([np.nan if v is None and nan_ok else v for v in values], dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"'{what}' must hold numbers only") from None
    if ((out < 0) | (np.isinf(out)) | (np.isnan(out) & (not nan_ok))).any():
        raise ValueError(f"'{what}' must hold finite numbers >= 0")
    return out


def _rounded(values: Sequence[float] | FloatArray) -> list[float]:
    # 1 ns resolution is what the profiler has; more digits only make diffs noisy.
    return [round(float(v), 3) for v in values]


def concat_rounds(tables: Sequence[OpTable]) -> OpTable:
    """The rounds of several captures of one body as one table, in order; an op missing from
    a capture has no calls in its rounds.  Device and memory tables aren't joined: a caller
    joins only captures without them."""
    names = tuple(sorted({n for t in tables for n in t.names}))
    at = {n: i for i, n in enumerate(names)}

    def joined(metric: str, dtype: type) -> Any:
        parts = []
        for t in tables:
            block: Any = np.zeros((len(names), t.rounds), dtype=dtype)
            block[[at[n] for n in t.names]] = getattr(t, metric)
            parts.append(block)
        return np.concatenate(parts, axis=1)

    befores = [t.host_before_us for t in tables]
    host_before = None
    if all(b is not None for b in befores):
        host_before = joined("host_before_us", np.float64)
    loads = [t.load for t in tables]
    load = None
    if all(x is not None for x in loads):
        load = _concat_loads([x for x in loads if x is not None])
    first = tables[0]
    return replace(
        first,
        names=names,
        **{m: joined(m, np.int64 if m == "calls" else np.float64) for m in METRICS},
        wall_us=np.concatenate([t.wall_us for t in tables]),
        probe_cpu_us=np.concatenate([t.probe_cpu_us for t in tables]),
        probe_device_us=np.concatenate([t.probe_device_us for t in tables]),
        host_before_us=host_before,
        load=load,
    )


def _concat_loads(loads: Sequence[RoundLoad]) -> RoundLoad:
    def part(key: str) -> Any:
        values = [getattr(x, key) for x in loads]
        return None if any(v is None for v in values) else np.concatenate(values)

    return RoundLoad(
        cpu_us=np.concatenate([x.cpu_us for x in loads]),
        queued_us=part("queued_us"),
        switches=part("switches"),
        blocks=part("blocks"),
        neighbours=part("neighbours"),
        cpus=loads[0].cpus,
    )
