"""The work census as plain data (docs/design.md §8).

A census records, per op, module and phase, the work one round of a test body does: calls,
FLOPs (torch's own registry), bytes read and written, dtypes and the first call's input
signature; plus the test's cross-device copies, host syncs and calls into compiled code.

Vocabulary.  ``module`` is the module path as ``named_modules()`` of the test's model writes it
(``encoder.layers.0.linear1``); ``""`` is the top level: the root module's own code or no module.
``phase`` is ``"backward"`` while autograd runs a backward pass, ``"forward hook"`` or
``"forward pre-hook"`` inside a module's own hooks (the module is the one they are registered
on), the optimizer's step (``"AdamW.step"``) inside ``Optimizer.step``, else ``"forward"``.
Bytes count the distinct elements each tensor argument addresses times the element size; view
ops (the schema says their output aliases an input) count none.  ``census`` numbers the
counting rules a table was taken under: tables taken under different rules are not compared.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from tprof_engine.model import strict
from tprof_engine.model.errors import BaselineError
from tprof_engine.model.ranks import bare

Phase = str  # "forward", "backward", "forward hook", "forward pre-hook" or "<Optimizer>.step"
FORWARD: Final = "forward"
BACKWARD: Final = "backward"
FORWARD_HOOK: Final = "forward hook"
FORWARD_PRE_HOOK: Final = "forward pre-hook"
_PHASES: Final = frozenset({FORWARD, BACKWARD, FORWARD_HOOK, FORWARD_PRE_HOOK})
_OPTIMIZER_STEP: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\.step")
# The census's counting rules.  1: FLOPs from torch's registry only, hooks' and optimizers' ops
# in the module running and the forward phase.  2: attention, RNN and fused-layer FLOPs, hook
# and optimizer phases, module paths without the name of the variable that holds the model.
CENSUS: Final = 2
WorkWord = Literal["regressed", "improved", "changed", "unchanged"]
RowStatus = Literal["increased", "decreased", "added", "deleted", "unchanged", "changed", "varies"]
RowKey = tuple[str, str, str]  # (op, module, phase)
DEFAULT_WORK_FLOOR: Final = 0.01  # work doesn't drift: 1 % of the test's total is a real change


# Namespaces of torch's collectives: c10d's ops (what ProcessGroup calls, DDP's reducer too)
# and the functional collectives (FSDP2, DTensor, compiled code).
COLLECTIVE_NAMESPACES: Final = ("c10d::", "_c10d_functional::", "c10d_functional::")


def is_collective(op: str) -> bool:
    """Whether an op (its rank tag, if any, removed) is a collective or its wait."""
    return bare(op).startswith(COLLECTIVE_NAMESPACES)


# Reads of a tensor's value into Python: a host sync on a device, a host read on the CPU.
VALUE_READS: Final = frozenset({"aten::_local_scalar_dense", "aten::item"})


# Ops whose output size depends on the data: the host waits for the device to know it.
DATA_DEPENDENT: Final = frozenset(
    {
        "aten::nonzero",
        "aten::masked_select",
        "aten::_unique",
        "aten::_unique2",
        "aten::unique_dim",
        "aten::unique_consecutive",
        "aten::unique_dim_consecutive",
        "aten::repeat_interleave",
        "aten::equal",
        "aten::is_nonzero",
    }
)


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkRow:
    """One op in one module and phase: its work in one census round."""

    op: str  # as torch.profiler names it: ``aten::addmm``
    module: str
    phase: Phase
    calls: int
    flops: int
    bytes_read: int
    bytes_written: int
    dtypes: tuple[str, ...] = ()  # sorted dtype names of the tensors it read and wrote
    signature: str = ""  # the first call's tensor inputs: ``f32[4, 8], f32[8, 16]ᵀ``
    varies: bool = False  # its work differed between census rounds
    group: int = 0  # a collective's process group size (0: not a collective)
    # In backward: the autograd nodes that ran it (``AddmmBackward0``), naming the forward op
    # it belongs to.  Description, not work: left out of equality.
    grad_fns: tuple[str, ...] = field(default=(), compare=False)
    # With --tprof-collect=stack: the user's source line of its first call (``model.py:12 in
    # forward``).
    source: str = field(default="", compare=False)

    @property
    def key(self) -> RowKey:
        return (self.op, self.module, self.phase)

    @property
    def bytes_total(self) -> int:
        return self.bytes_read + self.bytes_written

    @property
    def label(self) -> str:
        return row_label(self.key, self.grad_fns)


@dataclass(frozen=True, slots=True, kw_only=True)
class DeviceCopy:
    """Tensors an op moved from one device type to another, per round."""

    op: str
    module: str
    phase: Phase
    direction: str  # ``cpu→cuda``
    calls: int
    bytes: int


@dataclass(frozen=True, slots=True, kw_only=True)
class HostSync:
    """Calls of an op that make the host wait for a tensor's value, per round."""

    op: str
    module: str
    phase: Phase
    device: str
    calls: int


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkTable:
    """The census of one test: the work of one round (``iterations`` calls of the body).

    ``compiled`` counts calls into ``torch.compile``'d code during the round; the census runs
    them eagerly, so their rows are the eager ops, not the compiled kernels.  ``census_us``
    (wall time of the whole census) is a fact about the run, not the work: it is left out of
    equality and of :meth:`to_dict`, so an unchanged body re-records byte-identically.
    """

    rows: tuple[WorkRow, ...]
    copies: tuple[DeviceCopy, ...] = ()
    syncs: tuple[HostSync, ...] = ()
    compiled: int = 0
    iterations: int = 1
    census_us: float = field(default=0.0, compare=False)
    census: int = CENSUS  # the counting rules it was taken under

    def __post_init__(self) -> None:
        # One order everywhere, so that equal work is an equal table and a readable file diff.
        rows = tuple(sorted(self.rows, key=_row_order))
        keys = [r.key for r in rows]
        if len(set(keys)) != len(keys):
            repeated = next(k for k in keys if keys.count(k) > 1)
            raise ValueError(f"'rows' holds {row_label(repeated)} more than once")
        object.__setattr__(self, "rows", rows)
        object.__setattr__(self, "copies", tuple(sorted(self.copies, key=_copy_order)))
        object.__setattr__(self, "syncs", tuple(sorted(self.syncs, key=_sync_order)))

    @property
    def total_flops(self) -> int:
        return sum(r.flops for r in self.rows)

    @property
    def total_bytes(self) -> int:
        return sum(r.bytes_total for r in self.rows)

    def index(self) -> dict[RowKey, WorkRow]:
        return {r.key: r for r in self.rows}

    def to_dict(self) -> dict[str, Any]:
        """Builtin-only form for baseline files: lists in a fixed order, no floats."""
        return {
            "census": self.census,
            "iterations": self.iterations,
            "compiled": self.compiled,
            "rows": [_row_dict(r) for r in self.rows],
            "copies": [_copy_dict(c) for c in self.copies],
            "syncs": [_sync_dict(s) for s in self.syncs],
        }

    @classmethod
    def from_dict(cls, data: Any, *, where: str = "work") -> WorkTable:
        """Inverse of :meth:`to_dict`; any wrong key, type or value is a :class:`BaselineError`
        naming the key and the value (``'work.rows[3].flops' must be an integer >= 0``)."""
        obj = strict.mapping(data, where)
        strict.keys(obj, where, ("iterations", "compiled", "rows", "copies", "syncs"), ("census",))
        iterations = strict.count(obj, "iterations", where)
        if iterations < 1:
            raise BaselineError(f"'{where}.iterations' must be an integer >= 1 (got 0)")
        rows = [_row_from(v, f"{where}.rows[{i}]") for i, v in strict.items(obj, "rows", where)]
        seen: dict[RowKey, int] = {}
        for i, row in enumerate(rows):
            if row.key in seen:
                raise BaselineError(
                    f"'{where}.rows[{i}]' repeats {row.label} of '{where}.rows[{seen[row.key]}]'"
                )
            seen[row.key] = i
        copies = [
            _copy_from(v, f"{where}.copies[{i}]") for i, v in strict.items(obj, "copies", where)
        ]
        syncs = [_sync_from(v, f"{where}.syncs[{i}]") for i, v in strict.items(obj, "syncs", where)]
        return cls(
            rows=tuple(rows),
            copies=tuple(copies),
            syncs=tuple(syncs),
            compiled=strict.count(obj, "compiled", where),
            iterations=iterations,
            census=strict.count(obj, "census", where) if "census" in obj else 1,
        )

    def differences(self, other: WorkTable) -> tuple[str, ...]:
        """What differs from ``other``, one line each, in words (empty when the work is equal)."""
        lines = [
            f"{name} {mine} → {theirs}"
            for name, mine, theirs in (
                ("census rules", self.census, other.census),
                ("iterations", self.iterations, other.iterations),
                ("calls into compiled code", self.compiled, other.compiled),
            )
            if mine != theirs
        ]
        mine_rows, their_rows = self.index(), other.index()
        for key in sorted(mine_rows.keys() | their_rows.keys(), key=key_order):
            lines.extend(_row_differences(key, mine_rows.get(key), their_rows.get(key)))
        if self.copies != other.copies:
            lines.append(f"device copies {copies_text(self.copies)} → {copies_text(other.copies)}")
        if self.syncs != other.syncs:
            lines.append(f"host syncs {syncs_text(self.syncs)} → {syncs_text(other.syncs)}")
        return tuple(lines)


