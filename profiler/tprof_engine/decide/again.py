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
from tprof_engine.decide.timing.units import family_follows, in_other_units, other_units_follow
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
# The looks a verdict may get in all: the first and at most two more (a short verdict still
# short over two looks; a regression a fresh look took back, to break the tie).
MOST_LOOKS = 3


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


def no_evidence(
    child: TestVerdict | None, rule: Rule, why: str = "", other_settings: Sequence[str] = ()
) -> str:
    """Why a look is no evidence, in words (empty: it is): it gave no verdict (``why``), ran
    under other settings or compared no timings."""
    look = _look(rule)
    if child is None:
        return f"not measured again: {why}"
    if other_settings:
        return f"a {look} ran under {', '.join(other_settings)} unlike it"
    if not child.timing_compared:
        return f"the {look} compared no timings"
    return ""


def after_looks(first: TestVerdict, looks: Sequence[TestVerdict], rule: Rule) -> TestVerdict:
    """``first`` once ``looks`` (each a fresh pair or process that is evidence) measured its
    short families again: regressed when one of them, pooled over every look, is
    significantly beyond its floor (:func:`pooled_family`); else ``first`` with a note giving
    every reading."""
    pooled = _pooled_over(first, short_families(first, rule), looks, rule)
    said = f"short of its floor, measured again in {_looks_words(rule, len(looks))}: "
    also = first.reason if first.verdict not in (UNCHANGED, IMPROVED) else ""
    return _judged(first, first, pooled, looks, said, also, rule)


def another_look(
    first: TestVerdict, looks: Sequence[TestVerdict], rule: Rule, *, most: int = MOST_LOOKS
) -> bool:
    """Whether a verdict short of its floor gets one more look: fewer than ``most`` so far,
    and a short family still short over every look pooled (beyond part of its floor with p
    below :data:`SHORT_P`, not regressed).  A +10 % custom op beside one busy process read
    +7.2 % (p=0.10), then +8.9 % (p=0.095): pooled +8.0 % at p=0.034, past α."""
    if len(looks) + 1 >= most:
        return False
    pooled = _pooled_over(first, short_families(first, rule), looks, rule)
    if any(g.timing_regressed for _, g in pooled):
        return False
    return any(
        g.p_value < SHORT_P and g.delta_pct > rule.shift_share * g.floor_pct for _, g in pooled
    )


def after_dispute(
    first: TestVerdict, disputed: TestVerdict, looks: Sequence[TestVerdict], rule: Rule
) -> TestVerdict:
    """A timing regression (``first``) whose fresh look took it back (``disputed``: the
    process-dependent verdict), once a third look measured it: regressed when a family that
    failed, pooled over every look as a short one is, is significantly beyond its floor;
    else ``disputed`` with a note giving every reading.

    A process's own speed is what a fresh look averages out, and one look alone can't say
    which of two processes read right: beside one busy process a +10 % custom op read +13 %
    in its first pair and +1 to +3 % in fresh ones (``ab_reruns.py``, 4 of 4 taken back),
    and +5 to +9 % in others (``docs/timing.md``)."""
    pooled = _pooled_over(first, failed_totals(first), looks, rule)
    said = f"taken back, then measured a third time in a {_look(rule)}: "
    return _judged(first, disputed, pooled, looks, said, "", rule)


def breaks_ties(first: TestVerdict, rule: Rule) -> bool:
    """Whether a regression (``first``) a fresh look took back is measured a third time under
    ``rule``: on tprof ab's pairs, not against a stored baseline, and when a family failed on
    its total (what the looks pool; one that failed on a single op has no total beyond its
    floor: an unchanged test's ``aten::copy_`` +42 % then +3 % got a third pair with nothing
    to pool).  Both sides of a pair share the
    machine's state of the moment, so what a look's pairs disagree on is their processes' own
    speed, which a third pair averages; a stored look's change also carries the machine's
    state against the baseline sessions, and a slow state that comes back in one process of
    three wins the tie.  Simulated (``sequence.py``, 2,000 unchanged trials, 1 process in 3
    at 1.6×), a third look there failed 4.70 % of unchanged tests against 2.55 %; on pairs
    (``pairs.py``) no false-failure rate moved."""
    return rule.paired and bool(failed_totals(first))


def failed_totals(verdict: TestVerdict) -> list[FamilyResult]:
    """The gating families of ``verdict`` that failed on their total time (not on one op)."""
    return [f for f in verdict.families if f.gates and f.timing_regressed]


def _pooled_over(
    first: TestVerdict,
    families: Sequence[FamilyResult],
    looks: Sequence[TestVerdict],
    rule: Rule,
) -> list[tuple[FamilyResult, FamilyResult]]:
    """Each of ``families`` (``first``'s) with its pooled result over ``first`` and every
    look that judged it."""
    out = []
    for f in families:
        again = [g for look in looks for g in look.families if g.family == f.family]
        if len(again) == len(looks):
            out.append((f, pooled_family([f, *again], rule)))
    return out


