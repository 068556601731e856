"""The runner's steps that differ on a side of ``tprof ab`` (:mod:`tprof_engine.pairing`):
the rounds both sides agree on, the base side's rounds handed over, and the head side's
judgement of them beside its stored baseline."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from tprof_engine.decide import judge
from tprof_engine.model.environment import Fingerprint
from tprof_engine.model.results import ProfiledTest
from tprof_engine.model.verdicts import TestVerdict
from tprof_engine.store import schema

if TYPE_CHECKING:  # found.py reads stored_note from here
    from tprof_engine.found import Found


def active(pairing: Any, source: Any = None) -> Any:
    """The pairing when this test is paired with the other side's (None: run as usual).  A
    source whose rounds can't take turns (a distributed test's ranks) runs alone on each
    side; both sides decide so from the same test, so neither waits for the other."""
    if pairing is None or pairing.alone:
        return None
    if source is not None and not source.pairable:
        pairing.solo(pairing.test, "a distributed test's ranks are not paired")
        return None
    return pairing


def is_base(pairing: Any) -> bool:
    """This test is paired, on the base side: its rounds go to the head, which judges."""
    return pairing is not None and pairing.side == "base"


def plan(
    pairing: Any, source: Any, baseline: schema.Baseline | None, rounds: int | None
) -> tuple[int, int | None]:
    """Calls per round and measured rounds: the base side calibrates and tells the head,
    which runs what it is told (its own calibration only when alone)."""
    if pairing is None:
        return source.iterations(baseline), rounds
    if pairing.side == "head":
        told = pairing.plan({})
        if told.get("iterations"):
            return int(told["iterations"]), told.get("rounds", rounds)
        return source.iterations(None), rounds
    own = {"iterations": source.iterations(None), "rounds": rounds}
    pairing.plan(own)
    return own["iterations"], rounds


def handed_over(pairing: Any, test: ProfiledTest) -> ProfiledTest:
    """The base side's test, its verdict "saved" and its trace named, handed to the head,
    which judges its rounds and names its trace."""
    pairing.handoff(test.to_dict())
    return test


def base_side(pairing: Any, fingerprint: Fingerprint) -> tuple[judge.Recorded, str | None] | None:
    """The base side's rounds of the current test, as the side the head is judged against,
    and the base's trace of them (None: the base did not profile it)."""
    if pairing is None or pairing.side != "head":
        return None
    record = pairing.handoff(None)
    if record is None:
        return None
    base = ProfiledTest.from_dict(record)
    if base.table is None:
        return None
    recorded = judge.Recorded(
        tables=(base.table,),
        fingerprint=fingerprint,
        protocol=base.protocol,
        work=base.work,
        hosts=(fingerprint.soft.get("host"),),
        settings=base.settings,
        tracer=base.tracer,
    )
    return recorded, base.trace


def stored_note(beside: TestVerdict) -> str:
    """What the stored baseline said of the same rounds, as a note on the paired verdict."""
    reason = beside.reason.splitlines()[0] if beside.reason else ""
    return f"against the stored baseline: {beside.verdict.upper()}" + (
        f" ({reason})" if reason else ""
    )


def labelled(test: ProfiledTest, pairing: Any, found: Found | None) -> ProfiledTest:
    """The head's test naming the base its rounds were paired with (as the user named it) and
    the base side's trace, and its stored baseline only when ``found`` read one beside the
    pairs; or saying why its rounds were not paired."""
    if pairing is None or pairing.side != "head":
        return test
    if found is None or found.paired is None:
        note = f"tprof ab: not paired ({pairing.why_alone or 'the base did not profile it'})"
        return replace(test, verdict=test.verdict.with_notes(note))
    return replace(
        test,
        paired_base=pairing.config.ref or pairing.config.label,
        paired_trace=found.paired_trace,
        baseline=test.baseline if found.read_stored else None,
    )
