"""The decision rule: baseline sessions + current op table → a verdict per test and per op.

See design.md §5.  Per family (CPU self time; CUDA self device time when present):

1. Op times are put in drift-probe units: each session is scaled by its probe's median.
2. Test level: the round's total op time, one-sided Mann-Whitney U, α, a relative floor
   (learned from the baseline's sessions) and an absolute floor.
3. Op level: per-op one-sided U with Holm across the test's ops; an op carrying a material
   share of the round that regressed significantly beyond its floor fails the test alone.
4. Op against the rest of its test: a material op's time over the other ops' time, round by
   round, with its own learned floor; drift that moves the whole test cancels in it.
5. Structure: calls are exact; time added by new and more-called ops, net of what removed
   and less-called ops saved, fails the test past a share of the round; otherwise "changed".
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from fnmatch import fnmatchcase
from typing import Any, ClassVar

import numpy as np

from profiler import stats
from profiler.records import FloatArray, OpTable

REGRESSED = "regressed"
IMPROVED = "improved"
UNCHANGED = "unchanged"
CHANGED = "changed"
INCONCLUSIVE = "inconclusive"
INCOMPARABLE = "incomparable"
NO_BASELINE = "no-baseline"
ERROR = "error"
SAVED = "saved"
VERDICTS = (REGRESSED, IMPROVED, UNCHANGED, CHANGED, INCONCLUSIVE, INCOMPARABLE, NO_BASELINE, ERROR)

# Op verdicts beyond the test verdicts.
NEW = "new"
REMOVED = "removed"
CALLS_CHANGED = "calls-changed"
NOT_GATED = "not-gated"
NOISY = "too-noisy"

# Ops that wait for the device rather than work: reported, never gated (on device runs).
ROUNDS_KEPT = 5  # flagged ops per family whose per-round samples go into reports

SYNC_OPS = frozenset(
    {
        "cudaDeviceSynchronize",
        "cudaStreamSynchronize",
        "cudaEventSynchronize",
        "cudaStreamWaitEvent",
        "cuStreamSynchronize",
        "aten::item",
        "aten::_local_scalar_dense",
    }
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Rule:
    """Parameters of the decision rule; defaults are design.md §5's."""

    alpha: float = 0.01
    rel_floor: float | None = None  # fixed relative floor; None = learned from sessions
    # Minimum floor in probe units.  10 %, not 7 %: ops drift between sessions by different
    # amounts, which neither the probe nor the rest of the test tracks; with 2 % of such drift
    # per op the simulation false-failed 2.9 % at 7 % and 2.0 % at 10 % (three sessions), and
    # in real reruns two of three false alarms were an op 7-10 % slower against a 7-8 % floor.
    # Power for small single-op changes comes from the comparison with the rest of the test.
    min_rel_floor: float = 0.10
    # The U tests ask for a shift beyond this share of the floor; the estimate itself must
    # still exceed the whole floor.  The floor is already a bound on session drift, so testing
    # significance against all of it counts the sampling noise twice (simulated power for a
    # 10 % op slowdown with 3 sessions: 33 % at 1.0, 68 % at 0.5, false failures ≤ 0.1 %).
    shift_share: float = 0.5
    single_session_floor: float = 0.15  # conservative floor when one session can't show drift
    op_single_session_floor: float = 0.20
    abs_floor_us: float = 20.0
    material_share: float = 0.05  # an op carrying this share of the round is gated alone
    attribution_share: float = 0.10  # ops carrying this share of a total delta are listed
    structure_share: float = 0.05
    strict_calls: bool = False
    ignore: tuple[str, ...] = ()  # fnmatch patterns of ops to leave out
    probe: bool = True  # compare in drift-probe units

    # Each material op is also compared with the rest of its own test (its time over the other
    # ops' time, round by round).  Drift that moves the whole test cancels there, and the floor
    # learned for that ratio is the op's own sampling noise rather than the machine's mood:
    # simulated power for a 10 % op slowdown with 3 sessions went from 68 % to ~90 %.  Used only
    # while the rest of the test holds steady in probe units, so a faster rest can't read as a
    # slower op.
    peer: bool = True
    peer_min_rest: float = 0.2  # the rest must carry this share of the round to compare against
    peer_shift_share: float = 0.25  # as ``shift_share``, for the op-over-rest ratio
    peer_min_rel_floor: float = 0.07  # the ratio's minimum floor (the drift cancels there)
    # The op's own change in probe units must carry this share of its ratio's change: a ratio
    # that grew because the rest of the test got faster is the rest's doing, not the op's.
    peer_own_share: float = 0.5

    floor_z: float = 3.0  # how far out a new session's drift may fall before it counts
    # Where a side's time is read: a lower quantile, since contention on a shared machine only
    # ever adds time (a preempted op reads 10x slower), and the U tests use the rounds below
    # twice that quantile.  0.5 reads the median and tests every round.
    quantile: float = 0.25

    def center(self, values: FloatArray) -> float:
        """The side's representative time (its ``quantile``)."""
        return float(np.quantile(values, self.quantile)) if values.size else 0.0

    def lower(self, values: FloatArray) -> FloatArray:
        """The rounds the U tests use: those at or below twice the ``quantile``."""
        if self.quantile >= 0.5 or values.size < 4:
            return values
        return values[values <= np.quantile(values, 2 * self.quantile)]

    def floor_for(
        self, session_medians: Sequence[float], *, op: bool = False, minimum: float | None = None
    ) -> float:
        """Relative floor: fixed if configured, else learned from how the sessions disagree.

        The range of n sessions understates how far the next session can drift (with three,
        the next one falls outside their range half the time), so the floor is a one-sided
        prediction bound: the between-session spread estimated from the range (σ ≈ range/dₙ,
        the normal range constant), widened by √(1 + 1/n), at ``floor_z`` spreads.
        """
        if self.rel_floor is not None:
            return self.rel_floor
        meds = [m for m in session_medians if m > 0]
        if len(meds) < 2:
            return self.op_single_session_floor if op else self.single_session_floor
        n = len(meds)
        sigma = math.log(max(meds) / min(meds)) / _RANGE_D.get(n, _RANGE_D[10])
        bound = math.expm1(self.floor_z * sigma * math.sqrt(1.0 + 1.0 / n))
        return max(self.min_rel_floor if minimum is None else minimum, bound)


