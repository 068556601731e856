"""The timing rule: baseline sessions + current op table → a verdict per family and op."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from tprof_engine.decide.timing import device, stats
from tprof_engine.decide.timing.beside import (
    held_beside_others,
    ops_gain,
    over_common_shift,
    shifts,
)
from tprof_engine.decide.timing.families import (
    device_note,
    families,
    family_result,
    host_family,
    idle_family,
)
from tprof_engine.decide.timing.rule import Rule
from tprof_engine.decide.timing.samples import (
    OpStats,
    Side,
    Total,
    VsRest,
    op_tests,
    sides_of,
    total_test,
    vs_rest_tests,
)
from tprof_engine.decide.timing.structure import (
    Structure,
    host_wait_reasons,
    structure_of,
    structure_reasons,
)
from tprof_engine.decide.timing.units import held_back_notes, other_units_follow
from tprof_engine.model import device_delta, family_specs
from tprof_engine.model.arrays import FloatArray
from tprof_engine.model.records import OpTable
from tprof_engine.model.verdicts import (
    CALLS_CHANGED,
    CHANGED,
    IMPROVED,
    INCOMPARABLE,
    INCONCLUSIVE,
    NEW,
    NO_BASELINE,
    NOT_GATED,
    REGRESSED,
    REMOVED,
    TOO_NOISY,
    UNCHANGED,
    FamilyResult,
    OpVerdict,
    OpWord,
    RoundSamples,
    TestVerdict,
    TestWord,
    op_rank,
    verdict_rank,
)

__all__ = ["NOTHING_CHANGED", "Rule", "compare", "compare_across", "says_nothing"]
SAMPLED_OPS = 5  # flagged ops per family whose per-round samples go into reports
NOTHING_CHANGED = "no op changed beyond its floor"


@dataclass(frozen=True, slots=True, kw_only=True)
class _Call:
    """What :func:`_classify` decided for one op."""

    verdict: OpWord
    gated: bool
    gates: bool = False  # fails the test on its own
    vs_rest_only: bool = False
    note: str = ""


def _classify(
    o: OpStats, vs_rest: VsRest | None, total: Total, rule: Rule, n_tested: int, *, timed: bool
) -> _Call:
    """An op's verdict from its figures: structure first, then timing."""
    if o.base_calls == 0 and o.cur_calls > 0:
        return _Call(verdict=NEW, gated=False)
    if o.cur_calls == 0 and o.base_calls > 0:
        return _Call(verdict=REMOVED, gated=False)
    if o.base_calls != o.cur_calls:
        return _Call(verdict=CALLS_CHANGED, gated=False)
    if o.p is None:
        # A device wait (on device runs), or an op in too few rounds to have a per-round time.
        why = "waits for the device" if o.base_calls else "in too few rounds to time"
        return _Call(verdict=NOT_GATED, gated=False, note=f"{why}: reported, not gated")
    if not timed:
        return _Call(verdict=UNCHANGED, gated=False)
    return _classify_timed(o, vs_rest, total, rule, n_tested)


