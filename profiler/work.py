"""The work census as plain data, and the deterministic work verdict (docs/design.md §8).

A census records, per op, module and phase, the work one round of a test body does: calls,
FLOPs (torch's own registry), bytes read and written, dtypes and the first call's input
signature; plus the test's cross-device copies, host syncs and calls into compiled code.
:mod:`tprof_engine.work_capture` takes it; everything here is pure and imports no torch.

Vocabulary.  ``module`` is the module path as ``named_modules()`` of the test's model writes it
(``encoder.layers.0.linear1``); ``""`` is the top level: the root module's own code or no module.
``phase`` is ``"backward"`` while autograd runs a backward pass, else ``"forward"`` (optimizer
steps included).  Bytes count the distinct elements each tensor argument addresses times the
element size; view ops (the schema says their output aliases an input) count none.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final, Literal

from tprof_engine.errors import BaselineError, ConfigError

Phase = Literal["forward", "backward"]
WorkWord = Literal["regressed", "improved", "changed", "unchanged"]
RowStatus = Literal["increased", "decreased", "added", "deleted", "unchanged", "changed", "varies"]
RowKey = tuple[str, str, str]  # (op, module, phase)

DEFAULT_WORK_FLOOR: Final = 0.01  # work doesn't drift: 1 % of the test's total is a real change

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
HOST_DEVICES: Final = frozenset({"cpu", "meta"})

_DTYPE_CODES: Final = {
    "float64": "f64",
    "float32": "f32",
    "float16": "f16",
    "bfloat16": "bf16",
    "int64": "i64",
    "int32": "i32",
    "int16": "i16",
    "int8": "i8",
    "uint8": "u8",
    "bool": "b8",
    "complex128": "c128",
    "complex64": "c64",
}
_LIST_RUNS: Final = 8  # runs of equal tensors a tensor-list item shows before it abbreviates


# --------------------------------------------------------------------------- records


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
    # In backward: the autograd nodes that ran it (``AddmmBackward0``), naming the forward op
    # it belongs to.  Description, not work: left out of equality.
    grad_fns: tuple[str, ...] = field(default=(), compare=False)
    # With --tprof-stack: the user's source line of its first call (``model.py:12 in forward``).
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
        obj = _object(data, where)
        _keys(obj, where, ("iterations", "compiled", "rows", "copies", "syncs"))
        iterations = _count(obj, "iterations", where)
        if iterations < 1:
            raise BaselineError(f"'{where}.iterations' must be an integer >= 1 (got 0)")
        rows = [_row_from(v, f"{where}.rows[{i}]") for i, v in _items(obj, "rows", where)]
        seen: dict[RowKey, int] = {}
        for i, row in enumerate(rows):
            if row.key in seen:
                raise BaselineError(
                    f"'{where}.rows[{i}]' repeats {row.label} of '{where}.rows[{seen[row.key]}]'"
                )
            seen[row.key] = i
        copies = [_copy_from(v, f"{where}.copies[{i}]") for i, v in _items(obj, "copies", where)]
        syncs = [_sync_from(v, f"{where}.syncs[{i}]") for i, v in _items(obj, "syncs", where)]
        return cls(
            rows=tuple(rows),
            copies=tuple(copies),
            syncs=tuple(syncs),
            compiled=_count(obj, "compiled", where),
            iterations=iterations,
        )

    def differences(self, other: WorkTable) -> tuple[str, ...]:
        """What differs from ``other``, one line each, in words (empty when the work is equal)."""
        lines = [
            f"{name} {mine} → {theirs}"
            for name, mine, theirs in (
                ("iterations", self.iterations, other.iterations),
                ("calls into compiled code", self.compiled, other.compiled),
            )
            if mine != theirs
        ]
        mine_rows, their_rows = self.index(), other.index()
        for key in sorted(mine_rows.keys() | their_rows.keys(), key=_key_order):
            lines.extend(_row_differences(key, mine_rows.get(key), their_rows.get(key)))
        if self.copies != other.copies:
            lines.append(
                f"device copies {_copies_text(self.copies)} → {_copies_text(other.copies)}"
            )
        if self.syncs != other.syncs:
            lines.append(f"host syncs {_syncs_text(self.syncs)} → {_syncs_text(other.syncs)}")
        return tuple(lines)


def row_label(key: RowKey, grad_fns: Sequence[str] = ()) -> str:
    """``aten::addmm in encoder.layers.0.linear1 (forward)``; ``… at top level (…)`` for ``""``;
    a backward row names the autograd nodes that ran it: ``(backward of AddmmBackward0)``."""
    op, module, phase = key
    where = f"in {module}" if module else "at top level"
    of = f" of {', '.join(grad_fns[:2])}" + (" …" if len(grad_fns) > 2 else "") if grad_fns else ""
    return f"{op} {where} ({phase}{of})"


def _row_order(row: WorkRow) -> tuple[str, str, str]:
    return _key_order(row.key)


def _key_order(key: RowKey) -> tuple[str, str, str]:
    op, module, phase = key
    return (module, phase, op)  # grouped by module in files and listings


def _copy_order(c: DeviceCopy) -> tuple[str, str, str, str]:
    return (c.module, c.phase, c.op, c.direction)


def _sync_order(s: HostSync) -> tuple[str, str, str, str]:
    return (s.module, s.phase, s.op, s.device)


def _row_differences(key: RowKey, mine: WorkRow | None, theirs: WorkRow | None) -> list[str]:
    if mine is None or theirs is None:
        return [f"{row_label(key)} only in the {'other' if mine is None else 'first'} table"]
    fields = ("calls", "flops", "bytes_read", "bytes_written", "dtypes", "signature", "varies")
    changed = [
        f"{name} {_text(getattr(mine, name))} → {_text(getattr(theirs, name))}"
        for name in fields
        if getattr(mine, name) != getattr(theirs, name)
    ]
    return [f"{row_label(key)}: {'; '.join(changed)}"] if changed else []


def _text(value: Any) -> str:
    if isinstance(value, tuple):
        return ", ".join(value) or "none"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return str(value)


def _copies_text(copies: Sequence[DeviceCopy]) -> str:
    parts = [
        f"{row_label((c.op, c.module, c.phase))} {c.direction} ×{c.calls} {c.bytes:,} B"
        for c in copies
    ]
    return "[" + "; ".join(parts) + "]"


def _syncs_text(syncs: Sequence[HostSync]) -> str:
    parts = [f"{row_label((s.op, s.module, s.phase))} on {s.device} ×{s.calls}" for s in syncs]
    return "[" + "; ".join(parts) + "]"


# --------------------------------------------------------------------------- to and from dicts

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
    obj = _object(value, where)
    _keys(obj, where, _ROW_KEYS, optional=("grad_fns", "source"))
    return WorkRow(
        op=_string(obj, "op", where, empty=False),
        module=_string(obj, "module", where),
        phase=_phase(obj, where),
        calls=_count(obj, "calls", where),
        flops=_count(obj, "flops", where),
        bytes_read=_count(obj, "bytes_read", where),
        bytes_written=_count(obj, "bytes_written", where),
        dtypes=_names(obj, "dtypes", where),
        signature=_string(obj, "signature", where),
        varies=_flag(obj, "varies", where),
        grad_fns=_names(obj, "grad_fns", where) if "grad_fns" in obj else (),
        source=_string(obj, "source", where) if "source" in obj else "",
    )


def _copy_from(value: Any, where: str) -> DeviceCopy:
    obj = _object(value, where)
    _keys(obj, where, ("op", "module", "phase", "direction", "calls", "bytes"))
    return DeviceCopy(
        op=_string(obj, "op", where, empty=False),
        module=_string(obj, "module", where),
        phase=_phase(obj, where),
        direction=_string(obj, "direction", where, empty=False),
        calls=_count(obj, "calls", where),
        bytes=_count(obj, "bytes", where),
    )


def _sync_from(value: Any, where: str) -> HostSync:
    obj = _object(value, where)
    _keys(obj, where, ("op", "module", "phase", "device", "calls"))
    return HostSync(
        op=_string(obj, "op", where, empty=False),
        module=_string(obj, "module", where),
        phase=_phase(obj, where),
        device=_string(obj, "device", where, empty=False),
        calls=_count(obj, "calls", where),
    )


def _shown(value: Any) -> str:
    if value is None or isinstance(value, (bool, int, float, str)):
        text = repr(value)
        return text if len(text) <= 60 else text[:57] + "..."
    if isinstance(value, list) and all(isinstance(v, str) for v in value) and len(value) <= 8:
        return repr(value)
    return f"a {type(value).__name__}"


def _object(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        raise BaselineError(f"'{where}' must be an object (got {_shown(value)})")
    return value


def _keys(
    obj: Mapping[str, Any], where: str, expected: tuple[str, ...], optional: tuple[str, ...] = ()
) -> None:
    missing = [k for k in expected if k not in obj]
    if missing:
        raise BaselineError(f"'{where}' is missing {', '.join(repr(k) for k in missing)}")
    unknown = sorted(set(obj) - set(expected) - set(optional))
    if unknown:
        raise BaselineError(f"'{where}' has unknown keys {', '.join(repr(k) for k in unknown)}")


def _count(obj: Mapping[str, Any], key: str, where: str) -> int:
    value = obj[key]
    if type(value) is not int or value < 0:
        raise BaselineError(f"'{where}.{key}' must be an integer >= 0 (got {_shown(value)})")
    return value


def _string(obj: Mapping[str, Any], key: str, where: str, *, empty: bool = True) -> str:
    value = obj[key]
    if not isinstance(value, str) or (not empty and not value):
        rule = "a string" if empty else "a non-empty string"
        raise BaselineError(f"'{where}.{key}' must be {rule} (got {_shown(value)})")
    return value


def _flag(obj: Mapping[str, Any], key: str, where: str) -> bool:
    value = obj[key]
    if not isinstance(value, bool):
        raise BaselineError(f"'{where}.{key}' must be true or false (got {_shown(value)})")
    return value


def _phase(obj: Mapping[str, Any], where: str) -> Phase:
    value = obj["phase"]
    if value == "forward":
        return "forward"
    if value == "backward":
        return "backward"
    raise BaselineError(f"'{where}.phase' must be 'backward' or 'forward' (got {_shown(value)})")


def _names(obj: Mapping[str, Any], key: str, where: str) -> tuple[str, ...]:
    value = obj[key]
    if (
        not isinstance(value, list)
        or not all(isinstance(v, str) and v for v in value)
        or value != sorted(set(value))
    ):
        raise BaselineError(
            f"'{where}.{key}' must be a sorted list of distinct names (got {_shown(value)})"
        )
    return tuple(value)


def _items(obj: Mapping[str, Any], key: str, where: str) -> list[tuple[int, Any]]:
    value = obj[key]
    if not isinstance(value, list):
        raise BaselineError(f"'{where}.{key}' must be a list (got {_shown(value)})")
    return list(enumerate(value))


# --------------------------------------------------------------------------- pure facts of ops


def distinct_elements(shape: Sequence[int], strides: Sequence[int]) -> int:
    """Elements a strided tensor addresses: broadcast (stride 0) dimensions count once."""
    count = 1
    for size, stride in zip(shape, strides, strict=True):
        if size == 0:
            return 0
        if stride != 0:
            count *= size
    return count


def dtype_code(name: str) -> str:
    """``float32`` → ``f32``: the short dtype of a signature (unknown names stay as they are)."""
    return _DTYPE_CODES.get(name, name)


def format_tensor(dtype: str, shape: Sequence[int], strides: Sequence[int]) -> str:
    """``f32[4, 8]``; the transpose of a contiguous tensor gets ``ᵀ``, other layouts their strides.

    ``dtype`` is the dtype's name (``float32``).
    """
    text = f"{dtype_code(dtype)}[{', '.join(str(s) for s in shape)}]"
    if _is_contiguous(shape, strides):
        return text
    if len(shape) >= 2 and _is_contiguous(shape[::-1], strides[::-1]):
        return text + "ᵀ"
    return f"{text} (strides {', '.join(str(s) for s in strides)})"


def _is_contiguous(shape: Sequence[int], strides: Sequence[int]) -> bool:
    expected = 1
    for size, stride in zip(reversed(shape), reversed(strides), strict=True):
        if size != 1 and stride != expected:
            return False
        expected *= size
    return True


def format_tensor_list(items: Sequence[str]) -> str:
    """A tensor-list argument: equal neighbours as runs, ``[f32[64]×3, f32[8]]``."""
    runs: list[list[Any]] = []
    for item in items:
        if runs and runs[-1][0] == item:
            runs[-1][1] += 1
        else:
            runs.append([item, 1])
    shown = [text if n == 1 else f"{text}×{n}" for text, n in runs[:_LIST_RUNS]]
    if len(runs) > _LIST_RUNS:
        shown.append(f"… {len(items)} tensors")
    return "[" + ", ".join(shown) + "]"


def split_signature(signature: str) -> list[str]:
    """The top-level items of a signature (commas inside brackets or parentheses stay)."""
    items: list[str] = []
    depth = 0
    start = 0
    for i, ch in enumerate(signature):
        if ch in "[(":
            depth += 1
        elif ch in "])":
            depth -= 1
        elif ch == "," and depth == 0:
            items.append(signature[start:i].strip())
            start = i + 1
    tail = signature[start:].strip()
    if tail or items:
        items.append(tail)
    return items


def first_difference(sig_a: str, sig_b: str) -> str:
    """The first input that differs between two signatures: ``input f32[4, 8] → f64[4, 8]``.

    Empty when they are equal.
    """
    if sig_a == sig_b:
        return ""
    a, b = split_signature(sig_a), split_signature(sig_b)
    for item_a, item_b in zip(a, b, strict=False):
        if item_a != item_b:
            return f"input {item_a} → {item_b}"
    if len(a) > len(b):
        return f"input {a[len(b)]} removed"
    if len(b) > len(a):
        return f"input {b[len(a)]} added"
    return f"signature {sig_a!r} → {sig_b!r}"


def copy_direction(read_devices: Iterable[str], written_devices: Iterable[str]) -> str | None:
    """``cpu→cuda`` when an op read tensors on a device type other than the one it wrote.

    Device types are names (``cpu``, ``cuda``); ``meta`` tensors hold no data and don't count.
    """
    written = set(written_devices) - {"meta"}
    sources = sorted(set(read_devices) - written - {"meta"})
    if len(written) != 1 or not sources:
        return None
    return f"{sources[0]}→{next(iter(written))}"


def is_host_sync(op: str, device: str) -> bool:
    """Whether a call of ``op`` on tensors of ``device`` makes the host wait for their values.

    Reading a value (``.item()``, ``float(t)``) counts on every device; ops whose output size
    depends on the data (``nonzero``, ``unique``, ...) only off the host.
    """
    return op in VALUE_READS or (op in DATA_DEPENDENT and device not in HOST_DEVICES)


# --------------------------------------------------------------------------- the verdict


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
    source: str = ""  # with --tprof-stack: the user's source line of its first call
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
    reasons: tuple[str, ...]
    base_flops: int
    cur_flops: int
    base_bytes: int
    cur_bytes: int
    floor: float
    compiled: bool  # compiled code ran in either census: its work is counted as eager ops

    @property
    def regressed(self) -> bool:
        return self.verdict == "regressed"

    def to_dict(self) -> dict[str, Any]:
        """Builtin-only form for the JSON report and for xdist transport."""
        return {
            "verdict": self.verdict,
            "reasons": list(self.reasons),
            "floor": self.floor,
            "compiled": self.compiled,
            "flops": [self.base_flops, self.cur_flops],
            "bytes": [self.base_bytes, self.cur_bytes],
            "rows": [r.to_dict() for r in self.rows],
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
        )


def judge_work(
    baseline: WorkTable, current: WorkTable, *, floor: float = DEFAULT_WORK_FLOOR
) -> WorkVerdict:
    """Compare a test's census with its baseline's, exactly: no statistics, no noise.

    Regressed when the test's total FLOPs or bytes grow by more than ``floor`` of the baseline
    total, or one row's FLOPs or bytes grow (or a new row adds) more than ``floor`` × the
    baseline total of that measure; improved when work shrinks that much and nothing grew;
    changed when anything else differs (signatures, dtypes, calls, copies, syncs, small rows).
    """
    if not floor >= 0:
        raise ConfigError(f"'floor' must be >= 0 (got {floor})")
    if baseline.iterations != current.iterations:
        raise ConfigError(
            f"the work censuses ran different iterations per round (baseline "
            f"{baseline.iterations}, current {current.iterations}); take both with the same"
        )
    sides = _Sides.of(baseline, current)
    rows = _net_replacements(tuple(_delta(key, sides, floor) for key in sides.keys()), sides, floor)
    grew, shrank = _gate_lines(rows, sides, floor)
    changes = _change_lines(rows, sides)
    verdict: WorkWord
    if grew:
        verdict, lines = "regressed", grew
    elif shrank:
        verdict, lines = "improved", shrank
    elif changes:
        verdict, lines = "changed", changes
    else:
        verdict, lines = "unchanged", []
    return WorkVerdict(
        verdict=verdict,
        rows=rows,
        reasons=(*lines, *_note_lines(rows, sides)),
        base_flops=sides.base_flops,
        cur_flops=sides.cur_flops,
        base_bytes=sides.base_bytes,
        cur_bytes=sides.cur_bytes,
        floor=floor,
        compiled=bool(baseline.compiled or current.compiled),
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class _Sides:
    """Both tables indexed by row, and their totals over the rows whose work doesn't vary."""

    baseline: WorkTable
    current: WorkTable
    base: Mapping[RowKey, WorkRow]
    cur: Mapping[RowKey, WorkRow]
    varying: frozenset[RowKey]
    base_flops: int
    cur_flops: int
    base_bytes: int
    cur_bytes: int

    @classmethod
    def of(cls, baseline: WorkTable, current: WorkTable) -> _Sides:
        varying = frozenset(r.key for r in (*baseline.rows, *current.rows) if r.varies)
        base = [r for r in baseline.rows if r.key not in varying]
        cur = [r for r in current.rows if r.key not in varying]
        return cls(
            baseline=baseline,
            current=current,
            base=baseline.index(),
            cur=current.index(),
            varying=varying,
            base_flops=sum(r.flops for r in base),
            cur_flops=sum(r.flops for r in cur),
            base_bytes=sum(r.bytes_total for r in base),
            cur_bytes=sum(r.bytes_total for r in cur),
        )

    def keys(self) -> list[RowKey]:
        return sorted(self.base.keys() | self.cur.keys(), key=_key_order)


