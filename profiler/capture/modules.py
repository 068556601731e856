"""Where an op runs: the module path (``ModuleTracker`` over the test's ``named_modules()``),
calls into compiled code, and the user's source line for ``--tprof-collect=stack``.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import os
import sys
import sysconfig
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, Final

import torch
from torch import nn
from torch.utils.module_tracker import ModuleTracker

_TOP: Final = "Global"  # ModuleTracker's name for "no module"


class Tracker(ModuleTracker):
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


@contextlib.contextmanager
def compiled_code_runs_eagerly() -> Iterator[list[int]]:
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
