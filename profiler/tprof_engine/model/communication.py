"""The communication census: a work census's collectives per rank, op, phase and process group
size, counted per step (a call of the body), with the bytes each sends, their dtypes and the
modules they ran in (docs/design.md §17).  What the communication gate
(:mod:`tprof_engine.decide.gates.communication`) judges and the reports show."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

from tprof_engine.model.ranks import split
from tprof_engine.model.work import FORWARD, WorkRow, WorkTable, is_collective

TOP_LEVEL: Final = "(top level)"

CommKey = tuple[int | None, str, str, int]  # (rank, op, phase, group size)


@dataclass(frozen=True, slots=True, kw_only=True)
class CommRow:
    """One collective of one rank in one phase and group size, per step."""

    rank: int | None
    op: str
    phase: str
    group: int
    calls: float
    bytes: float  # what it sends (:func:`sent`)
    dtypes: tuple[str, ...]
    modules: tuple[str, ...]
    varies: bool

    @property
    def key(self) -> CommKey:
        return (self.rank, self.op, self.phase, self.group)


@dataclass(slots=True)
class _Sum:
    calls: int = 0
    bytes: int = 0
    dtypes: set[str] = field(default_factory=set)
    modules: set[str] = field(default_factory=set)
    varies: bool = False


def communication(work: WorkTable) -> dict[CommKey, CommRow]:
    """The collectives of a census, per step, keyed by rank, op, phase and group size."""
    found: dict[CommKey, _Sum] = {}
    for row in work.rows:
        if not is_collective(row.op):
            continue
        rank, op = split(row.op)
        total = found.setdefault((rank, op, row.phase, row.group), _Sum())
        total.calls += row.calls
        total.bytes += sent(row)
        total.dtypes.update(row.dtypes)
        total.modules.add(row.module or TOP_LEVEL)
        total.varies = total.varies or row.varies
    per = work.iterations
    return {
        key: CommRow(
            rank=key[0],
            op=key[1],
            phase=key[2],
            group=key[3],
            calls=t.calls / per,
            bytes=t.bytes / per,
            dtypes=tuple(sorted(t.dtypes)),
            modules=tuple(sorted(t.modules)),
            varies=t.varies,
        )
        for key, t in found.items()
    }


def collectives(work: WorkTable) -> list[CommRow]:
    """The census's collectives per step, in one order: phase, op, group, rank."""
    return sorted(communication(work).values(), key=lambda r: order(r.key))


def row_place(row: CommRow) -> str:
    """``c10d::allreduce_ in backward (group of 2)``: the collective and where it ran."""
    return place(row.key, row.modules)


def communication_rows(work: WorkTable) -> list[dict[str, Any]]:
    """The census's collectives per step as plain rows, for the JSON report."""
    return [
        {
            "rank": r.rank,
            "op": r.op,
            "where": row_place(r),
            "phase": r.phase,
            "group": r.group,
            "calls_per_step": r.calls,
            "bytes_per_step": r.bytes,
            "dtypes": list(r.dtypes),
            "modules": list(r.modules),
            "varies": r.varies,
        }
        for r in collectives(work)
    ]


def sent(row: WorkRow) -> int:
    """The bytes a collective sends: of the tensors it reads and doesn't write (an
    all-gather's or reduce-scatter's input), else of those it works on in place (an
    all-reduce's or broadcast's tensors)."""
    only_read = row.bytes_read - row.bytes_written
    return only_read if only_read > 0 else row.bytes_written


def place(key: CommKey, modules: tuple[str, ...] = ()) -> str:
    """``c10d::allreduce_ in backward (group of 2)``; a collective of the body's own code,
    outside every module and not in backward, ``at top level`` (the census's "forward" is
    every phase but backward, hooks and the optimizer's step)."""
    _, op, phase, group = key
    of = f" (group of {group})" if group else ""
    if phase == FORWARD and modules and set(modules) == {TOP_LEVEL}:
        return f"{op} at top level, outside backward{of}"
    return f"{op} in {phase}{of}"


def order(key: CommKey) -> tuple[str, str, int, int]:
    rank, op, phase, group = key
    return (phase, op, group, -1 if rank is None else rank)
