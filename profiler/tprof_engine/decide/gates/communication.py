"""The communication census and its exact gate (docs/design.md §17).

A test's collectives are the rows of its work census in torch's collective namespaces
(``c10d::allreduce_``, ``_c10d_functional::all_gather_into_tensor``, …).  Per rank, op, phase
and process group size they are counted per step (a call of the body): calls, the bytes each
sends, dtypes and the modules they ran in.  Like work, they don't drift: a lost gradient
bucketing, an extra all-reduce of a metric or a wider message dtype changes the counts, so
any growth fails the test, no floor, no statistics, no confirmation.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Final

from tprof_engine.decide.gates.finding import NOTHING, Finding, Gate
from tprof_engine.decide.timing.sides import Sides
from tprof_engine.model.communication import (
    CommKey,
    CommRow,
    collectives,
    communication,
    order,
    place,
)
from tprof_engine.model.ranks import said_once
from tprof_engine.model.verdicts import COMMUNICATION, UNCHANGED
from tprof_engine.model.work import WorkTable, WorkWord, is_collective


@dataclass(frozen=True, slots=True, kw_only=True)
class CommVerdict:
    """The collectives against the baseline's: the word and one line per change."""

    verdict: WorkWord
    lines: tuple[str, ...] = ()
    not_gated: tuple[str, ...] = ()  # collectives whose counts differ between census rounds


def diverged(works: Sequence[WorkTable | None]) -> str | None:
    """Why the ranks' censuses can't be the same program's, or None: every rank must call the
    same collectives, as often, in the same phases and group sizes (their bytes may differ)."""
    seen: dict[tuple[tuple[str, str, int, float], ...], list[int]] = {}
    for rank, work in enumerate(works):
        if work is not None:
            calls = sorted((r.op, r.phase, r.group, r.calls) for r in collectives(work))
            seen.setdefault(tuple(calls), []).append(rank)
    if len(seen) <= 1:
        return None
    groups = [
        f"ranks {', '.join(map(str, ranks))}: "
        + (", ".join(f"{op} in {phase} ×{n:g}" for op, phase, _, n in calls) or "none")
        for calls, ranks in seen.items()
    ]
    return "the ranks called different collectives: " + "; ".join(groups)


def without_collectives(work: WorkTable) -> WorkTable:
    """The census without its collectives: the work gate judges computation, this gate them."""
    return replace(work, rows=tuple(r for r in work.rows if not is_collective(r.op)))


def judge_communication(baseline: WorkTable, current: WorkTable) -> CommVerdict:
    """The current collectives against the baseline's, exactly.

    Regressed when a collective is new or any one is called more often or sends more bytes
    per step; improved when some are called less or send less and none grew; changed when
    only dtypes or modules differ.
    """
    before, now = communication(baseline), communication(current)
    grew: list[tuple[str, int | None]] = []
    shrank: list[tuple[str, int | None]] = []
    changed: list[tuple[str, int | None]] = []
    not_gated = []
    for key in sorted(before.keys() | now.keys(), key=order):
        b, c = before.get(key), now.get(key)
        if (b is not None and b.varies) or (c is not None and c.varies):
            not_gated.append(place(key, _modules(b, c)))
            continue
        kind, text = _compared(key, b, c)
        {"grew": grew, "shrank": shrank, "changed": changed}.get(kind, []).append((text, key[0]))
    word: WorkWord = "unchanged"
    if grew:
        word = "regressed"
    elif shrank:
        word = "improved"
    elif changed:
        word = "changed"
    lines = said_once(grew) + said_once(shrank) + said_once(changed)
    return CommVerdict(verdict=word, lines=lines, not_gated=tuple(dict.fromkeys(not_gated)))


UNCHANGED_KIND: Final = "same"


def _compared(key: CommKey, b: CommRow | None, c: CommRow | None) -> tuple[str, str]:
    """How one collective moved (grew, shrank, changed or the same) and the line that says so."""
    where = place(key, _modules(b, c))
    if b is None:
        assert c is not None
        return "grew", f"{where}: new, {_calls(c.calls)} per step, {_size(c.bytes)}"
    if c is None:
        return "shrank", f"{where}: gone (was {_calls(b.calls)} per step, {_size(b.bytes)})"
    figures = f"{b.calls:g} → {_calls(c.calls)} per step, {_size(b.bytes)} → {_size(c.bytes)}"
    if c.dtypes != b.dtypes:
        figures += f", dtype {'/'.join(b.dtypes)} → {'/'.join(c.dtypes)}"
    if c.calls > b.calls or c.bytes > b.bytes:
        return "grew", f"{where}: {figures}"
    if c.calls < b.calls or c.bytes < b.bytes:
        return "shrank", f"{where}: {figures}"
    if c.dtypes != b.dtypes or c.modules != b.modules:
        moved = "" if c.modules == b.modules else f"; in {', '.join(c.modules)}"
        return "changed", f"{where}: {figures}{moved}"
    return UNCHANGED_KIND, ""


def _modules(b: CommRow | None, c: CommRow | None) -> tuple[str, ...]:
    """Where a collective ran: now, else in the baseline."""
    for row in (c, b):
        if row is not None:
            return row.modules
    return ()


def _calls(calls: float) -> str:
    return f"{calls:g} call" if calls == 1 else f"{calls:g} calls"


def _size(nbytes: float) -> str:
    return f"{round(nbytes):,} B"


def comparable_work(sides: Sides) -> tuple[WorkTable, WorkTable] | None:
    """Both sides' work censuses when they can be compared (the work gate's notes say when
    not)."""
    b, c = sides.baseline.work, sides.current.work
    return None if b is None or c is None or b.census != c.census else (b, c)


def communication_finding(sides: Sides) -> Finding:
    """The collectives gated exactly: failing when any collective is new, called more often
    or sends more per step."""
    pair = comparable_work(sides)
    if pair is None:
        return NOTHING
    comm = judge_communication(*pair)
    notes: tuple[str, ...] = ()
    if comm.not_gated:
        notes = (
            "collectives not gated (their counts differ between census rounds): "
            + ", ".join(comm.not_gated),
        )
    if comm.verdict == UNCHANGED:
        return Finding(notes=notes)
    return GATE.said(comm.verdict, "communication: " + "; ".join(comm.lines), notes)


GATE: Final = Gate(kind=COMMUNICATION, exact=True, find=communication_finding)
