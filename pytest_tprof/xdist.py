"""Hooks that exist only with pytest-xdist: the controller collects workers' results."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class XdistHooks:
    """Registered only when xdist is installed; workers send builtin-only data."""

    def __init__(self, add_results: Callable[[list[dict[str, Any]]], None]) -> None:
        self.add_results = add_results

    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        output = getattr(node, "workeroutput", None) or {}
        self.add_results(output.get("tprof", []))
