"""The ``tprof`` section of the terminal summary."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from profiler import report as rpt
from profiler.compare import ERROR, REGRESSED

if TYPE_CHECKING:
    from pytest_tprof.plugin import TprofPlugin


def summary(tr: pytest.TerminalReporter, plugin: TprofPlugin) -> None:
    results = list(plugin.results.values())
    if not results and not plugin.messages:
        return
    tr.write_sep("=", "tprof")
    order = {REGRESSED: 0, ERROR: 1}
    for r in sorted(results, key=lambda r: (order.get(r.verdict.verdict, 2), r.nodeid)):
        bad = r.verdict.verdict in (REGRESSED, ERROR)
        tr.write_line(rpt.summary_line(r), red=bad, green=r.verdict.verdict == "unchanged")
    run = plugin.settings.run
    if results:
        tr.write_line(f"baselines: {plugin.runner.env_dir}")
        if run.trace_dir is not None:
            tr.write_line(f"traces: {run.trace_dir}")
    for msg in plugin.messages:
        tr.write_line(msg, yellow=True)
