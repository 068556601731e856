"""tprof ab's second pair for a verdict that landed short: a family whose paired change leaned
slower without reaching significance beyond its floor is measured again in a fresh pair, and
judged on both pairs pooled (docs/design.md §18, "Measured again when short").

Why only paired: a paired family's floor is the rule's minimum or its pairs' minimum detectable
effect, whichever is more, and more pairs shrink the latter; a stored baseline's floor is
learned from how its sessions disagree, which more rounds of this run don't change.  What the
second look costs in false failures is stated here and measured in
``benchmarks/detection/pairs.py``: with each look at α, the two routes to a regression (the
first pairs significant, or short and the pooled pairs significant) bound the procedure at 2α
against the pairs' noise alone; each tests against half the floor, so far less is spent.  What
pairs can't cancel, a process's own speed, is what the simulation charges it for.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

from tprof_engine.decide.timing import pooling
from tprof_engine.decide.timing.rule import Rule
from tprof_engine.decide.timing.samples import paired_floor
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
    """The gating families of a paired verdict that landed short: timed, not failing the test,
    not too noisy to judge, their change beyond ``rule.shift_share`` of the floor (the shift
    its test is against) with p below :data:`SHORT_P`, yet not regressed.  None once the test
    fails on anything.

    The p bar is the cost's: without it, 12 % of unchanged test-runs of ``ab_reruns.py`` were
    measured again (the CPU or the host family of 9 of 72), each a fresh pair of processes,
    and the quiet run took 20.9 s against 11.4 s.  In the simulation (``pairs.py``, 6 % own
    noise per round) the bar measures 2.1 % of unchanged trials again against 7.1 % and
    catches a +10 % change 87.7 against 88.3 % of the time (81.3 % without a second pair): the
    combined p needs a first pair well on its way.  A bar of 0.1 gave up 3 points more."""
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
    ]


def after_second_pair(
    first: TestVerdict,
    child: TestVerdict | None,
    rule: Rule,
    why: str = "",
    other_settings: Sequence[str] = (),
) -> TestVerdict:
    """``first`` once a fresh pair measured its short families again: regressed when one of
    them, pooled over both pairs, is significantly beyond its floor (:func:`pooled_family`);
    else ``first`` with a note giving both readings.  A second pair that gave no verdict, ran
    under other settings or compared no timings is no evidence: ``first`` stands as it was."""
    short = short_families(first, rule)
    if child is None:
        return first.with_notes(f"short of its floor; not measured again: {why}")
    if other_settings:
        moved = ", ".join(other_settings)
        return first.with_notes(f"short of its floor; a fresh pair ran under {moved} unlike it")
    if not child.timing_compared:
        return first.with_notes("short of its floor; the fresh pair compared no timings")
    again = {f.family: f for f in child.families}
    judged = [(f, pooled_family(f, again[f.family], rule)) for f in short if f.family in again]
    failed = [(f, g) for f, g in judged if g.timing_regressed]
    if not failed:
        said = "; ".join(_readings(f, again[f.family], g) for f, g in judged) or "no family to pool"
        return first.with_notes(f"short of its floor, measured again in a fresh pair: {said}")
    pooled = {g.family: g for _, g in failed}
    families = tuple(pooled.get(f.family, f) for f in first.families)
    reasons = [f"{g.family.upper()}: " + "; ".join(g.reasons) for g in pooled.values()]
    if first.verdict not in (UNCHANGED, IMPROVED) and first.reason:
        reasons.append(first.reason)  # what else the first pairs found
    return replace(
        first,
        verdict=worst([REGRESSED, first.verdict]),
        reason=" | ".join(reasons),
        families=families,
        notes=(
            *first.notes,
            *(
                "short of its floor, measured again in a fresh pair: "
                + _readings(f, again[f.family], g)
                for f, g in failed
            ),
        ),
    )


def pooled_family(first: FamilyResult, again: FamilyResult, rule: Rule) -> FamilyResult:
    """A family's two pairs pooled: its change, the two pairs' changes averaged (each ran the
    same rounds); its floor, the paired floor at that average's detectable effect; its p, the
    two pairs' own signed-rank p-values combined (:func:`.timing.pooling.combined_p`), each
    against half its floor.  It regressed when beyond the floor with p below ``rule.alpha``.

    The p-values, not the errors read back from the detectable effects: one pair's robust
    spread of 20 rounds came out half its size in 1 of 2,000 simulated unchanged trials, and
    pooled by that error +5.6 % (p=0.22) then +6.3 % (p=0.041) read p=9e-6 (``pairs.py``)."""
    blocks = [pooling.block_of(f, rule.alpha) for f in (first, again)]
    sure = [b for b in blocks if b is not None]
    if len(sure) < 2:
        return first
    together = pooling.averaged(sure)
    mde = math.expm1(pooling.z_power(rule.alpha) * together.se)
    floor = paired_floor(rule, mde, op=False)
    p = pooling.combined_p([first.p_value, again.p_value])
    regressed = p < rule.alpha and together.effect > math.log1p(floor)
    if not regressed:
        return replace(first, delta_pct=together.pct, p_value=p, floor_pct=floor * 100.0)
    reason = (
        f"{spec(first.family).total_words} {together.pct:+.1f}% over two pairs "
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
        floor_source=f"{first.floor_source}, over two pairs",
        timing_regressed=True,
        reasons=(reason, *first.reasons),
    )


def _readings(first: FamilyResult, again: FamilyResult, pooled: FamilyResult) -> str:
    label = family_total(first.family)
    return (
        f"{label} {first.delta_pct:+.1f}% (p={first.p_value:.2g}, floor {first.floor_pct:.0f}%) "
        f"then {again.delta_pct:+.1f}% (p={again.p_value:.2g}); pooled {pooled.delta_pct:+.1f}% "
        f"(p={pooled.p_value:.2g}, floor {pooled.floor_pct:.0f}%)"
    )
