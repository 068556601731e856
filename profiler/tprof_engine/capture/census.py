"""Take the work census of a test body: rounds under a ``TorchDispatchMode`` (docs/design.md §8).

Each op call is counted with torch's own FLOP formulas and the bytes its tensors address, keyed
by op, module (:mod:`.modules`) and phase; the result is a
:class:`~tprof_engine.model.work.WorkTable`.
"""

from __future__ import annotations

import functools
import time
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import torch

from tprof_engine.capture import torch_api
from tprof_engine.capture.flops import formula_for
from tprof_engine.capture.modules import (
    BodyModules,
    Tracker,
    body_modules,
    compiled_code_runs_eagerly,
    hooks_charged_to_their_module,
    optimizer_steps,
    user_line,
)
from tprof_engine.capture.session import split_setup
from tprof_engine.model.errors import CaptureError, ConfigError
from tprof_engine.model.tensors import (
    ARG,
    copy_direction,
    distinct_elements,
    format_tensor,
    format_tensor_list,
    is_host_sync,
)
from tprof_engine.model.work import (
    DATA_DEPENDENT,
    VALUE_READS,
    DeviceCopy,
    HostSync,
    RowKey,
    WorkRow,
    WorkTable,
    is_collective,
)

_NOT_WORK_NAMESPACES: Final = frozenset({"profiler", "prim"})


_METADATA_OPS: Final = frozenset(
    {
        "aten::sym_is_contiguous",
        "aten::is_contiguous",
        "aten::is_strides_like_format",
        "aten::is_non_overlapping_and_dense",
        "aten::size",
        "aten::sym_size",
        "aten::stride",
        "aten::sym_stride",
        "aten::storage_offset",
        "aten::sym_storage_offset",
        "aten::numel",
        "aten::sym_numel",
        "aten::dim",
    }
)


_UNANNOTATED_VIEWS: Final = frozenset({"aten::_unsafe_view"})


_ALLOCATIONS: Final = frozenset(
    {
        "aten::empty",
        "aten::empty_like",
        "aten::empty_strided",
        "aten::empty_permuted",
        "aten::new_empty",
        "aten::new_empty_strided",
    }
)


def take_census(
    fn: Callable[..., Any],
    args: tuple[Any, ...] = (),
    kwargs: Mapping[str, Any] | None = None,
    *,
    setup: Callable[[], Any] | None = None,
    iterations: int = 1,
    rounds: int = 2,
    stack: bool = False,
) -> WorkTable:
    """The work of one round of ``iterations`` calls of ``fn``, taken ``rounds`` times.

    ``setup`` runs before each round, outside the census, and may return ``(args, kwargs)``
    for it.  The table holds the last round's work; a row whose work differs between rounds
    (calls, FLOPs, bytes, dtypes or first signature) is marked ``varies``.  Run it after the
    body's warm-up, so that lazy first-call work (optimizer state, caches) isn't in it.
    With ``stack``, each row keeps the user's source line of its first call.  An exception
    from the body is re-raised as :class:`CaptureError`, no mode left active.
    """
    if iterations < 1:
        raise ConfigError(f"'iterations' must be >= 1 (got {iterations})")
    if rounds < 1:
        raise ConfigError(f"'rounds' must be >= 1 (got {rounds})")
    kwargs = dict(kwargs or {})
    where = body_modules(fn, args, kwargs)
    start = time.perf_counter_ns()
    try:
        taken = [
            _round(fn, args, kwargs, setup, iterations, where, stack=stack) for _ in range(rounds)
        ]
    except ConfigError:
        raise
    except Exception as exc:
        raise CaptureError(
            f"the work census could not run the test body under a TorchDispatchMode: "
            f"{type(exc).__name__}: {exc}"
        ) from exc
    census_us = (time.perf_counter_ns() - start) / 1000.0
    return _table(taken, iterations=iterations, census_us=census_us)


