"""The exact memory gate: allocations per op and the round's peak, which don't drift
(``--tprof-collect=memory``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import numpy as np

from tprof_engine.decide.gates.finding import NOTHING, Finding, Gate
from tprof_engine.decide.timing.rule import Rule
from tprof_engine.model.arrays import IntArray
from tprof_engine.model.device_tables import MemoryTable
from tprof_engine.model.memory_verdict import MemoryVerdict
from tprof_engine.model.records import OpTable
from tprof_engine.model.verdicts import IMPROVED, MEMORY, REGRESSED, UNCHANGED, TestWord


def judge_memory(
    baseline: Sequence[MemoryTable], current: MemoryTable, *, floor: float
) -> MemoryVerdict:
    """Allocations and peaks against the baseline, exactly, where they are deterministic.

    An op (or the round's peak) is gated only when it is the same in every baseline round and
    every current round; then more than ``floor`` of the baseline round's allocations (of its
    peak) more is a regression, as much less an improvement.
    """
    rounds = sum(int(b.peak_bytes.size) for b in baseline)
    base_total = float(np.median(np.concatenate([b.alloc_bytes.sum(axis=0) for b in baseline])))
    worse: list[str] = []
    better: list[str] = []
    varying = 0
    for op in sorted({*current.ops, *(o for b in baseline for o in b.ops)}):
        base = np.concatenate([_op_rounds(b, op) for b in baseline])
        base = np.pad(base, (0, rounds - base.size))
        now = _op_rounds(current, op, int(current.peak_bytes.size))
        if not (_constant(base) and _constant(now)):
            varying += 1
            continue
        _sort(f"{op} allocates", int(base[0]), int(now[0]), floor * base_total, worse, better)
    peaks = np.concatenate([b.peak_bytes for b in baseline])
    if _constant(peaks) and _constant(current.peak_bytes):
        base_peak = int(peaks[0])
        _sort("round peak", base_peak, int(current.peak_bytes[0]), floor * base_peak, worse, better)
    word = "regressed" if worse else "improved" if better else "unchanged"
    return MemoryVerdict(verdict=word, reasons=tuple(worse or better), varying_ops=varying)


def _op_rounds(table: MemoryTable, op: str, rounds: int | None = None) -> IntArray:
    if op in table.ops:
        row: IntArray = table.alloc_bytes[table.ops.index(op)]
        return row
    return np.zeros(0 if rounds is None else rounds, dtype=np.int64)


def _constant(values: IntArray) -> bool:
    return bool(values.size) and bool((values == values[0]).all())


def _sort(
    what: str, base: int, now: int, floor: float, worse: list[str], better: list[str]
) -> None:
    """Put a deterministic figure's change beyond ``floor`` bytes into ``worse`` or ``better``."""
    if abs(now - base) <= floor:
        return
    line = f"{what} {base:,} → {now:,} B per round ({now - base:+,} B)"
    (worse if now > base else better).append(line)


def memory_finding(baseline: Sequence[OpTable], current: OpTable, rule: Rule) -> Finding:
    """The memory gate (allocations per op and the round's peak, exactly) when the current
    run collected memory."""
    if current.memory is None:
        return NOTHING
    tables = [b.memory for b in baseline if b.memory is not None]
    if len(tables) < len(baseline):
        return Finding(notes=("no memory baseline: re-record with --tprof-save",))
    gate = judge_memory(tables, current.memory, floor=rule.work_floor)
    notes: tuple[str, ...] = ()
    if gate.varying_ops:
        notes = (
            f"memory: {gate.varying_ops} ops allocate differently from round to round "
            "(reported, not gated)",
        )
    if gate.verdict == UNCHANGED:
        return Finding(notes=notes)
    word: TestWord = REGRESSED if gate.verdict == REGRESSED else IMPROVED
    return GATE.said(word, "MEMORY: " + "; ".join(gate.reasons), notes)


GATE: Final = Gate(
    kind=MEMORY,
    exact=True,
    find=lambda s: memory_finding(s.base_tables, s.current_table, s.rule),
)