def _classify_timed(
    o: OpStats, vs_rest: VsRest | None, total: Total, rule: Rule, n_tested: int
) -> _Call:
    assert o.p is not None and o.low_base is not None and o.low_cur is not None  # tested ops
    sig_up = (
        o.p < rule.alpha
        and o.pct > o.floor
        and (o.cur_us - o.base_us) >= rule.abs_floor_us
        and other_units_follow(o.pct, o.floor, total.to_other_units, rule)
    )
    rest_up = vs_rest is not None and vs_rest.regressed
    alone = (sig_up and rest_up) if rule.beside_others else (sig_up or rest_up)
    if alone and o.share >= rule.material_share:
        if rest_up and not sig_up:
            assert vs_rest is not None
            note = (
                f"{vs_rest.pct:+.0%} against the rest of the test, "
                f"floor {vs_rest.floor:.0%}, p={vs_rest.p:.2g}"
            )
            return _Call(verdict=REGRESSED, gated=True, gates=True, vs_rest_only=True, note=note)
        return _Call(verdict=REGRESSED, gated=True, gates=True)
    if sig_up and total.regressed:
        return _Call(verdict=REGRESSED, gated=True)  # carries part of a regressed total
    if (sig_up or rest_up) and o.share >= rule.material_share:
        return _Call(verdict=UNCHANGED, gated=True, note=_one_route_note(o, vs_rest))
    # A Bonferroni cut: the test for a speed-up runs only for ops that didn't slow down.
    shifted = o.low_base * (1.0 - rule.shift_share * o.floor)
    if stats.mwu_less(o.low_cur, shifted) < rule.alpha / n_tested and o.pct < -o.floor:
        return _Call(verdict=IMPROVED, gated=True)
    if o.mde is not None and o.mde > o.floor and o.share >= rule.material_share:
        need = stats.rounds_needed(o.sigma, o.floor, total.n_base, alpha=rule.alpha)
        note = f"can only see slowdowns ≥ {o.mde:.0%} (floor {o.floor:.0%})" + (
            f"; needs ~{need} rounds" if need else ""
        )
        return _Call(verdict=TOO_NOISY, gated=True, note=note)
    return _Call(verdict=UNCHANGED, gated=True)


def _one_route_note(o: OpStats, vs_rest: VsRest | None) -> str:
    """Why an op that rose on one route alone doesn't fail a test that ran beside others."""
    against = (
        "not tried against the rest of the test"
        if vs_rest is None
        else f"{vs_rest.pct:+.0%} against the rest of the test, floor {vs_rest.floor:.0%}"
    )
    return (
        f"{o.pct:+.0%} here, {against}: beside other processes an op alone must rise on both routes"
    )


def _op_verdict(
    name: str, family: str, o: OpStats, vs_rest: VsRest | None, call: _Call
) -> OpVerdict:
    # From 0 µs an op called on both sides has no relative change (an infinite one reads
    # "new"); only an op the baseline never called is new.
    pct = o.pct if math.isfinite(o.pct) or o.base_calls == 0 else math.nan
    return OpVerdict(
        op=name,
        family=family,
        verdict=call.verdict,
        baseline_median_us=o.base_us,
        current_median_us=o.cur_us,
        delta_us=o.cur_us - o.base_us,
        delta_pct=pct * 100.0,
        p_value=o.p,
        calls_baseline=o.base_calls,
        calls_current=o.cur_calls,
        share=o.share,
        floor_pct=o.floor * 100.0,
        mde_pct=None if o.mde is None else o.mde * 100.0,
        gated=call.gated,
        note=call.note or o.floor_note,
        vs_rest_pct=None if vs_rest is None else vs_rest.pct * 100.0,
        vs_rest_floor_pct=None if vs_rest is None else vs_rest.floor * 100.0,
        vs_rest_mde_pct=None if vs_rest is None else vs_rest.mde * 100.0,
        vs_rest_only=call.vs_rest_only,
    )


def _attribute(
    ops: list[OpVerdict], gate: Sequence[str], total: Total, rule: Rule
) -> list[OpVerdict]:
    """When the total regressed, keep as regressed only the ops carrying its delta."""
    delta = total.cur_us - total.base_us
    if not total.regressed or delta <= 0:
        return ops
    small = rule.attribution_share * delta
    return [
        replace(o, verdict=UNCHANGED, note="slower, but carries little of the total's delta")
        if o.verdict == REGRESSED and o.op not in gate and o.delta_us < small
        else o
        for o in ops
    ]


