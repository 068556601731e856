"""Two sides' samples, and the statistical tests on them: the test's total, each op, and
each op against the rest of its round (docs/design.md §5).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from fnmatch import fnmatchcase

import numpy as np

from tprof_engine.decide.timing import stats
from tprof_engine.decide.timing.rule import SYNC_OPS, Rule
from tprof_engine.decide.timing.units import (
    RAW_BY_CHOICE,
    gain_of,
    other_units_follow,
    pooled_probe,
    raw_by_choice,
    scale,
)
from tprof_engine.model.arrays import FloatArray
from tprof_engine.model.family_specs import is_device, spec
from tprof_engine.model.records import OpTable


@dataclass(slots=True)
class Side:
    """One side (baseline sessions pooled, or the current run) of one family, normalised."""

    per_op: dict[str, FloatArray]  # op → per-round times (probe units, µs)
    per_session_op_medians: dict[str, list[float]]
    calls: dict[str, int]  # op → median calls per round
    totals: FloatArray  # per-round total op time
    session_total_medians: list[float]
    raw_op_medians: dict[str, float]  # not probe-normalised, for the uniform shift
    sessions: list[tuple[dict[str, FloatArray], FloatArray]]  # per session: op → rounds, totals
    # The factor one session's times are multiplied by to put them in probe units (above 1
    # where its probe ran faster than the reference); 1 for pooled sessions.  A side judged
    # in raw µs keeps it, for the check in the other units.
    gain: float = 1.0
    # The family is judged in raw µs though it has a drift probe: its baseline sessions agree
    # better without it (:func:`probe_narrows`).
    raw_by_choice: bool = False
    # The factor the ops' common shift puts the current run's times in: 1 / (1 + the median
    # change of its ops' raw times); 0 where not read.
    ops_gain: float = 0.0
    # The ops that are user annotations in any of its tables (:attr:`OpTable.scopes`).
    scopes: frozenset[str] = frozenset()

    @property
    def to_other_units(self) -> float:
        """What turns a ratio in the units this side is judged in into one in the other
        units (raw µs ↔ probe units), by its probe's :attr:`gain`.  Judged in raw µs, the
        milder of the probe's and the ops' (:attr:`ops_gain`): a slower machine explains a
        raw rise only when the ops read it slower too, for the probe of such a family is the
        witness its own sessions found wandering."""
        if self.raw_by_choice:
            return max(self.gain, self.ops_gain)
        return 1.0 / self.gain


def _metric(family: str) -> tuple[str, str | None]:
    """The op table's column of the family's times, and of its drift probe (None: raw µs)."""
    found = spec(family)
    return found.column or "self_device_us", found.probe


def _ignored(name: str, patterns: Sequence[str]) -> bool:
    return any(fnmatchcase(name, p) for p in patterns)


def _kept(t: OpTable, rule: Rule) -> list[int]:
    """The rows of a table that are ops of its side: called in the measured rounds (a
    warm-up-only op in older baselines has no calls there) and not ignored."""
    return [i for i, n in enumerate(t.names) if t.calls[i].any() and not _ignored(n, rule.ignore)]


def side_of(
    tables: Sequence[OpTable],
    family: str,
    reference: float,
    rule: Rule,
    *,
    raw: bool = False,
    ops_gain: float = 0.0,
) -> Side:
    """One side of a family: in units of the ``reference`` probe time, or in raw µs where
    ``raw`` (its :attr:`Side.gain` still the probe's, its :attr:`Side.ops_gain` the
    ``ops_gain`` given)."""
    metric, probe_attr = _metric(family)
    per_op: dict[str, list[FloatArray]] = {}
    raw_rows: dict[str, list[FloatArray]] = {}
    per_session: dict[str, list[float]] = {}
    calls: dict[str, list[FloatArray]] = {}
    totals: list[FloatArray] = []
    session_rows: list[tuple[dict[str, FloatArray], FloatArray]] = []
    for t in tables:
        s = 1.0 if raw else scale(t, probe_attr, reference, rule)
        values = getattr(t, metric)
        keep = _kept(t, rule)
        round_total = values[keep].sum(axis=0) * s if keep else np.zeros(t.rounds)
        totals.append(round_total)
        scaled = values[keep] * s
        by_name = {t.names[i]: row for i, row in zip(keep, scaled, strict=True)}
        session_rows.append((by_name, round_total))
        for i, row, centre in zip(keep, scaled, rule.centers(scaled), strict=True):
            name = t.names[i]
            per_op.setdefault(name, []).append(row)
            raw_rows.setdefault(name, []).append(values[i])
            per_session.setdefault(name, []).append(float(centre))
            calls.setdefault(name, []).append(t.calls[i])
    return Side(
        per_op={k: np.concatenate(v) for k, v in per_op.items()},
        per_session_op_medians=per_session,
        calls={k: round(stats.median(np.concatenate(v))) for k, v in calls.items()},
        totals=np.concatenate(totals) if totals else np.zeros(0),
        session_total_medians=[rule.center(t) for t in totals],
        raw_op_medians={k: rule.center(np.concatenate(v)) for k, v in raw_rows.items()},
        sessions=session_rows,
        gain=gain_of(tables, probe_attr, reference, rule),
        raw_by_choice=raw,
        ops_gain=ops_gain,
        scopes=frozenset().union(*(t.scopes for t in tables)),
    )


def sides_of(
    baseline: Sequence[OpTable],
    current: OpTable,
    family: str,
    rule: Rule,
    *,
    ops_gain: float = 0.0,
) -> tuple[Side, Side]:
    """Both sides of one family, in units of the baseline's pooled probe time, or in raw µs
    where the probe spreads the baseline's sessions wider (:func:`probe_narrows`); the
    current side carries ``ops_gain`` (:attr:`Side.ops_gain`)."""
    metric, probe_attr = _metric(family)
    reference = pooled_probe(baseline, probe_attr, rule)
    medians = [rule.center(getattr(t, metric)[_kept(t, rule)].sum(axis=0)) for t in baseline]
    raw = raw_by_choice(baseline, medians, family, reference, rule)
    return (
        side_of(baseline, family, reference, rule, raw=raw),
        side_of([current], family, reference, rule, raw=raw, ops_gain=ops_gain),
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class Total:
    """The test-level test of one family: the round's total op time."""

    base_us: float
    cur_us: float
    delta_pct: float  # a fraction
    floor: float
    floor_source: str
    p_greater: float
    p_less: float
    sigma: float
    mde: float
    n_base: int
    n_cur: int
    n_base_low: int
    n_cur_low: int
    regressed: bool
    improved: bool
    to_other_units: float = 1.0  # the current side's (:attr:`Side.to_other_units`)
    raw_us: bool = False  # judged in raw µs by choice (:attr:`Side.raw_by_choice`)


