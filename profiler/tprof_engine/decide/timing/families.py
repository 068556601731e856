"""The families judged beside each device's op time: the time outside any op (``host``) and
the device's idle time (``gpu-idle``), each as a total with the ops it grew before.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from tprof_engine.decide.timing import device as gpu
from tprof_engine.decide.timing.rule import Rule
from tprof_engine.decide.timing.samples import Side, Total, total_test
from tprof_engine.decide.timing.units import (
    RAW_BY_CHOICE,
    gain_of,
    pooled_probe,
    raw_by_choice,
    scale,
)
from tprof_engine.model import family_specs
from tprof_engine.model.arrays import FloatArray
from tprof_engine.model.device_tables import DeviceTable
from tprof_engine.model.records import OpTable
from tprof_engine.model.verdicts import (
    IMPROVED,
    REGRESSED,
    UNCHANGED,
    FamilyResult,
    TestWord,
)

IDLE_FAMILY = "gpu-idle"
IDLE_RANKED = 3  # ops named as the ones the device waited for


def _idle_side(tables: Sequence[DeviceTable], rule: Rule) -> Side:
    """A side whose round total is the device's idle µs: the total test runs on it as is."""
    rounds = [t.idle_us for t in tables]
    return Side(
        per_op={},
        per_session_op_medians={},
        calls={},
        totals=np.concatenate(rounds),
        session_total_medians=[rule.center(r) for r in rounds],
        raw_op_medians={},
        sessions=[],
    )


def idle_family(
    baseline: Sequence[OpTable], current: OpTable, rule: Rule, *, timed: bool
) -> FamilyResult | None:
    """The device's idle time per round against the baseline's, by the total test (§10).

    None unless both sides have device tables.  Its reasons name the ops whose activities
    the device waited for longer than in the baseline.
    """
    tables = [b.device for b in baseline if b.device is not None]
    if current.device is None or not tables or len(tables) < len(baseline):
        return None
    base, cur = _idle_side(tables, rule), _idle_side([current.device], rule)
    total = total_test(base, cur, len(baseline), rule, timed=timed, family=IDLE_FAMILY)
    verdict: TestWord = REGRESSED if total.regressed else IMPROVED if total.improved else UNCHANGED
    reasons: tuple[str, ...] = ()
    if verdict != UNCHANGED:
        reasons = (_idle_reason(tables, current.device, total, rule),)
    return family_result(IDLE_FAMILY, verdict, total, reasons)


HOST_FAMILY = "host"


def _host_side(
    tables: Sequence[OpTable], reference: float, rule: Rule, *, raw: bool, ops_gain: float = 0.0
) -> Side:
    """A side whose round total is the time outside any op, in drift-probe units (raw µs
    where ``raw``; its :attr:`Side.gain` still the probe's, :attr:`Side.ops_gain` the
    ``ops_gain`` given)."""
    rounds = [t.host_us * (1.0 if raw else scale(t, PROBE, reference, rule)) for t in tables]
    return Side(
        per_op={},
        per_session_op_medians={},
        calls={},
        totals=np.concatenate(rounds) if rounds else np.zeros(0),
        session_total_medians=[rule.center(r) for r in rounds],
        raw_op_medians={},
        sessions=[],
        gain=gain_of(tables, PROBE, reference, rule),
        raw_by_choice=raw,
        ops_gain=ops_gain,
    )


PROBE = family_specs.spec(HOST_FAMILY).probe  # the host time's drift probe


def host_family(
    baseline: Sequence[OpTable],
    current: OpTable,
    rule: Rule,
    *,
    timed: bool,
    ops_gain: float = 0.0,
) -> FamilyResult:
    """The round's time outside any op (Python between ops, hooks, the loop) by the total
    test: what the op rows can't show, judged like a family's total (``ops_gain``: the
    current run's, :attr:`.samples.Side.ops_gain`)."""
    reference = pooled_probe(baseline, PROBE, rule)
    medians = [rule.center(t.host_us) for t in baseline]
    raw = raw_by_choice(baseline, medians, HOST_FAMILY, reference, rule)
    base = _host_side(baseline, reference, rule, raw=raw)
    cur = _host_side([current], reference, rule, raw=raw, ops_gain=ops_gain)
    units = 0.0 if raw else reference  # the reference the judged units are in (0: raw µs)
    total = _at_round_scale(baseline, base, cur, units, rule, timed=timed)
    verdict: TestWord = REGRESSED if total.regressed else IMPROVED if total.improved else UNCHANGED
    reasons: tuple[str, ...] = ()
    grew: list[tuple[str, float]] = []
    if verdict != UNCHANGED:
        text = (
            f"time outside any op {total.base_us:,.0f} → {total.cur_us:,.0f} µs per round "
            f"({total.delta_pct:+.0%}, p={total.p_greater:.2g}, floor {total.floor:.0%} "
            f"{total.floor_source}): Python between ops, hooks or the body's own loop"
        )
        grew = [
            (op, d)
            for op, d in _host_growth(baseline, current, units, rule)
            if d >= rule.attribution_share * (total.cur_us - total.base_us)
        ][:HOST_RANKED]
        if verdict == REGRESSED and grew:
            text += "; it grew before " + ", ".join(f"{op} ({d:+,.0f} µs)" for op, d in grew)
        reasons = (text,)
    result = family_result(HOST_FAMILY, verdict, total, reasons)
    if verdict == REGRESSED:
        result = replace(result, grew_before=tuple(op for op, _ in grew))
    return result


