"""Memory per op and per round from ``profile_memory`` events."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from tprof_engine.model.arrays import IntArray
from tprof_engine.model.device_tables import MemoryTable
from tprof_engine.model.records import KIND_MEMORY, EventArrays


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