def _family_verdict(
    total: Total, gate: Sequence[str], structure: Structure, rule: Rule, *, timed: bool
) -> tuple[TestWord, str | None]:
    """The family's verdict, and a reason when it's improved or inconclusive."""
    if total.regressed or gate or structure.regressed:
        return REGRESSED, None
    if structure.changes or structure.host_waits:
        return CHANGED, None
    if total.improved:
        return IMPROVED, f"total op time {total.delta_pct:+.1%} (p={total.p_less:.2g})"
    min_p = stats.min_attainable_p(total.n_cur_low, total.n_base_low)
    if timed and min_p > rule.alpha:
        return INCONCLUSIVE, (
            f"too few rounds ({total.n_cur} current, {total.n_base} baseline; the tests use the "
            f"faster {total.n_cur_low} and {total.n_base_low}) to reach α={rule.alpha}"
        )
    if timed and total.mde > total.floor:
        need = stats.rounds_needed(total.sigma, total.floor, total.n_base, alpha=rule.alpha)
        return INCONCLUSIVE, (
            f"too noisy: can only see slowdowns ≥ {total.mde:.0%}, above the "
            f"{total.floor:.0%} floor" + (f"; ~{need} rounds would see it" if need else "")
        )
    return UNCHANGED, None


def _round_samples(
    ops: Sequence[OpVerdict], base: Side, cur: Side, family: str
) -> list[RoundSamples]:
    """Per-round samples of the ops a report shows first, for distribution plots."""
    shown = [o.op for o in ops if o.flagged][:SAMPLED_OPS]
    return [
        RoundSamples(
            op=name,
            family=family,
            baseline_us=_rounded(base.per_op.get(name)),
            current_us=_rounded(cur.per_op.get(name)),
        )
        for name in shown
    ]


def _rounded(values: FloatArray | None) -> tuple[float, ...]:
    return () if values is None else tuple(round(float(v), 3) for v in values)


@dataclass(frozen=True, slots=True, kw_only=True)
class _FamilyOutcome:
    result: FamilyResult
    ops: list[OpVerdict]
    samples: list[RoundSamples]


def _compare_family(
    baseline: Sequence[OpTable],
    current: OpTable,
    family: str,
    rule: Rule,
    *,
    timed: bool,
    ops_gain: float,
) -> _FamilyOutcome:
    """One family through the pipeline of the module docstring."""
    base, cur = sides_of(baseline, current, family, rule, ops_gain=ops_gain)
    total = total_test(base, cur, len(baseline), rule, timed=timed, family=family)
    stats_by_op = op_tests(base, cur, family, total.base_us, rule, device_run=current.has_device)
    vs_rest = (
        vs_rest_tests(stats_by_op, base, cur, total.floor, rule) if timed and rule.vs_rest else {}
    )
    n_tested = sum(o.p is not None for o in stats_by_op.values())
    ops: list[OpVerdict] = []
    gate: list[str] = []
    for name, o in stats_by_op.items():
        call = _classify(o, vs_rest.get(name), total, rule, n_tested, timed=timed)
        ops.append(_op_verdict(name, family, o, vs_rest.get(name), call))
        if call.gates:
            gate.append(name)
    ops = _attribute(ops, gate, total, rule)
    waits = host_wait_reasons(baseline, current, family)
    structure = structure_of(stats_by_op, ops, total, rule, waits)
    by_name = {o.op: o for o in ops}
    reasons = structure_reasons(total, [by_name[n] for n in gate], structure, vs_rest)
    verdict, extra = _family_verdict(total, gate, structure, rule, timed=timed)
    if extra:
        reasons.append(extra)
    ops.sort(key=lambda o: (op_rank(o.verdict), -o.delta_us))
    result = family_result(
        family,
        verdict,
        total,
        reasons,
        gate=gate,
        structure=(structure.added_us, structure.regressed),
    )
    return _FamilyOutcome(result=result, ops=ops, samples=_round_samples(ops, base, cur, family))