def _judged(
    first: TestVerdict,
    otherwise: TestVerdict,
    pooled: Sequence[tuple[FamilyResult, FamilyResult]],
    looks: Sequence[TestVerdict],
    said: str,
    also: str,
    rule: Rule,
) -> TestVerdict:
    """``first`` failed on the families that regressed pooled over every look (a note each,
    after ``said``; ``also``: what else its first look found, kept in the reason); with none,
    ``otherwise`` with a note giving every reading."""
    failed = [(f, g) for f, g in pooled if g.timing_regressed]
    if not failed:
        readings = "; ".join(_readings(f, looks, g, rule) for f, g in pooled)
        return otherwise.with_notes(said + (readings or "no family to pool"))
    notes = [said + _readings(f, looks, g, rule) for f, g in failed]
    pooled_by = {g.family: g for _, g in failed}
    reasons = [f"{g.family.upper()}: " + "; ".join(g.reasons) for g in pooled_by.values()]
    if also:
        reasons.append(also)
    return replace(
        first,
        verdict=worst([REGRESSED, first.verdict]),
        reason=" | ".join(reasons),
        families=tuple(pooled_by.get(f.family, f) for f in first.families),
        notes=(*first.notes, *notes),
    )


def pooled_family(looks: Sequence[FamilyResult], rule: Rule) -> FamilyResult:
    """A family's looks pooled: its change, the looks' changes averaged (each ran the same
    rounds); its p, their own one-sided p-values combined
    (:func:`.timing.pooling.combined_p`), each against half its floor; its floor, a pair's the
    paired floor at the average's detectable effect, a stored family's the first look's (it
    bounds what its baseline sessions allow of one process, and of an average of several).
    It regressed when beyond the floor with p below ``rule.alpha`` and its units follow.

    The p-values, not the errors read back from the detectable effects: one pair's robust
    spread of 20 rounds came out half its size in 1 of 2,000 simulated unchanged trials, and
    pooled by that error +5.6 % (p=0.22) then +6.3 % (p=0.041) read p=9e-6 (``pairs.py``)."""
    first = looks[0]
    blocks = [pooling.block_of(f, rule.alpha) for f in looks]
    sure = [b for b in blocks if b is not None]
    if len(sure) < len(looks):
        return first
    together = pooling.averaged(sure)
    mde = math.expm1(pooling.z_power(rule.alpha) * together.se)
    floor = paired_floor(rule, mde, op=False) if rule.paired else first.floor_pct / 100.0
    p = pooling.combined_p([f.p_value for f in looks])
    change = math.expm1(together.effect)
    base_us = first.baseline_total_us
    beyond = beyond_floor(rule, True, base_us, base_us * (1.0 + change), change, floor, p, 1.0)[0]
    to_other = math.prod(f.to_other_units for f in looks) ** (1.0 / len(looks))  # as averaged
    if not (beyond and other_units_follow(change, floor, to_other, rule)):
        return replace(
            first,
            delta_pct=together.pct,
            p_value=p,
            floor_pct=floor * 100.0,
            timing_regressed=False,
            to_other_units=to_other,
        )
    over = _looks_words(rule, len(looks))
    then = " then ".join(f"{f.delta_pct:+.1f}%" for f in looks)
    reason = (
        f"{spec(first.family).total_words} {together.pct:+.1f}% over {over} "
        f"(p={p:.2g}, floor {floor:.0%} {first.floor_source}; {then})"
    )
    return replace(
        first,
        verdict=REGRESSED,
        delta_pct=together.pct,
        p_value=p,
        floor_pct=floor * 100.0,
        mde_pct=mde * 100.0,
        floor_source=f"{first.floor_source}, over {over}",
        timing_regressed=True,
        reasons=(reason, *first.reasons),
    )


def _looks_words(rule: Rule, n: int) -> str:
    """``n`` looks under ``rule`` in words: "a fresh pair", "two pairs", "three processes"."""
    if n == 1:
        return f"a {_look(rule)}"
    kind = "pairs" if rule.paired else "processes"
    return f"{_COUNTS.get(n, str(n))} {kind}"


_COUNTS = {2: "two", 3: "three", 4: "four"}


def _look(rule: Rule) -> str:
    """What measures a verdict again under ``rule``, in words."""
    return "fresh pair" if rule.paired else "fresh process"


def _readings(
    first: FamilyResult, looks: Sequence[TestVerdict], pooled: FamilyResult, rule: Rule
) -> str:
    """A family's every reading and its pooled one, in words, and why a pooled change
    beyond its floor was not read as a slowdown (its other units didn't follow)."""
    label = family_total(first.family)
    again = [g for look in looks for g in look.families if g.family == first.family]
    then = "".join(f" then {g.delta_pct:+.1f}% (p={g.p_value:.2g})" for g in again)
    held = ""
    if set_aside(pooled, rule) and not family_follows(pooled, rule):
        units = "probe units" if pooled.raw_us else "raw µs"
        held = f"; {in_other_units(pooled):+.1%} in {units}, so not read as a slowdown"
    return (
        f"{label} {first.delta_pct:+.1f}% (p={first.p_value:.2g}, floor {first.floor_pct:.0f}%)"
        f"{then}; pooled {pooled.delta_pct:+.1f}% (p={pooled.p_value:.2g}, "
        f"floor {pooled.floor_pct:.0f}%){held}"
    )
