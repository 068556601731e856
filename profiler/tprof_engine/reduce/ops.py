"""Events → per-op, per-round table (the hot path: arrays, not per-event objects).

Self CPU time follows ``torch.autograd.profiler_util``: an event's self time is its duration
minus the durations of its direct children, where children are the CPU events of the same
thread whose interval lies inside it.  Device time is the duration of the kernels (and
memcpy / memset activities) linked by correlation id to the CPU op that launched them; an op's
total device time adds its descendants'.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from tprof_engine.model.arrays import FloatArray, IntArray
from tprof_engine.model.device_tables import DeviceTable, MemoryTable
from tprof_engine.model.records import (
    KIND_ANNOTATION,
    KIND_ASYNC,
    KIND_DEVICE,
    KIND_OP,
    KIND_SYNC,
    EventArrays,
    OpTable,
)
from tprof_engine.reduce.compiled import compile_time, with_compiles, with_stable_names
from tprof_engine.reduce.device import device_table
from tprof_engine.reduce.memory import innermost, memory_rows, memory_table
from tprof_engine.reduce.nesting import nesting

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
# The round's closing device synchronize: the plugin's own wait for the body's kernels, in no
# family (the round's wall time still includes it).
SYNC_PREFIX = "tprof::sync#"
# tprof ab's unmeasured call of the body before a round that follows the peer's rounds
# (pairing.opens_turn): outside every round, so counted nowhere.
REWARM_PREFIX = "tprof::rewarm#"


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
    ev = with_stable_names(ev)
    p = _placed(ev)
    op_names, cells = _op_cells(p.names, p.cpu_names[p.counted], p.c_round[p.counted], p.n_rounds)
    shape = (len(op_names), p.n_rounds)
    cpu, counted = p.cpu, p.counted
    gaps = _gaps_before(cpu, counted, p.c_round, p.is_round_name, p.rounds)
    info = {"events": len(ev), **(meta or {})}
    info.update(whole_trace_as_round=p.rounds.whole_trace, parents=_op_parents(ev, p))

    def per_op(weights: Any) -> Any:  # ns summed per op and round, in µs
        return _summed(cells, weights[counted], shape) / 1000.0

    return OpTable(
        names=op_names,
        calls=_summed(cells, None, shape).astype(np.int64),
        self_cpu_us=per_op(p.self_cpu),
        total_cpu_us=per_op(cpu.dur),
        self_device_us=per_op(p.self_dev),
        total_device_us=per_op(p.total_dev),
        wall_us=_wall_us(wall_us, p.rounds),
        host_before_us=per_op(gaps),
        probe_cpu_us=p.probe_cpu / 1000.0,
        probe_device_us=p.probe_dev / 1000.0,
        has_device=p.has_device,
        meta=info,
        device=_device(ev, p),
        memory=_memory(ev, p),
        scopes=_scopes(ev, p),
    )


def _scopes(ev: EventArrays, p: _Placed) -> frozenset[str]:
    """The ops whose counted events are all user annotations (``record_function`` scopes);
    a compilation's row (``tprof::compile``, added after the trace's names) is none."""
    counted = np.flatnonzero(p.counted)
    annotation = ev.kind[p.cpu.idx[counted]] == KIND_ANNOTATION
    names = p.cpu_names[counted]
    others = set(np.unique(names[~annotation]).tolist())
    found = np.unique(names[annotation]).tolist()
    return frozenset(p.names[i] for i in found if i not in others and i < len(ev.names))


def _device(ev: EventArrays, p: _Placed) -> DeviceTable | None:
    """The device table: each device event goes to the op that kept its launching op's time."""
    if not p.has_device:
        return None
    owner = np.where(p.dev_owner >= 0, p.kept_as[np.maximum(p.dev_owner, 0)], -1)
    dev_round = np.where((owner >= 0) & p.counted[owner], p.c_round[owner], -1)
    return device_table(ev, p.dev_rows, p.cpu_names[owner], dev_round, p.names, p.n_rounds)


