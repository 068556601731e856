"""The gates beyond the families' timing, as entries: each reads both sides and returns a
:class:`Finding`, which :func:`applied` joins to the verdict the one same way.

A gate is a :class:`Gate` in :data:`GATES`: its cause kind (exact or not, by the model's
:data:`~tprof_engine.model.verdicts.CAUSE_SPECS`: an exact one that fails needs no second
look) and the function that finds what it says.  Adding a gate is a cause kind in the model
and an entry here; the judge runs the list (:mod:`.judge`), the policy reads exactness from
the causes (:mod:`.policy`), the reports render the causes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Final

from tprof_engine.decide import compile_gate, memory_gate
from tprof_engine.decide.comm_gate import judge_communication, without_collectives
from tprof_engine.decide.rule import Rule
from tprof_engine.decide.sides import Sides
from tprof_engine.decide.timing import NOTHING_CHANGED
from tprof_engine.decide.work_gate import judge_work
from tprof_engine.model import settings
from tprof_engine.model.records import OpTable
from tprof_engine.model.verdicts import (
    CHANGED,
    COMMUNICATION,
    COMPILE,
    IMPROVED,
    MEMORY,
    REGRESSED,
    SETTINGS,
    UNCHANGED,
    WORK,
    Cause,
    CauseKind,
    TestVerdict,
    TestWord,
    verdict_rank,
    worst,
)
from tprof_engine.model.work import WorkTable
from tprof_engine.model.work_verdict import WorkVerdict

__all__ = [
    "GATES",
    "Finding",
    "Gate",
    "applied",
    "communication_finding",
    "compile_finding",
    "findings",
    "memory_finding",
    "settings_finding",
    "work_finding",
    "work_moved",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class Finding:
    """What one gate says: the word it adds to the test's verdict (the most urgent word
    wins), its part of the reason (none when empty), its cause or work record, notes."""

    word: TestWord = UNCHANGED
    text: str = ""
    cause: Cause | None = None
    work: WorkVerdict | None = None
    notes: tuple[str, ...] = ()


NOTHING: Final = Finding()


@dataclass(frozen=True, slots=True)
class Gate:
    """One gate: the cause kind it speaks for and how it finds (the work gate's record is
    the verdict's ``work``, not a cause of its own)."""

    kind: CauseKind
    find: Callable[[Sides], Finding]


def applied(verdict: TestVerdict, finding: Finding) -> TestVerdict:
    """``verdict`` with a gate's finding joined: its word if more urgent, its text alone when
    nothing else changed, first when its word is at least as urgent as the verdict's, else
    after; its cause, work record and notes kept."""
    verdict = verdict.with_notes(*finding.notes)
    if finding.cause is not None:
        verdict = verdict.with_cause(finding.cause)
    if finding.work is not None:
        verdict = replace(verdict, work=finding.work)
    if not finding.text:
        return verdict
    reason, text = verdict.reason, finding.text
    if reason in (NOTHING_CHANGED, ""):
        joined = text
    elif verdict_rank(finding.word) <= verdict_rank(verdict.verdict):
        joined = f"{text} | {reason}"
    else:
        joined = f"{reason} | {text}"
    return replace(verdict, verdict=worst([verdict.verdict, finding.word]), reason=joined)


def _exact(kind: CauseKind, word: TestWord, text: str, notes: tuple[str, ...] = ()) -> Finding:
    """An exact gate's finding: regressed fails the test, improved doesn't."""
    cause = Cause(kind=kind, text=text, failing=word == REGRESSED)
    return Finding(word=word, text=text, cause=cause, notes=notes)


def memory_finding(baseline: Sequence[OpTable], current: OpTable, rule: Rule) -> Finding:
    """The memory gate (allocations per op and the round's peak, exactly) when the current
    run collected memory."""
    if current.memory is None:
        return NOTHING
    tables = [b.memory for b in baseline if b.memory is not None]
    if len(tables) < len(baseline):
        return Finding(notes=("no memory baseline: re-record with --tprof-save",))
    gate = memory_gate.judge_memory(tables, current.memory, floor=rule.work_floor)
    notes: tuple[str, ...] = ()
    if gate.varying_ops:
        notes = (
            f"memory: {gate.varying_ops} ops allocate differently from round to round "
            "(reported, not gated)",
        )
    if gate.verdict == UNCHANGED:
        return Finding(notes=notes)
    word: TestWord = REGRESSED if gate.verdict == REGRESSED else IMPROVED
    return _exact(MEMORY, word, "MEMORY: " + "; ".join(gate.reasons), notes)


def compile_finding(baseline: OpTable, current: OpTable, *, per_call: int = 1) -> Finding:
    """torch.compile's structure (a new graph break or a recompilation fails the test; fewer
    graph breaks read improved)."""
    change = compile_gate.graph_change(baseline, current, per_call=per_call)
    return NOTHING if change is None else _exact(COMPILE, *change)


def _comparable_work(sides: Sides) -> tuple[WorkTable, WorkTable] | None:
    """Both sides' work censuses when they can be compared (the notes say when not: see
    :func:`work_finding`)."""
    b, c = sides.baseline.work, sides.current.work
    return None if b is None or c is None or b.census != c.census else (b, c)


def communication_finding(sides: Sides) -> Finding:
    """The collectives gated exactly (``comm_gate``): failing when any collective is new,
    called more often or sends more per step."""
    pair = _comparable_work(sides)
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
    return _exact(COMMUNICATION, comm.verdict, "communication: " + "; ".join(comm.lines), notes)


def work_finding(baseline: WorkTable | None, current: WorkTable | None, rule: Rule) -> Finding:
    """The work census against the baseline's (FLOPs, bytes and calls per op, module and
    phase, exactly; collectives are the communication gate's).  Work needs only what calls
    need (the same torch and device type): it gates even when timings were not compared."""
    if current is None:
        return NOTHING
    if baseline is None:
        return Finding(notes=("no work baseline: re-record with --tprof-save",))
    if baseline.census != current.census:
        return Finding(
            notes=(
                f"work not compared: the baseline's census counted by older rules (census "
                f"{baseline.census}, now {current.census}: attention and RNN FLOPs, hook and "
                "optimizer phases); record a session with --tprof-save to gate work again",
            )
        )
    work = judge_work(
        without_collectives(baseline), without_collectives(current), floor=rule.work_floor
    )
    text = "" if work.verdict == UNCHANGED else f"work: {work.headline()}"
    return Finding(word=work.verdict, text=text, work=work)


def settings_finding(before: Mapping[str, Any], after: Mapping[str, Any]) -> Finding:
    """The numeric settings that differ (TF32, matmul precision, cuDNN, SDPA backends,
    threads), as a cause: they choose the kernels, so a change is named and timing still
    judged; a test the change didn't make slower reads at least changed."""
    changes = settings.differences(before, after)
    if not changes:
        return NOTHING
    text = settings.described(changes)
    return Finding(word=CHANGED, text=text, cause=Cause(kind=SETTINGS, text=text))


def _compile(sides: Sides) -> Finding:
    return compile_finding(sides.base_tables[-1], sides.current_table, per_call=sides.per_call)


# The gates, in the order their findings join the verdict (and their texts the reason).
GATES: Final[tuple[Gate, ...]] = (
    Gate(MEMORY, lambda s: memory_finding(s.base_tables, s.current_table, s.rule)),
    Gate(COMPILE, _compile),
    Gate(COMMUNICATION, communication_finding),
    Gate(WORK, lambda s: work_finding(s.baseline.work, s.current.work, s.rule)),
    Gate(SETTINGS, lambda s: settings_finding(s.baseline.settings, s.current.settings)),
)


def findings(sides: Sides, gates: Sequence[Gate] = GATES) -> list[Finding]:
    """Every gate's finding on ``sides``, in the gates' order."""
    return [g.find(sides) for g in gates]


def work_moved(found: Sequence[Finding]) -> bool:
    """Whether the work census's finding says the work changed (so an inconclusive test
    vouches for its calls only)."""
    return any(f.work is not None and f.work.verdict != UNCHANGED for f in found)