_EMPTY: Final = WorkRow(
    op="", module="", phase="forward", calls=0, flops=0, bytes_read=0, bytes_written=0
)


def _delta(key: RowKey, sides: _Sides, floor: float) -> WorkDelta:
    base_row, cur_row = sides.base.get(key), sides.cur.get(key)
    base, cur = base_row or _EMPTY, cur_row or _EMPTY
    status = _status(base_row, cur_row, key in sides.varying)
    gated = status != "varies" and (
        abs(cur.flops - base.flops) > floor * sides.base_flops
        or abs(cur.bytes_total - base.bytes_total) > floor * sides.base_bytes
    )
    return WorkDelta(
        op=key[0],
        module=key[1],
        phase=(base_row or cur).phase,
        status=status,
        gated=gated,
        base_calls=base.calls,
        cur_calls=cur.calls,
        base_flops=base.flops,
        cur_flops=cur.flops,
        base_bytes=base.bytes_total,
        cur_bytes=cur.bytes_total,
        base_signature=base.signature,
        cur_signature=cur.signature,
        grad_fns=(cur_row or base).grad_fns,
        source=(cur_row or base).source,
        cur_dtypes=cur.dtypes,
    )


def _net_replacements(
    rows: tuple[WorkDelta, ...], sides: _Sides, floor: float
) -> tuple[WorkDelta, ...]:
    """Gate new and gone ops by their module and phase's net: a replacement is one change.

    A hand-written op that replaces a library op in the same module moves work from one row
    to others; only what the new rows add beyond what the gone rows did counts.
    """
    net = _replacement_nets(rows)

    def gated(r: WorkDelta) -> bool:
        if r.status not in ("added", "deleted"):
            return r.gated
        f, b = net[(r.module, r.phase)]
        return abs(f) > floor * sides.base_flops or abs(b) > floor * sides.base_bytes

    return tuple(replace(r, gated=gated(r)) if gated(r) != r.gated else r for r in rows)


