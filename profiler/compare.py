"""The timing decision rule: baseline sessions + current op table → a verdict per test and op.

Per family (CPU self time; CUDA self device time when present), a pipeline of small steps,
each returning a record (docs/design.md, "The decision rule", says why each step is there):

1. :func:`_sides` puts op times in drift-probe units: each session scaled by its probe.
2. :func:`_total_test`: the round's total op time, one-sided Mann-Whitney U, α, a relative
   floor (learned from the baseline's sessions) and an absolute floor.
3. :func:`_op_tests`: per-op one-sided U with Holm across the test's ops.
4. :func:`_vs_rest_tests`: each material op's time over the rest of its test, round by round,
   with its own learned floor; drift that moves the whole test cancels in it.
5. :func:`_classify` gives each op its verdict (a pure function of the figures above);
   :func:`_structure` sums the time that new, removed and re-called ops add.
6. :func:`_family_verdict` and :func:`_reasons` give the family's verdict and its words.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from fnmatch import fnmatchcase

import numpy as np

from tprof_engine import gpu, memory, stats
from tprof_engine.records import DeviceTable, FloatArray, OpTable
from tprof_engine.rule import SYNC_OPS, Rule
from tprof_engine.verdicts import (
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
    STRUCTURAL_OPS,
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

__all__ = ["Rule", "compare", "compare_across"]

SAMPLED_OPS = 5  # flagged ops per family whose per-round samples go into reports
NOTHING_CHANGED = "no op changed beyond its floor"


# --------------------------------------------------------------------------- the sides


@dataclass(slots=True)
class _Side:
    """One side (baseline sessions pooled, or the current run) of one family, normalised."""

    per_op: dict[str, FloatArray]  # op → per-round times (probe units, µs)
    per_session_op_medians: dict[str, list[float]]
    calls: dict[str, int]  # op → median calls per round
    totals: FloatArray  # per-round total op time
    session_total_medians: list[float]
    raw_op_medians: dict[str, float]  # not probe-normalised, for the uniform shift
    sessions: list[tuple[dict[str, FloatArray], FloatArray]]  # per session: op → rounds, totals


def _metric(family: str) -> tuple[str, str]:
    return (
        ("self_cpu_us", "probe_cpu_us")
        if family == "cpu"
        else ("self_device_us", "probe_device_us")
    )


def _scale(table: OpTable, probe_attr: str, reference: float, rule: Rule) -> float:
    """Factor putting a session's times in units of the reference probe time."""
    if not rule.probe or reference <= 0:
        return 1.0
    med = rule.center(getattr(table, probe_attr))
    return reference / med if med > 0 else 1.0


def _ignored(name: str, patterns: Sequence[str]) -> bool:
    return any(fnmatchcase(name, p) for p in patterns)


def _side(tables: Sequence[OpTable], family: str, reference: float, rule: Rule) -> _Side:
    metric, probe_attr = _metric(family)
    per_op: dict[str, list[FloatArray]] = {}
    raw: dict[str, list[FloatArray]] = {}
    per_session: dict[str, list[float]] = {}
    calls: dict[str, list[FloatArray]] = {}
    totals: list[FloatArray] = []
    session_rows: list[tuple[dict[str, FloatArray], FloatArray]] = []
    for t in tables:
        s = _scale(t, probe_attr, reference, rule)
        values = getattr(t, metric)
        # A row of no calls (a warm-up-only op in older baselines) is no op of this side.
        keep = [
            i for i, n in enumerate(t.names) if t.calls[i].any() and not _ignored(n, rule.ignore)
        ]
        round_total = values[keep].sum(axis=0) * s if keep else np.zeros(t.rounds)
        totals.append(round_total)
        session_rows.append(({t.names[i]: values[i] * s for i in keep}, round_total))
        for i in keep:
            name = t.names[i]
            per_op.setdefault(name, []).append(values[i] * s)
            raw.setdefault(name, []).append(values[i])
            per_session.setdefault(name, []).append(rule.center(values[i] * s))
            calls.setdefault(name, []).append(t.calls[i])
    return _Side(
        per_op={k: np.concatenate(v) for k, v in per_op.items()},
        per_session_op_medians=per_session,
        calls={k: round(float(np.median(np.concatenate(v)))) for k, v in calls.items()},
        totals=np.concatenate(totals) if totals else np.zeros(0),
        session_total_medians=[rule.center(t) for t in totals],
        raw_op_medians={k: rule.center(np.concatenate(v)) for k, v in raw.items()},
        sessions=session_rows,
    )


