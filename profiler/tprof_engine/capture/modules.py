"""Where an op runs: the module path (``ModuleTracker`` over the test's ``named_modules()``) and
phase (forward, backward, a module's own hooks, an optimizer's step), calls into compiled code,
and the user's source line for ``--tprof-collect=stack``.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import os
import sys
import sysconfig
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import torch
from torch import nn

from tprof_engine.capture import torch_api
from tprof_engine.model.work import BACKWARD, FORWARD, FORWARD_HOOK, FORWARD_PRE_HOOK

_TOP: Final = "Global"  # ModuleTracker's name for "no module"


class Tracker(torch_api.ModuleTracker):
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
        # The hooks running, innermost last: (their module, phase, clock when they started).
        self._running_hooks: list[tuple[str, str, int]] = []
        self.optimizer: str | None = None  # the optimizer step running: ``AdamW.step``
        self._made_in: dict[int, str] = {}  # autograd node's sequence number → its module
        self._last_node = -1

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

    def place(self) -> tuple[str, str]:
        """Where an op runs now: (module path, phase).

        A module's own forward hooks run after ModuleTracker's global hook has left the
        module: their ops, and its pre-hooks' alike, are charged to the module they are
        registered on, in a phase of their own; a module the hook calls is their owner.
        Backward ops go to the module whose forward made their autograd node.
        """
        if self.is_bw:
            return self._backward_module(), BACKWARD
        if self._running_hooks:
            path, phase, since = self._running_hooks[-1]
            inner = self.innermost()
            if not inner or self._entered.get(inner, -1) < since:
                self._note_node(path)
                return path, phase
        if self.optimizer is not None:
            return "", self.optimizer
        path = self.innermost()
        self._note_node(path)
        return path, FORWARD

    def _note_node(self, path: str) -> None:
        """Remember the module a forward op ran in by the autograd node it made (the next
        sequence number has moved past it); its backward ops are charged to that module."""
        made = torch_api.autograd_sequence_nr() - 1
        if made != self._last_node:
            self._last_node = made
            self._made_in.setdefault(made, path)

    def _backward_module(self) -> str:
        """The module whose forward made the autograd node running now.  ModuleTracker's own
        backward hooks fire once every output has its gradient: a module returning a tensor
        it also used (eager attention's weights) would have its first backward ops charged
        to its parent."""
        node = torch_api.current_autograd_node()
        if node is not None:
            found = self._made_in.get(torch_api.node_sequence_nr(node))
            if found is not None:
                return found
        return self.innermost()

    @contextlib.contextmanager
    def in_hook(self, path: str, phase: str) -> Iterator[None]:
        """The ops of a hook of module ``path`` (``phase``: forward hook or pre-hook)."""
        self._running_hooks.append((path, phase, next(self._clock)))
        try:
            yield
        finally:
            self._running_hooks.pop()

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


@dataclass(frozen=True, slots=True)
class BodyModules:
    """The modules a test body reaches, by ``id``: each one's path and the module itself."""

    names: dict[int, str]
    modules: dict[int, nn.Module]


def body_modules(
    fn: Callable[..., Any], args: tuple[Any, ...] = (), kwargs: Mapping[str, Any] | None = None
) -> BodyModules:
    """Every module reachable from the body, and its path as ``named_modules()`` has it.

    Of several outermost models, each one's paths start with the variable that holds it.  A
    module of no parameters and no submodules beside a model (its loss, an activation) is
    named by its variable and leaves the model's paths as they are.
    """
    roots = _roots(fn, args, kwargs or {})
    models = {id(root) for _, root, _ in roots if _is_model(root)} or {id(r) for _, r, _ in roots}
    names: dict[int, str] = {}
    modules: dict[int, nn.Module] = {}
    for var, root, wrapper in roots:
        prefix = var if len(models) > 1 or id(root) not in models else ""
        for path, module in root.named_modules():
            names.setdefault(id(module), ".".join(p for p in (prefix, path) if p))
            modules[id(module)] = module
        names[id(wrapper)] = names[id(root)]
    return BodyModules(names=names, modules=modules)


def _is_model(module: nn.Module) -> bool:
    """A module with parameters or submodules, not a loss or an activation."""
    return next(module.children(), None) is not None or next(module.parameters(), None) is not None


@contextlib.contextmanager
def hooks_charged_to_their_module(tracker: Tracker, body: BodyModules) -> Iterator[None]:
    """Run the modules' own forward hooks and pre-hooks inside ``tracker.in_hook``; each hook
    is put back as it was afterwards."""
    wrapped: list[tuple[dict[int, Any], int, Any]] = []
    for key, module in body.modules.items():
        path = body.names.get(key, "")
        for hooks, phase in (
            (module._forward_pre_hooks, FORWARD_PRE_HOOK),
            (module._forward_hooks, FORWARD_HOOK),
        ):
            for handle, hook in list(hooks.items()):
                hooks[handle] = _in_hook(tracker, hook, path, phase)
                wrapped.append((hooks, handle, hook))
    try:
        yield
    finally:
        for hooks, handle, hook in wrapped:
            if handle in hooks:
                hooks[handle] = hook


@contextlib.contextmanager
def optimizer_steps(tracker: Tracker) -> Iterator[None]:
    """Name the optimizer whose ``step`` runs (``AdamW.step``) in ``tracker.optimizer``."""
    from torch.optim.optimizer import (
        register_optimizer_step_post_hook,
        register_optimizer_step_pre_hook,
    )

    running: list[str] = []

    def started(optimizer: Any, *_: Any) -> None:
        running.append(f"{type(optimizer).__name__}.step")
        tracker.optimizer = running[-1]

    def finished(*_: Any) -> None:
        if running:
            running.pop()
        tracker.optimizer = running[-1] if running else None

    handles = [
        register_optimizer_step_pre_hook(started),
        register_optimizer_step_post_hook(finished),
    ]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()
        tracker.optimizer = None


def _in_hook(tracker: Tracker, hook: Any, path: str, phase: str) -> Callable[..., Any]:
    @functools.wraps(hook)
    def charged(*args: Any, **kwargs: Any) -> Any:
        with tracker.in_hook(path, phase):
            return hook(*args, **kwargs)

    return charged


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


@contextlib.contextmanager
def compiled_code_runs_eagerly() -> Iterator[list[int]]:
    """Run ``torch.compile``'d code eagerly and count the calls into it (one-item list)."""
    calls = [0]
    eval_frame = torch_api.dynamo_eval_frame()
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
        with (
            stance("force_eager") if stance is not None else contextlib.nullcontext(),
            torch_api.eager_run_quiet(),
        ):
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
