"""Memory per op and per round from ``profile_memory`` events (no torch).

An allocation belongs to the innermost op around it on its thread, as torch's own
``self_cpu_memory_usage`` counts it; a round's peak is the most it held above its start,
allocations and frees of every op (the drift probe's left out) in time order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from tprof_engine.records import KIND_MEMORY, EventArrays, IntArray, MemoryTable


def memory_rows(ev: EventArrays) -> IntArray:
    """The rows of ``ev`` that are allocations or frees with a size."""
    if ev.nbytes is None:
        return np.zeros(0, dtype=np.int64)
    return np.flatnonzero((ev.kind == KIND_MEMORY) & (ev.nbytes != 0))


def innermost(
    thread: IntArray,
    start: IntArray,
    end: IntArray,
    parent: IntArray,
    at_thread: IntArray,
    at: IntArray,
) -> IntArray:
    """The innermost interval (index, -1 for none) of the same thread holding each time.

    The intervals nest per thread with ``parent`` (from ``reduce.nesting``); the latest one
    starting at or before the time is climbed out of until one still runs then.
    """
    found = np.full(at.size, -1, dtype=np.int64)
    for t in np.unique(at_thread).tolist():
        mine = np.flatnonzero(thread == t)
        if mine.size == 0:
            continue
        mine = mine[np.argsort(start[mine], kind="stable")]
        wanted = np.flatnonzero(at_thread == t)
        pos = np.searchsorted(start[mine], at[wanted], side="right") - 1
        cand = np.where(pos >= 0, mine[np.maximum(pos, 0)], -1)
        while True:  # climb while the candidate ended before the time
            out = (cand >= 0) & (end[np.maximum(cand, 0)] < at[wanted])
            if not out.any():
                break
            cand[out] = parent[cand[out]]
        found[wanted] = cand
    return found


def memory_table(
    ev: EventArrays,
    rows: IntArray,
    op_idx: IntArray,
    round_idx: IntArray,
    in_round: IntArray,
    op_names: Sequence[str],
    n_rounds: int,
) -> MemoryTable:
    """Per-op allocations and per-round peaks of the memory events ``rows``.

    ``op_idx`` / ``round_idx``: each event's counted op (index into ``op_names``) and its round,
    -1 where no counted op holds it; ``in_round``: the round each event falls in by time,
    -1 outside the rounds and in the drift probe (the peak counts every op's memory).
    """
    nbytes = ev.nbytes[rows] if ev.nbytes is not None else np.zeros(rows.size, dtype=np.int64)
    alloc = (nbytes > 0) & (round_idx >= 0)
    used, op_of = np.unique(op_idx[alloc], return_inverse=True)
    cells = op_of * n_rounds + round_idx[alloc]
    size, shape = used.size * n_rounds, (used.size, n_rounds)
    summed = np.bincount(cells, weights=nbytes[alloc], minlength=size)
    return MemoryTable(
        ops=tuple(op_names[i] for i in used.tolist()),
        alloc_bytes=np.rint(summed).astype(np.int64).reshape(shape),
        allocs=np.bincount(cells, minlength=size).astype(np.int64).reshape(shape),
        peak_bytes=_peaks(ev.start_ns[rows], nbytes, in_round, n_rounds),
    )


def _peaks(
    time_ns: IntArray, nbytes: IntArray, in_round: IntArray, n_rounds: int
) -> npt.NDArray[np.int64]:
    peaks = np.zeros(n_rounds, dtype=np.int64)
    order = np.lexsort((time_ns, in_round))
    rounds, sizes = in_round[order], nbytes[order]
    bounds = np.searchsorted(rounds, np.arange(n_rounds + 1))
    for r in range(n_rounds):
        held = np.cumsum(sizes[bounds[r] : bounds[r + 1]])
        peaks[r] = max(0, int(held.max(initial=0)))
    return peaks


@dataclass(frozen=True, slots=True, kw_only=True)
class MemoryVerdict:
    """The memory gate: ``regressed``, ``improved`` or ``unchanged``, with its reasons, and
    how many ops allocate a different amount from round to round (reported, never gated)."""

    verdict: str
    reasons: tuple[str, ...]
    varying_ops: int


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
