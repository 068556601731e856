"""Which interval holds which: each event's parent and depth on its thread, in array passes.

torch's own stack walk (``profiler_util``) pushes a thread's events in start order and pops
every open event that ends before the next one ends.  That walk's parent of an event is the
nearest earlier event of the thread, in that order, whose end is not before the event's
(strictly after, for an event of zero length): the previous element at least as large, a
search this module makes with a table of running maxima instead of a Python loop per event.
Intervals that overlap only partially are therefore not nested, as in torch's walk.
"""

from __future__ import annotations

import numpy as np

from tprof_engine.model.arrays import IntArray


def nesting(thread: IntArray, start: IntArray, end: IntArray) -> tuple[IntArray, IntArray]:
    """Parent index (-1 for roots) and depth of each interval, nesting per thread."""
    n = start.shape[0]
    parent = np.full(n, -1, dtype=np.int64)
    depth = np.zeros(n, dtype=np.int64)
    if n == 0:
        return parent, depth
    order = np.lexsort((-end, start, thread))
    found = _previous_at_least(*_search_keys(thread[order], start[order], end[order]))
    parent[order] = np.where(found >= 0, order[np.maximum(found, 0)], -1)
    depth[order] = _depths(found)
    return parent, depth


def _search_keys(thread: IntArray, start: IntArray, end: IntArray) -> tuple[IntArray, IntArray]:
    """Sorted intervals' ends, each thread's lifted above every earlier thread's (so no search
    stops in another thread), and the key a holder must reach."""
    lane = np.cumsum(np.r_[True, thread[1:] != thread[:-1]]) - 1
    low = int(min(start.min(), end.min()))
    span = int(max(start.max(), end.max())) - low + 2
    key = (end - low) + lane * span
    return key, key + (start == end)


def _previous_at_least(key: IntArray, need: IntArray) -> IntArray:
    """For each position, the nearest earlier one whose key reaches its ``need``, or -1.

    ``maxima[k][i]`` is the largest key of the ``2**k`` positions ending at ``i``; from just
    before each position, whole blocks that fall short are skipped, largest first.
    """
    n = key.shape[0]
    maxima = [key]
    while (width := 1 << (len(maxima) - 1)) * 2 <= n:
        wider = maxima[-1].copy()
        wider[width:] = np.maximum(maxima[-1][width:], maxima[-1][:-width])
        maxima.append(wider)
    pos = np.arange(n, dtype=np.int64) - 1
    for level in range(len(maxima) - 1, -1, -1):
        size = 1 << level
        able = np.flatnonzero(pos - size + 1 >= 0)
        short = maxima[level][pos[able]] < need[able]
        pos[able[short]] -= size
    hit = np.flatnonzero(pos >= 0)
    pos[hit[key[pos[hit]] < need[hit]]] = -1
    return pos


def _depths(parent: IntArray) -> IntArray:
    """Each node's number of ancestors, one pass per level of the deepest chain."""
    depth = np.zeros(parent.shape[0], dtype=np.int64)
    above = parent.copy()
    live = np.flatnonzero(above >= 0)
    while live.size:
        depth[live] += 1
        above[live] = parent[above[live]]
        live = live[above[live] >= 0]
    return depth