@dataclass(slots=True, kw_only=True)
class _Tally:
    """The work of one row so far in a round."""

    signature: str
    calls: int = 0
    flops: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    dtypes: set[torch.dtype] = field(default_factory=set)
    grad_fns: set[str] = field(default_factory=set)
    source: str = ""
    group: int = 0  # a collective's process group size

    def dtype_names(self) -> tuple[str, ...]:
        return tuple(sorted(_dtype_name(d) for d in self.dtypes))

    def work(self) -> tuple[Any, ...]:
        figures = (self.calls, self.flops, self.bytes_read, self.bytes_written)
        return (*figures, self.dtype_names(), self.signature)

    def row(self, key: RowKey, *, varies: bool) -> WorkRow:
        op, module, phase = key
        return WorkRow(
            op=op,
            module=module,
            phase=phase,
            calls=self.calls,
            flops=self.flops,
            bytes_read=self.bytes_read,
            bytes_written=self.bytes_written,
            dtypes=self.dtype_names(),
            signature=self.signature,
            varies=varies,
            grad_fns=tuple(sorted(self.grad_fns)),
            source=self.source,
            group=self.group,
        )


@dataclass(slots=True, kw_only=True)
class _Round:
    rows: dict[RowKey, _Tally] = field(default_factory=dict)
    copies: dict[tuple[str, str, str, str], list[int]] = field(default_factory=dict)
    syncs: dict[tuple[str, str, str, str], int] = field(default_factory=dict)
    compiled: int = 0


def _round(
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    setup: Callable[[], Any] | None,
    iterations: int,
    where: BodyModules,
    *,
    stack: bool = False,
) -> _Round:
    call_args, call_kwargs = args, kwargs
    if setup is not None:
        prepared = setup()
        if prepared is not None:
            call_args, call_kwargs = split_setup(prepared)
    result = _Round()
    tracker = Tracker(where.names)
    with warnings.catch_warnings():
        # ModuleTracker's global hooks make torch warn when a compiled module runs; the census
        # expects that (Tracker names both alike) and must not fail a warnings-as-errors run.
        warnings.filterwarnings("ignore", message=r"Using `torch\.compile\(module\)` when")
        with (
            compiled_code_runs_eagerly() as compiled,
            tracker,
            hooks_charged_to_their_module(tracker, where),
            optimizer_steps(tracker),
            _Census(tracker, result, stack=stack),
        ):
            for _ in range(iterations):
                fn(*call_args, **call_kwargs)
    result.compiled = compiled[0]
    return result


def _table(taken: list[_Round], *, iterations: int, census_us: float) -> WorkTable:
    """The last round's work as a table, rows that differ between rounds marked."""
    last = taken[-1]
    latest: dict[RowKey, _Tally] = {}
    for r in taken:
        latest.update(r.rows)
    rows = [tally.row(key, varies=_varies(key, taken)) for key, tally in latest.items()]
    copies = [
        DeviceCopy(op=op, module=module, phase=phase, direction=direction, calls=n, bytes=b)
        for (op, module, phase, direction), (n, b) in last.copies.items()
    ]
    syncs = [
        HostSync(op=op, module=module, phase=phase, device=device, calls=n)
        for (op, module, phase, device), n in last.syncs.items()
    ]
    return WorkTable(
        rows=tuple(rows),
        copies=tuple(copies),
        syncs=tuple(syncs),
        compiled=last.compiled,
        iterations=iterations,
        census_us=census_us,
    )


def _varies(key: RowKey, taken: list[_Round]) -> bool:
    """Whether a row's work (or its absence) differs between census rounds."""
    return len({r.rows[key].work() if key in r.rows else () for r in taken}) > 1