# Expected range of n standard normal samples (d2 of control charts).
_RANGE_D = {
    2: 1.128,
    3: 1.693,
    4: 2.059,
    5: 2.326,
    6: 2.534,
    7: 2.704,
    8: 2.847,
    9: 2.970,
    10: 3.078,
}


@dataclass(frozen=True, slots=True, kw_only=True)
class OpVerdict:
    """One op of one family: medians per round in µs (probe-normalised), p adjusted by Holm."""

    op: str
    family: str
    verdict: str
    baseline_median_us: float
    current_median_us: float
    delta_us: float
    delta_pct: float
    p_value: float | None
    calls_baseline: int
    calls_current: int
    share: float
    floor_pct: float
    mde_pct: float | None
    gated: bool
    note: str = ""
    # The op's time over the rest of its test, against the baseline's (material ops only).
    peer_pct: float | None = None
    peer_floor_pct: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {k: _clean(v) for k, v in asdict(self).items()}


@dataclass(frozen=True, slots=True, kw_only=True)
class FamilyResult:
    """Test-level figures for one family (``cpu`` or ``cuda``)."""

    family: str
    verdict: str
    baseline_total_us: float
    current_total_us: float
    delta_pct: float
    p_value: float
    floor_pct: float
    floor_source: str
    mde_pct: float
    timing_regressed: bool
    op_gate: tuple[str, ...]  # ops that fail the test on their own
    structure_added_us: float
    structure_regressed: bool
    reasons: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {k: _clean(v) for k, v in asdict(self).items()}