def _replacement_nets(rows: Sequence[WorkDelta]) -> dict[tuple[str, str], tuple[int, int]]:
    """Per module and phase: the FLOPs and bytes its new ops add net of its gone ops."""
    net: dict[tuple[str, str], tuple[int, int]] = {}
    for r in rows:
        if r.status in ("added", "deleted"):
            f, b = net.get((r.module, r.phase), (0, 0))
            net[(r.module, r.phase)] = (f + r.flops_delta, b + r.bytes_delta)
    return net


def _direction(r: WorkDelta, nets: Mapping[tuple[str, str], tuple[int, int]]) -> int:
    """+1 when a gated row's work grew, -1 when it shrank; a replacement by its module's net."""
    if r.status in ("added", "deleted"):
        f, b = nets[(r.module, r.phase)]
        return 1 if max(f, b) > 0 else -1
    return 1 if max(r.flops_delta, r.bytes_delta) > 0 else -1


def _status(base: WorkRow | None, cur: WorkRow | None, varies: bool) -> RowStatus:
    if varies:
        return "varies"
    if base is None:
        return "added"
    if cur is None:
        return "deleted"
    moves = {_sign(cur.flops - base.flops), _sign(cur.bytes_total - base.bytes_total)} - {0}
    if moves == {1}:
        return "increased"
    if moves == {-1}:
        return "decreased"
    same_use = (base.calls, base.signature, base.dtypes) == (cur.calls, cur.signature, cur.dtypes)
    return "changed" if moves or not same_use else "unchanged"