def compare(
    baseline: Sequence[OpTable],
    current: OpTable,
    rule: Rule | None = None,
    *,
    same_hardware: bool = True,
) -> TestVerdict:
    """Compare the current op table with one or more baseline sessions.

    With ``same_hardware=False`` timings are not compared: only the structure (calls) gates.
    """
    rule = rule or Rule()
    if not baseline:
        return TestVerdict(verdict=NO_BASELINE, reason="no baseline recorded for this test")
    beside = same_hardware and rule.beside_others
    read = beside or (same_hardware and rule.probe)
    uniform, probe_shift = shifts(baseline, current, rule) if read else (None, None)
    judged = over_common_shift(current, uniform, probe_shift, rule) if beside else current
    gain = ops_gain(uniform if judged is current else 0.0)
    outcomes, results = _judged_families(baseline, judged, rule, same_hardware, gain)
    if judged is not current:
        assert uniform is not None  # a shift was taken out
        plain = _judged_families(baseline, current, rule, same_hardware, ops_gain(uniform))[1]
        results = held_beside_others(results, plain, uniform)
    on_device = device_test(results)
    # The drift between the sides says how timings were compared; with none compared, nothing.
    # A rule without the probe (tprof ab's pairs: raw µs, both rounds of a pair on one
    # machine) compared nothing in probe units: no drift to speak of.
    probed = same_hardware and rule.probe and _probe_speaks(results, on_device=on_device)
    results = moved_most_first(results)
    verdict, reason = _combine(results)
    ops = [op for o in outcomes for op in o.ops]
    return TestVerdict(
        verdict=verdict,
        reason=reason,
        ops=tuple(ops),
        families=tuple(results),
        uniform_shift_pct=uniform if probed else None,
        probe_shift_pct=probe_shift if probed else None,
        beside_others=judged is not current,
        sessions=len(baseline),
        notes=(
            *device_note(baseline, current),
            *(_judged_on(results) if on_device else ()),
            *held_back_notes(results, uniform, None if beside else probe_shift, rule),
        ),
        timing_compared=same_hardware,
        round_samples=tuple(s for o in outcomes for s in o.samples),
        device_rows=_device_rows(baseline, current, ops),
    )


def _judged_families(
    baseline: Sequence[OpTable], current: OpTable, rule: Rule, timed: bool, gain: float
) -> tuple[list[_FamilyOutcome], list[FamilyResult]]:
    """Each family's outcome, and every family's result (the host's and the device's idle time
    too), each marked as gating the test or only reporting (``gain``: the ops' common shift's
    factor, :attr:`.samples.Side.ops_gain`)."""
    outcomes = [
        _compare_family(baseline, current, fam, rule, timed=timed, ops_gain=gain)
        for fam in families(baseline, current)
    ]
    results = [o.result for o in outcomes]
    idle = idle_family(baseline, current, rule, timed=timed)
    if idle is not None:
        results.append(idle)
    results.append(host_family(baseline, current, rule, timed=timed, ops_gain=gain))
    return outcomes, with_roles(results, on_device=device_test(results))


def _device_rows(
    baseline: Sequence[OpTable], current: OpTable, ops: Sequence[OpVerdict]
) -> tuple[device_delta.DeviceRowDelta, ...]:
    """The kernels, copies and fills of the flagged ops and of the ops with a new host wait,
    when every side has a device table."""
    tables = [b.device for b in baseline if b.device is not None]
    if current.device is None or len(tables) < len(baseline):
        return ()
    flagged = [o.op for o in sorted((o for o in ops if o.flagged), key=lambda o: -o.delta_us)]
    waiting = [w.op for w in device.host_waits(tables, current.device) if w.more]
    return tuple(device.row_deltas([*flagged, *waiting], tables, current.device))