@dataclass(frozen=True, slots=True, kw_only=True)
class TestVerdict:
    """The verdict on one test, with every op's figures for reports."""

    __test__: ClassVar[bool] = False  # not a pytest test class, whatever its name

    verdict: str
    reason: str
    ops: tuple[OpVerdict, ...] = ()
    families: tuple[FamilyResult, ...] = ()
    uniform_shift_pct: float | None = None
    probe_shift_pct: float | None = None
    sessions: int = 0
    differences: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    timing_compared: bool = True
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def regressed(self) -> bool:
        return self.verdict == REGRESSED

    @property
    def timing_regressed(self) -> bool:
        return any(f.timing_regressed or f.op_gate for f in self.families)

    def flagged_ops(self) -> list[OpVerdict]:
        """Ops to show in a failure: regressed and structural changes, largest delta first."""
        keep = {REGRESSED, NEW, REMOVED, CALLS_CHANGED}
        rows = [o for o in self.ops if o.verdict in keep]
        return sorted(rows, key=lambda o: -o.delta_us)

    def to_dict(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict,
            "reason": self.reason,
            "uniform_shift": _clean(self.uniform_shift_pct),
            "probe_shift": _clean(self.probe_shift_pct),
            "sessions": self.sessions,
            "differences": list(self.differences),
            "notes": list(self.notes),
            "timing_compared": self.timing_compared,
            "families": [f.to_dict() for f in self.families],
            "ops": [o.to_dict() for o in self.ops],
            "round_samples": list(self.extra.get("round_samples", [])),
        }


def _clean(v: Any) -> Any:
    if isinstance(v, float):
        if math.isnan(v) or math.isinf(v):
            return None
        return float(f"{v:.6g}")  # significant digits: tiny p-values must not become 0
    if isinstance(v, tuple):
        return list(v)
    return v


# ---------------------------------------------------------------------------------------


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


def _side(tables: Sequence[OpTable], family: str, reference: float, rule: Rule) -> _Side:
    metric, probe_attr = _metric(family)
    per_op: dict[str, list[FloatArray]] = {}
    raw: dict[str, list[FloatArray]] = {}
    per_session: dict[str, list[float]] = {}
    calls: dict[str, list[FloatArray]] = {}
    totals: list[FloatArray] = []
    session_totals: list[float] = []
    session_rows: list[tuple[dict[str, FloatArray], FloatArray]] = []
    for t in tables:
        s = _scale(t, probe_attr, reference, rule)
        values = getattr(t, metric)
        keep = [i for i, n in enumerate(t.names) if not _ignored(n, rule.ignore)]
        round_total = values[keep].sum(axis=0) * s if keep else np.zeros(t.rounds)
        totals.append(round_total)
        session_totals.append(rule.center(round_total))
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
        session_total_medians=session_totals,
        raw_op_medians={k: rule.center(np.concatenate(v)) for k, v in raw.items()},
        sessions=session_rows,
    )


def _peer(side: _Side, name: str, rule: Rule) -> tuple[FloatArray, list[float], FloatArray]:
    """The op's time over the rest of its test, round by round.

    Returns the pooled per-round ratios, each session's median ratio (for the learned floor)
    and the rest's per-round time (probe units) on the same rounds.  A session without the op
    contributes nothing.
    """
    ratios: list[FloatArray] = []
    centres: list[float] = []
    rests: list[FloatArray] = []
    for ops, totals in side.sessions:
        op = ops.get(name)
        if op is None or totals.size == 0:
            continue
        rest = totals - op
        # Every round: contention that slows the whole round cancels in the ratio, and what
        # slows one side of it is an outlier either way, which the median and U shrug off.
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


def _families(baseline: Sequence[OpTable], current: OpTable) -> list[str]:
    fams = ["cpu"]
    if current.has_device and all(b.has_device for b in baseline):
        fams.append("cuda")
    return fams