def _sides(
    baseline: Sequence[OpTable], current: OpTable, family: str, rule: Rule
) -> tuple[_Side, _Side]:
    """Both sides of one family in units of the baseline's pooled probe time."""
    _, probe_attr = _metric(family)
    reference = rule.center(np.concatenate([getattr(b, probe_attr) for b in baseline]))
    return _side(baseline, family, reference, rule), _side([current], family, reference, rule)


# --------------------------------------------------------------------------- the tests


@dataclass(frozen=True, slots=True, kw_only=True)
class _Total:
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


def _total_test(base: _Side, cur: _Side, sessions: int, rule: Rule, *, timed: bool) -> _Total:
    """Significantly beyond the floor: current rounds against baseline rounds shifted by part
    of the floor, so sampling noise alone can't carry a change past it."""
    base_us, cur_us = rule.center(base.totals), rule.center(cur.totals)
    floor = rule.floor_for(base.session_total_medians)
    low_b, low_c = rule.lower(base.totals), rule.lower(cur.totals)
    shift = rule.shift_share * floor
    p_greater = stats.mwu_greater(low_c, low_b * (1.0 + shift))
    p_less = stats.mwu_less(low_c, low_b * (1.0 - shift))
    delta_pct = (cur_us / base_us - 1.0) if base_us > 0 else 0.0
    sigma = stats.pooled_log_spread(low_b, low_c)
    return _Total(
        base_us=base_us,
        cur_us=cur_us,
        delta_pct=delta_pct,
        floor=floor,
        floor_source=rule.floor_source(sessions),
        p_greater=p_greater,
        p_less=p_less,
        sigma=sigma,
        mde=stats.min_detectable_effect(sigma, low_c.size, low_b.size, alpha=rule.alpha),
        n_base=int(base.totals.size),
        n_cur=int(cur.totals.size),
        n_base_low=int(low_b.size),
        n_cur_low=int(low_c.size),
        regressed=timed
        and p_greater < rule.alpha
        and delta_pct > floor
        and (cur_us - base_us) >= rule.abs_floor_us,
        improved=timed
        and p_less < rule.alpha
        and delta_pct < -floor
        and (base_us - cur_us) >= rule.abs_floor_us,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class _OpStats:
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

    @property
    def pct(self) -> float:
        if self.base_us > 0:
            return self.cur_us / self.base_us - 1.0
        return math.inf if self.cur_us > 0 else 0.0


def _op_stats(name: str, base: _Side, cur: _Side, base_total: float, rule: Rule) -> _OpStats:
    b_vals, c_vals = base.per_op.get(name), cur.per_op.get(name)
    b_med = rule.center(b_vals) if b_vals is not None else 0.0
    return _OpStats(
        base_us=b_med,
        cur_us=rule.center(c_vals) if c_vals is not None else 0.0,
        base_calls=base.calls.get(name, 0),
        cur_calls=cur.calls.get(name, 0),
        share=b_med / base_total if base_total > 0 else 0.0,
        floor=rule.floor_for(base.per_session_op_medians.get(name, []), op=True),
    )


def _testable(name: str, o: _OpStats, base: _Side, cur: _Side, *, device_run: bool) -> bool:
    """Timed ops with the same calls on both sides; device waits are reported, not tested."""
    if name not in base.per_op or name not in cur.per_op or o.base_calls != o.cur_calls:
        return False
    return not (device_run and name in SYNC_OPS)


def _op_tests(
    base: _Side, cur: _Side, family: str, base_total: float, rule: Rule, *, device_run: bool
) -> dict[str, _OpStats]:
    """Every op's figures, in name order; tested ops carry p (Holm across the test's ops)."""
    ops: dict[str, _OpStats] = {}
    raw_p: dict[str, float] = {}
    for name in sorted(set(base.per_op) | set(cur.per_op)):
        o = _op_stats(name, base, cur, base_total, rule)
        if family == "cuda" and o.base_us == 0.0 and o.cur_us == 0.0:
            continue  # ops that launch no kernels have no CUDA row
        if _testable(name, o, base, cur, device_run=device_run):
            lb, lc = rule.lower(base.per_op[name]), rule.lower(cur.per_op[name])
            sig = stats.pooled_log_spread(lb, lc)
            mde = stats.min_detectable_effect(sig, lc.size, lb.size, alpha=rule.alpha)
            o = replace(o, low_base=lb, low_cur=lc, sigma=sig, mde=mde)
            raw_p[name] = stats.mwu_greater(lc, lb * (1.0 + rule.shift_share * o.floor))
        ops[name] = o
    for name, p_adj in zip(raw_p, stats.holm(list(raw_p.values())), strict=True):
        ops[name] = replace(ops[name], p=p_adj)
    return ops


@dataclass(frozen=True, slots=True, kw_only=True)
class _VsRest:
    """One material op against the rest of its test."""

    pct: float  # change of the op-over-rest ratio, a fraction
    floor: float
    p: float = 1.0  # Holm-adjusted
    regressed: bool = False


def _ratios(side: _Side, name: str) -> tuple[FloatArray, list[float], FloatArray]:
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
    o: _OpStats, name: str, base: _Side, cur: _Side, test_floor: float, rule: Rule
) -> tuple[_VsRest, bool, float] | None:
    """The ratio's change, whether the op's own move backs it, and its raw p; None if untested.

    The op must have moved by ``vs_rest_own_share`` of the ratio's change in probe units,
    and the rest must not have got clearly faster (a faster rest would read as a slower op).
    """
    if o.share < rule.material_share or 1.0 - o.share < rule.vs_rest_min_rest:
        return None
    rb, centres, rest_b = _ratios(base, name)
    rc, _, rest_c = _ratios(cur, name)
    if rb.size < 2 or rc.size < 2:
        return None
    pct = _ratio_centre(rc) / _ratio_centre(rb) - 1.0  # geometric means: always > 0
    floor = rule.floor_for(centres, op=True, minimum=rule.vs_rest_min_rel_floor)
    rest_pct = float(np.median(rest_c)) / float(np.median(rest_b)) - 1.0
    own_pct = o.cur_us / o.base_us - 1.0 if o.base_us > 0 else 0.0
    backed = own_pct >= rule.vs_rest_own_share * pct and rest_pct > -rule.shift_share * test_floor
    p = stats.mwu_greater(rc, rb * (1.0 + rule.vs_rest_shift_share * floor))
    return _VsRest(pct=pct, floor=floor), backed, p