def _sign(x: int) -> int:
    return (x > 0) - (x < 0)


def _gate_lines(
    rows: Sequence[WorkDelta], sides: _Sides, floor: float
) -> tuple[list[str], list[str]]:
    """Reasons for growth beyond the floor and for shrinkage beyond it, totals first."""
    grew: list[str] = []
    shrank: list[str] = []
    for measure, base, cur in (
        ("FLOPs", sides.base_flops, sides.cur_flops),
        ("bytes", sides.base_bytes, sides.cur_bytes),
    ):
        if abs(cur - base) > floor * base:
            line = f"total {measure} {_change(base, cur)} ({base:,} → {cur:,})"
            (grew if cur > base else shrank).append(line)
    nets = _replacement_nets(rows)
    for line, direction in _replacement_lines(rows, nets, sides, floor):
        (grew if direction > 0 else shrank).append(line)
    flagged = sorted((r for r in rows if r.gated), key=lambda r: -_weight(r, sides))
    named = False
    for r in flagged:
        direction = _direction(r, nets)
        moved = _moved(r, sides, floor, direction)
        if moved:  # a replacement lists the rows that moved its module's way
            (grew if direction > 0 else shrank).append(_row_line(r, moved))
            named |= direction > 0
    if grew and not named:
        grew.extend(_largest_growth(rows, sides))
    return grew, shrank