def compare(
    baseline: Sequence[OpTable],
    current: OpTable,
    rule: Rule | None = None,
    *,
    timing: bool = True,
) -> TestVerdict:
    """Compare the current op table with one or more baseline sessions.

    With ``timing=False`` (hardware differs) only the structure (calls) is gated.
    """
    rule = rule or Rule()
    if not baseline:
        return TestVerdict(verdict=NO_BASELINE, reason="no baseline recorded for this test")
    families = _families(baseline, current)
    results: list[FamilyResult] = []
    ops: list[OpVerdict] = []
    notes: list[str] = []
    if current.has_device and not all(b.has_device for b in baseline):
        notes.append("the baseline has no CUDA times: CUDA was not compared")
    elif not current.has_device:
        notes.append("CUDA was not profiled (no GPU): CPU times only")
    rounds: list[dict[str, Any]] = []
    for fam in families:
        res, fam_ops, fam_rounds = _compare_family(baseline, current, fam, rule, timing=timing)
        results.append(res)
        ops.extend(fam_ops)
        rounds.extend(fam_rounds)

    uniform, probe_shift = _shifts(baseline, current, rule)
    verdict, reason = _combine(results, timing)
    return TestVerdict(
        verdict=verdict,
        reason=reason,
        ops=tuple(ops),
        families=tuple(results),
        uniform_shift_pct=uniform,
        probe_shift_pct=probe_shift,
        sessions=len(baseline),
        notes=tuple(notes),
        timing_compared=timing,
        extra={"round_samples": rounds},
    )


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
    verdict = compare(baseline, current, rule, timing=not timing_diffs)
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


def _combine(results: Sequence[FamilyResult], timing: bool) -> tuple[str, str]:
    order = (REGRESSED, CHANGED, IMPROVED, INCONCLUSIVE, UNCHANGED)
    worst = min(results, key=lambda r: order.index(r.verdict))
    reasons = [f"{r.family.upper()}: {'; '.join(r.reasons)}" for r in results if r.reasons]
    if worst.verdict == UNCHANGED and not reasons:
        reasons = ["no op changed beyond its floor"]
    return worst.verdict, " | ".join(reasons)