def compare_across(
    baseline: Sequence[OpTable],
    current: OpTable,
    rule: Rule | None = None,
    *,
    structure_diffs: Sequence[str] = (),
    timing_diffs: Sequence[str] = (),
    notes: Sequence[str] = (),
) -> TestVerdict:
    """:func:`compare` under the comparability rule, given what differs between the runs.

    Differing structure keys (torch, device) make the pair incomparable; any other difference
    leaves only the calls compared, and the verdict says which keys kept timings out.
    """
    if structure_diffs:
        return TestVerdict(
            verdict=INCOMPARABLE,
            reason="calls and timings not comparable: " + ", ".join(structure_diffs),
            differences=tuple(structure_diffs),
        )
    verdict = compare(baseline, current, rule, same_hardware=not timing_diffs)
    extra = list(notes)
    if timing_diffs:
        extra.append("timings not compared: " + ", ".join(timing_diffs))
    if not extra:
        return verdict
    return replace(
        verdict,
        differences=tuple(timing_diffs) or verdict.differences,
        notes=(*verdict.notes, *extra),
    )


def device_test(results: Sequence[FamilyResult]) -> bool:
    """Whether the test's ops ran on a device: its baseline has device time."""
    return any(family_specs.is_device(r.family) and r.baseline_total_us > 0 for r in results)


def with_roles(results: Sequence[FamilyResult], *, on_device: bool) -> list[FamilyResult]:
    """Each family marked as gating the test or only reported beside it, by the registry
    (:mod:`tprof_engine.model.family_specs`) and where the test's ops ran."""
    return [replace(r, gates=family_specs.gates(r.family, device_test=on_device)) for r in results]


def _probe_speaks(results: Sequence[FamilyResult], *, on_device: bool) -> bool:
    """Whether the drift probe says how the verdict's timings were compared: on the CPU
    always; on a device test only when a family judged in probe units fails it (the device's
    time is judged in raw µs, and the CPU's only reports)."""
    return not on_device or any(
        r.fails and family_specs.spec(r.family).probe is not None for r in results
    )


def _judged_on(results: Sequence[FamilyResult]) -> tuple[str, ...]:
    """A device test's note on the families its timing was judged on and those reported."""
    judged = [family_specs.family_total(r.family) for r in results if r.gates]
    reported = [family_specs.family_total(r.family) for r in results if not r.gates]
    return (
        f"timing judged on {' and '.join(judged)}; reported, not gated: {', '.join(reported)} "
        "(on a GPU these follow the host's drift)",
    )


def moved_most_first(results: Sequence[FamilyResult]) -> list[FamilyResult]:
    """The families that fail the test first, the one that added the most µs per round
    leading (time outside any op that grew 2 ms before an op that grew 0.2 ms); the others
    after them, in their own order.  Every report lists the families in this order."""
    fails = [r.fails for r in results]
    failing = sorted(
        (r for r, f in zip(results, fails, strict=True) if f),
        key=lambda r: -(r.current_total_us - r.baseline_total_us),
    )
    return [*failing, *(r for r, f in zip(results, fails, strict=True) if not f)]


def _combine(results: Sequence[FamilyResult]) -> tuple[TestWord, str]:
    """The test's verdict: its most urgent gating family's, with every family's reasons (a
    reported family's marked as such)."""
    word = min((r.deciding_word for r in results), key=verdict_rank)
    reasons = [
        f"{r.family.upper()}{'' if r.gates else ' (timing reported, not gated)'}: "
        + "; ".join(r.reasons)
        for r in results
        if r.reasons
    ]
    if word == UNCHANGED and all(not r.gates for r in results if r.reasons):
        reasons = [NOTHING_CHANGED, *reasons]
    return word, " | ".join(reasons)


def says_nothing(verdict: TestVerdict) -> bool:
    """Whether a verdict's reason is :data:`NOTHING_CHANGED` alone, read from its fields: its
    word unchanged and no family with a reason to give (what :func:`_combine` writes then), so
    what joins it replaces the reason rather than follows it."""
    return verdict.verdict == UNCHANGED and not any(f.reasons for f in verdict.families)