# Words of op names that do matrix work: such an op that counted no FLOPs has no formula.
_MATRIX_WORDS: Final = frozenset(
    {
        "mm",
        "bmm",
        "addmm",
        "baddbmm",
        "addbmm",
        "matmul",
        "mv",
        "addmv",
        "dot",
        "vdot",
        "linear",
        "einsum",
        "tensordot",
        "attention",
        "rnn",
        "lstm",
        "gru",
        "transformer",
    }
)
_CONVOLUTION: Final = re.compile(r"conv(olution)?(\d+d)?")


def matrix_op(op: str) -> bool:
    """Whether an op's name says it does matrix work (``aten::mkldnn_rnn_layer``)."""
    words = op.rpartition("::")[2].split(".")[0].strip("_").split("_")
    return any(w in _MATRIX_WORDS or _CONVOLUTION.fullmatch(w) for w in words)


def no_formula(op: str, flops: int) -> bool:
    """Whether an op does matrix work yet counted no FLOPs: neither torch nor the census has
    its formula, so the test's FLOPs leave it out (its bytes are counted)."""
    return not flops and matrix_op(op)


def flops_unknown(rows: Iterable[WorkRow]) -> tuple[str, ...]:
    """The ops of ``rows`` with :func:`no_formula`, sorted."""
    return tuple(sorted({r.op for r in rows if r.calls and no_formula(r.op, r.flops)}))