def _compare_family(
    baseline: Sequence[OpTable],
    current: OpTable,
    family: str,
    rule: Rule,
    *,
    timing: bool,
) -> tuple[FamilyResult, list[OpVerdict], list[dict[str, Any]]]:
    _, probe_attr = _metric(family)
    pooled_probe = np.concatenate([getattr(b, probe_attr) for b in baseline])
    reference = rule.center(pooled_probe)
    base = _side(baseline, family, reference, rule)
    cur = _side([current], family, reference, rule)
    n_b = int(base.totals.size)
    n_c = int(cur.totals.size)
    base_total = rule.center(base.totals)
    cur_total = rule.center(cur.totals)

    # Test level.
    if len(baseline) >= 2 and rule.rel_floor is None:
        floor_source = f"learned from {len(baseline)} baseline sessions"
    elif rule.rel_floor is not None:
        floor_source = "configured"
    else:
        floor_source = "single-session default"
    floor = rule.floor_for(base.session_total_medians)
    # "Significantly beyond the floor": the current rounds against the baseline rounds
    # shifted by the floor, so sampling noise alone can't carry a change past it.
    low_b, low_c = rule.lower(base.totals), rule.lower(cur.totals)
    shift = rule.shift_share * floor
    p_total = stats.mwu_greater(low_c, low_b * (1.0 + shift))
    p_total_less = stats.mwu_less(low_c, low_b * (1.0 - shift))
    delta_pct = (cur_total / base_total - 1.0) if base_total > 0 else 0.0
    sigma = stats.pooled_log_spread(low_b, low_c)
    mde = stats.min_detectable_effect(sigma, low_c.size, low_b.size, alpha=rule.alpha)
    timing_regressed = (
        timing
        and p_total < rule.alpha
        and delta_pct > floor
        and (cur_total - base_total) >= rule.abs_floor_us
    )
    improved = (
        timing
        and p_total_less < rule.alpha
        and delta_pct < -floor
        and (base_total - cur_total) >= rule.abs_floor_us
    )

    # Op level.
    names = sorted(set(base.per_op) | set(cur.per_op))
    device_run = current.has_device
    rows: dict[str, dict[str, Any]] = {}
    pvals: list[float] = []
    tested: list[str] = []
    for name in names:
        b_vals = base.per_op.get(name)
        c_vals = cur.per_op.get(name)
        b_calls = base.calls.get(name, 0)
        c_calls = cur.calls.get(name, 0)
        b_med = rule.center(b_vals) if b_vals is not None else 0.0
        c_med = rule.center(c_vals) if c_vals is not None else 0.0
        if family == "cuda" and b_med == 0.0 and c_med == 0.0:
            continue  # ops that launch no kernels have no CUDA row
        row: dict[str, Any] = {
            "b_med": b_med,
            "c_med": c_med,
            "b_calls": b_calls,
            "c_calls": c_calls,
            "share": b_med / base_total if base_total > 0 else 0.0,
            "p": None,
            "mde": None,
            "floor": rule.floor_for(base.per_session_op_medians.get(name, []), op=True),
        }
        rows[name] = row
        structural = b_calls != c_calls
        if b_vals is None or c_vals is None or structural:
            continue
        if device_run and name in SYNC_OPS:
            continue
        lb, lc = rule.lower(b_vals), rule.lower(c_vals)
        sig = stats.pooled_log_spread(lb, lc)
        row["mde"] = stats.min_detectable_effect(sig, lc.size, lb.size, alpha=rule.alpha)
        row["sigma"] = sig
        pvals.append(stats.mwu_greater(lc, lb * (1.0 + rule.shift_share * row["floor"])))
        tested.append(name)
    for name, p_adj in zip(tested, stats.holm(pvals), strict=True):
        rows[name]["p"] = p_adj
    if timing and rule.peer:
        _peer_tests(rows, tested, base, cur, floor, rule)

    op_gate: list[str] = []
    added = 0.0
    out: list[OpVerdict] = []
    for name, row in rows.items():
        b_med, c_med = row["b_med"], row["c_med"]
        b_calls, c_calls = row["b_calls"], row["c_calls"]
        delta = c_med - b_med
        pct = (c_med / b_med - 1.0) if b_med > 0 else (math.inf if c_med > 0 else 0.0)
        gated = row["p"] is not None
        note = ""
        if b_calls == 0 and c_calls > 0:
            verdict = NEW
            added += c_med
        elif c_calls == 0 and b_calls > 0:
            verdict = REMOVED
            added -= b_med
        elif b_calls != c_calls:
            verdict = CALLS_CHANGED
            if c_calls > b_calls:
                added += (c_calls - b_calls) * (c_med / c_calls if c_calls else 0.0)
            else:
                added -= (b_calls - c_calls) * (b_med / b_calls if b_calls else 0.0)
        elif not gated:
            verdict = NOT_GATED
            note = "waits for the device: reported, not gated"
        elif not timing:
            verdict = UNCHANGED
            gated = False
        else:
            p = row["p"]
            sig_up = p < rule.alpha and pct > row["floor"] and delta >= rule.abs_floor_us
            peer_up = row.get("peer_up", False)
            if (sig_up or peer_up) and row["share"] >= rule.material_share:
                verdict = REGRESSED
                op_gate.append(name)
                if peer_up and not sig_up:
                    row["peer_only"] = True
                    note = (
                        f"{row['peer_pct']:+.0%} against the rest of the test, "
                        f"floor {row['peer_floor']:.0%}, p={row['peer_p']:.2g}"
                    )
            elif sig_up and timing_regressed:
                verdict = REGRESSED  # carries part of a regressed total
            elif stats.mwu_less(
                rule.lower(cur.per_op[name]),
                rule.lower(base.per_op[name]) * (1.0 - rule.shift_share * row["floor"]),
            ) < rule.alpha / len(tested) and (pct < -row["floor"]):
                verdict = IMPROVED
            elif (
                row["mde"] is not None
                and row["mde"] > row["floor"]
                and row["share"] >= rule.material_share
            ):
                verdict = NOISY
                need = stats.rounds_needed(
                    row.get("sigma", 0.0), row["floor"], n_b, alpha=rule.alpha
                )
                note = f"can only see slowdowns ≥ {row['mde']:.0%} (floor {row['floor']:.0%})" + (
                    f"; needs ~{need} rounds" if need else ""
                )
            else:
                verdict = UNCHANGED
        out.append(
            OpVerdict(
                op=name,
                family=family,
                verdict=verdict,
                baseline_median_us=b_med,
                current_median_us=c_med,
                delta_us=delta,
                delta_pct=pct * 100.0,
                p_value=row["p"],
                calls_baseline=b_calls,
                calls_current=c_calls,
                share=row["share"],
                floor_pct=row["floor"] * 100.0,
                mde_pct=None if row["mde"] is None else row["mde"] * 100.0,
                gated=gated,
                note=note,
                peer_pct=_pct_or_none(row.get("peer_pct")),
                peer_floor_pct=_pct_or_none(row.get("peer_floor")),
            )
        )

    # Attribution: when the total regressed, keep as regressed only ops carrying the delta.
    total_delta = cur_total - base_total
    if timing_regressed and total_delta > 0:
        out = [
            _demote(o, total_delta, rule) if o.verdict == REGRESSED and o.op not in op_gate else o
            for o in out
        ]

    structure_changes = [o for o in out if o.verdict in (NEW, REMOVED, CALLS_CHANGED)]
    structure_regressed = bool(structure_changes) and (
        rule.strict_calls
        or (added >= rule.structure_share * base_total and added >= rule.abs_floor_us)
    )
    reasons: list[str] = []
    if timing_regressed:
        reasons.append(
            f"total op time {delta_pct:+.1%} (p={p_total:.2g}, floor {floor:.0%} {floor_source})"
        )
    for name in op_gate:
        o = next(v for v in out if v.op == name)
        if rows[name].get("peer_only"):  # caught against the rest of the test only
            reasons.append(
                f"{name} {o.peer_pct:+.0f}% against the rest of the test ({o.share:.0%} of the "
                f"round, floor {o.peer_floor_pct:.0f}%, p={rows[name]['peer_p']:.2g}; "
                f"{o.delta_pct:+.0f}% in probe units, floor {o.floor_pct:.0f}%)"
            )
        else:
            reasons.append(
                f"{name} {o.delta_pct:+.0f}% ({o.share:.0%} of the round, p={o.p_value:.2g})"
            )
    if structure_changes:
        what = ", ".join(
            f"{o.op} {o.calls_baseline}→{o.calls_current}" for o in structure_changes[:6]
        )
        more = f" (+{len(structure_changes) - 6} more)" if len(structure_changes) > 6 else ""
        if structure_regressed:
            reasons.append(
                f"calls changed, adding {added:+.0f} µs per round "
                f"({added / base_total:+.0%} of the round): {what}{more}"
                if base_total > 0
                else f"calls changed: {what}{more}"
            )
        else:
            reasons.append(f"calls changed, net {added:+.0f} µs per round: {what}{more}")
    if timing_regressed or op_gate or structure_regressed:
        verdict = REGRESSED
    elif structure_changes:
        verdict = CHANGED
    elif improved:
        verdict = IMPROVED
        reasons.append(f"total op time {delta_pct:+.1%} (p={p_total_less:.2g})")
    elif timing and (mde > floor or stats.min_attainable_p(low_c.size, low_b.size) > rule.alpha):
        verdict = INCONCLUSIVE
        if stats.min_attainable_p(low_c.size, low_b.size) > rule.alpha:
            reasons.append(
                f"too few rounds ({n_c} current, {n_b} baseline; the tests use the faster "
                f"{low_c.size} and {low_b.size}) to reach α={rule.alpha}"
            )
        else:
            need = stats.rounds_needed(sigma, floor, n_b, alpha=rule.alpha)
            reasons.append(
                f"too noisy: can only see slowdowns ≥ {mde:.0%}, above the {floor:.0%} floor"
                + (f"; ~{need} rounds would see it" if need else "")
            )
    else:
        verdict = UNCHANGED
    order = {REGRESSED: 0, NEW: 1, CALLS_CHANGED: 1, REMOVED: 2}
    out.sort(key=lambda o: (order.get(o.verdict, 3), -o.delta_us))
    # Per-round samples of the ops a report will show first, for distribution plots.
    shown = [o.op for o in out if o.verdict in (REGRESSED, NEW, CALLS_CHANGED, REMOVED)][
        :ROUNDS_KEPT
    ]
    rounds = [
        {
            "op": name,
            "family": family,
            "baseline_us": _rounded(base.per_op.get(name)),
            "current_us": _rounded(cur.per_op.get(name)),
        }
        for name in shown
    ]
    return (
        FamilyResult(
            family=family,
            verdict=verdict,
            baseline_total_us=base_total,
            current_total_us=cur_total,
            delta_pct=delta_pct * 100.0,
            p_value=p_total,
            floor_pct=floor * 100.0,
            floor_source=floor_source,
            mde_pct=mde * 100.0,
            timing_regressed=bool(timing_regressed),
            op_gate=tuple(op_gate),
            structure_added_us=added,
            structure_regressed=structure_regressed,
            reasons=tuple(reasons),
        ),
        out,
        rounds,
    )