def _replacement_lines(
    rows: Sequence[WorkDelta],
    nets: Mapping[tuple[str, str], tuple[int, int]],
    sides: _Sides,
    floor: float,
) -> list[tuple[str, int]]:
    """One line per module and phase whose new ops, net of its gone ones, moved its work."""
    out = []
    for (module, phase), (flops, size) in nets.items():
        moved = [
            f"{measure} {delta:+,} net ({delta / total * 100:+.1f}% of the test's)"
            for measure, delta, total in (
                ("FLOPs", flops, sides.base_flops),
                ("bytes", size, sides.base_bytes),
            )
            if total and abs(delta) > floor * total
        ]
        group = [r for r in rows if (r.module, r.phase) == (module, phase)]
        gone = [r.op for r in group if r.status == "deleted"]
        new = [r.op for r in group if r.status == "added"]
        if not moved or not gone or not new:
            continue  # a new op alone, or one gone alone, is its own row's line
        where = row_label(("", module, phase)).lstrip()  # "in m (phase)" / "at top level (…)"
        what = f"{', '.join(gone[:3])} gone, {len(new)} new op{'s' if len(new) > 1 else ''}"
        out.append((f"{where}: {what}, {', '.join(moved)}", 1 if max(flops, size) > 0 else -1))
    return out


