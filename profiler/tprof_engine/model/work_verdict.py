"""The work gate's records: each row's change, and the test's work verdict."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from tprof_engine.model.tensors import dtype_code, first_difference
from tprof_engine.model.work import Phase, RowKey, RowStatus, WorkWord


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkDelta:
    """One op-module-phase row of a work comparison: both sides and how it moved."""

    op: str
    module: str
    phase: Phase
    status: RowStatus
    gated: bool  # its FLOPs or bytes moved by more than the floor × the test's total
    base_calls: int
    cur_calls: int
    base_flops: int
    cur_flops: int
    base_bytes: int
    cur_bytes: int
    base_signature: str
    cur_signature: str
    grad_fns: tuple[str, ...] = ()  # in backward: the autograd nodes that ran it
    source: str = ""  # with --tprof-collect=stack: the user's source line of its first call
    cur_dtypes: tuple[str, ...] = ()  # the dtypes it read and wrote now

    @property
    def key(self) -> RowKey:
        return (self.op, self.module, self.phase)

    @property
    def calls_delta(self) -> int:
        return self.cur_calls - self.base_calls

    @property
    def flops_delta(self) -> int:
        return self.cur_flops - self.base_flops

    @property
    def bytes_delta(self) -> int:
        return self.cur_bytes - self.base_bytes

    @property
    def does_work(self) -> bool:
        """Whether the row moves FLOPs or bytes on either side (a view moves none)."""
        return bool(self.base_flops or self.cur_flops or self.base_bytes or self.cur_bytes)

    def difference(self) -> str:
        """What differs beside its amounts: a new row's inputs (and dtypes it writes that
        they don't name), a gone row's, else the inputs that changed, else its calls."""
        if self.status == "added":
            # The dtypes name what the input alone doesn't: a copy into float64 reads f32.
            text = f"input {self.cur_signature}" if self.cur_signature else ""
            codes = [dtype_code(d) for d in self.cur_dtypes]
            unseen = [c for c in codes if c not in self.cur_signature]
            return f"{text}, writes {', '.join(unseen)}" if text and unseen else text
        if self.status == "deleted":
            return f"input was {self.base_signature}" if self.base_signature else ""
        diff = first_difference(self.base_signature, self.cur_signature)
        if diff:
            return diff
        return f"calls {self.base_calls:,} → {self.cur_calls:,}" if self.calls_delta else ""

    def to_dict(self) -> dict[str, Any]:
        out = {k: getattr(self, k) for k in _DELTA_FIELDS}
        out["grad_fns"] = list(self.grad_fns)
        out["cur_dtypes"] = list(self.cur_dtypes)
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> WorkDelta:
        fields: dict[str, Any] = {k: d[k] for k in _DELTA_FIELDS if k in d}
        fields["grad_fns"] = tuple(fields.get("grad_fns", ()))
        fields["source"] = str(fields.get("source", ""))
        fields["cur_dtypes"] = tuple(str(x) for x in fields.get("cur_dtypes", ()))
        return cls(**fields)


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkVerdict:
    """The work verdict of one test, its rows and its reasons in words.

    Totals are over the rows whose work is comparable: rows that vary between census rounds
    (on either side) are listed with status ``varies`` and left out of the totals and the gate.
    """

    verdict: WorkWord
    rows: tuple[WorkDelta, ...]
    reasons: tuple[str, ...]  # the totals that moved past the floor first, then the rows'
    base_flops: int
    cur_flops: int
    base_bytes: int
    cur_bytes: int
    floor: float
    compiled: bool  # compiled code ran in either census: its work is counted as eager ops
    totals: tuple[str, ...] = ()  # each total that moved past the floor, short: "FLOPs +98.8%"
    iterations: int = 1  # calls of the body the census's rows count (1: per call)

    @property
    def regressed(self) -> bool:
        return self.verdict == "regressed"

    @property
    def row_reasons(self) -> tuple[str, ...]:
        """The reasons after the totals': what moved where."""
        return self.reasons[len(self.totals) :]

    def headline(self, rows: int = 1) -> str:
        """The verdict in one line: the totals that moved, then the first ``rows`` rows'
        reasons and how many more there are."""
        shown = self.row_reasons[:rows]
        more = len(self.row_reasons) - len(shown)
        parts = [", ".join(self.totals)] if self.totals else []
        return "; ".join([*parts, *shown]) + (f" (+{more} more)" if more > 0 else "")

    def to_dict(self) -> dict[str, Any]:
        """Builtin-only form for the JSON report and for xdist transport."""
        return {
            "verdict": self.verdict,
            "reasons": list(self.reasons),
            "totals": list(self.totals),
            "floor": self.floor,
            "compiled": self.compiled,
            "flops": [self.base_flops, self.cur_flops],
            "bytes": [self.base_bytes, self.cur_bytes],
            "rows": [r.to_dict() for r in self.rows],
            "iterations": self.iterations,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> WorkVerdict:
        """Inverse of :meth:`to_dict`."""
        return cls(
            verdict=d["verdict"],
            rows=tuple(WorkDelta.from_dict(r) for r in d.get("rows", [])),
            reasons=tuple(d.get("reasons", [])),
            base_flops=int(d["flops"][0]),
            cur_flops=int(d["flops"][1]),
            base_bytes=int(d["bytes"][0]),
            cur_bytes=int(d["bytes"][1]),
            floor=float(d["floor"]),
            compiled=bool(d.get("compiled", False)),
            totals=tuple(str(t) for t in d.get("totals", [])),
            iterations=int(d.get("iterations", 1)),
        )


_DELTA_FIELDS: Final = tuple(WorkDelta.__dataclass_fields__)
