"""One device row's move between two sides (a kernel, copy or sync of one op)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

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
