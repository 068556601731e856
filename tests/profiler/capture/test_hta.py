"""A produced trace loads in Holistic Trace Analysis (skipped when HTA is not installed)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import torch

from tprof_engine.capture.session import capture
from tprof_engine.store.trace_gzip import write_gzipped

hta_analysis = pytest.importorskip(
    "hta.trace_analysis", reason="HolisticTraceAnalysis not installed"
)


# HTA's own pandas calls warn under newer pandas; those warnings are not ours to fix.
@pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::FutureWarning")
@pytest.mark.filterwarnings("ignore:.*inplace.*")
def test_a_trace_loads_in_hta_as_rank_0_with_its_rounds_as_iterations(tmp_path: Path) -> None:
    x = torch.randn(64, 64)
    capture(
        torch.mm,
        (x, x),
        rounds=3,
        warmup=1,
        trace_path=tmp_path / "t.pt.trace.json.gz",
        write_trace=write_gzipped,
    )
    logging.getLogger().setLevel(logging.ERROR)
    analysis = hta_analysis.TraceAnalysis(trace_dir=str(tmp_path))
    assert list(analysis.t.traces) == [0]
    df = analysis.t.get_trace(0)
    names = analysis.t.symbol_table.get_sym_table()
    steps = {names[i] for i in df["name"].unique() if names[i].startswith("ProfilerStep#")}
    # HTA sees the rounds as iterations (it may leave out the last one, as it does for any trace).
    assert (
        {f"ProfilerStep#{r}" for r in range(3)} <= steps <= {f"ProfilerStep#{r}" for r in range(4)}
    )
