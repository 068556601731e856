"""The units a family is judged in: drift-probe units (each session's times over its
probe's, times the baseline's pooled probe) or raw µs, and the check that a slowdown in one
shows in the other (docs/design.md §5)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tprof_engine.decide.timing.rule import Rule
from tprof_engine.model.family_specs import spec
from tprof_engine.model.records import OpTable
from tprof_engine.model.verdicts import FamilyResult


def scale(table: OpTable, probe_attr: str | None, reference: float, rule: Rule) -> float:
    """Factor putting a session's times in units of the reference probe time (1 for a
    family judged in raw µs)."""
    if not rule.probe or probe_attr is None or reference <= 0:
        return 1.0
    med = rule.center(getattr(table, probe_attr))
    return reference / med if med > 0 else 1.0


def gain_of(
    tables: Sequence[OpTable], probe_attr: str | None, reference: float, rule: Rule
) -> float:
    """A side's :attr:`Side.gain`: its one session's probe factor (1 for pooled sessions)."""
    return scale(tables[0], probe_attr, reference, rule) if len(tables) == 1 else 1.0


def pooled_probe(tables: Sequence[OpTable], probe_attr: str | None, rule: Rule) -> float:
    """The pooled probe time of the baseline's sessions, the unit both sides are put in (0:
    a family judged in raw µs)."""
    if probe_attr is None or not rule.probe:
        return 0.0
    return rule.center(np.concatenate([getattr(b, probe_attr) for b in tables]))


def probe_narrows(
    raw_medians: Sequence[float], scales: Sequence[float], rule: Rule, minimum: float | None
) -> bool:
    """Whether a family's baseline sessions set a learned floor in probe units no wider than
    in raw µs (both at least ``minimum``): the probe is used unless it widens the floor.

    In most tests it doesn't (the machine's speed moves the probe and the ops alike), and
    where both floors sit at their minimum the probe stays, to take out the drift of the
    machine the current run meets.  Where the probe adds drift of its own, it goes: the probe
    of an HF Llama ``generate`` test moved -19 to +13 % between processes while the test's raw
    host time moved a few percent, and in probe units its learned floor widened to 44 %,
    above a planted +45-70 % host loop's reading in some processes (``busy_reruns.py --suite
    hf``).  A comparison of the raw spreads alone would pick the narrower of two noisy
    estimates every time, and so set floors below the sessions' true drift: simulated, false
    failures rose (at 5 % drift, 2 to 4 in 1,000) and power fell; only a wider floor moves the
    choice.  One session, or a configured floor, can't tell: probe units."""
    pairs = [(m, s) for m, s in zip(raw_medians, scales, strict=True) if m > 0 and s > 0]
    in_probe = rule.floor_for([m * s for m, s in pairs], minimum=minimum)
    return in_probe <= rule.floor_for([m for m, _ in pairs], minimum=minimum)


def raw_by_choice(
    tables: Sequence[OpTable],
    raw_medians: Sequence[float],
    family: str,
    reference: float,
    rule: Rule,
) -> bool:
    """Whether a family with a drift probe is judged in raw µs: its sessions' ``raw_medians``
    agree better without the probe (:func:`probe_narrows`)."""
    if reference <= 0 or not rule.choose_units:
        return False
    found = spec(family)
    scales = [scale(t, found.probe, reference, rule) for t in tables]
    return not probe_narrows(raw_medians, scales, rule, found.min_floor)


# How a floor's source reads for a family judged in raw µs by :func:`probe_narrows`.
RAW_BY_CHOICE = ", in raw µs (the drift probe spread its sessions wider)"


def other_units_follow(delta_pct: float, floor: float, to_other: float, rule: Rule) -> bool:
    """Whether a slowdown of ``delta_pct`` in the units a family is judged in is one in the
    other units too (raw µs for probe units, probe units for raw µs): at least the part of
    the floor the U tests shift by.

    A probe that ran faster than the baseline's can't make unchanged raw times read as
    slower: beside one busy process the probe of an HF Llama ``generate`` test read 18 %
    faster while its ops' raw µs moved under 1 %, and both its families read +16-23 % in
    probe units (``busy_reruns.py``).  Nor can a machine that slowed the probe as much as the
    ops make a family judged in raw µs read as slower."""
    return (1.0 + delta_pct) * to_other - 1.0 >= rule.shift_share * floor


def held_back_notes(
    results: Sequence[FamilyResult],
    uniform_pct: float | None,
    probe_pct: float | None,
    rule: Rule,
) -> list[str]:
    """A note for each family beyond its floor that :func:`other_units_follow` held back
    (``uniform_pct``, ``probe_pct``: the ops' common shift and the probe's, percent; no notes
    without the probe's): in probe units, a probe that ran faster than the baseline's while
    the raw times did not; in raw µs, a probe and ops that ran slower by as much as the times
    did."""
    if probe_pct is None:
        return []
    notes = []
    for r in results:
        beyond = r.p_value < rule.alpha and r.delta_pct > r.floor_pct
        if spec(r.family).probe is None or r.timing_regressed or not beyond:
            continue
        if not family_follows(r, rule):
            notes.append(_held_back_note(r, in_other_units(r), probe_pct, uniform_pct or 0.0))
    return notes


def family_follows(r: FamilyResult, rule: Rule) -> bool:
    """:func:`other_units_follow` of a family's result: its change, floor and factor."""
    return other_units_follow(r.delta_pct / 100.0, r.floor_pct / 100.0, r.to_other_units, rule)


def in_other_units(r: FamilyResult) -> float:
    """A family's change (a fraction) in the units it was not judged in."""
    return (1.0 + r.delta_pct / 100.0) * r.to_other_units - 1.0


def _held_back_note(r: FamilyResult, other: float, probe_pct: float, uniform_pct: float) -> str:
    label = spec(r.family).label
    if r.raw_us:
        return (
            f"{label} {r.delta_pct:+.0f}% in raw µs is {other:+.0%} over the machine's "
            f"slowdown: the drift probe ran {probe_pct:.0f}% and the ops' raw times "
            f"{uniform_pct:.0f}% slower than the baseline's as well, so it is not read as a "
            "slowdown"
        )
    return (
        f"{label} {r.delta_pct:+.0f}% in probe units is {other:+.0%} in raw µs: the drift "
        f"probe ran {-probe_pct:.0f}% faster than the baseline's and these times did not, "
        "so it is not read as a slowdown"
    )
