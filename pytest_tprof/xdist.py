"""Hooks that exist only with pytest-xdist: the controller collects workers' results."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pytest_tprof.plugin import TprofPlugin


class XdistHooks:
    """Registered only when xdist is installed; workers send builtin-only data."""

    def __init__(self, plugin: TprofPlugin) -> None:
        self.plugin = plugin

    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        output = getattr(node, "workeroutput", None) or {}
        self.plugin.add_results(output.get("tprof", []))