class _Placed(NamedTuple):
    """Each CPU event placed: in which round, whether it counts for its op, its self times;
    the device events' owners; the rounds' probe times."""

    rounds: _Rounds
    n_rounds: int
    is_round_name: Any
    cpu: _CpuEvents
    dev_rows: IntArray
    dev_owner: IntArray
    has_device: bool
    self_cpu: Any
    self_dev: Any
    total_dev: Any
    kept_as: IntArray
    c_round: IntArray
    counted: Any
    probe_cpu: Any
    probe_dev: Any
    names: tuple[str, ...]  # the op names, tprof::compile added when a round compiled
    cpu_names: IntArray  # each CPU event's index into names


def _placed(ev: EventArrays) -> _Placed:
    is_round_name = _names_starting(ev.names, ROUND_PREFIX)
    is_probe_name = _names_starting(ev.names, PROBE_PREFIX)
    is_sync_name = _names_starting(ev.names, SYNC_PREFIX)
    rounds = _rounds(ev, is_round_name, is_probe_name, is_sync_name)
    n_rounds = int(rounds.starts.size)
    cpu = _cpu_events(ev)
    dev_rows = np.flatnonzero((ev.kind == KIND_DEVICE) | (ev.kind == KIND_SYNC))
    dev_owner = _owners(ev, cpu, dev_rows)
    self_dev, total_dev, has_device = _device_times(ev, cpu, dev_rows, dev_owner)
    dup, self_cpu, self_dev, kept_as = _merge_duplicates(cpu, self_dev, has_device)
    compiling, compile_root = compile_time(ev.names, cpu)
    c_round = _locate(rounds.starts, rounds.ends, cpu.start)
    in_probe = _locate(rounds.probe_starts, rounds.probe_ends, cpu.start) >= 0
    in_sync = _locate(rounds.sync_starts, rounds.sync_ends, cpu.start) >= 0
    marker = (is_round_name | is_probe_name | is_sync_name)[cpu.name]
    counted = (c_round >= 0) & ~marker & ~in_probe & ~in_sync & ~dup & ~compiling
    probe = (c_round >= 0) & in_probe & ~marker & ~dup
    probe_cpu, probe_dev = _probe_times(c_round, probe, self_cpu, self_dev, n_rounds)
    names, cpu_names, counted, self_cpu = with_compiles(
        ev.names, cpu, compile_root, counted, c_round, self_cpu
    )
    return _Placed(
        rounds=rounds,
        n_rounds=n_rounds,
        is_round_name=is_round_name,
        cpu=cpu,
        dev_rows=dev_rows,
        dev_owner=dev_owner,
        has_device=has_device,
        self_cpu=self_cpu,
        self_dev=self_dev,
        total_dev=total_dev,
        kept_as=kept_as,
        c_round=c_round,
        counted=counted,
        probe_cpu=probe_cpu,
        probe_dev=probe_dev,
        names=names,
        cpu_names=cpu_names,
    )


def _op_parents(ev: EventArrays, p: _Placed) -> dict[str, str]:
    """The op each op's counted events ran directly inside, where one op held more than half of
    them: how a kernel's op (``aten::mkldnn_convolution``) is found under the op the work
    census names (``aten::convolution``)."""
    cpu = p.cpu
    child = np.flatnonzero(p.counted & cpu.has_parent)
    parent = p.kept_as[cpu.parent[child]]
    is_op = (ev.kind[cpu.idx[parent]] == KIND_OP) & p.counted[parent]
    kid, holder = p.cpu_names[child[is_op]], p.cpu_names[parent[is_op]]
    if kid.size == 0:
        return {}
    n = len(p.names)
    pairs, counts = np.unique(kid * n + holder, return_counts=True)
    kid, holder = pairs // n, pairs % n
    order = np.lexsort((-counts, kid))  # per op, its most frequent holder first
    first = order[np.r_[True, kid[order][1:] != kid[order][:-1]]]
    held = np.bincount(kid, weights=counts, minlength=n)
    first = first[(2 * counts[first] > held[kid[first]]) & (kid[first] != holder[first])]
    held_by = zip(kid[first].tolist(), holder[first].tolist(), strict=True)
    return {p.names[k]: p.names[h] for k, h in held_by}