def beyond_floor(
    rule: Rule,
    timed: bool,
    base_us: float,
    cur_us: float,
    delta_pct: float,
    floor: float,
    p_greater: float,
    p_less: float,
) -> tuple[bool, bool]:
    """Whether a family's total regressed, and whether it improved: timed, significant,
    beyond the floor and by at least ``rule.abs_floor_us`` (one rule for stored and paired
    rounds, and for two looks pooled: ``decide.again``)."""
    regressed = p_greater < rule.alpha and delta_pct > floor
    improved = p_less < rule.alpha and delta_pct < -floor
    return (
        timed and regressed and (cur_us - base_us) >= rule.abs_floor_us,
        timed and improved and (base_us - cur_us) >= rule.abs_floor_us,
    )


def total_test(
    base: Side,
    cur: Side,
    sessions: int,
    rule: Rule,
    *,
    timed: bool,
    family: str = "cpu",
    least_floor: float = 0.0,
) -> Total:
    """Significantly beyond the floor: current rounds against baseline rounds shifted by part
    of the floor, so sampling noise alone can't carry a change past it.  The floor's minimum
    is the family's (:mod:`tprof_engine.model.family_specs`), or ``least_floor`` where that is
    more.  Paired rounds (tprof ab) are tested pair by pair (:func:`paired_total`)."""
    if rule.paired:
        return paired_total(base, cur, rule, timed=timed)
    base_us, cur_us = rule.center(base.totals), rule.center(cur.totals)
    learned = rule.floor_for(base.session_total_medians, minimum=spec(family).min_floor)
    floor = max(learned, least_floor)
    low_b, low_c = rule.lower(base.totals), rule.lower(cur.totals)
    shift = rule.shift_share * floor
    p_greater = stats.mwu_greater(low_c, low_b * (1.0 + shift))
    p_less = stats.mwu_less(low_c, low_b * (1.0 - shift))
    delta_pct = (cur_us / base_us - 1.0) if base_us > 0 else 0.0
    sigma = stats.pooled_log_spread(low_b, low_c)
    moved = beyond_floor(rule, timed, base_us, cur_us, delta_pct, floor, p_greater, p_less)
    return Total(
        base_us=base_us,
        cur_us=cur_us,
        delta_pct=delta_pct,
        floor=floor,
        floor_source=rule.floor_source(sessions) + (RAW_BY_CHOICE if base.raw_by_choice else ""),
        p_greater=p_greater,
        p_less=p_less,
        sigma=sigma,
        mde=stats.min_detectable_effect(sigma, low_c.size, low_b.size, alpha=rule.alpha),
        n_base=int(base.totals.size),
        n_cur=int(cur.totals.size),
        n_base_low=int(low_b.size),
        n_cur_low=int(low_c.size),
        regressed=moved[0] and other_units_follow(delta_pct, floor, cur.to_other_units, rule),
        improved=moved[1],
        to_other_units=cur.to_other_units,
        raw_us=base.raw_by_choice,
    )