def _vs_rest_tests(
    ops: dict[str, _OpStats], base: _Side, cur: _Side, test_floor: float, rule: Rule
) -> dict[str, _VsRest]:
    """Each tested material op against the rest of its test (Holm across the ops tried).

    Regressed on this route when the ratio grew beyond its own learned floor, significantly,
    by at least the absolute floor, and the op's own move backs it.
    """
    found: dict[str, tuple[_VsRest, bool, float]] = {}
    for name, o in ops.items():
        if o.p is not None and (one := _vs_rest_one(o, name, base, cur, test_floor, rule)):
            found[name] = one
    out: dict[str, _VsRest] = {}
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


# --------------------------------------------------------------------------- op verdicts


@dataclass(frozen=True, slots=True, kw_only=True)
class _Call:
    """What :func:`_classify` decided for one op."""

    verdict: OpWord
    gated: bool
    gates: bool = False  # fails the test on its own
    vs_rest_only: bool = False
    note: str = ""


def _classify(
    o: _OpStats, vs_rest: _VsRest | None, total: _Total, rule: Rule, n_tested: int, *, timed: bool
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
    o: _OpStats, vs_rest: _VsRest | None, total: _Total, rule: Rule, n_tested: int
) -> _Call:
    assert o.p is not None and o.low_base is not None and o.low_cur is not None  # tested ops
    sig_up = o.p < rule.alpha and o.pct > o.floor and (o.cur_us - o.base_us) >= rule.abs_floor_us
    rest_up = vs_rest is not None and vs_rest.regressed
    if (sig_up or rest_up) and o.share >= rule.material_share:
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


