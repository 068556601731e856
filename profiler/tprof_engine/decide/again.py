"""A verdict that landed short of its floor, measured again: a family whose change leaned
slower without reaching significance beyond its floor is measured once more (on a side of
tprof ab a fresh pair, against a stored baseline a fresh process) and judged on both looks
pooled (docs/design.md §18, "Measured again when short").

What a second look averages out is what one look can't: the speed of the process (or pair of
processes) it drew.  A plant's realised size moves with it (a 0.3 ms Python loop in an LSTM
step read host time +55 to +113 % from process to process against a 57 % floor), and so does
an unchanged test's reading; the floor stays what it was (a paired family's is the rule's
minimum or the pooled pairs' detectable effect, a stored one's what its baseline sessions
allow), and the pooled change must clear it.  What the second look costs in false failures is
stated here and measured in ``benchmarks/detection/pairs.py`` and ``sequence.py``: with each
look at α, the two routes to a regression (the first look significant, or short and the
pooled looks significant) bound the procedure at 2α against the looks' noise alone; each
tests against half the floor, so far less is spent.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

from tprof_engine.decide.timing import pooling
from tprof_engine.decide.timing.rule import Rule
from tprof_engine.decide.timing.samples import beyond_floor, paired_floor
from tprof_engine.decide.timing.units import other_units_follow
from tprof_engine.model.family_specs import family_total, spec
from tprof_engine.model.verdicts import (
    IMPROVED,
    REGRESSED,
    UNCHANGED,
    FamilyResult,
    TestVerdict,
    worst,
)

# How far short a family may land and still be measured again: its one-sided p below this.
SHORT_P = 0.25


def short_families(verdict: TestVerdict, rule: Rule) -> list[FamilyResult]:
    """The gating families of a verdict that landed short: timed, not failing the test, not
    too noisy to judge, their change beyond ``rule.shift_share`` of the floor (the shift its
    test is against) with p below :data:`SHORT_P`, yet not regressed.  None once the test
    fails on anything.

    The p bar is the cost's: without it, 12 % of unchanged test-runs of ``ab_reruns.py`` were
    measured again (the CPU or the host family of 9 of 72), each a fresh pair of processes,
    and the quiet run took 20.9 s against 11.4 s.  In the simulation (``pairs.py``, 6 % own
    noise per round) the bar measures 2.1 % of unchanged trials again against 7.1 % and
    catches a +10 % change 87.7 against 88.3 % of the time (81.3 % without a second pair): the
    combined p needs a first look well on its way.  A bar of 0.1 gave up 3 points more."""
    if verdict.verdict == REGRESSED or not verdict.timing_compared:
        return []
    return [
        f
        for f in verdict.families
        if f.gates
        and not f.fails
        and not f.too_noisy
        and f.p_value < SHORT_P
        and f.delta_pct > rule.shift_share * f.floor_pct
        and not set_aside(f, rule)
    ]


def set_aside(family: FamilyResult, rule: Rule) -> bool:
    """Beyond its floor and significant, yet not regressed: another of the rule's checks set
    it aside (the other units didn't follow, the rise was under the least µs), and a second
    look changes none of them.  Simulated with a probe that wanders 10 % per process, such
    readings measured again failed 1.5 % of unchanged tests (``sequence.py``)."""
    return family.p_value < rule.alpha and family.delta_pct > family.floor_pct


def after_second_look(
    first: TestVerdict,
    child: TestVerdict | None,
    rule: Rule,
    why: str = "",
    other_settings: Sequence[str] = (),
) -> TestVerdict:
    """``first`` once a second look (``rule.paired``: a fresh pair; else a fresh process)
    measured its short families again: regressed when one of them, pooled over both looks, is
    significantly beyond its floor (:func:`pooled_family`); else ``first`` with a note giving
    both readings.  A second look that gave no verdict, ran under other settings or compared
    no timings is no evidence: ``first`` stands as it was."""
    look = _look(rule)
    short = short_families(first, rule)
    if child is None:
        return first.with_notes(f"short of its floor; not measured again: {why}")
    if other_settings:
        moved = ", ".join(other_settings)
        return first.with_notes(f"short of its floor; a {look} ran under {moved} unlike it")
    if not child.timing_compared:
        return first.with_notes(f"short of its floor; the {look} compared no timings")
    again = {f.family: f for f in child.families}
    judged = [(f, pooled_family(f, again[f.family], rule)) for f in short if f.family in again]
    failed = [(f, g) for f, g in judged if g.timing_regressed]
    said = f"short of its floor, measured again in a {look}: "
    if not failed:
        readings = "; ".join(_readings(f, again[f.family], g) for f, g in judged)
        return first.with_notes(said + (readings or "no family to pool"))
    pooled = {g.family: g for _, g in failed}
    reasons = [f"{g.family.upper()}: " + "; ".join(g.reasons) for g in pooled.values()]
    if first.verdict not in (UNCHANGED, IMPROVED) and first.reason:
        reasons.append(first.reason)  # what else the first look found
    return replace(
        first,
        verdict=worst([REGRESSED, first.verdict]),
        reason=" | ".join(reasons),
        families=tuple(pooled.get(f.family, f) for f in first.families),
        notes=(*first.notes, *(said + _readings(f, again[f.family], g) for f, g in failed)),
    )


def pooled_family(first: FamilyResult, again: FamilyResult, rule: Rule) -> FamilyResult:
    """A family's two looks pooled: its change, the two looks' changes averaged (each ran the
    same rounds); its p, their own one-sided p-values combined
    (:func:`.timing.pooling.combined_p`), each against half its floor; its floor, a pair's the
    paired floor at the average's detectable effect, a stored family's the first look's (what
    its baseline sessions allow of one process is what the floor bounds: the average of two
    processes is held to it too).  It regressed when beyond the floor with p below
    ``rule.alpha``.

    The p-values, not the errors read back from the detectable effects: one pair's robust
    spread of 20 rounds came out half its size in 1 of 2,000 simulated unchanged trials, and
    pooled by that error +5.6 % (p=0.22) then +6.3 % (p=0.041) read p=9e-6 (``pairs.py``)."""
    blocks = [pooling.block_of(f, rule.alpha) for f in (first, again)]
    sure = [b for b in blocks if b is not None]
    if len(sure) < 2:
        return first
    together = pooling.averaged(sure)
    mde = math.expm1(pooling.z_power(rule.alpha) * together.se)
    floor = paired_floor(rule, mde, op=False) if rule.paired else first.floor_pct / 100.0
    p = pooling.combined_p([first.p_value, again.p_value])
    change = math.expm1(together.effect)
    base_us = first.baseline_total_us
    beyond = beyond_floor(rule, True, base_us, base_us * (1.0 + change), change, floor, p, 1.0)[0]
    # each look's factor into the other units, averaged as their changes are
    to_other = math.sqrt(first.to_other_units * again.to_other_units)
    regressed = beyond and other_units_follow(change, floor, to_other, rule)
    if not regressed:
        return replace(first, delta_pct=together.pct, p_value=p, floor_pct=floor * 100.0)
    looks = "two pairs" if rule.paired else "two processes"
    reason = (
        f"{spec(first.family).total_words} {together.pct:+.1f}% over {looks} "
        f"(p={p:.2g}, floor {floor:.0%} {first.floor_source}; "
        f"{first.delta_pct:+.1f}% then {again.delta_pct:+.1f}%)"
    )
    return replace(
        first,
        verdict=REGRESSED,
        delta_pct=together.pct,
        p_value=p,
        floor_pct=floor * 100.0,
        mde_pct=mde * 100.0,
        floor_source=f"{first.floor_source}, over {looks}",
        timing_regressed=True,
        reasons=(reason, *first.reasons),
    )


def _look(rule: Rule) -> str:
    """What measures a verdict again under ``rule``, in words."""
    return "fresh pair" if rule.paired else "fresh process"


def _readings(first: FamilyResult, again: FamilyResult, pooled: FamilyResult) -> str:
    label = family_total(first.family)
    return (
        f"{label} {first.delta_pct:+.1f}% (p={first.p_value:.2g}, floor {first.floor_pct:.0f}%) "
        f"then {again.delta_pct:+.1f}% (p={again.p_value:.2g}); pooled {pooled.delta_pct:+.1f}% "
        f"(p={pooled.p_value:.2g}, floor {pooled.floor_pct:.0f}%)"
    )
