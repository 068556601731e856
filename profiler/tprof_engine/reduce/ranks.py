"""A distributed test's ranks as one op table and one census (docs/design.md §17).

Every rank ran the same rounds, aligned by a barrier before each, so round ``r`` of every rank
is the same step.  The joined table keeps each rank's ops under their own names
(``[rank1] aten::addmm``); per round, the wall, the probe and the load readings are the ranks'
sums (each rank's time outside any op adds up, and the busy rule reads the ranks' waits
together), the neighbours the most any rank saw.  What the join can't keep, which rank was
slowest in each round and how long each waited in collectives, :func:`rank_notes` says.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from tprof_engine.model.errors import CaptureError
from tprof_engine.model.ranks import tagged
from tprof_engine.model.records import METRICS, OpTable, RoundLoad
from tprof_engine.model.work import DeviceCopy, HostSync, WorkRow, WorkTable, is_collective


def join_tables(tables: Sequence[OpTable]) -> OpTable:
    """The ranks' op tables (rank ``i`` is ``tables[i]``) as one table of tagged ops."""
    rounds = {t.rounds for t in tables}
    if len(rounds) != 1:
        raise CaptureError(
            f"the ranks measured different rounds ({sorted(rounds)}): a rank diverged"
        )
    names = [tagged(rank, n) for rank, t in enumerate(tables) for n in t.names]
    order = sorted(range(len(names)), key=names.__getitem__)

    def stacked(metric: str) -> Any:
        return np.concatenate([getattr(t, metric) for t in tables])[order]

    befores = [t.host_before_us for t in tables]
    first = tables[0]
    return replace(
        first,
        names=tuple(names[i] for i in order),
        **{m: stacked(m) for m in METRICS},
        wall_us=np.sum([t.wall_us for t in tables], axis=0),
        probe_cpu_us=np.sum([t.probe_cpu_us for t in tables], axis=0),
        probe_device_us=np.sum([t.probe_device_us for t in tables], axis=0),
        has_device=any(t.has_device for t in tables),
        device_family=next((t.device_family for t in tables if t.device_family), None),
        host_before_us=None if any(b is None for b in befores) else stacked("host_before_us"),
        meta={**first.meta, "events": sum(int(t.meta.get("events", 0)) for t in tables)},
        device=None,  # kernel rows and idle time are per device: not joined across ranks
        memory=None,
        load=_joined_load([t.load for t in tables]),
        scopes=frozenset(tagged(rank, n) for rank, t in enumerate(tables) for n in t.scopes),
    )


def _joined_load(loads: Sequence[RoundLoad | None]) -> RoundLoad | None:
    if any(x is None for x in loads):
        return None
    known = [x for x in loads if x is not None]

    def total(key: str) -> Any:
        values = [getattr(x, key) for x in known]
        return None if any(v is None for v in values) else np.sum(values, axis=0)

    neighbours = [x.neighbours for x in known]
    memory = [x.memory_us for x in known]
    return RoundLoad(
        cpu_us=np.sum([x.cpu_us for x in known], axis=0),
        queued_us=total("queued_us"),
        memory_us=None if any(m is None for m in memory) else np.max(np.asarray(memory), axis=0),
        switches=total("switches"),
        blocks=total("blocks"),
        neighbours=None
        if any(n is None for n in neighbours)
        else np.max(np.asarray(neighbours), axis=0),
        cpus=known[0].cpus,
    )


def join_work(works: Sequence[WorkTable | None]) -> WorkTable | None:
    """The ranks' censuses as one census of tagged ops; None when any rank has none."""
    if not works or any(w is None for w in works):
        return None
    known = [w for w in works if w is not None]
    rows: list[WorkRow] = []
    copies: list[DeviceCopy] = []
    syncs: list[HostSync] = []
    for rank, w in enumerate(known):
        rows += [replace(r, op=tagged(rank, r.op)) for r in w.rows]
        copies += [replace(c, op=tagged(rank, c.op)) for c in w.copies]
        syncs += [replace(s, op=tagged(rank, s.op)) for s in w.syncs]
    return WorkTable(
        rows=tuple(rows),
        copies=tuple(copies),
        syncs=tuple(syncs),
        compiled=sum(w.compiled for w in known),
        iterations=known[0].iterations,
        census_us=sum(w.census_us for w in known),
        census=known[0].census,
    )


def rank_notes(tables: Sequence[OpTable]) -> tuple[str, ...]:
    """Which rank was slowest in each round, how far the ranks' rounds spread, and each
    rank's time in collectives per round (median), for the test's notes."""
    walls = np.asarray([t.wall_us for t in tables])
    slowest = np.bincount(np.argmax(walls, axis=0), minlength=len(tables))
    spread = (walls.max(axis=0) - walls.min(axis=0)) / np.maximum(walls.max(axis=0), 1e-9)
    counts = ", ".join(f"rank {r} in {int(n)}" for r, n in enumerate(slowest) if n)
    comm = ", ".join(f"rank {r} {_collective_us(t):,.0f} µs" for r, t in enumerate(tables))
    outside = ", ".join(
        f"rank {r} {float(np.median(t.host_us)):,.0f} µs "
        f"({float(np.median(t.host_us)) / max(float(np.median(t.wall_us)), 1e-9):.0%})"
        for r, t in enumerate(tables)
    )
    return (
        f"slowest rank per round: {counts} of {walls.shape[1]}; the ranks' rounds differ by "
        f"{float(np.median(spread)):.0%} (median)",
        f"per round (median), in collectives' ops: {comm}; outside any op (waiting for a "
        f"collective to finish, Python): {outside}",
    )


def _collective_us(table: OpTable) -> float:
    """A rank's median time per round inside its collectives (their total CPU time)."""
    rows = [i for i, n in enumerate(table.names) if is_collective(n)]
    if not rows:
        return 0.0
    return float(np.median(table.total_cpu_us[rows].sum(axis=0)))