def _largest_growth(rows: Sequence[WorkDelta], sides: _Sides, limit: int = 3) -> list[str]:
    """When only the totals moved past the floor: the rows that grew most, by share of it."""
    growing = [r for r in rows if r.status != "varies" and (r.flops_delta > 0 or r.bytes_delta > 0)]
    ranked = sorted(growing, key=lambda r: -_weight(r, sides))[:limit]
    return [
        "largest growth: "
        + _row_line(r, _moved(r, sides, 0.0, +1) or ["work " + _change(0, r.bytes_delta)])
        for r in ranked
    ]


def _weight(r: WorkDelta, sides: _Sides) -> float:
    """The row's largest move as a share of the test's total of that measure."""
    flops = abs(r.flops_delta) / max(sides.base_flops, 1)
    return max(flops, abs(r.bytes_delta) / max(sides.base_bytes, 1))


def _moved(r: WorkDelta, sides: _Sides, floor: float, direction: int) -> list[str]:
    """The measures of a row that moved beyond the floor in ``direction`` (+1 grew, -1 shrank)."""
    out = []
    for measure, base, cur, total in (
        ("FLOPs", r.base_flops, r.cur_flops, sides.base_flops),
        ("bytes", r.base_bytes, r.cur_bytes, sides.base_bytes),
    ):
        if (cur - base) * direction > floor * total:
            out.append(_measure_text(measure, base, cur, total))
    return out