def paired_total(base: Side, cur: Side, rule: Rule, *, timed: bool) -> Total:
    """The test level on paired rounds: the log ratio of each head round's total to its base
    round's, its centre beyond the floor and the signed-rank test significant against half of
    it.  Every round counts: a neighbour's load falls on both rounds of a pair."""
    logs = stats.log_ratios(base.totals, cur.totals)
    sigma = stats.log_spread(logs)
    mde = stats.paired_min_effect(sigma, logs.size, alpha=rule.alpha)
    floor = paired_floor(rule, mde, op=False)
    centre = stats.hodges_lehmann(logs)
    shift = math.log1p(rule.shift_share * floor)
    p_greater = stats.signed_rank_greater(logs - shift)
    p_less = stats.signed_rank_greater(-logs - shift)
    base_us = stats.median(base.totals) if base.totals.size else 0.0
    cur_us = base_us * math.exp(centre)
    delta_pct = math.expm1(centre)
    moved = beyond_floor(rule, timed, base_us, cur_us, delta_pct, floor, p_greater, p_less)
    return Total(
        base_us=base_us,
        cur_us=cur_us,
        delta_pct=delta_pct,
        floor=floor,
        floor_source=rule.floor_source(1),
        p_greater=p_greater,
        p_less=p_less,
        sigma=sigma,
        mde=mde,
        n_base=int(base.totals.size),
        n_cur=int(cur.totals.size),
        n_base_low=int(logs.size),
        n_cur_low=int(logs.size),
        regressed=moved[0],
        improved=moved[1],
    )


def paired_floor(rule: Rule, mde: float, *, op: bool) -> float:
    """A paired family's or op's floor: the rule's minimum, or what the pairs' noise lets it
    see when that is more (so a noisy pair gates only what it can see, and says so in its
    floor); a fixed floor stays the user's."""
    floor = rule.floor_for([], op=op)
    return floor if rule.rel_floor is not None else max(floor, min(mde, rule.useful_floor))


@dataclass(frozen=True, slots=True, kw_only=True)
class OpStats:
    """One op's figures on both sides; ``p`` is set for ops tested for a slowdown."""

    base_us: float
    cur_us: float
    base_calls: int
    cur_calls: int
    share: float  # of the baseline round
    floor: float
    low_base: FloatArray | None = None  # the rounds the U tests use
    low_cur: FloatArray | None = None
    sigma: float = 0.0
    mde: float | None = None
    p: float | None = None  # Holm-adjusted
    # The least floor of a user annotation's own time in stored mode (:func:`at_test_scale`),
    # both routes' (its own time, against the rest); 0 for every other op.
    least_floor: float = 0.0
    floor_note: str = ""  # why the floor is that, when it set it

    @property
    def pct(self) -> float:
        if self.base_us > 0:
            return self.cur_us / self.base_us - 1.0
        return math.inf if self.cur_us > 0 else 0.0


