"""What a gate says and how it joins the verdict: each gate (a module of this package, listed
in :data:`~tprof_engine.decide.gates.registry.GATES`) reads both sides and returns a
:class:`Finding`, which :func:`applied` joins to the verdict the one same way, by its fields.

A :class:`Gate` is its cause kind, whether that cause is exact (counts that don't drift: one
that fails the test needs no second look) and the function that finds what it says.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Final

from tprof_engine.decide.timing.compare import says_nothing
from tprof_engine.decide.timing.sides import Sides
from tprof_engine.model.verdicts import (
    REGRESSED,
    UNCHANGED,
    Cause,
    CauseKind,
    TestVerdict,
    TestWord,
    verdict_rank,
    worst,
)
from tprof_engine.model.work_verdict import WorkVerdict

__all__ = ["NOTHING", "Finding", "Gate", "applied", "work_moved"]


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


@dataclass(frozen=True, slots=True, kw_only=True)
class Gate:
    """One gate: the cause kind it speaks for, whether that cause is exact (the confirmation
    policy reads it from the cause: an exact failure is not measured again), and how it
    finds (the work gate's record is the verdict's ``work`` besides its cause)."""

    kind: CauseKind
    exact: bool
    find: Callable[[Sides], Finding]

    def cause(self, text: str, *, failing: bool = False) -> Cause:
        """A cause of this gate's kind, its exactness with it."""
        return Cause(kind=self.kind, text=text, failing=failing, exact=self.exact)

    def said(self, word: TestWord, text: str, notes: tuple[str, ...] = ()) -> Finding:
        """A finding that moved the verdict: regressed fails the test, improved doesn't."""
        cause = self.cause(text, failing=word == REGRESSED)
        return Finding(word=word, text=text, cause=cause, notes=notes)


def applied(verdict: TestVerdict, finding: Finding) -> TestVerdict:
    """``verdict`` with a gate's finding joined: its word if more urgent, its text alone when
    nothing else changed, first when its word is at least as urgent as the verdict's, else
    after; its cause, work record and notes kept.  Whether nothing else changed is read from
    the verdict's fields (:func:`~tprof_engine.decide.timing.compare.says_nothing`), never
    from its reason's text."""
    verdict = verdict.with_notes(*finding.notes)
    if finding.cause is not None:
        verdict = verdict.with_cause(finding.cause)
    if finding.work is not None:
        verdict = replace(verdict, work=finding.work)
    if not finding.text:
        return verdict
    reason, text = verdict.reason, finding.text
    if not reason or says_nothing(verdict):
        joined = text
    elif verdict_rank(finding.word) <= verdict_rank(verdict.verdict):
        joined = f"{text} | {reason}"
    else:
        joined = f"{reason} | {text}"
    return replace(verdict, verdict=worst([verdict.verdict, finding.word]), reason=joined)


def work_moved(found: Sequence[Finding]) -> bool:
    """Whether the work census's finding says the work changed (so an inconclusive test
    vouches for its calls only)."""
    return any(f.work is not None and f.work.verdict != UNCHANGED for f in found)
