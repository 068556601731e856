"""Take the work census of a test body: rounds under a ``TorchDispatchMode`` (docs/design.md §8).

A capture boundary like :mod:`tprof_engine.capture`: it imports torch, and returns only the plain
records of :mod:`tprof_engine.work`.  Each census round runs ``setup`` and then ``iterations``
calls of the body under :class:`_Census` (every op that reaches the Python dispatcher) and a
``ModuleTracker`` (which module's forward or backward is running).  The body's return values
are dropped: the census adds work facts to a test, never results.

How each figure is taken, and why:

* op names are ``func._schema.name`` (``aten::addmm``), the names the profiler's table uses.
  Ops that have a ``CompositeImplicitAutograd`` kernel and no FLOP formula (``aten::linear``
  under ``torch.inference_mode``) are decomposed, as ``FlopCounterMode`` does, so a census
  records the same leaf ops with and without autograd; ``profiler::`` bookkeeping ops and
  tensor-metadata queries are not work and aren't recorded.
* FLOPs come from ``torch.utils.flop_counter.flop_registry``; ops without a formula have 0.
* bytes are distinct elements addressed × element size, not ``untyped_storage().nbytes()``:
  a slice passed to an op would otherwise count its whole base tensor, and an expanded bias
  its broadcast size.  Reads are the tensor arguments except ``out=`` ones (an in-place op
  reads its ``self`` too); writes are arguments the schema marks written plus fresh outputs.
  Ops whose outputs alias an input (views), ``aten::_unsafe_view`` (a view without the
  annotation) and ``empty*`` allocations move no bytes, ``*_like`` factories read none; their
  calls still count.
* module paths: the modules reachable from the body (the callable itself, a bound method's
  object, ``functools.partial`` parts, closure variables and the functions they hold, globals
  it names, its arguments) are named as ``named_modules()`` of the outermost one names them:
  ``encoder.layers.0``, not ModuleTracker's ``TransformerEncoder.layers.0`` (which depends on
  the module called first); the outermost module itself is ``""``, like ops outside every
  module.  With several outermost modules each path starts with its variable's name; a module
  reached no way keeps ModuleTracker's class-rooted name.  A row is charged to the innermost
  running module (see :class:`_Tracker`).  In backward, ModuleTracker enters a module when
  the gradient of its output is ready and leaves it when the gradients of its inputs are, so
  backward ops land in the module whose forward made them; a module whose inputs need no
  gradient stays entered until the pass ends, and backward ops that no inner module claims
  later are charged to it.
* compiled code: a dispatch mode turns ``torch.compile`` off (``fullgraph=True`` would fail),
  so the census runs under ``torch.compiler.set_stance("force_eager")``: compiled functions run
  their eager code, whose ops the census records, and each call into one is counted from
  Dynamo's own stance check.  Nothing is compiled during a census.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import os
import sys
import sysconfig
import time
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import flop_registry
from torch.utils.module_tracker import ModuleTracker

from tprof_engine.capture import _split_setup
from tprof_engine.errors import CaptureError, ConfigError
from tprof_engine.work import (
    DATA_DEPENDENT,
    VALUE_READS,
    DeviceCopy,
    HostSync,
    Phase,
    RowKey,
    WorkRow,
    WorkTable,
    copy_direction,
    distinct_elements,
    format_tensor,
    format_tensor_list,
    is_host_sync,
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
_CIA = torch._C.DispatchKey.CompositeImplicitAutograd
_TOP: Final = "Global"  # ModuleTracker's name for "no module"


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
    names = module_names(fn, args, kwargs)
    start = time.perf_counter_ns()
    try:
        taken = [
            _round(fn, args, kwargs, setup, iterations, names, stack=stack) for _ in range(rounds)
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


# --------------------------------------------------------------------------- one round


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
            phase=_phase(phase),
            calls=self.calls,
            flops=self.flops,
            bytes_read=self.bytes_read,
            bytes_written=self.bytes_written,
            dtypes=self.dtype_names(),
            signature=self.signature,
            varies=varies,
            grad_fns=tuple(sorted(self.grad_fns)),
            source=self.source,
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
    names: Mapping[int, str],
    *,
    stack: bool = False,
) -> _Round:
    call_args, call_kwargs = args, kwargs
    if setup is not None:
        prepared = setup()
        if prepared is not None:
            call_args, call_kwargs = _split_setup(prepared)
    result = _Round()
    tracker = _Tracker(names)
    with warnings.catch_warnings():
        # ModuleTracker's global hooks make torch warn when a compiled module runs; the census
        # expects that (_Tracker names both alike) and must not fail a warnings-as-errors run.
        warnings.filterwarnings("ignore", message=r"Using `torch\.compile\(module\)` when")
        with (
            _compiled_code_runs_eagerly() as compiled,
            tracker,
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
        DeviceCopy(op=op, module=module, phase=_phase(phase), direction=direction, calls=n, bytes=b)
        for (op, module, phase, direction), (n, b) in last.copies.items()
    ]
    syncs = [
        HostSync(op=op, module=module, phase=_phase(phase), device=device, calls=n)
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


def _phase(text: str) -> Phase:
    return "backward" if text == "backward" else "forward"


# --------------------------------------------------------------------------- the dispatch mode


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
    def of(cls, func: torch._ops.OpOverload) -> _OpFacts:
        schema = func._schema
        name = schema.name
        formula = flop_registry.get(func._overloadpacket)
        view = name in _UNANNOTATED_VIEWS or any(
            r.alias_info is not None and not r.alias_info.is_write for r in schema.returns
        )
        tensors = [(i, a) for i, a in enumerate(schema.arguments) if "Tensor" in str(a.type)]
        return cls(
            name=name,
            recorded=name.split("::")[0] not in _NOT_WORK_NAMESPACES and name not in _METADATA_OPS,
            decompose=formula is None and _has_composite_kernel(func),
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
_FACTS: dict[torch._ops.OpOverload, _OpFacts] = {}


def _has_composite_kernel(func: torch._ops.OpOverload) -> bool:
    return _CIA in func.py_kernels or bool(
        torch._C._dispatch_has_kernel_for_dispatch_key(func.name(), _CIA)  # type: ignore[no-untyped-call]
    )


class _Census(TorchDispatchMode):
    """Tallies every op the body runs into a round, by op, innermost module and phase."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # torch wraps a mode's __torch_dispatch__ in torch._dynamo.disable unless told not to:
        # that imports Dynamo (about a second) and costs a frame switch per op.  Nothing is
        # compiled during a census (see _compiled_code_runs_eagerly), so it protects nothing.
        return False

    def __init__(self, tracker: _Tracker, into: _Round, *, stack: bool = False) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self._tracker = tracker
        self._round = into
        self._stack = stack

    def __torch_dispatch__(
        self,
        func: torch._ops.OpOverload,
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
        key = (facts.name, tracker.innermost(), "backward" if tracker.is_bw else "forward")
        tally = self._round.rows.get(key)
        if tally is None:
            tally = self._round.rows[key] = _Tally(signature=_signature(facts, args, kwargs))
            if self._stack:
                tally.source = user_line()
        tally.calls += 1
        if tracker.is_bw:
            node = torch._C._current_autograd_node()
            if node is not None and not node.name().startswith("torch::autograd::"):
                tally.grad_fns.add(node.name())
        if facts.flop_formula is not None:
            tally.flops += int(facts.flop_formula(*args, **kwargs, out_val=out))
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
    """The readable tensor inputs of a call: ``f32[4, 8], f32[8, 16]ᵀ``."""
    items = []
    for pos, name in facts.inputs:
        value = args[pos] if pos < len(args) else kwargs.get(name)
        if isinstance(value, torch.Tensor):
            items.append(_tensor_text(value))
        elif isinstance(value, (list, tuple)):
            items.append(format_tensor_list([_tensor_text(t) for t in _tensors(value)]))
    return ", ".join(items)


def _tensor_text(t: torch.Tensor) -> str:
    if t.layout is torch.strided and not t.is_nested:
        return format_tensor(_dtype_name(t.dtype), tuple(t.shape), t.stride())
    return f"{_dtype_name(t.dtype)} {str(t.layout).removeprefix('torch.')}"


# --------------------------------------------------------------------------- modules


class _Tracker(ModuleTracker):
    """ModuleTracker with the paths users see in ``named_modules()`` and the innermost module.

    ``parents`` is a set.  The innermost running module is one with no running descendant
    (paths say which), and of several such, the one entered last: in backward a module whose
    inputs need no gradient is never left, and a later sibling's ops belong to the sibling.
    Entry order alone is not enough: a module returning its child's output tensor gets its
    backward hook after the child's.
    """

    def __init__(self, names: Mapping[int, str]) -> None:
        super().__init__()
        self._names = names
        self._entered: dict[str, int] = {}
        self._clock = itertools.count()
        self._known: dict[frozenset[str], str] = {}  # innermost module by running set

    def _get_mod_name(self, mod: Any) -> str:
        name = self._names.get(id(mod))
        return name if name is not None else str(super()._get_mod_name(mod))  # type: ignore[no-untyped-call]

    def _get_append_fn(self, name: str, is_bw: bool) -> Callable[..., None]:
        append = super()._get_append_fn(name, is_bw)  # type: ignore[no-untyped-call]

        def entered(*args: Any) -> None:
            append(*args)
            self._entered[name] = next(self._clock)
            self._known.clear()

        return entered

    def innermost(self) -> str:
        """The path of the innermost running module; ``""`` outside every module."""
        running = frozenset(self.parents)
        known = self._known.get(running)
        if known is None:
            known = self._known[running] = self._innermost(running)
        return known

    def _innermost(self, running: frozenset[str]) -> str:
        inside = [p for p in running if p != _TOP]
        leaves = [p for p in inside if not any(_descends(q, p) for q in inside)]
        return max(leaves, key=lambda p: self._entered.get(p, -1)) if leaves else ""


def _descends(path: str, ancestor: str) -> bool:
    """Whether ``path`` names a submodule of ``ancestor`` (``""`` is the root of every path)."""
    return path != ancestor and (ancestor == "" or path.startswith(ancestor + "."))


def module_names(
    fn: Callable[..., Any], args: tuple[Any, ...] = (), kwargs: Mapping[str, Any] | None = None
) -> dict[int, str]:
    """Path of every module reachable from the body, by ``id``, as ``named_modules()`` has it."""
    roots = _roots(fn, args, kwargs or {})
    names: dict[int, str] = {}
    for var, root, wrapper in roots:
        prefix = var if len(roots) > 1 else ""
        for path, module in root.named_modules():
            names.setdefault(id(module), ".".join(p for p in (prefix, path) if p))
        names[id(wrapper)] = names[id(root)]
    return names


def _roots(
    fn: Callable[..., Any], args: tuple[Any, ...], kwargs: Mapping[str, Any]
) -> list[tuple[str, nn.Module, nn.Module]]:
    """The outermost modules the body can reach: (variable, module, the object found).

    The object found differs from the module for a ``torch.compile``'d module, which wraps
    the user's and is named like it.
    """
    found: dict[int, tuple[str, nn.Module, nn.Module]] = {}
    candidates = [*_reachable(fn, depth=2)]
    candidates += [(f"args[{i}]", a) for i, a in enumerate(args)]
    candidates += list(kwargs.items())
    for var, value in candidates:
        if isinstance(value, nn.Module):
            inner_module = getattr(value, "_orig_mod", None)
            module = inner_module if isinstance(inner_module, nn.Module) else value
            found.setdefault(id(module), (var, module, value))
    inner = {id(m) for _, root, _ in found.values() for m in root.modules() if m is not root}
    return [entry for key, entry in found.items() if key not in inner]


def _reachable(fn: Any, *, depth: int) -> Iterator[tuple[str, Any]]:
    """Values a callable holds: itself, bound objects, partial arguments, closures, globals."""
    if isinstance(fn, nn.Module):
        yield type(fn).__name__, fn
        return
    if isinstance(fn, functools.partial):
        yield from _reachable(fn.func, depth=depth)
        yield from ((f"args[{i}]", a) for i, a in enumerate(fn.args))
        yield from fn.keywords.items()
        return
    owner = getattr(fn, "__self__", None)
    if owner is not None:
        yield type(owner).__name__, owner
        fn = getattr(fn, "__func__", fn)
    code = getattr(fn, "__code__", None)
    if code is None:
        return
    for var, cell in zip(code.co_freevars, getattr(fn, "__closure__", None) or (), strict=False):
        try:
            value = cell.cell_contents
        except ValueError:  # a cell not assigned yet
            continue
        yield var, value
        if depth > 1 and callable(value) and not isinstance(value, (type, nn.Module)):
            yield from _reachable(value, depth=depth - 1)
    named = getattr(fn, "__globals__", {})
    yield from ((var, named[var]) for var in code.co_names if var in named)


# --------------------------------------------------------------------------- compiled code


@contextlib.contextmanager
def _compiled_code_runs_eagerly() -> Iterator[list[int]]:
    """Run ``torch.compile``'d code eagerly and count the calls into it (one-item list)."""
    calls = [0]
    eval_frame = sys.modules.get("torch._dynamo.eval_frame")
    if eval_frame is None:
        # Dynamo is imported by the first torch.compile(): without it no compiled code exists,
        # and importing it here would cost a second.
        yield calls
        return
    original = getattr(eval_frame, "_callback_from_stance", None)

    def counting(callback: Any) -> Any:
        # Dynamo asks this once per call into compiled code, with no callback when disabled.
        if callback is not None and callback is not False:
            calls[0] += 1
        return original(callback)  # type: ignore[misc]

    if original is not None:
        eval_frame._callback_from_stance = counting  # type: ignore[attr-defined]
    stance = getattr(torch.compiler, "set_stance", None)
    try:
        with stance("force_eager") if stance is not None else contextlib.nullcontext():
            yield calls
    finally:
        if original is not None:
            eval_frame._callback_from_stance = original  # type: ignore[attr-defined]


# Frames of these folders are the tooling's, not the user's: torch, this package, the
# standard library (contextlib, functools wrappers).
_TOOLING = tuple(
    str(Path(p).resolve()) + os.sep
    for p in (
        Path(torch.__file__).parent,
        Path(__file__).parent,
        Path(sysconfig.get_paths()["stdlib"]),
    )
)


def user_line() -> str:
    """The innermost frame of the caller's stack outside torch, this package and the
    standard library: ``model.py:12 in forward`` (relative to the working folder)."""
    frame = sys._getframe(1)
    while frame is not None:
        path = frame.f_code.co_filename
        if not path.startswith("<") and not _is_tooling(path):
            return f"{_shown_path(path)}:{frame.f_lineno} in {frame.f_code.co_name}"
        frame = frame.f_back  # type: ignore[assignment]
    return ""


@functools.lru_cache(maxsize=4096)
def _is_tooling(path: str) -> bool:
    return str(Path(path).resolve()).startswith(_TOOLING)


def _shown_path(path: str) -> str:
    try:
        return str(Path(path).resolve().relative_to(Path.cwd()))
    except ValueError:
        return path