def _measure_text(measure: str, base: int, cur: int, total: int) -> str:
    """``FLOPs +9.9%``; for a row that had none: its amount and its share of the test."""
    if base and cur:
        return f"{measure} {_change(base, cur)}"
    share = f"{(cur - base) / total * 100:+.1f}% of the test's" if total else "the test had none"
    return f"{measure} {cur - base:+,} ({share})"


def _change(base: int, cur: int) -> str:
    return f"{(cur - base) / base * 100:+.1f}%" if base else f"{cur - base:+,}"


def _row_line(r: WorkDelta, measures: Sequence[str]) -> str:
    word = {"added": "new, ", "deleted": "gone, "}.get(r.status, "")
    tail = _row_tail(r)
    text = f"{row_label(r.key, r.grad_fns)}: {word}{', '.join(measures)}"
    return text + (f" — {tail}" if tail else "") + (f" [{r.source}]" if r.source else "")


def _row_tail(r: WorkDelta) -> str:
    """The first readable difference of the row: its input, else its calls."""
    if r.status == "added":
        # The dtypes name what the input alone doesn't: a copy into float64 reads f32.
        text = f"input {r.cur_signature}" if r.cur_signature else ""
        codes = [dtype_code(d) for d in r.cur_dtypes]
        unseen = [c for c in codes if c not in r.cur_signature]
        return f"{text}, writes {', '.join(unseen)}" if text and unseen else text
    if r.status == "deleted":
        return f"input was {r.base_signature}" if r.base_signature else ""
    diff = first_difference(r.base_signature, r.cur_signature)
    if diff:
        return diff
    return f"calls {r.base_calls:,} → {r.cur_calls:,}" if r.calls_delta else ""