def _peer_tests(
    rows: dict[str, dict[str, Any]],
    tested: Sequence[str],
    base: _Side,
    cur: _Side,
    test_floor: float,
    rule: Rule,
) -> None:
    """Each material op against the rest of its test: sets ``peer_up`` and its figures in rows.

    Regressed on this route when the op's share of the test grew beyond the floor learned for
    that ratio, significantly (one-sided U on the per-round ratios against the baseline's
    shifted by part of the floor, Holm across the ops tried), by at least the absolute floor,
    while the op itself did not get faster and the rest did not get clearly faster in probe
    units (a faster rest would otherwise read as a slower op).
    """
    names: list[str] = []
    pvals: list[float] = []
    for name in tested:
        row = rows[name]
        if row["share"] < rule.material_share or 1.0 - row["share"] < rule.peer_min_rest:
            continue
        rb, centres, rest_b = _peer(base, name, rule)
        rc, _, rest_c = _peer(cur, name, rule)
        if rb.size < 2 or rc.size < 2:
            continue
        mb, mc = _ratio_centre(rb), _ratio_centre(rc)  # geometric means: always > 0
        row["peer_floor"] = rule.floor_for(centres, op=True, minimum=rule.peer_min_rel_floor)
        row["peer_pct"] = mc / mb - 1.0
        rest_pct = float(np.median(rest_c)) / float(np.median(rest_b)) - 1.0
        own_pct = row["c_med"] / row["b_med"] - 1.0 if row["b_med"] > 0 else 0.0
        row["peer_ok"] = (
            own_pct >= rule.peer_own_share * row["peer_pct"]
            and rest_pct > -rule.shift_share * test_floor
        )
        names.append(name)
        pvals.append(stats.mwu_greater(rc, rb * (1.0 + rule.peer_shift_share * row["peer_floor"])))
    for name, p_adj in zip(names, stats.holm(pvals), strict=True):
        row = rows[name]
        row["peer_p"] = p_adj
        row["peer_up"] = bool(
            row["peer_ok"]
            and p_adj < rule.alpha
            and row["peer_pct"] > row["peer_floor"]
            and row["b_med"] * row["peer_pct"] >= rule.abs_floor_us
        )


def _pct_or_none(value: float | None) -> float | None:
    return None if value is None else value * 100.0


def _rounded(values: FloatArray | None) -> list[float]:
    return [] if values is None else [round(float(v), 3) for v in values]


def _demote(o: OpVerdict, total_delta: float, rule: Rule) -> OpVerdict:
    if o.delta_us >= rule.attribution_share * total_delta:
        return o
    return replace(o, verdict=UNCHANGED, note="slower, but carries little of the total's delta")


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


def shift_message(verdict: TestVerdict) -> str:
    """Plain words for the uniform shift: did the machine or the code get slower?"""
    u, p = verdict.uniform_shift_pct, verdict.probe_shift_pct
    if u is None:
        return ""
    text = f"uniform shift {u:+.0f}%"
    if p is None:
        return text
    if abs(p) >= 5:
        who = "the machine itself got slower" if p > 0 else "the machine itself got faster"
        return f"{text} (probe {p:+.0f}%: {who}; compared in probe units)"
    return f"{text} (probe steady {p:+.0f}%: the change is in the code)"
