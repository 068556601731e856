"""The compile gate: torch.compile's structure in a test, exactly (a new graph break, a
recompilation during the measured rounds), and the notes for what Dynamo logged while the
test ran (docs/design.md §9)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Final

import numpy as np

from tprof_engine.decide.gates.finding import NOTHING, Finding, Gate
from tprof_engine.decide.timing.sides import Sides
from tprof_engine.model.records import OpTable
from tprof_engine.model.verdicts import COMPILE, IMPROVED, REGRESSED, TestWord
from tprof_engine.reduce.compiled import COMPILE_OP, GRAPH_KEY

__all__ = ["GATE", "compile_finding", "compile_notes", "compiled_graphs", "graph_change"]
GRAPH_PREFIX = GRAPH_KEY.split("{")[0]  # a compiled graph's op name, without its number


def compiled_graphs(table: OpTable) -> tuple[int, int]:
    """Calls of compiled graphs per round, and compilations in the measured rounds."""
    graphs = sum(
        int(np.median(table.calls[i]))
        for i, name in enumerate(table.names)
        if name.startswith(GRAPH_PREFIX)
    )
    index = table.index()
    compiles = int(table.calls[index[COMPILE_OP]].sum()) if COMPILE_OP in index else 0
    return graphs, compiles


def graph_change(
    baseline: OpTable, current: OpTable, *, per_call: int = 1
) -> tuple[TestWord, str] | None:
    """torch.compile's structure, exactly: more compiled graphs per call of the body is a new
    graph break, a compilation during the measured rounds a recompilation (either regressed);
    fewer graphs per call is improved.  None when neither moved."""
    (b_graphs, _), (c_graphs, compiles) = compiled_graphs(baseline), compiled_graphs(current)
    b_graphs, c_graphs = b_graphs // per_call, c_graphs // per_call
    reasons = []
    if c_graphs > b_graphs:
        reasons.append(f"compiled graphs per call {b_graphs} → {c_graphs}: a new graph break")
    if compiles:
        # A recompiled forward and its lazily compiled backward are two compile ranges, or one
        # when a cache holds the backward: say that it happened, not how many ranges.
        reasons.append("recompiled during the measured rounds")
    if reasons:
        return REGRESSED, "compile: " + "; ".join(reasons)
    if c_graphs < b_graphs:
        fewer = f"compiled graphs per call {b_graphs} → {c_graphs}: fewer graph breaks"
        return IMPROVED, f"compile: {fewer}"
    return None


def compile_notes(
    before: tuple[Sequence[str], Sequence[str]], after: tuple[Sequence[str], Sequence[str]]
) -> list[str]:
    """Notes for what torch.compile logged while the test ran: its graph breaks (reason and
    the user's line torch gives) and its guard failures, counted exactly."""
    breaks = Counter(after[0][len(before[0]) :])
    notes = [f"graph break while compiling (×{n}): {text}" for text, n in breaks.items()]
    guards = list(after[1])[len(before[1]) :]
    if guards:
        first = guards[0].strip().splitlines()[0] if guards[0].strip() else "no reason given"
        notes.append(f"guard failures while profiling: {len(guards)} (first: {first})")
    return notes


def compile_finding(baseline: OpTable, current: OpTable, *, per_call: int = 1) -> Finding:
    """torch.compile's structure (a new graph break or a recompilation fails the test; fewer
    graph breaks read improved)."""
    change = graph_change(baseline, current, per_call=per_call)
    return NOTHING if change is None else GATE.said(*change)


def _compile(sides: Sides) -> Finding:
    return compile_finding(sides.base_tables[-1], sides.current_table, per_call=sides.per_call)


GATE: Final = Gate(kind=COMPILE, exact=True, find=_compile)