def _probe_times(
    c_round: IntArray, at: Any, self_cpu: Any, self_dev: Any, n_rounds: int
) -> tuple[Any, Any]:
    """Each round's drift-probe CPU and device ns: the self times of its probe's events."""
    return (
        np.bincount(c_round[at], weights=self_cpu[at], minlength=n_rounds),
        np.bincount(c_round[at], weights=self_dev[at], minlength=n_rounds),
    )


def _memory(ev: EventArrays, p: _Placed) -> MemoryTable | None:
    """The memory table: each allocation goes to the counted op that keeps its op's time
    (None: the trace records no allocation)."""
    rows = memory_rows(ev)
    if not rows.size:
        return None
    cpu, rounds, at = p.cpu, p.rounds, ev.start_ns[rows]
    owner = innermost(
        ev.thread[cpu.idx], cpu.start, ev.end_ns[cpu.idx], cpu.parent, ev.thread[rows], at
    )
    owner = np.where(owner >= 0, p.kept_as[np.maximum(owner, 0)], -1)
    own_round = np.where((owner >= 0) & p.counted[np.maximum(owner, 0)], p.c_round[owner], -1)
    in_round = _locate(rounds.starts, rounds.ends, at)
    in_round[_locate(rounds.probe_starts, rounds.probe_ends, at) >= 0] = -1
    op_idx = p.cpu_names[np.maximum(owner, 0)]
    return memory_table(ev, rows, op_idx, own_round, in_round, p.names, int(rounds.starts.size))


class _Rounds(NamedTuple):
    """Measured rounds and probe runs as time-ordered intervals (ns)."""

    starts: IntArray
    ends: IntArray
    probe_starts: IntArray
    probe_ends: IntArray
    sync_starts: IntArray  # the rounds' closing synchronizes (the plugin's own)
    sync_ends: IntArray
    whole_trace: bool  # no step annotations: one round spans every event


def _rounds(
    ev: EventArrays,
    is_round_name: npt.NDArray[np.bool_],
    is_probe_name: npt.NDArray[np.bool_],
    is_sync_name: npt.NDArray[np.bool_],
) -> _Rounds:
    annotation = ev.kind == KIND_ANNOTATION
    starts, ends = _intervals(ev, annotation & is_round_name[ev.name_idx])
    probe_starts, probe_ends = _intervals(ev, annotation & is_probe_name[ev.name_idx])
    sync_starts, sync_ends = _intervals(ev, annotation & is_sync_name[ev.name_idx])
    whole_trace = starts.size == 0
    if whole_trace:
        starts = np.asarray([ev.start_ns.min() if len(ev) else 0], dtype=np.int64)
        ends = np.asarray([ev.end_ns.max() + 1 if len(ev) else 1], dtype=np.int64)
    return _Rounds(
        starts, ends, probe_starts, probe_ends, sync_starts, sync_ends, bool(whole_trace)
    )


class _CpuEvents(NamedTuple):
    """The CPU-side events (ops, annotations, async ops), nested per thread; times in ns."""

    idx: IntArray  # their rows in the EventArrays
    start: IntArray
    dur: FloatArray
    name: IntArray
    parent: IntArray  # index into these events, -1 for roots
    depth: IntArray
    has_parent: npt.NDArray[np.bool_]
    self_ns: FloatArray  # duration less the direct children's (0 for async ops)


def _cpu_events(ev: EventArrays) -> _CpuEvents:
    cpu = (ev.kind == KIND_OP) | (ev.kind == KIND_ANNOTATION) | (ev.kind == KIND_ASYNC)
    idx = np.flatnonzero(cpu)
    start = ev.start_ns[idx]
    end = ev.end_ns[idx]
    dur = (end - start).astype(np.float64)
    # Async ops (torch: start and end threads differ) nest with nothing and have no self time.
    is_async = ev.kind[idx] == KIND_ASYNC
    thread = np.where(is_async, -1 - np.arange(idx.size), ev.thread[idx])
    parent, depth = nesting(thread, start, end)
    has_parent = parent >= 0
    child_sum = np.bincount(parent[has_parent], weights=dur[has_parent], minlength=dur.size).astype(
        np.float64
    )
    self_ns = np.where(is_async, 0.0, dur - child_sum)
    return _CpuEvents(idx, start, dur, ev.name_idx[idx], parent, depth, has_parent, self_ns)


