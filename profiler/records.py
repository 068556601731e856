"""Value objects that cross the capture boundary: plain numbers and numpy arrays, no torch."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

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

    def __len__(self) -> int:
        return int(self.start_ns.shape[0])


KIND_OP = 0  # an op or runtime call on a CPU thread: counted
KIND_ANNOTATION = 1  # a user annotation (record_function) on a CPU thread: counted, unless a marker
KIND_DEVICE = 2  # a kernel / memcpy / memset on the device: attributed to its launching op
KIND_IGNORED = 3  # hidden, memory or profiler-internal events
KIND_ASYNC = 4  # a CPU op that ends on another thread: counted, never nested, no self time


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
    meta: Mapping[str, Any] = field(default_factory=dict)

    @property
    def rounds(self) -> int:
        return int(self.wall_us.shape[0])

    def index(self) -> dict[str, int]:
        return {name: i for i, name in enumerate(self.names)}

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
        return out

    @classmethod
    def from_dict(
        cls, data: Mapping[str, Any], *, meta: Mapping[str, Any] | None = None
    ) -> OpTable:
        """Inverse of :meth:`to_dict`; the caller has validated shapes and values."""
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
        )

    def session_totals(self) -> dict[str, dict[str, float]]:
        """Per-op session totals (sum over rounds), keyed like ``key_averages()`` columns."""
        out: dict[str, dict[str, float]] = {}
        for i, name in enumerate(self.names):
            out[name] = {m: float(getattr(self, m)[i].sum()) for m in METRICS}
        return out


def _rounded(values: Sequence[float] | FloatArray) -> list[float]:
    # 1 ns resolution is what the profiler has; more digits only make diffs noisy.
    return [round(float(v), 3) for v in values]
