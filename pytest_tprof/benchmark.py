"""pytest-benchmark interplay: a ``benchmark``-using test also gets an op-level profile.

pytest-benchmark keeps its contract: the function is called exactly as often, in the same
order, with the same setup and teardown as without ``--tprof``.  tprof profiles
pytest-benchmark's own rounds instead of running its own: the profiler opens once
pytest-benchmark has calibrated, each of its rounds becomes a profiler step, and the rounds it
keeps in its statistics (not its warm-up) are tprof's rounds, up to tprof's warm-up + rounds;
later rounds run unprofiled.  A per-op summary goes in ``extra_info["tprof"]`` so
``--benchmark-json`` carries it, with how many of pytest-benchmark's rounds were profiled.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import replace
from typing import Any, Protocol

import pytest

from pytest_tprof.fixture import RESULT_KEY
from tprof_engine.model.errors import TprofError
from tprof_engine.model.results import ProfiledTest

# pytest-benchmark's fixture methods tprof wraps (present from 4.0 to 5.x).
_HOOKS = ("_make_stats", "_make_runner", "__call__", "pedantic")


class Borrowing(Protocol):
    """What the plugin gives: a session for a test's rounds, and their verdict."""

    def borrowed_rounds(self, item: pytest.Item) -> Any: ...

    def judge_borrowed(self, item: pytest.Item, borrowed: Any) -> ProfiledTest: ...

    def profiling_threads(self) -> AbstractContextManager[None]: ...

    def not_profiled(self, item: pytest.Item, why: str) -> None: ...


def extra_info(result: ProfiledTest, *, limit: int = 10) -> dict[str, Any]:
    """The per-op summary stored under ``extra_info["tprof"]`` (builtin types only)."""
    table = result.table
    ops: list[dict[str, Any]] = []
    if table is not None:
        import numpy as np

        med = np.median(table.self_cpu_us, axis=1) if table.names else np.zeros(0)
        order = np.argsort(-med)[:limit]
        for i in order.tolist():
            row = {
                "op": table.names[i],
                "calls": int(np.median(table.calls[i])),
                "self_cpu_us": round(float(med[i]), 3),
            }
            if table.has_device:
                row["self_cuda_us"] = round(float(np.median(table.self_device_us[i])), 3)
            ops.append(row)
    top = result.verdict.top_op()
    return {
        "verdict": result.verdict.verdict,
        "reason": result.verdict.reason,
        "trace": result.trace,
        "top_op": None if top is None else f"{top.op} {top.delta_pct:+.0f}%",
        "ops": ops,
    }


def wrap(item: pytest.Item, tprof: Borrowing) -> None:
    """Make the test's ``benchmark`` fixture run its rounds under one profiler session."""
    funcargs: Mapping[str, Any] = getattr(item, "funcargs", {})
    fixture = funcargs.get("benchmark")
    if fixture is None or RESULT_KEY in item.stash:
        return
    if getattr(fixture, "disabled", False):
        tprof.not_profiled(
            item,
            "not profiled: pytest-benchmark is disabled for this test (--benchmark-disable, "
            "or under xdist, where pytest-benchmark turns itself off)",
        )
        return
    original = type(fixture)
    if not all(hasattr(original, name) for name in _HOOKS):
        return
    borrowed = tprof.borrowed_rounds(item)

    def profiled(fixture: Any, method: Any, args: Any, kwargs: Any) -> Any:
        with tprof.profiling_threads():
            try:
                value = method(fixture, *args, **kwargs)
            finally:
                borrowed.stop()
        _record(item, fixture, tprof, borrowed)
        return value

    fixture.__class__ = _profiling_class(original, borrowed, profiled)


def _profiling_class(original: type, borrowed: Any, profiled: Callable[..., Any]) -> type:
    """pytest-benchmark's fixture class with its rounds under ``borrowed``'s session: it opens
    after calibration, each kept round is one profiled round, and ``profiled`` runs the call."""

    class ProfilingBenchmark(original):  # type: ignore[misc, valid-type]
        def _make_stats(self, iterations: int) -> Any:
            # pytest-benchmark makes its statistics after calibrating and before any round
            # it keeps: the session opens here, so calibration runs unprofiled.
            stats = original._make_stats(self, iterations)  # type: ignore[attr-defined]
            update = stats.update

            def update_then_keep(duration: float) -> None:
                update(duration)
                borrowed.kept()

            stats.update = update_then_keep
            borrowed.start(iterations)
            return stats

        def _make_runner(self, fn: Callable[..., Any], args: Any, kwargs: Any) -> Any:
            runner = original._make_runner(self, fn, args, kwargs)  # type: ignore[attr-defined]

            def profiled_round(*a: Any, **k: Any) -> Any:
                with borrowed.round():
                    return runner(*a, **k)

            return profiled_round

        def __call__(self, *args: Any, **kwargs: Any) -> Any:
            return profiled(self, original.__call__, args, kwargs)

        def pedantic(self, *args: Any, **kwargs: Any) -> Any:
            return profiled(self, original.pedantic, args, kwargs)  # type: ignore[attr-defined]

    return ProfilingBenchmark


def _record(item: pytest.Item, fixture: Any, tprof: Borrowing, borrowed: Any) -> None:
    """Judge the profiled rounds; say in ``extra_info`` what tprof did to the benchmark."""
    info = getattr(fixture, "extra_info", None)
    info = info if isinstance(info, dict) else {}
    profiled = {"profiled_rounds": borrowed.kept_rounds, "iterations": borrowed.iterations}
    try:
        result = tprof.judge_borrowed(item, borrowed)
    except TprofError as exc:  # no torch op, or a profiler already open: not tprof's test
        info["tprof"] = {**profiled, "verdict": None, "reason": f"not profiled: {exc}"}
        return
    result = replace(result, benchmark=True)
    item.stash[RESULT_KEY] = result
    info["tprof"] = {**profiled, **extra_info(result)}