def _op_stats(
    name: str, base: Side, cur: Side, base_total: float, rule: Rule, family: str
) -> OpStats:
    b_vals, c_vals = base.per_op.get(name), cur.per_op.get(name)
    b_med = rule.center(b_vals) if b_vals is not None else 0.0
    learned = rule.floor_for(
        base.per_session_op_medians.get(name, []), op=True, minimum=spec(family).min_floor
    )
    scoped = name in base.scopes or name in cur.scopes
    least = at_test_scale(b_med, base_total, rule) if scoped and not is_device(family) else 0.0
    return OpStats(
        base_us=b_med,
        cur_us=rule.center(c_vals) if c_vals is not None else 0.0,
        base_calls=base.calls.get(name, 0),
        cur_calls=cur.calls.get(name, 0),
        share=b_med / base_total if base_total > 0 else 0.0,
        floor=max(learned, least),
        least_floor=least,
        floor_note=(
            f"a user annotation's own time (Python in it, outside any op): floor at the "
            f"test's scale, {rule.round_floor():.0%} of its {base_total:,.0f} µs a round"
            if least > learned
            else ""
        ),
    )


def at_test_scale(op_us: float, test_us: float, rule: Rule) -> float:
    """A user annotation's least floor in stored mode: the change of its own time (``op_us``
    a round) that moves the test's op time (``test_us``) by :meth:`Rule.round_floor`; 0 on
    paired rounds, which cancel the drift.

    Its own time is the Python that runs inside it outside any op, and Python drifts between
    processes as the time outside any op does (docs/design.md §5, step 8): an unchanged
    encoder's ``Optimizer.step#AdamW.step`` read +25 to +36 %, 9 % of its round, each time
    confirmed in a fresh process, while its ``aten::mm`` moved -1.5 % and the drift probe +6
    to +8 %; it was named in 4 of the 5 false or collateral failures of 1,092 unchanged
    stored test-runs (``ab_reruns.py``), two of them on the op alone."""
    if rule.paired or op_us <= 0 or test_us <= 0:
        return 0.0
    return rule.round_floor() * test_us / op_us


def _testable(name: str, o: OpStats, base: Side, cur: Side, *, device_run: bool) -> bool:
    """Timed ops with the same calls on both sides; device waits are reported, not tested."""
    if name not in base.per_op or name not in cur.per_op or o.base_calls != o.cur_calls:
        return False
    return not (device_run and name in SYNC_OPS)


def op_tests(
    base: Side, cur: Side, family: str, base_total: float, rule: Rule, *, device_run: bool
) -> dict[str, OpStats]:
    """Every op's figures, in name order; tested ops carry p (Holm across the test's ops)."""
    ops: dict[str, OpStats] = {}
    raw_p: dict[str, float] = {}
    for name in sorted(set(base.per_op) | set(cur.per_op)):
        o = _op_stats(name, base, cur, base_total, rule, family)
        if is_device(family) and o.base_us == 0.0 and o.cur_us == 0.0:
            continue  # ops that launch no kernels have no CUDA row
        if _testable(name, o, base, cur, device_run=device_run):
            o, raw_p[name] = _op_test(o, base.per_op[name], cur.per_op[name], rule)
        ops[name] = o
    for name, p_adj in zip(raw_p, stats.holm(list(raw_p.values())), strict=True):
        ops[name] = replace(ops[name], p=p_adj)
    return ops


def _op_test(o: OpStats, b: FloatArray, c: FloatArray, rule: Rule) -> tuple[OpStats, float]:
    """One op's slowdown test and its raw p: the U test on the fast rounds, or on paired
    rounds the signed-rank test of their log ratios (their centre is the op's change)."""
    if rule.paired:
        logs = stats.log_ratios(b, c)
        sig = stats.log_spread(logs)
        mde = stats.paired_min_effect(sig, logs.size, alpha=rule.alpha)
        floor = paired_floor(rule, mde, op=True)
        centre = stats.hodges_lehmann(logs)
        p = stats.signed_rank_greater(logs - math.log1p(rule.shift_share * floor))
        base_us = stats.median(b)
        moved = replace(o, base_us=base_us, cur_us=base_us * math.exp(centre), floor=floor)
        return replace(moved, low_base=b, low_cur=c, sigma=sig, mde=mde), p
    lb, lc = rule.lower(b), rule.lower(c)
    sig = stats.pooled_log_spread(lb, lc)
    mde = stats.min_detectable_effect(sig, lc.size, lb.size, alpha=rule.alpha)
    p = stats.mwu_greater(lc, lb * (1.0 + rule.shift_share * o.floor))
    return replace(o, low_base=lb, low_cur=lc, sigma=sig, mde=mde), p


