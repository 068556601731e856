"""pytest-xdist: the controller collects workers' results; each worker takes its own GPU."""

from __future__ import annotations

import pickle
from collections.abc import Callable, MutableMapping
from typing import Any

from tprof_engine.model.environment import (
    VISIBLE_DEVICES,
    device_for_worker,
    nvml_gpu_count,
    sharing_warning,
    visible_devices,
)

WORKER_ID = "PYTEST_XDIST_WORKER"  # xdist sets it in a worker before pytest configures


class XdistHooks:
    """Registered only when xdist is installed; workers send builtin-only data."""

    def __init__(
        self,
        add_results: Callable[[list[dict[str, Any]]], None],
        random_states: MutableMapping[str, dict[str, Any]],
    ) -> None:
        self.add_results = add_results
        self.random_states = random_states  # where the serial re-run finds each test's

    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        output = getattr(node, "workeroutput", None) or {}
        self.add_results(output.get("tprof", []))
        for nodeid, state in (output.get("tprof-random") or {}).items():
            self.random_states[nodeid] = pickle.loads(state)


def assign_worker_gpu(
    environ: MutableMapping[str, str], count_gpus: Callable[[], int] = nvml_gpu_count
) -> str | None:
    """In an xdist worker, make its one GPU the only visible one; the entry chosen, or None.

    Must run before anything initialises CUDA in the worker: CUDA reads the variable once.
    """
    if not environ.get(WORKER_ID):
        return None
    device = device_for_worker(environ[WORKER_ID], visible_devices(environ, count_gpus))
    if device is not None:
        environ[VISIBLE_DEVICES] = device
    return device


def device_header(
    workers: int, environ: MutableMapping[str, str], count_gpus: Callable[[], int] = nvml_gpu_count
) -> list[str]:
    """The controller's header lines on how its workers' GPUs are assigned (none without GPUs)."""
    devices = visible_devices(environ, count_gpus)
    if workers <= 0 or not devices:
        return []
    warning = sharing_warning(workers, devices)
    if warning is not None:
        return [f"tprof: warning: {warning}"]
    plan = ", ".join(f"gw{w} → {device_for_worker(f'gw{w}', devices)}" for w in range(workers))
    return [f"tprof: one GPU per xdist worker ({VISIBLE_DEVICES}: {plan})"]