@dataclass(frozen=True, slots=True, kw_only=True)
class _OpFacts:
    """What an op's schema says about its work, worked out once per op overload."""

    name: str
    recorded: bool  # real work, not bookkeeping or a metadata query
    decompose: bool  # a composite op without a FLOP formula: record its parts instead
    moves_bytes: bool
    reads_data: bool  # ``*_like`` factories read only their argument's shape
    inputs: tuple[tuple[int, str], ...]  # tensor arguments it reads: (position, name)
    written: tuple[tuple[int, str], ...]  # tensor arguments it writes in place (or out=)
    fresh: tuple[int, ...]  # returns that are new tensors
    returns: int
    flop_formula: Callable[..., Any] | None
    maybe_sync: bool

    @classmethod
    def of(cls, func: torch_api.OpOverload) -> _OpFacts:
        schema = func._schema
        name = schema.name
        formula = formula_for(func)
        view = name in _UNANNOTATED_VIEWS or any(
            r.alias_info is not None and not r.alias_info.is_write for r in schema.returns
        )
        tensors = [(i, a) for i, a in enumerate(schema.arguments) if "Tensor" in str(a.type)]
        return cls(
            name=name,
            recorded=name.split("::")[0] not in _NOT_WORK_NAMESPACES and name not in _METADATA_OPS,
            decompose=formula is None and torch_api.has_composite_kernel(func),
            moves_bytes=not view and name not in _ALLOCATIONS,
            inputs=tuple((i, a.name) for i, a in tensors if not a.is_out),
            reads_data=not name.endswith("_like"),
            written=tuple(
                (i, a.name)
                for i, a in tensors
                if a.alias_info is not None and a.alias_info.is_write
            ),
            fresh=tuple(i for i, r in enumerate(schema.returns) if r.alias_info is None),
            returns=len(schema.returns),
            flop_formula=formula,
            maybe_sync=name in VALUE_READS or name in DATA_DEPENDENT,
        )


# Op overloads live as long as the process; their schemas never change.
_FACTS: dict[torch_api.OpOverload, _OpFacts] = {}