@dataclass(frozen=True, slots=True, kw_only=True)
class VsRest:
    """One material op against the rest of its test."""

    pct: float  # change of the op-over-rest ratio, a fraction
    floor: float
    mde: float = math.inf  # the ratio's minimum detectable change
    p: float = 1.0  # Holm-adjusted
    regressed: bool = False


def _ratios(side: Side, name: str) -> tuple[FloatArray, list[float], FloatArray]:
    """The op's time over the rest of its test, round by round.

    Returns the pooled per-round ratios, each session's centre ratio (for the learned floor)
    and the rest's per-round time (probe units) on the same rounds.  A session without the
    op contributes nothing.  Every round counts: contention that slows a whole round cancels
    in the ratio, and what slows one side of it is an outlier the centre and U shrug off.
    """
    ratios: list[FloatArray] = []
    centres: list[float] = []
    rests: list[FloatArray] = []
    for ops, totals in side.sessions:
        op = ops.get(name)
        if op is None or totals.size == 0:
            continue
        rest = totals - op
        keep = rest > 0
        if not keep.any():
            continue
        r = op[keep] / rest[keep]
        ratios.append(r)
        centres.append(_ratio_centre(r))
        rests.append(rest[keep])
    if not ratios:
        return np.zeros(0), [], np.zeros(0)
    return np.concatenate(ratios), centres, np.concatenate(rests)


def _ratio_centre(ratios: FloatArray) -> float:
    """Geometric mean of the ratios with the highest and lowest fifth left out."""
    logs = np.sort(np.log(ratios))
    cut = int(0.2 * logs.size)
    kept = logs[cut : logs.size - cut] if logs.size - 2 * cut > 0 else logs
    return float(np.exp(kept.mean()))


def _vs_rest_one(
    o: OpStats, name: str, base: Side, cur: Side, test_floor: float, rule: Rule
) -> tuple[VsRest, bool, float] | None:
    """The ratio's change, whether the op's own move backs it, and its raw p; None if untested.

    The op must have moved by ``vs_rest_own_share`` of the ratio's change in its family's units,
    and the rest must not have got clearly faster (a faster rest would read as a slower op).
    """
    if o.share < rule.material_share or 1.0 - o.share < rule.vs_rest_min_rest:
        return None
    rb, centres, rest_b = _ratios(base, name)
    rc, _, rest_c = _ratios(cur, name)
    if rb.size < 2 or rc.size < 2:
        return None
    pct = _ratio_centre(rc) / _ratio_centre(rb) - 1.0  # geometric means: always > 0
    floor = max(rule.floor_for(centres, op=True, minimum=rule.vs_rest_min_rel_floor), o.least_floor)
    rest_pct = stats.median(rest_c) / stats.median(rest_b) - 1.0
    own_pct = o.cur_us / o.base_us - 1.0 if o.base_us > 0 else 0.0
    backed = own_pct >= rule.vs_rest_own_share * pct and rest_pct > -rule.shift_share * test_floor
    p = stats.mwu_greater(rc, rb * (1.0 + rule.vs_rest_shift_share * floor))
    sigma = stats.pooled_log_spread(rb, rc)
    mde = stats.min_detectable_effect(sigma, rc.size, rb.size, alpha=rule.alpha)
    return VsRest(pct=pct, floor=floor, mde=mde), backed, p


def vs_rest_tests(
    ops: dict[str, OpStats], base: Side, cur: Side, test_floor: float, rule: Rule
) -> dict[str, VsRest]:
    """Each tested material op against the rest of its test (Holm across the ops tried).

    Regressed on this route when the ratio grew beyond its own learned floor, significantly,
    by at least the absolute floor, and the op's own move backs it.
    """
    found: dict[str, tuple[VsRest, bool, float]] = {}
    for name, o in ops.items():
        if o.p is not None and (one := _vs_rest_one(o, name, base, cur, test_floor, rule)):
            found[name] = one
    out: dict[str, VsRest] = {}
    adjusted = stats.holm([p for _, _, p in found.values()])
    for (name, (r, backed, _)), p_adj in zip(found.items(), adjusted, strict=True):
        up = (
            backed
            and p_adj < rule.alpha
            and r.pct > r.floor
            and ops[name].base_us * r.pct >= rule.abs_floor_us
        )
        out[name] = replace(r, p=p_adj, regressed=up)
    return out
