"""pytest-benchmark interplay: a ``benchmark``-using test also gets an op-level profile.

After pytest-benchmark has timed the function its own way, the same function is profiled for
tprof's rounds (outside pytest-benchmark's timing), compared like any tprof test, and a per-op
summary is put in the benchmark's ``extra_info["tprof"]`` so ``--benchmark-json`` carries it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

import pytest

from profiler.results import ProfiledTest
from profiler.runner import Body
from pytest_tprof.fixture import RESULT_KEY, Profile


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


def wrap(item: pytest.Item, profile: Profile) -> None:
    """Make the test's ``benchmark`` fixture profile its function after benchmarking it."""
    funcargs: Mapping[str, Any] = getattr(item, "funcargs", {})
    fixture = funcargs.get("benchmark")
    if fixture is None or RESULT_KEY in item.stash or getattr(fixture, "disabled", False):
        return
    original = type(fixture)

    def profile_after(
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: Mapping[str, Any],
        setup: Callable[[], Any] | None,
    ) -> None:
        body = Body(fn=fn, args=args, kwargs=kwargs, setup=setup)
        _, result = profile(item, body, rounds=None, warmup=None)
        result = replace(result, benchmark=True)
        item.stash[RESULT_KEY] = result
        info = getattr(fixture, "extra_info", None)
        if isinstance(info, dict):
            info["tprof"] = extra_info(result)

    class ProfilingBenchmark(original):  # type: ignore[misc, valid-type]
        def __call__(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
            value = original.__call__(self, fn, *args, **kwargs)
            profile_after(fn, args, kwargs, None)
            return value

        def pedantic(
            self,
            target: Callable[..., Any],
            args: tuple[Any, ...] = (),
            kwargs: Mapping[str, Any] | None = None,
            setup: Callable[[], Any] | None = None,
            **rest: Any,
        ) -> Any:
            value = original.pedantic(self, target, args=args, kwargs=kwargs, setup=setup, **rest)
            profile_after(target, tuple(args), dict(kwargs or {}), setup)
            return value

    fixture.__class__ = ProfilingBenchmark
