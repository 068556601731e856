"""reduce.nesting against torch's stack walk, written out the slow way."""

from __future__ import annotations

import numpy as np
import pytest

from tprof_engine.reduce.nesting import nesting


def stack_walk(thread: np.ndarray, start: np.ndarray, end: np.ndarray) -> tuple[list, list]:
    """torch's walk: per thread in start order (longest first), pop what ends before."""
    parent, depth = [-1] * len(start), [0] * len(start)
    stack: list[int] = []
    current = None
    for i in np.lexsort((-end, start, thread)).tolist():
        if thread[i] != current:
            stack, current = [], thread[i]
        while stack and (start[i] >= end[stack[-1]] or end[i] > end[stack[-1]]):
            stack.pop()
        if stack:
            parent[i], depth[i] = stack[-1], len(stack)
        stack.append(i)
    return parent, depth


def deep_tree(rng: np.random.Generator, levels: int) -> tuple[list[int], list[int]]:
    """Properly nested intervals, ``levels`` deep, siblings side by side."""
    starts, ends = [], []

    def grow(lo: int, hi: int, level: int) -> None:
        starts.append(lo)
        ends.append(hi)
        if level == levels or hi - lo < 4:
            return
        cut = sorted(rng.choice(np.arange(lo + 1, hi), size=2, replace=False).tolist())
        grow(cut[0], cut[1], level + 1)
        if rng.random() < 0.5:
            grow(cut[1], hi, level + 1)

    grow(0, 10**9, 0)
    return starts, ends


@pytest.mark.parametrize("seed", range(40))
def test_the_parents_and_depths_are_the_stack_walks_with_ties_zero_lengths_and_overlaps(
    seed: int,
) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 120))
    thread = rng.integers(0, 4, n) * 7 - 3
    start = rng.integers(-50, 40, n)
    end = start + rng.integers(0, 15, n)
    parent, depth = nesting(thread, start, end)
    assert (parent.tolist(), depth.tolist()) == stack_walk(thread, start, end)


def test_a_deep_tree_on_two_threads_is_the_stack_walks() -> None:
    rng = np.random.default_rng(7)
    s1, e1 = deep_tree(rng, 40)
    s2, e2 = deep_tree(rng, 25)
    start, end = np.array(s1 + s2), np.array(e1 + e2)
    thread = np.array([5] * len(s1) + [2] * len(s2))
    shuffled = rng.permutation(len(start))
    parent, depth = nesting(thread[shuffled], start[shuffled], end[shuffled])
    expected = stack_walk(thread[shuffled], start[shuffled], end[shuffled])
    assert (parent.tolist(), depth.tolist()) == expected
    assert depth.max() >= 20


def test_a_small_case_by_hand() -> None:
    # outer [0, 10) holds a [1, 4) (which holds a zero-length mark at 2) and b [4, 9);
    # c [8, 12) only overlaps b and outer, so it is nobody's child; d is on another thread.
    start = np.array([0, 1, 2, 4, 8, 1])
    end = np.array([10, 4, 2, 9, 12, 3])
    thread = np.array([1, 1, 1, 1, 1, 2])
    parent, depth = nesting(thread, start, end)
    assert parent.tolist() == [-1, 0, 1, 0, -1, -1]
    assert depth.tolist() == [0, 1, 2, 1, 0, 0]


def test_no_intervals() -> None:
    empty = np.zeros(0, dtype=np.int64)
    parent, depth = nesting(empty, empty, empty)
    assert parent.size == depth.size == 0
