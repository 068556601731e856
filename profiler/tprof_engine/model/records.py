"""Value objects that cross the capture boundary: plain numbers and numpy arrays, no torch."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import numpy.typing as npt

from tprof_engine.model.arrays import FloatArray, IntArray, per_round, rounded
from tprof_engine.model.device_tables import DeviceTable, MemoryTable

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
    # The family spec key of its device columns (capture's backend sets it); None: the
    # table's first device family, which every stored baseline's device times are.
    device_family: str | None = None
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
    # The rows that are user annotations (``record_function`` scopes: an optimizer's step, a
    # DataLoader's next batch): their self time is Python run inside them outside any op.
    # Empty in older baselines and where the capture can't tell.
    scopes: frozenset[str] = frozenset()

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
                entry[m] = rounded(getattr(self, m)[i])
            if self.has_device:
                for m in ("self_device_us", "total_device_us"):
                    entry[m] = rounded(getattr(self, m)[i])
            ops[name] = entry
        out: dict[str, Any] = {
            "wall_us": rounded(self.wall_us),
            "probe_cpu_us": rounded(self.probe_cpu_us),
            "has_device": self.has_device,
            "ops": ops,
        }
        if self.has_device:
            out["probe_device_us"] = rounded(self.probe_device_us)
        out.update(self._parts_to_dict())
        return out

    def _parts_to_dict(self) -> dict[str, Any]:
        """The parts a table may lack, each where it has it."""
        out: dict[str, Any] = {}
        for key in ("device", "memory", "load"):
            part = getattr(self, key)
            if part is not None:
                out[key] = part.to_dict()
        if self.host_before_us is not None:
            out["host_before_us"] = {
                name: rounded(self.host_before_us[i])
                for i, name in enumerate(self.names)
                if self.host_before_us[i].any()
            }
        if self.scopes:
            out["scopes"] = sorted(self.scopes)
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
            scopes=frozenset(data.get("scopes") or ()) & frozenset(names),
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
        out[at[op]] = per_round(values, rounds, f"{str(op)[:80]}")
    return out


# Per-round counts a RoundLoad may hold, each None where it wasn't read.
LOAD_COUNTS = ("switches", "blocks", "neighbours", "gpu_slowed", "gpu_sm_mhz", "gpu_others")


@dataclass(frozen=True, slots=True, kw_only=True)
class RoundLoad:
    """What the machine let each measured round run, read around the body's calls.

    ``cpu_us``: CPU time the profiling thread got during the round (its wall time less this
    is time off the CPU: waiting for one, stolen by a hypervisor, or blocked).  Linux only,
    else None: ``queued_us``, the time the process's threads waited in the run queue for a
    CPU, together (``/proc/self/task/*/schedstat``: the calling thread's and those of torch's
    intra-op pool); ``switches`` and ``blocks``, involuntary and voluntary
    context switches (``getrusage(RUSAGE_THREAD)``); ``neighbours``, other runnable tasks on
    the machine at the round's end (``/proc/loadavg``).  With a GPU whose driver answers
    (NVML): ``gpu_slowed``, the clock-event reasons seen at the round's start or end
    (``capture.gpu_state``), ``gpu_sm_mhz``, its SM clock at the round's end, and
    ``gpu_others``, other processes holding a context on it.  ``memory_us``: the time to read a
    slice of a buffer larger than the last-level cache, one cache line in each 64 bytes, before
    the capture's rounds and after them, the slower of the two for each of its rounds
    (``capture.load.MemoryRead``): a neighbour taking the memory bandwidth slows it where the
    drift probe's arithmetic, in cache, doesn't see it.  Each array has one value per round.
    """

    cpu_us: FloatArray
    queued_us: FloatArray | None = None
    switches: IntArray | None = None
    blocks: IntArray | None = None  # voluntary context switches: the thread blocked itself
    neighbours: IntArray | None = None
    cpus: int = 1  # the machine's CPUs, which the neighbours shared
    gpu_slowed: IntArray | None = None  # NVML clock-event reason bits
    gpu_sm_mhz: IntArray | None = None
    gpu_others: IntArray | None = None
    memory_us: FloatArray | None = None  # the capture's memory read (None: not read)

    def _parts(self, pick: Any) -> dict[str, Any]:
        return {k: None if (v := getattr(self, k)) is None else pick(v) for k in LOAD_COUNTS}

    def rounds_slice(self, keep: Any) -> RoundLoad:
        return RoundLoad(
            cpu_us=self.cpu_us[keep],
            queued_us=None if self.queued_us is None else self.queued_us[keep],
            memory_us=None if self.memory_us is None else self.memory_us[keep],
            cpus=self.cpus,
            **self._parts(lambda a: a[keep]),
        )

    def per_iteration(self, iterations: int) -> RoundLoad:
        """Times per call of the body, as the round's other times; counts stay the round's."""
        return replace(
            self,
            cpu_us=self.cpu_us / iterations,
            queued_us=None if self.queued_us is None else self.queued_us / iterations,
        )

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"cpu_us": rounded(self.cpu_us), "cpus": self.cpus}
        if self.queued_us is not None:
            out["queued_us"] = rounded(self.queued_us)
        if self.memory_us is not None:
            out["memory_us"] = rounded(self.memory_us)
        for key in LOAD_COUNTS:
            values = getattr(self, key)
            if values is not None:
                out[key] = [int(v) for v in values]
        return out

    @classmethod
    def from_dict(cls, data: Any, rounds: int) -> RoundLoad:
        """Inverse of :meth:`to_dict`, checked: a malformed part is a ``ValueError`` naming it."""
        if not isinstance(data, Mapping):
            raise ValueError("must be an object of per-round arrays")
        known = {"cpu_us", "queued_us", "memory_us", "cpus", *LOAD_COUNTS}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown key {unknown[0]!r}")
        cpus = data.get("cpus", 1)
        if isinstance(cpus, bool) or not isinstance(cpus, int) or not 1 <= cpus <= 1 << 20:
            raise ValueError(f"'cpus' must be a count of CPUs >= 1 (got {cpus!r})")

        def counts(key: str) -> IntArray | None:
            if data.get(key) is None:
                return None
            values = per_round(data[key], rounds, key)
            if (values != np.floor(values)).any():
                raise ValueError(f"'{key}' must hold whole numbers")
            return values.astype(np.int64)

        return cls(
            cpu_us=per_round(data.get("cpu_us"), rounds, "cpu_us"),
            queued_us=None
            if data.get("queued_us") is None
            else per_round(data["queued_us"], rounds, "queued_us"),
            memory_us=None
            if data.get("memory_us") is None
            else per_round(data["memory_us"], rounds, "memory_us"),
            cpus=cpus,
            **{key: counts(key) for key in LOAD_COUNTS},
        )


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
        scopes=frozenset().union(*(t.scopes for t in tables)),
    )


def _concat_loads(loads: Sequence[RoundLoad]) -> RoundLoad:
    def part(key: str) -> Any:
        values = [getattr(x, key) for x in loads]
        return None if any(v is None for v in values) else np.concatenate(values)

    return RoundLoad(
        cpu_us=np.concatenate([x.cpu_us for x in loads]),
        queued_us=part("queued_us"),
        memory_us=part("memory_us"),
        cpus=loads[0].cpus,
        **{key: part(key) for key in LOAD_COUNTS},
    )