def step_part(phase: Phase) -> str:
    """``forward`` for the forward and a module's hooks; the phase itself otherwise."""
    return FORWARD if phase in (FORWARD, FORWARD_HOOK, FORWARD_PRE_HOOK) else phase


def flops_unknown_text(ops: Sequence[str]) -> str:
    """``FLOPs unknown for 2 ops (aten::a, aten::b): no formula; bytes counted``; "" for none."""
    if not ops:
        return ""
    shown = ", ".join(ops[:3]) + (", …" if len(ops) > 3 else "")
    plural = "s" if len(ops) > 1 else ""
    return f"FLOPs unknown for {len(ops)} op{plural} ({shown}): no formula; bytes counted"


def row_label(key: RowKey, grad_fns: Sequence[str] = ()) -> str:
    """``aten::addmm in encoder.layers.0.linear1 (forward)``; ``… at top level (…)`` for ``""``;
    a backward row names the autograd nodes that ran it: ``(backward of AddmmBackward0)``."""
    op, module, phase = key
    where = f"in {module}" if module else "at top level"
    of = f" of {', '.join(grad_fns[:2])}" + (" …" if len(grad_fns) > 2 else "") if grad_fns else ""
    return f"{op} {where} ({phase}{of})"


def _row_order(row: WorkRow) -> tuple[str, str, str]:
    return key_order(row.key)


def key_order(key: RowKey) -> tuple[str, str, str]:
    op, module, phase = key
    return (module, phase, op)  # grouped by module in files and listings


def _copy_order(c: DeviceCopy) -> tuple[str, str, str, str]:
    return (c.module, c.phase, c.op, c.direction)


def _sync_order(s: HostSync) -> tuple[str, str, str, str]:
    return (s.module, s.phase, s.op, s.device)


def _row_differences(key: RowKey, mine: WorkRow | None, theirs: WorkRow | None) -> list[str]:
    if mine is None or theirs is None:
        return [f"{row_label(key)} only in the {'other' if mine is None else 'first'} table"]
    fields = (*_ROW_KEYS[3:], "group")  # the work, not the row's key
    changed = [
        f"{name} {value_text(getattr(mine, name))} → {value_text(getattr(theirs, name))}"
        for name in fields
        if getattr(mine, name) != getattr(theirs, name)
    ]
    return [f"{row_label(key)}: {'; '.join(changed)}"] if changed else []


