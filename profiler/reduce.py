"""Events → per-op, per-round table (the hot path: arrays, not per-event objects).

Self CPU time follows ``torch.autograd.profiler_util``: an event's self time is its duration
minus the durations of its direct children, where children are the CPU events of the same
thread whose interval lies inside it.  Device time is the duration of the kernels (and
memcpy / memset activities) linked by correlation id to the CPU op that launched them; an op's
total device time adds its descendants'.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from profiler.records import (
    KIND_ANNOTATION,
    KIND_ASYNC,
    KIND_DEVICE,
    KIND_OP,
    EventArrays,
    FloatArray,
    IntArray,
    OpTable,
)

# Events torch's own post-processing drops before it builds key_averages().
FILTERED_NAMES = frozenset(
    {
        "[memory]",
        "[OutOfMemory]",
        "profiler::_record_function_enter",
        "profiler::_record_function_enter_new",
        "profiler::_record_function_exit",
        "aten::is_leaf",
        "aten::output_nr",
        "aten::_version",
    }
)
ROUND_PREFIX = "ProfilerStep#"  # torch.profiler's own step annotation: trace tools see iterations
PROBE_PREFIX = "tprof::probe#"


def _names_starting(names: Sequence[str], prefix: str) -> npt.NDArray[np.bool_]:
    return np.fromiter((n.startswith(prefix) for n in names), dtype=bool, count=len(names))


def _intervals(ev: EventArrays, mask: np.ndarray) -> tuple[IntArray, IntArray]:
    idx = np.flatnonzero(mask)
    order = np.argsort(ev.start_ns[idx], kind="stable")
    idx = idx[order]
    return ev.start_ns[idx], ev.end_ns[idx]


def _locate(starts: IntArray, ends: IntArray, t: IntArray) -> IntArray:
    """Index of the interval holding each time in ``t``, or -1."""
    if starts.size == 0:
        return np.full(t.shape, -1, dtype=np.int64)
    pos = np.searchsorted(starts, t, side="right") - 1
    ok = pos >= 0
    ok[ok] &= t[ok] < ends[pos[ok]]
    return np.where(ok, pos, -1)


def nesting(thread: IntArray, start: IntArray, end: IntArray) -> tuple[IntArray, IntArray]:
    """Parent index (-1 for roots) and depth of each interval, nesting per thread.

    Intervals that overlap only partially are not nested, as in torch's own stack walk.
    """
    n = start.shape[0]
    parent = np.full(n, -1, dtype=np.int64)
    depth = np.zeros(n, dtype=np.int64)
    if n == 0:
        return parent, depth
    order = np.lexsort((-end, start, thread))
    th = thread[order].tolist()
    st = start[order].tolist()
    en = end[order].tolist()
    idx = order.tolist()
    par = [-1] * n
    dep = [0] * n
    stack_i: list[int] = []
    stack_end: list[int] = []
    last_thread = None
    for k in range(n):
        t = th[k]
        if t != last_thread:
            stack_i.clear()
            stack_end.clear()
            last_thread = t
        s = st[k]
        e = en[k]
        while stack_end and (s >= stack_end[-1] or e > stack_end[-1]):
            stack_end.pop()
            stack_i.pop()
        i = idx[k]
        if stack_i:
            par[i] = stack_i[-1]
            dep[i] = len(stack_i)
        stack_i.append(i)
        stack_end.append(e)
    parent[:] = par
    depth[:] = dep
    return parent, depth


def reduce_events(
    ev: EventArrays,
    *,
    wall_us: Sequence[float] | FloatArray | None = None,
    meta: Mapping[str, Any] | None = None,
) -> OpTable:
    """Reduce profiler events to an :class:`OpTable` with one column per measured round.

    Measured rounds are the ``ProfilerStep#N`` annotations, in time order; events outside
    them (set-up, profiler bookkeeping) are not counted, events inside a
    ``tprof::probe#N`` annotation are summed into the round's probe time instead of ops.
    A trace without step annotations is one round spanning every event.
    """
    names = ev.names
    is_round_name = _names_starting(names, ROUND_PREFIX)
    is_probe_name = _names_starting(names, PROBE_PREFIX)
    is_marker_name = is_round_name | is_probe_name

    cpu = (ev.kind == KIND_OP) | (ev.kind == KIND_ANNOTATION) | (ev.kind == KIND_ASYNC)
    annotation = ev.kind == KIND_ANNOTATION
    round_starts, round_ends = _intervals(ev, annotation & is_round_name[ev.name_idx])
    probe_starts, probe_ends = _intervals(ev, annotation & is_probe_name[ev.name_idx])
    whole_trace = round_starts.size == 0
    if whole_trace:
        round_starts = np.asarray([ev.start_ns.min() if len(ev) else 0], dtype=np.int64)
        round_ends = np.asarray([ev.end_ns.max() + 1 if len(ev) else 1], dtype=np.int64)
    n_rounds = int(round_starts.size)

    cpu_idx = np.flatnonzero(cpu)
    c_start = ev.start_ns[cpu_idx]
    c_end = ev.end_ns[cpu_idx]
    c_dur = (c_end - c_start).astype(np.float64)
    # Async ops (torch: start and end threads differ) nest with nothing and have no self time.
    c_async = ev.kind[cpu_idx] == KIND_ASYNC
    c_thread = np.where(c_async, -1 - np.arange(cpu_idx.size), ev.thread[cpu_idx])
    parent, depth = nesting(c_thread, c_start, c_end)
    has_parent = parent >= 0
    child_sum = np.bincount(
        parent[has_parent], weights=c_dur[has_parent], minlength=c_dur.size
    ).astype(np.float64)
    self_cpu = np.where(c_async, 0.0, c_dur - child_sum)

    # Device time: kernels → launching CPU op by correlation id.
    dev_idx = np.flatnonzero(ev.kind == KIND_DEVICE)
    has_device = dev_idx.size > 0
    self_dev = np.zeros(cpu_idx.size)
    total_dev = self_dev
    if has_device:
        c_corr = ev.corr[cpu_idx]
        corr_order = np.argsort(c_corr, kind="stable")
        sorted_corr = c_corr[corr_order]
        links = ev.link[dev_idx]
        pos = np.searchsorted(sorted_corr, links)
        pos_ok = pos < sorted_corr.size
        pos_ok[pos_ok] &= sorted_corr[pos[pos_ok]] == links[pos_ok]
        pos_ok &= links > 0
        owner = corr_order[pos[pos_ok]]
        k_dur = (ev.end_ns[dev_idx] - ev.start_ns[dev_idx]).astype(np.float64)[pos_ok]
        self_dev = np.bincount(owner, weights=k_dur, minlength=cpu_idx.size).astype(np.float64)
        total_dev = self_dev.copy()
        for d in range(int(depth.max(initial=0)), 0, -1):
            at = np.flatnonzero((depth == d) & has_parent)
            np.add.at(total_dev, parent[at], total_dev[at])

    c_name = ev.name_idx[cpu_idx]
    # torch merges an event into its parent when the parent has the same name and no other
    # child (EventList._remove_dup_nodes): the parent keeps the time, the child is not counted.
    n_children = np.bincount(parent[has_parent], minlength=c_dur.size)
    dup = np.zeros(c_dur.size, dtype=bool)
    dup[has_parent] = (c_name[parent[has_parent]] == c_name[has_parent]) & (
        n_children[parent[has_parent]] == 1
    )
    if dup.any():
        owner_of = np.arange(c_dur.size)
        owner_of[dup] = parent[dup]
        while True:  # chains of merges end at the first ancestor that is kept
            nxt = owner_of[owner_of]
            if np.array_equal(nxt, owner_of):
                break
            owner_of = nxt
        d_idx = np.flatnonzero(dup)
        self_cpu = self_cpu.copy()
        np.add.at(self_cpu, owner_of[d_idx], self_cpu[d_idx])
        if has_device:
            self_dev = self_dev.copy()
            np.add.at(self_dev, owner_of[d_idx], self_dev[d_idx])

    c_round = _locate(round_starts, round_ends, c_start)
    in_probe = _locate(probe_starts, probe_ends, c_start) >= 0
    marker = is_marker_name[c_name]
    counted = (c_round >= 0) & ~marker & ~in_probe & ~dup
    probe_ev = (c_round >= 0) & in_probe & ~marker & ~dup

    probe_cpu = np.bincount(c_round[probe_ev], weights=self_cpu[probe_ev], minlength=n_rounds)
    probe_dev = np.bincount(c_round[probe_ev], weights=self_dev[probe_ev], minlength=n_rounds)

    used, op_of = np.unique(c_name[counted], return_inverse=True)
    # Ops in name order, as the fallback and the trace reader give them.
    by_name = np.argsort(np.asarray([names[i] for i in used.tolist()], dtype=object), kind="stable")
    rank = np.empty_like(by_name)
    rank[by_name] = np.arange(by_name.size)
    op_of = rank[op_of]
    used_names = used[by_name]
    n_ops = used_names.size
    flat = op_of * n_rounds + c_round[counted]
    size = n_ops * n_rounds

    def table(weights: FloatArray | None) -> Any:
        out = np.bincount(flat, weights=weights, minlength=size)
        return out.reshape(n_ops, n_rounds)

    if wall_us is None:
        wall = (round_ends - round_starts).astype(np.float64) / 1000.0
    else:
        wall = np.asarray(wall_us, dtype=np.float64)
        if wall.shape != (n_rounds,):
            raise ValueError(
                f"'wall_us' must have one value per round ({n_rounds}), got {wall.shape}"
            )
    info = dict(meta or {})
    info.setdefault("events", len(ev))
    info["whole_trace_as_round"] = whole_trace
    return OpTable(
        names=tuple(names[i] for i in used_names.tolist()),
        calls=table(None).astype(np.int64),
        self_cpu_us=table(self_cpu[counted]) / 1000.0,
        total_cpu_us=table(c_dur[counted]) / 1000.0,
        self_device_us=table(self_dev[counted]) / 1000.0,
        total_device_us=table(total_dev[counted]) / 1000.0,
        wall_us=wall,
        probe_cpu_us=probe_cpu / 1000.0,
        probe_device_us=probe_dev / 1000.0,
        has_device=bool(has_device),
        meta=info,
    )


def drop_leading_rounds(table: OpTable, count: int) -> OpTable:
    """The same table without its first ``count`` rounds (extra warm-up found after capture)."""
    if count <= 0:
        return table
    keep = slice(count, None)
    return OpTable(
        names=table.names,
        calls=table.calls[:, keep],
        self_cpu_us=table.self_cpu_us[:, keep],
        total_cpu_us=table.total_cpu_us[:, keep],
        self_device_us=table.self_device_us[:, keep],
        total_device_us=table.total_device_us[:, keep],
        wall_us=table.wall_us[keep],
        probe_cpu_us=table.probe_cpu_us[keep],
        probe_device_us=table.probe_device_us[keep],
        has_device=table.has_device,
        meta=table.meta,
    )