class _Census(torch_api.DispatchMode):
    """Tallies every op the body runs into a round, by op, innermost module and phase."""

    def __init__(self, tracker: Tracker, into: _Round, *, stack: bool = False) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self._tracker = tracker
        self._round = into
        self._stack = stack

    def __torch_dispatch__(
        self,
        func: torch_api.OpOverload,
        types: tuple[type, ...],
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        facts = _FACTS.get(func)
        if facts is None:
            facts = _FACTS[func] = _OpFacts.of(func)
        if facts.decompose:
            with self:
                result = func.decompose(*args, **kwargs)
            if result is not NotImplemented:
                return result
        out = func(*args, **kwargs)
        if facts.recorded:
            self._record(facts, args, kwargs, out)
        return out

    def _record(
        self, facts: _OpFacts, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any
    ) -> None:
        # Runs for every op of the body: kept to plain loops, views skip the byte work.
        read = _gather(args, kwargs, facts.inputs)
        tracker = self._tracker
        key = (facts.name, *tracker.place())
        tally = self._round.rows.get(key) or self._new_tally(key, facts, args, kwargs)
        tally.calls += 1
        if tracker.is_bw:
            _note_grad_fn(tally)
        if facts.flop_formula is not None:
            tally.flops += _flops(facts.flop_formula, args, kwargs, out)
        tally.dtypes.update([t.dtype for t in read])
        if facts.maybe_sync:
            self._note_sync(key, read)
        if not facts.moves_bytes:
            return
        written = _gather(args, kwargs, facts.written)
        for i in facts.fresh:
            written.extend(_tensors(out if facts.returns == 1 else out[i]))
        tally.dtypes.update([t.dtype for t in written])
        if facts.reads_data:
            tally.bytes_read += sum(map(_nbytes, read))
        tally.bytes_written += sum(map(_nbytes, written))
        if written:
            self._note_copy(key, read, written)

    def _new_tally(
        self, key: RowKey, facts: _OpFacts, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> _Tally:
        tally = self._round.rows[key] = _Tally(signature=_signature(facts, args, kwargs))
        if is_collective(facts.name):
            tally.group = _group_size(args, kwargs)
        if self._stack:
            tally.source = user_line()
        return tally

    def _note_sync(self, key: RowKey, read: list[torch.Tensor]) -> None:
        device = read[0].device.type if read else "cpu"
        if is_host_sync(key[0], device):
            sync_key = (*key, device)
            self._round.syncs[sync_key] = self._round.syncs.get(sync_key, 0) + 1

    def _note_copy(
        self, key: RowKey, read: list[torch.Tensor], written: list[torch.Tensor]
    ) -> None:
        # A 0-dim CPU tensor is a scalar operand that any device's kernels accept.
        sources = {t.device.type for t in read if t.dim() > 0}
        targets = {t.device.type for t in written}
        if sources == targets:
            return
        direction = copy_direction(sources, targets)
        if direction is None:
            return
        source = direction.split("→")[0]
        moved = sum(_nbytes(t) for t in read if t.dim() > 0 and t.device.type == source)
        tally = self._round.copies.setdefault((*key, direction), [0, 0])
        tally[0] += 1
        tally[1] += moved


def _flops(
    formula: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], out: Any
) -> int:
    """The call's FLOPs; 0 where its tensors have no plain shape (nested, sparse), which the
    census reports as FLOPs unknown for the op."""
    try:
        return int(formula(*args, **kwargs, out_val=out))
    except (RuntimeError, AssertionError, ValueError):
        return 0


def _group_size(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> int:
    """The size of the process group a collective runs in: c10d's ops pass the group as a
    script object, the functional collectives by its name; 0 where neither says."""
    import torch.distributed as dist

    for value in (*args, *kwargs.values()):
        try:
            if isinstance(value, torch.ScriptObject):
                return int(dist.ProcessGroup.unbox(value).size())
            resolve = getattr(dist.distributed_c10d, "_resolve_process_group", None)
            if isinstance(value, str) and resolve is not None:
                return int(resolve(value).size())
        except (RuntimeError, ValueError, KeyError, AttributeError):
            continue  # a ReduceOp, a tag: not the group
    return 0


def _note_grad_fn(tally: _Tally) -> None:
    """The autograd node a backward op runs for (``AddmmBackward0``), torch's own excepted."""
    node = torch_api.current_autograd_node()
    if node is not None and not node.name().startswith("torch::autograd::"):
        tally.grad_fns.add(node.name())


def _gather(
    args: tuple[Any, ...], kwargs: Mapping[str, Any], places: tuple[tuple[int, str], ...]
) -> list[torch.Tensor]:
    """The tensors passed at ``places`` (position, name), tensor lists flattened."""
    found: list[torch.Tensor] = []
    given = len(args)
    for pos, name in places:
        value = args[pos] if pos < given else kwargs.get(name)
        if isinstance(value, torch.Tensor):
            found.append(value)
        elif isinstance(value, (list, tuple)):
            found.extend(v for v in value if isinstance(v, torch.Tensor))
    return found


def _tensors(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [v for v in value if isinstance(v, torch.Tensor)]
    return []


def _nbytes(t: torch.Tensor) -> int:
    if t.layout is torch.strided and not t.is_nested:
        if t.is_contiguous():
            return int(t.nbytes)
        return distinct_elements(t.shape, t.stride()) * t.element_size()
    try:
        return int(t.numel()) * t.element_size()
    except RuntimeError:  # nested and sparse layouts without a plain element count
        return 0


@functools.cache
def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _signature(facts: _OpFacts, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> str:
    """The readable tensor inputs of a call, named by their arguments when there are several:
    ``f32[4, 8]``, ``self=f32[16], mat1=f32[4, 8], mat2=f32[8, 16]ᵀ``."""
    items = []
    for pos, name in facts.inputs:
        value = args[pos] if pos < len(args) else kwargs.get(name)
        if isinstance(value, torch.Tensor):
            items.append((name, _tensor_text(value)))
        elif isinstance(value, (list, tuple)):
            items.append((name, format_tensor_list([_tensor_text(t) for t in _tensors(value)])))
    if len(items) == 1:
        return items[0][1]
    return ", ".join(f"{name}{ARG}{text}" for name, text in items)


def _tensor_text(t: torch.Tensor) -> str:
    if t.layout is torch.strided and not t.is_nested:
        return format_tensor(_dtype_name(t.dtype), tuple(t.shape), t.stride())
    return f"{_dtype_name(t.dtype)} {str(t.layout).removeprefix('torch.')}"