def _op_verdict(
    name: str, family: str, o: _OpStats, vs_rest: _VsRest | None, call: _Call
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
        note=call.note,
        vs_rest_pct=None if vs_rest is None else vs_rest.pct * 100.0,
        vs_rest_floor_pct=None if vs_rest is None else vs_rest.floor * 100.0,
        vs_rest_only=call.vs_rest_only,
    )


def _attribute(
    ops: list[OpVerdict], gate: Sequence[str], total: _Total, rule: Rule
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


# --------------------------------------------------------------------------- structure


def _added_us(o: _OpStats) -> float:
    """Time per round a structural change adds (negative when it saves time)."""
    cur, base = _added_sides(o)
    return cur + base


def _added_sides(o: _OpStats) -> tuple[float, float]:
    """The time a structural change adds, split by the side it was measured on: what new ops
    and extra calls take now (current µs), and what removed ops and fewer calls took (baseline
    µs, negative)."""
    if o.base_calls == 0 and o.cur_calls > 0:
        return o.cur_us, 0.0
    if o.cur_calls == 0 and o.base_calls > 0:
        return 0.0, -o.base_us
    if o.cur_calls > o.base_calls:
        return (o.cur_calls - o.base_calls) * (o.cur_us / o.cur_calls), 0.0
    if o.cur_calls < o.base_calls:
        return 0.0, -(o.base_calls - o.cur_calls) * (o.base_us / o.base_calls)
    return 0.0, 0.0


def _added_share(ops: dict[str, _OpStats], base_total: float, cur_total: float) -> float:
    """The structural change's net share of the baseline's round, with each side's part read
    against its own round, so the process's speed cancels: µs against the baseline's round
    read the same change at 3 % in one process and 10 % in the next.

    With ``x`` the added part's share of the current round and ``r`` the removed part's
    share of the baseline's, a change of Δ on a round of B (both in one process's units)
    gives ``x = N / (B + Δ)`` and ``r = R / B`` with Δ = N − R, so Δ / B = (x − r) / (1 − x).
    """
    if base_total <= 0 or cur_total <= 0:
        return 0.0
    cur_part = base_part = 0.0
    for o in ops.values():
        c, b = _added_sides(o)
        cur_part += c
        base_part += b
    x, r = cur_part / cur_total, -base_part / base_total
    return (x - r) / (1.0 - x) if x < 1.0 else math.inf


@dataclass(frozen=True, slots=True, kw_only=True)
class _Structure:
    changes: tuple[OpVerdict, ...]
    added_us: float
    regressed: bool
    host_waits: tuple[gpu.HostWait, ...] = ()
    share: float = 0.0  # of the round, each side's part against its own (_added_share)


def _structure(
    ops: dict[str, _OpStats],
    verdicts: Sequence[OpVerdict],
    total: _Total,
    rule: Rule,
    host_waits: Sequence[gpu.HostWait] = (),
) -> _Structure:
    """New ops and extra calls, net of removed ops and fewer calls, against the round (each
    side's part against its own round: :func:`_added_share`); and on device runs, DtoH copies
    and host syncs: one more per round fails whatever its time."""
    added = 0.0
    for o in ops.values():
        added += _added_us(o)
    share = _added_share(ops, total.base_us, total.cur_us)
    changes = tuple(v for v in verdicts if v.verdict in STRUCTURAL_OPS)
    regressed = bool(changes) and (
        rule.strict_calls or (share >= rule.structure_share and added >= rule.abs_floor_us)
    )
    regressed |= any(w.more for w in host_waits)
    return _Structure(
        changes=changes,
        added_us=added,
        regressed=regressed,
        host_waits=tuple(host_waits),
        share=share,
    )


def _host_waits(baseline: Sequence[OpTable], current: OpTable, family: str) -> list[gpu.HostWait]:
    """The device family's host-wait changes, when every side has a device table."""
    if family != "cuda" or current.device is None:
        return []
    tables = [b.device for b in baseline if b.device is not None]
    if len(tables) < len(baseline):  # a baseline from before device tables: nothing to tell
        return []
    return gpu.host_waits(tables, current.device)


# --------------------------------------------------------------------------- the family


def _reasons(
    total: _Total, gated: Sequence[OpVerdict], structure: _Structure, vs_rest: dict[str, _VsRest]
) -> list[str]:
    """One line per thing that regressed or changed, in the failure's words."""
    reasons: list[str] = []
    if total.regressed:
        reasons.append(
            f"total op time {total.delta_pct:+.1%} (p={total.p_greater:.2g}, "
            f"floor {total.floor:.0%} {total.floor_source})"
        )
    for o in gated:
        if o.vs_rest_only:
            reasons.append(
                f"{o.op} {o.vs_rest_pct:+.0f}% against the rest of the test ({o.share:.0%} of "
                f"the round, floor {o.vs_rest_floor_pct:.0f}%, p={vs_rest[o.op].p:.2g}; "
                f"{o.delta_pct:+.0f}% in probe units, floor {o.floor_pct:.0f}%)"
            )
        else:
            reasons.append(
                f"{o.op} {o.delta_pct:+.0f}% ({o.share:.0%} of the round, p={o.p_value:.2g})"
            )
    if structure.changes:
        reasons.append(_structure_reason(structure, total.base_us))
    reasons.extend(w.describe() for w in structure.host_waits)
    return reasons


def _structure_reason(structure: _Structure, base_total: float) -> str:
    changes, added = structure.changes, structure.added_us
    what = ", ".join(f"{o.op} {o.calls_baseline}→{o.calls_current}" for o in changes[:6])
    more = f" (+{len(changes) - 6} more)" if len(changes) > 6 else ""
    if not structure.regressed:
        return f"calls changed, net {added:+.0f} µs per round: {what}{more}"
    if base_total > 0:
        return (
            f"calls changed, adding {added:+.0f} µs per round "
            f"({_share_text(structure.share)} of the round): {what}{more}"
        )
    return f"calls changed: {what}{more}"


def _share_text(share: float) -> str:
    return f"{share:+.0%}" if math.isfinite(share) else "nearly all"


def _family_verdict(
    total: _Total, gate: Sequence[str], structure: _Structure, rule: Rule, *, timed: bool
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
    ops: Sequence[OpVerdict], base: _Side, cur: _Side, family: str
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
    baseline: Sequence[OpTable], current: OpTable, family: str, rule: Rule, *, timed: bool
) -> _FamilyOutcome:
    """One family through the pipeline of the module docstring."""
    base, cur = _sides(baseline, current, family, rule)
    total = _total_test(base, cur, len(baseline), rule, timed=timed)
    stats_by_op = _op_tests(base, cur, family, total.base_us, rule, device_run=current.has_device)
    vs_rest = (
        _vs_rest_tests(stats_by_op, base, cur, total.floor, rule) if timed and rule.vs_rest else {}
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
    waits = _host_waits(baseline, current, family)
    structure = _structure(stats_by_op, ops, total, rule, waits)
    by_name = {o.op: o for o in ops}
    reasons = _reasons(total, [by_name[n] for n in gate], structure, vs_rest)
    verdict, extra = _family_verdict(total, gate, structure, rule, timed=timed)
    if extra:
        reasons.append(extra)
    ops.sort(key=lambda o: (op_rank(o.verdict), -o.delta_us))
    result = _family_result(
        family,
        verdict,
        total,
        reasons,
        gate=gate,
        structure=(structure.added_us, structure.regressed),
    )
    return _FamilyOutcome(result=result, ops=ops, samples=_round_samples(ops, base, cur, family))


# --------------------------------------------------------------------------- the test


# --------------------------------------------------------------------------- device idle time

IDLE_FAMILY = "gpu-idle"
IDLE_RANKED = 3  # ops named as the ones the device waited for


def _idle_side(tables: Sequence[DeviceTable], rule: Rule) -> _Side:
    """A side whose round total is the device's idle µs: the total test runs on it as is."""
    rounds = [t.idle_us for t in tables]
    return _Side(
        per_op={},
        per_session_op_medians={},
        calls={},
        totals=np.concatenate(rounds),
        session_total_medians=[rule.center(r) for r in rounds],
        raw_op_medians={},
        sessions=[],
    )


def _idle_family(
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
    total = _total_test(base, cur, len(baseline), rule, timed=timed)
    verdict: TestWord = REGRESSED if total.regressed else IMPROVED if total.improved else UNCHANGED
    reasons: tuple[str, ...] = ()
    if verdict != UNCHANGED:
        reasons = (_idle_reason(tables, current.device, total, rule),)
    return _family_result(IDLE_FAMILY, verdict, total, reasons)


# --------------------------------------------------------------------------- host overhead

HOST_FAMILY = "host"


def _host_side(tables: Sequence[OpTable], reference: float, rule: Rule) -> _Side:
    """A side whose round total is the time outside any op, in drift-probe units."""
    rounds = [t.host_us * _scale(t, "probe_cpu_us", reference, rule) for t in tables]
    return _Side(
        per_op={},
        per_session_op_medians={},
        calls={},
        totals=np.concatenate(rounds) if rounds else np.zeros(0),
        session_total_medians=[rule.center(r) for r in rounds],
        raw_op_medians={},
        sessions=[],
    )


def _host_family(
    baseline: Sequence[OpTable], current: OpTable, rule: Rule, *, timed: bool
) -> FamilyResult:
    """The round's time outside any op (Python between ops, hooks, the loop) by the total
    test: what the op rows can't show, judged like a family's total."""
    reference = rule.center(np.concatenate([b.probe_cpu_us for b in baseline]))
    base = _host_side(baseline, reference, rule)
    cur = _host_side([current], reference, rule)
    total = _total_test(base, cur, len(baseline), rule, timed=timed)
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
            for op, d in _host_growth(baseline, current, rule)
            if d >= rule.attribution_share * (total.cur_us - total.base_us)
        ][:HOST_RANKED]
        if verdict == REGRESSED and grew:
            text += "; it grew before " + ", ".join(f"{op} ({d:+,.0f} µs)" for op, d in grew)
        reasons = (text,)
    result = _family_result(HOST_FAMILY, verdict, total, reasons)
    if verdict == REGRESSED:
        result = replace(result, grew_before=tuple(op for op, _ in grew))
    return result


HOST_RANKED = 3  # ops named as the ones the time outside any op grew before


def _host_growth(
    baseline: Sequence[OpTable], current: OpTable, rule: Rule
) -> list[tuple[str, float]]:
    """The ops before which the time outside any op grew, µs per round (raw), largest first:
    the gap before each of the body's outermost ops, against the baseline's pooled rounds."""
    if current.host_before_us is None:
        return []
    pooled: dict[str, list[FloatArray]] = {}
    for t in baseline:
        if t.host_before_us is None:
            return []  # a baseline from before the gaps were kept: nothing to rank against
        for i, name in enumerate(t.names):
            pooled.setdefault(name, []).append(t.host_before_us[i])
    grew = []
    for i, name in enumerate(current.names):
        before = rule.center(np.concatenate(pooled[name])) if name in pooled else 0.0
        delta = rule.center(current.host_before_us[i]) - before
        if delta > 0:
            grew.append((name, delta))
    return sorted(grew, key=lambda g: -g[1])


def _family_result(
    family: str,
    verdict: TestWord,
    total: _Total,
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
    )


def _idle_reason(
    baseline: Sequence[DeviceTable], current: DeviceTable, total: _Total, rule: Rule
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


def _families(baseline: Sequence[OpTable], current: OpTable) -> list[str]:
    fams = ["cpu"]
    if current.has_device and all(b.has_device for b in baseline):
        fams.append("cuda")
    return fams


def _device_note(baseline: Sequence[OpTable], current: OpTable) -> tuple[str, ...]:
    if current.has_device and not all(b.has_device for b in baseline):
        return ("the baseline has no CUDA times: CUDA was not compared",)
    if not current.has_device:
        return ("CUDA was not profiled (no GPU): CPU times only",)
    return ()


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
    outcomes = [
        _compare_family(baseline, current, fam, rule, timed=same_hardware)
        for fam in _families(baseline, current)
    ]
    results = [o.result for o in outcomes]
    idle = _idle_family(baseline, current, rule, timed=same_hardware)
    if idle is not None:
        results.append(idle)
    results.append(_host_family(baseline, current, rule, timed=same_hardware))
    # The drift between the sides says how timings were compared; with none compared, nothing.
    uniform, probe_shift = _shifts(baseline, current, rule) if same_hardware else (None, None)
    verdict, reason = _combine(results)
    verdict, reason, memory_notes = _with_memory(verdict, reason, baseline, current, rule)
    ops = [op for o in outcomes for op in o.ops]
    return TestVerdict(
        verdict=verdict,
        reason=reason,
        ops=tuple(ops),
        families=tuple(results),
        uniform_shift_pct=uniform,
        probe_shift_pct=probe_shift,
        sessions=len(baseline),
        notes=(*_device_note(baseline, current), *memory_notes),
        timing_compared=same_hardware,
        round_samples=tuple(s for o in outcomes for s in o.samples),
        device_rows=_device_rows(baseline, current, ops),
    )


def _with_memory(
    verdict: TestWord, reason: str, baseline: Sequence[OpTable], current: OpTable, rule: Rule
) -> tuple[TestWord, str, tuple[str, ...]]:
    """The verdict joined with the memory gate (exact, like the work census: no confirmation),
    and the notes it leaves."""
    if current.memory is None:
        return verdict, reason, ()
    tables = [b.memory for b in baseline if b.memory is not None]
    if len(tables) < len(baseline):
        return verdict, reason, ("no memory baseline: re-record with --tprof-save",)
    gate = memory.judge_memory(tables, current.memory, floor=rule.work_floor)
    notes: tuple[str, ...] = ()
    if gate.varying_ops:
        notes = (f"memory: {gate.varying_ops} ops allocate differently from round to round "
                 "(reported, not gated)",)  # fmt: skip
    if gate.verdict == UNCHANGED:
        return verdict, reason, notes
    text = "MEMORY: " + "; ".join(gate.reasons)
    word: TestWord = REGRESSED if gate.verdict == REGRESSED else IMPROVED
    word = min((verdict, word), key=verdict_rank)
    quiet = reason == NOTHING_CHANGED
    return word, text if quiet else f"{reason} | {text}", notes


def _device_rows(
    baseline: Sequence[OpTable], current: OpTable, ops: Sequence[OpVerdict]
) -> tuple[gpu.DeviceRowDelta, ...]:
    """The kernels, copies and fills of the flagged ops and of the ops with a new host wait,
    when every side has a device table."""
    tables = [b.device for b in baseline if b.device is not None]
    if current.device is None or len(tables) < len(baseline):
        return ()
    flagged = [o.op for o in sorted((o for o in ops if o.flagged), key=lambda o: -o.delta_us)]
    waiting = [w.op for w in gpu.host_waits(tables, current.device) if w.more]
    return tuple(gpu.row_deltas([*flagged, *waiting], tables, current.device))


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


def _combine(results: Sequence[FamilyResult]) -> tuple[TestWord, str]:
    """The test's verdict: its most urgent family's, with every family's reasons."""
    worst = min(results, key=lambda r: verdict_rank(r.verdict))
    reasons = [f"{r.family.upper()}: {'; '.join(r.reasons)}" for r in results if r.reasons]
    if worst.verdict == UNCHANGED and not reasons:
        reasons = [NOTHING_CHANGED]
    return worst.verdict, " | ".join(reasons)


def _shifts(
    baseline: Sequence[OpTable], current: OpTable, rule: Rule
) -> tuple[float | None, float | None]:
    """Median log-ratio over the ops (raw µs) and the probe's own shift, in percent."""
    raw_rule = replace(rule, probe=False)
    base = _side(baseline, "cpu", 0.0, raw_rule)
    cur = _side([current], "cpu", 0.0, raw_rule)
    total = sum(base.raw_op_medians.values())
    ratios = [
        math.log(cur.raw_op_medians[n] / m)
        for n, m in base.raw_op_medians.items()
        if n in cur.raw_op_medians and m > 0 and cur.raw_op_medians[n] > 0 and m >= 0.01 * total
    ]
    uniform = math.expm1(float(np.median(ratios))) * 100.0 if ratios else None
    b_probe = np.concatenate([b.probe_cpu_us for b in baseline])
    probe = None
    if b_probe.size and current.probe_cpu_us.size:
        bm, cm = rule.center(b_probe), rule.center(current.probe_cpu_us)
        probe = (cm / bm - 1.0) * 100.0 if bm > 0 else None
    return uniform, probe