def value_text(value: Any) -> str:
    if isinstance(value, tuple):
        return ", ".join(value) or "none"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return str(value)


def copies_text(copies: Sequence[DeviceCopy]) -> str:
    parts = [
        f"{row_label((c.op, c.module, c.phase))} {c.direction} ×{c.calls} {c.bytes:,} B"
        for c in copies
    ]
    return "[" + "; ".join(parts) + "]"


def syncs_text(syncs: Sequence[HostSync]) -> str:
    parts = [f"{row_label((s.op, s.module, s.phase))} on {s.device} ×{s.calls}" for s in syncs]
    return "[" + "; ".join(parts) + "]"


_ROW_KEYS: Final = (
    "op",
    "module",
    "phase",
    "calls",
    "flops",
    "bytes_read",
    "bytes_written",
    "dtypes",
    "signature",
    "varies",
)


def _row_dict(r: WorkRow) -> dict[str, Any]:
    return {
        "op": r.op,
        "module": r.module,
        "phase": r.phase,
        "calls": r.calls,
        "flops": r.flops,
        "bytes_read": r.bytes_read,
        "bytes_written": r.bytes_written,
        "dtypes": list(r.dtypes),
        "signature": r.signature,
        "varies": r.varies,
        **({"group": r.group} if r.group else {}),
        **({"grad_fns": list(r.grad_fns)} if r.grad_fns else {}),
        **({"source": r.source} if r.source else {}),
    }


def _copy_dict(c: DeviceCopy) -> dict[str, Any]:
    return {
        "op": c.op,
        "module": c.module,
        "phase": c.phase,
        "direction": c.direction,
        "calls": c.calls,
        "bytes": c.bytes,
    }


def _sync_dict(s: HostSync) -> dict[str, Any]:
    return {"op": s.op, "module": s.module, "phase": s.phase, "device": s.device, "calls": s.calls}


def _row_from(value: Any, where: str) -> WorkRow:
    obj = strict.mapping(value, where)
    strict.keys(obj, where, _ROW_KEYS, optional=("grad_fns", "source", "group"))
    return WorkRow(
        op=strict.string(obj, "op", where, empty=False),
        module=strict.string(obj, "module", where),
        phase=_phase(obj, where),
        calls=strict.count(obj, "calls", where),
        flops=strict.count(obj, "flops", where),
        bytes_read=strict.count(obj, "bytes_read", where),
        bytes_written=strict.count(obj, "bytes_written", where),
        dtypes=strict.names(obj, "dtypes", where),
        signature=strict.string(obj, "signature", where),
        varies=strict.flag(obj, "varies", where),
        group=strict.count(obj, "group", where) if "group" in obj else 0,
        grad_fns=strict.names(obj, "grad_fns", where) if "grad_fns" in obj else (),
        source=strict.string(obj, "source", where) if "source" in obj else "",
    )


def _copy_from(value: Any, where: str) -> DeviceCopy:
    obj = strict.mapping(value, where)
    strict.keys(obj, where, ("op", "module", "phase", "direction", "calls", "bytes"))
    return DeviceCopy(
        op=strict.string(obj, "op", where, empty=False),
        module=strict.string(obj, "module", where),
        phase=_phase(obj, where),
        direction=strict.string(obj, "direction", where, empty=False),
        calls=strict.count(obj, "calls", where),
        bytes=strict.count(obj, "bytes", where),
    )


def _sync_from(value: Any, where: str) -> HostSync:
    obj = strict.mapping(value, where)
    strict.keys(obj, where, ("op", "module", "phase", "device", "calls"))
    return HostSync(
        op=strict.string(obj, "op", where, empty=False),
        module=strict.string(obj, "module", where),
        phase=_phase(obj, where),
        device=strict.string(obj, "device", where, empty=False),
        calls=strict.count(obj, "calls", where),
    )


def _phase(obj: Mapping[str, Any], where: str) -> Phase:
    value = obj["phase"]
    if isinstance(value, str) and (value in _PHASES or _OPTIMIZER_STEP.fullmatch(value)):
        return value
    raise BaselineError(
        f"'{where}.phase' must be 'forward', 'backward', 'forward hook', 'forward pre-hook' or "
        f"an optimizer's step such as 'AdamW.step' (got {strict.shown(value)})"
    )


EMPTY: Final = WorkRow(
    op="", module="", phase="forward", calls=0, flops=0, bytes_read=0, bytes_written=0
)


QUIET: Final = frozenset({"unchanged", "varies"})