def _owners(ev: EventArrays, cpu: _CpuEvents, rows: IntArray) -> IntArray:
    """The CPU event (index into ``cpu``) each event of ``rows`` links to, or -1."""
    owner = np.full(rows.size, -1, dtype=np.int64)
    if rows.size == 0:
        return owner
    c_corr = ev.corr[cpu.idx]
    corr_order = np.argsort(c_corr, kind="stable")
    sorted_corr = c_corr[corr_order]
    links = ev.link[rows]
    pos = np.searchsorted(sorted_corr, links)
    ok = pos < sorted_corr.size
    ok[ok] &= sorted_corr[pos[ok]] == links[ok]
    ok &= links > 0
    owner[ok] = corr_order[pos[ok]]
    return owner


def _device_times(
    ev: EventArrays, cpu: _CpuEvents, rows: IntArray, owner: IntArray
) -> tuple[FloatArray, FloatArray, bool]:
    """Self and total device ns of each CPU event, and whether there is device work at all.

    Kernels, copies and fills (``rows`` with their ``owner``, from :func:`_owners`) go to the
    CPU op they link to; syncs take no device time.  An op's total adds its descendants'.
    """
    self_dev = np.zeros(cpu.idx.size)
    if rows.size == 0:
        return self_dev, self_dev, False
    timed = (owner >= 0) & (ev.kind[rows] == KIND_DEVICE)
    k_dur = (ev.end_ns[rows] - ev.start_ns[rows]).astype(np.float64)[timed]
    self_dev = np.bincount(owner[timed], weights=k_dur, minlength=cpu.idx.size).astype(np.float64)
    total_dev = self_dev.copy()
    for d in range(int(cpu.depth.max(initial=0)), 0, -1):
        at = np.flatnonzero((cpu.depth == d) & cpu.has_parent)
        np.add.at(total_dev, cpu.parent[at], total_dev[at])
    return self_dev, total_dev, True


def device_attribution(ev: EventArrays) -> tuple[float, float]:
    """Device time (µs) that links to a CPU event, and all device time (kernels, memcpy,
    memset): what :func:`reduce_events` can give an op, and what ran."""
    cpu = (ev.kind == KIND_OP) | (ev.kind == KIND_ANNOTATION) | (ev.kind == KIND_ASYNC)
    device = ev.kind == KIND_DEVICE
    dur = (ev.end_ns[device] - ev.start_ns[device]).astype(np.float64)
    links = ev.link[device]
    owned = (links > 0) & np.isin(links, ev.corr[cpu])
    return float(dur[owned].sum()) / 1000.0, float(dur.sum()) / 1000.0


def _merge_duplicates(
    cpu: _CpuEvents, self_dev: FloatArray, has_device: bool
) -> tuple[npt.NDArray[np.bool_], FloatArray, FloatArray, IntArray]:
    """Which events merge into their parent, the self CPU and device ns after merging, and
    the event each one's time went to (itself when kept).

    torch merges an event into its parent when the parent has the same name and no other
    child (EventList._remove_dup_nodes): the parent keeps the time, the child is not counted.
    """
    parent, has_parent = cpu.parent, cpu.has_parent
    self_cpu = cpu.self_ns
    n_children = np.bincount(parent[has_parent], minlength=cpu.dur.size)
    dup = np.zeros(cpu.dur.size, dtype=bool)
    dup[has_parent] = (cpu.name[parent[has_parent]] == cpu.name[has_parent]) & (
        n_children[parent[has_parent]] == 1
    )
    owner_of = np.arange(cpu.dur.size)
    if not dup.any():
        return dup, self_cpu, self_dev, owner_of
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
    return dup, self_cpu, self_dev, owner_of