HOST_RANKED = 3  # ops named as the ones the time outside any op grew before


def _at_round_scale(
    baseline: Sequence[OpTable],
    base: Side,
    cur: Side,
    reference: float,
    rule: Rule,
    *,
    timed: bool,
) -> Total:
    """The host time's total test; in stored mode its floor is at least the change that moves
    the whole round by :meth:`Rule.round_floor` (paired rounds keep the host's own floor).

    Between processes the host time of an unchanged test moved +26 to +57 % on the 2-core VM
    (``benchmarks/ab_reruns.py``), far beyond what its baseline sessions, saved one after the
    other, showed (floors 11-32 %), yet never more than 6 % of its round.  Pairing cancels
    that drift.
    """
    host_us = rule.center(base.totals)
    walls = [t.wall_us * scale(t, PROBE, reference, rule) for t in baseline]
    round_us = rule.center(np.concatenate(walls)) if walls else 0.0
    least = 0.0 if rule.paired or host_us <= 0 else rule.round_floor() * round_us / host_us
    total = total_test(
        base, cur, len(baseline), rule, timed=timed, family=HOST_FAMILY, least_floor=least
    )
    if least > 0 and total.floor == least:
        source = f"at the test's scale: {rule.round_floor():.0%} of its {round_us:,.0f} µs round"
        total = replace(total, floor_source=source + (RAW_BY_CHOICE if total.raw_us else ""))
    return total


def _host_growth(
    baseline: Sequence[OpTable], current: OpTable, reference: float, rule: Rule
) -> list[tuple[str, float]]:
    """The ops before which the time outside any op grew, µs per round in drift-probe units
    (the total's units, so the two add up), largest first: the gap before each of the body's
    outermost ops, against the baseline's pooled rounds."""
    if current.host_before_us is None:
        return []
    pooled: dict[str, list[FloatArray]] = {}
    for t in baseline:
        if t.host_before_us is None:
            return []  # a baseline from before the gaps were kept: nothing to rank against
        units = scale(t, PROBE, reference, rule)
        for i, name in enumerate(t.names):
            pooled.setdefault(name, []).append(t.host_before_us[i] * units)
    units = scale(current, PROBE, reference, rule)
    grew = []
    for i, name in enumerate(current.names):
        before = rule.center(np.concatenate(pooled[name])) if name in pooled else 0.0
        delta = rule.center(current.host_before_us[i] * units) - before
        if delta > 0:
            grew.append((name, delta))
    return sorted(grew, key=lambda g: -g[1])


def family_result(
    family: str,
    verdict: TestWord,
    total: Total,
    reasons: Sequence[str],
    *,
    gate: Sequence[str] = (),
    structure: tuple[float, bool] = (0.0, False),
) -> FamilyResult:
    """A family's record from its total test, the ops that gate it and its structure."""
    return FamilyResult(
        family=family,
        verdict=verdict,
        baseline_total_us=total.base_us,
        current_total_us=total.cur_us,
        delta_pct=total.delta_pct * 100.0,
        p_value=total.p_greater,
        floor_pct=total.floor * 100.0,
        floor_source=total.floor_source,
        mde_pct=total.mde * 100.0,
        timing_regressed=bool(total.regressed),
        op_gate=tuple(gate),
        structure_added_us=structure[0],
        structure_regressed=structure[1],
        reasons=tuple(reasons),
        raw_us=total.raw_us,
        to_other_units=total.to_other_units,
    )


def _idle_reason(
    baseline: Sequence[DeviceTable], current: DeviceTable, total: Total, rule: Rule
) -> str:
    fraction = f"{_fraction(baseline, rule):.0%} → {_fraction([current], rule):.0%}"
    text = (
        f"device idle {total.base_us:,.0f} → {total.cur_us:,.0f} µs per round ({fraction} of "
        f"its span, {total.delta_pct:+.0%}, p={total.p_greater:.2g}, floor {total.floor:.0%} "
        f"{total.floor_source})"
    )
    waited = gpu.idle_growth(baseline, current)[:IDLE_RANKED]
    if waited:
        text += "; it waited longer for " + ", ".join(f"{o} {d:+,.0f} µs" for o, d in waited)
    return text


def _fraction(tables: Sequence[DeviceTable], rule: Rule) -> float:
    return rule.center(np.concatenate([t.idle_fraction for t in tables]))


def families(baseline: Sequence[OpTable], current: OpTable) -> list[str]:
    fams = ["cpu"]
    if current.has_device and all(b.has_device for b in baseline):
        fams.append(family_specs.device_spec(current.device_family).name)
    return fams


def device_note(baseline: Sequence[OpTable], current: OpTable) -> tuple[str, ...]:
    if current.has_device and not all(b.has_device for b in baseline):
        return (f"the baseline has no {_label(current)} times: {_label(current)} was not compared",)
    if not current.has_device:
        return (f"{_label(current)} was not profiled (no GPU): CPU times only",)
    return ()


def _label(table: OpTable) -> str:
    return family_specs.device_spec(table.device_family).label