def _change_lines(rows: Sequence[WorkDelta], sides: _Sides) -> list[str]:
    """Differences below the floor: rows, dtypes, copies, syncs."""
    out = [_small_change(r, sides) for r in rows if not r.gated and r.status not in _QUIET]
    base, cur = sides.baseline, sides.current
    if base.compiled != cur.compiled:
        out.append(f"calls into compiled code {base.compiled:,} → {cur.compiled:,}")
    if base.copies != cur.copies:
        out.append(f"device copies {_copies_text(base.copies)} → {_copies_text(cur.copies)}")
    if base.syncs != cur.syncs:
        out.append(f"host syncs {_syncs_text(base.syncs)} → {_syncs_text(cur.syncs)}")
    return out


_QUIET: Final = frozenset({"unchanged", "varies"})


def _small_change(r: WorkDelta, sides: _Sides) -> str:
    parts = []
    if r.status in ("added", "deleted"):
        parts.append(f"{'new' if r.status == 'added' else 'gone'}, below the floor")
    if r.flops_delta or r.bytes_delta:
        parts.append(f"FLOPs {r.flops_delta:+,}, bytes {r.bytes_delta:+,}")
    base_types = sides.base.get(r.key, _EMPTY).dtypes
    cur_types = sides.cur.get(r.key, _EMPTY).dtypes
    if r.status not in ("added", "deleted") and base_types != cur_types:
        parts.append(f"dtypes {_text(base_types)} → {_text(cur_types)}")
    tail = _row_tail(r)
    if not parts:
        return f"{row_label(r.key, r.grad_fns)}: {tail}"
    return f"{row_label(r.key, r.grad_fns)}: {', '.join(parts)}" + (f" — {tail}" if tail else "")


def _calls(n: int) -> str:
    return f"{n:,} call" + ("" if n == 1 else "s")


def _note_lines(rows: Sequence[WorkDelta], sides: _Sides) -> list[str]:
    """What the verdict can't judge: rows whose work varies, and compiled code."""
    notes = [
        f"{row_label(r.key, r.grad_fns)}: work varies between census rounds "
        f"(FLOPs {r.base_flops:,} → {r.cur_flops:,}, "
        f"bytes {r.base_bytes:,} → {r.cur_bytes:,}); not gated"
        for r in rows
        if r.status == "varies"
    ]
    base, cur = sides.baseline.compiled, sides.current.compiled
    if base or cur:
        notes.append(
            f"compiled code: {_calls(cur)} into torch.compile'd code in this census "
            f"({_calls(base)} in the baseline's) ran eagerly for it; the census counts their "
            "eager ops and can't see inside compiled regions (fused kernels, generated code)"
        )
    return notes


_DELTA_FIELDS: Final = tuple(WorkDelta.__dataclass_fields__)


@dataclass(frozen=True, slots=True, kw_only=True)
class ModuleWork:
    """One module and phase's work on both sides: the sums of its rows."""

    module: str
    phase: Phase
    base_flops: int
    cur_flops: int
    base_bytes: int
    cur_bytes: int

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in ModuleWork.__dataclass_fields__}


def by_module(rows: Sequence[WorkDelta]) -> list[ModuleWork]:
    """The rows summed per module path and phase, the modules whose work moved most first."""
    sums: dict[tuple[str, Phase], list[int]] = {}
    for r in rows:
        acc = sums.setdefault((r.module, r.phase), [0, 0, 0, 0])
        acc[0] += r.base_flops
        acc[1] += r.cur_flops
        acc[2] += r.base_bytes
        acc[3] += r.cur_bytes
    out = [
        ModuleWork(
            module=m, phase=p, base_flops=a[0], cur_flops=a[1], base_bytes=a[2], cur_bytes=a[3]
        )
        for (m, p), a in sums.items()
    ]
    return sorted(
        out,
        key=lambda w: (
            -abs(w.cur_flops - w.base_flops),
            -abs(w.cur_bytes - w.base_bytes),
            -w.base_flops,
            w.module,
            w.phase,
        ),
    )