def _gaps_before(
    cpu: _CpuEvents,
    counted: npt.NDArray[np.bool_],
    c_round: IntArray,
    is_round_name: npt.NDArray[np.bool_],
    rounds: _Rounds,
) -> FloatArray:
    """Each counted event's time outside any op just before it (ns): for the body's outermost
    events (children of their round's step annotation), the gap since the previous one ended,
    or since the drift probe (else the round) began the body; 0 for every other event.

    Python between ops, hooks and the body's loop are these gaps: summed per op they say
    before which op the round's time outside any op was spent.
    """
    gaps = np.zeros(cpu.start.size)
    parent_is_round = np.zeros(cpu.start.size, dtype=bool)
    parent_is_round[cpu.has_parent] = is_round_name[cpu.name[cpu.parent[cpu.has_parent]]]
    top = np.flatnonzero(counted & parent_is_round)
    if top.size == 0:
        return gaps
    top = top[np.lexsort((cpu.start[top], c_round[top]))]
    ends = cpu.start[top] + cpu.dur[top].astype(np.int64)
    r = c_round[top]
    body_start = _body_starts(rounds)
    first = np.ones(top.size, dtype=bool)
    first[1:] = r[1:] != r[:-1]
    previous_end = np.empty(top.size, dtype=np.int64)
    previous_end[1:] = ends[:-1]
    previous_end[first] = body_start[r[first]]
    gaps[top] = np.maximum(cpu.start[top] - previous_end, 0)
    return gaps


def _body_starts(rounds: _Rounds) -> IntArray:
    """Where each round's body begins: the end of the drift probe inside it, else its start."""
    out: IntArray = np.array(rounds.starts, dtype=np.int64)
    if rounds.probe_starts.size == 0:
        return out
    at = np.minimum(
        np.searchsorted(rounds.probe_starts, rounds.starts), rounds.probe_starts.size - 1
    )
    inside = (rounds.probe_starts[at] >= rounds.starts) & (rounds.probe_starts[at] < rounds.ends)
    out[inside] = rounds.probe_ends[at[inside]]
    return out


def _op_cells(
    names: Sequence[str], name_idx: IntArray, round_idx: IntArray, n_rounds: int
) -> tuple[tuple[str, ...], IntArray]:
    """The ops in name order, and each event's flat cell in the op × round table."""
    used, op_of = np.unique(name_idx, return_inverse=True)
    # Ops in name order, as the fallback and the trace reader give them.
    by_name = np.argsort(np.asarray([names[i] for i in used.tolist()], dtype=object), kind="stable")
    rank = np.empty_like(by_name)
    rank[by_name] = np.arange(by_name.size)
    used_names = used[by_name]
    return tuple(names[i] for i in used_names.tolist()), rank[op_of] * n_rounds + round_idx


def _summed(cells: IntArray, weights: FloatArray | None, shape: tuple[int, int]) -> Any:
    """Per-cell sums of ``weights`` (counts when None) as an op × round table."""
    out = np.bincount(cells, weights=weights, minlength=shape[0] * shape[1])
    return out.reshape(shape)


def _wall_us(wall_us: Sequence[float] | FloatArray | None, rounds: _Rounds) -> FloatArray:
    """The rounds' wall times as given, or else the bodies' spans in the step annotations
    (from the drift probe's end, as a capture times them)."""
    n_rounds = int(rounds.starts.size)
    if wall_us is None:
        return (rounds.ends - _body_starts(rounds)).astype(np.float64) / 1000.0
    wall = np.asarray(wall_us, dtype=np.float64)
    if wall.shape != (n_rounds,):
        raise ValueError(f"'wall_us' must have one value per round ({n_rounds}), got {wall.shape}")
    return wall


def keep_rounds(table: OpTable, rounds: Sequence[int]) -> OpTable:
    """The same table with only ``rounds`` (indices, in that order); ops none of them called go.

    Another harness's loop (pytest-benchmark's) runs warm-up rounds between its kept ones.
    """
    return table.with_rounds(np.asarray(rounds, dtype=np.int64))


def drop_leading_rounds(table: OpTable, count: int) -> OpTable:
    """The same table without its first ``count`` rounds (extra warm-up found after capture).

    Ops called only in the dropped rounds go too: lazy first-step work (an optimizer's state)
    is warm-up, and a row of zero calls would read as a change of structure.
    """
    if count <= 0:
        return table
    return table.with_rounds(np.arange(count, table.rounds))
