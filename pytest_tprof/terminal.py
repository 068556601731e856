"""The ``tprof`` section of the terminal summary."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from tprof_engine.api import Outcome, summary_line
from tprof_engine.model.results import ProfiledTest
from tprof_engine.model.verdicts import NOT_SAVED, UNCHANGED, verdict_rank


def summary(
    tr: pytest.TerminalReporter,
    results: Sequence[tuple[ProfiledTest, Outcome]],
    messages: Sequence[str],
    *,
    baseline_dir: Path | None,
    trace_dir: Path | None,
) -> None:
    """Each profiled test's line (with its outcome), most urgent first, then where files went
    and messages."""
    if not results and not messages:
        return
    tr.write_sep("=", "tprof")
    for r, said in sorted(results, key=lambda o: (verdict_rank(o[1].word), o[0].nodeid)):
        word = said.word
        tr.write_line(
            summary_line(r), red=said.fails, green=word == UNCHANGED, yellow=word == NOT_SAVED
        )
    if results and baseline_dir is not None:
        tr.write_line(f"baselines: {baseline_dir}")
    if results and trace_dir is not None:
        tr.write_line(f"traces: {trace_dir}")
    for msg in messages:
        tr.write_line(msg, yellow=True)


def coverage_line(tracer: str | None, *, pytest_cov: bool, save: bool) -> str | None:
    """The header's line when coverage (or another line tracer) slows every traced line."""
    if pytest_cov:
        who = "coverage (pytest-cov) traces every line"
    elif tracer is not None:
        who = ("coverage" if tracer.startswith("coverage") else "a line tracer") + " is active"
    else:
        return None
    if save:
        return f"tprof: {who}: --tprof-save records no baseline under it; save without coverage"
    return f"tprof: {who}: calls and work gate as usual; timings are reported, not gated"
