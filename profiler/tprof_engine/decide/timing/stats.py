"""Statistics for the verdicts, in numpy alone.

The Mann-Whitney U test gives scipy's ``mannwhitneyu(..., method="auto")`` p-values (its
exact null distribution when a sample has at most 8 values and nothing is tied, else the
normal approximation with tie and continuity corrections) without scipy's per-call cost,
which was most of a test's judging time (a test with 144 tests spent 1.2 s in them).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import numpy as np

from tprof_engine.model.arrays import FloatArray

MAD_TO_SD = 1.4826  # scale of the median absolute deviation for a normal distribution


def quantile(values: FloatArray, q: float) -> float:
    """``np.quantile(values, q)`` of a 1-D array of finite values, the same number without its
    per-call cost (a test's judging calls it hundreds of times): numpy's linear method, its
    virtual index and its interpolation, over a partial sort."""
    n = values.size
    if n == 0:
        raise ValueError("quantile of no values")
    virtual = (n - 1) * q
    below = min(max(math.floor(virtual), 0), n - 1)
    above = min(below + 1, n - 1)
    gamma = virtual - math.floor(virtual)
    part = np.partition(values, (below, above))
    a, b = float(part[below]), float(part[above])
    diff = b - a
    return b - diff * (1.0 - gamma) if gamma >= 0.5 else a + diff * gamma


def median(values: FloatArray) -> float:
    """``np.median`` of a 1-D array of finite values, without its per-call cost."""
    n = values.size
    if n == 0:
        raise ValueError("median of no values")
    half = n // 2
    if n % 2:
        return float(np.partition(values, half)[half])
    part = np.partition(values, (half - 1, half))
    return float((part[half - 1] + part[half]) / 2.0)


EXACT_MAX_N = 8  # the exact null distribution when one sample is this small and untied


def mwu_greater(current: FloatArray, baseline: FloatArray) -> float:
    """One-sided Mann-Whitney U p-value for "current is stochastically greater"."""
    n1, n2 = current.size, baseline.size
    if n1 == 0 or n2 == 0:
        return 1.0
    if np.all(current == current[0]) and np.all(baseline == current[0]):
        return 1.0
    both = np.concatenate([current, baseline]).astype(float, copy=False)
    if np.isnan(both).any():
        return math.nan
    ranks, ties = _average_ranks(both)
    u1 = float(ranks[:n1].sum()) - n1 * (n1 + 1) / 2
    if min(n1, n2) <= EXACT_MAX_N and not (ties > 1).any():
        p = _exact_sf(round(u1), n1, n2)
    else:
        n = n1 + n2
        tie_term = float((ties.astype(float) ** 3 - ties).sum())
        spread = math.sqrt(n1 * n2 / 12 * ((n + 1) - tie_term / (n * (n - 1))))
        z = (u1 - n1 * n2 / 2 - 0.5) / spread  # the continuity correction
        p = 0.5 * math.erfc(z / math.sqrt(2.0))
    return min(max(p, 0.0), 1.0)


def _average_ranks(values: FloatArray) -> tuple[FloatArray, np.ndarray]:
    """1-based ranks, tied values sharing their average rank, and the size of each tie group."""
    order = np.argsort(values, kind="mergesort")
    ordered = values[order]
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1], True])
    sizes = np.diff(starts)
    ranks = np.empty(values.size)
    ranks[order] = np.repeat(starts[:-1] + (sizes + 1) / 2, sizes)
    return ranks, sizes


def _exact_sf(u: int, n1: int, n2: int) -> float:
    """P(U >= u) under the null hypothesis, from the exact distribution of U."""
    counts = _u_counts(min(n1, n2), max(n1, n2))
    if u <= 0:
        return 1.0
    if u >= len(counts):
        return 0.0
    return sum(counts[u:]) / math.comb(n1 + n2, n1)


@functools.lru_cache(maxsize=64)
def _u_counts(m: int, n: int) -> tuple[int, ...]:
    """How many orderings of m + n values give each U, 0..m·n: the coefficients of the
    Gaussian binomial coefficient [m + n choose m], built as a product of m factors
    (1 - q^(n+i)) / (1 - q^i), in exact integers."""
    counts = [1] + [0] * (m * n)
    for i in range(1, m + 1):
        for k in range(len(counts) - 1, n + i - 1, -1):  # times (1 - q^(n+i))
            counts[k] -= counts[k - n - i]
        for k in range(i, len(counts)):  # divided by (1 - q^i)
            counts[k] += counts[k - i]
    return tuple(counts)


def mwu_less(current: FloatArray, baseline: FloatArray) -> float:
    """One-sided Mann-Whitney U p-value for "current is stochastically smaller"."""
    return mwu_greater(baseline, current)


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm–Bonferroni adjusted p-values (step-down, monotone, capped at 1)."""
    m = len(pvalues)
    order = sorted(range(m), key=lambda i: pvalues[i])
    adjusted = [1.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * pvalues[i]))
        adjusted[i] = running
    return adjusted


def min_attainable_p(n_current: int, n_baseline: int) -> float:
    """Smallest one-sided p an exact U test can give with these sample sizes."""
    if n_current == 0 or n_baseline == 0:
        return 1.0
    return 1.0 / math.comb(n_current + n_baseline, n_current)


def pooled_log_spread(a: FloatArray, b: FloatArray) -> float:
    """Spread of log values within each sample, pooled: a shift between them doesn't count."""
    la, lb = np.log(a[a > 0]), np.log(b[b > 0])
    if la.size + lb.size < 3:
        return 0.0
    resid = (
        np.concatenate([la - median(la), lb - median(lb)])
        if la.size and lb.size
        else (la - median(la) if la.size else lb - median(lb))
    )
    return float(MAD_TO_SD * median(np.abs(resid - median(resid))))


def min_detectable_effect(
    sigma_log: float, n_current: int, n_baseline: int, *, alpha: float, power: float = 0.8
) -> float:
    """Relative slowdown a one-sided U test detects with ``power`` at level ``alpha``.

    Normal approximation of the t test, widened by the U test's asymptotic relative
    efficiency (3/π) for normal data; ``sigma_log`` is the per-round spread of log times.
    """
    if n_current == 0 or n_baseline == 0:
        return math.inf
    z = _z(alpha, power)
    effect = z * sigma_log * math.sqrt(1 / n_current + 1 / n_baseline) * math.sqrt(math.pi / 3)
    return math.expm1(effect)


def rounds_needed(
    sigma_log: float, target: float, n_baseline: int, *, alpha: float, power: float = 0.8
) -> int | None:
    """Current rounds needed (same count in the baseline) to see ``target`` relative effect."""
    if target <= 0 or sigma_log <= 0:
        return None
    z = _z(alpha, power)
    per_side = 2 * (z * sigma_log * math.sqrt(math.pi / 3) / math.log1p(target)) ** 2
    return max(2, math.ceil(per_side))


def _z(alpha: float, power: float) -> float:
    from statistics import NormalDist

    nd = NormalDist()
    clamp = min(max(1 - alpha, 1e-12), 1 - 1e-12)  # alpha = 1 (a test switched off) stays finite
    return nd.inv_cdf(clamp) + nd.inv_cdf(min(max(power, 1e-12), 1 - 1e-12))


# Paired samples (tprof ab: a base round and a head round run next to each other).


SIGNED_RANK_EXACT_MAX_N = (
    50  # scipy's threshold: beyond it the exact sum costs n³ and gains nothing
)


def signed_rank_greater(diffs: FloatArray) -> float:
    """One-sided Wilcoxon signed-rank p-value for "the differences centre above 0", zeros
    dropped: up to :data:`SIGNED_RANK_EXACT_MAX_N` differences the exact null distribution
    (ties take average ranks, counted in half ranks), beyond it the normal approximation with
    tie and continuity corrections (scipy's ``wilcoxon(..., method="approx",
    correction=True)``)."""
    x = diffs[diffs != 0]
    n = x.size
    if n == 0:
        return 1.0
    ranks, ties = _average_ranks(np.abs(x))
    if n > SIGNED_RANK_EXACT_MAX_N:
        w_plus = float(ranks[x > 0].sum())
        variance = n * (n + 1) * (2 * n + 1) / 24.0 - float((ties**3 - ties).sum()) / 48.0
        if variance <= 0:
            return 1.0
        z = (w_plus - n * (n + 1) / 4.0 - 0.5) / math.sqrt(variance)
        return 0.5 * math.erfc(z / math.sqrt(2.0))
    doubled = np.rint(2 * ranks).astype(np.int64)  # average ranks are whole or halves
    w_plus_doubled = int(doubled[x > 0].sum())
    counts = np.zeros(int(doubled.sum()) + 1)
    counts[0] = 1.0
    for r in doubled:  # each rank's sign independently + or - under the null
        shifted = np.zeros_like(counts)
        shifted[r:] = counts[: counts.size - r]
        counts = (counts + shifted) / 2.0
    return float(counts[w_plus_doubled:].sum())


HODGES_LEHMANN_MAX_N = 1000  # half a million Walsh averages; beyond, the differences' median


def hodges_lehmann(diffs: FloatArray) -> float:
    """The paired differences' centre: the median of their pairwise (Walsh) averages (of the
    differences themselves past :data:`HODGES_LEHMANN_MAX_N`, where the averages' count grows
    as n²)."""
    if diffs.size == 0:
        return 0.0
    if diffs.size > HODGES_LEHMANN_MAX_N:
        return median(diffs)
    i, j = np.triu_indices(diffs.size)
    return median((diffs[i] + diffs[j]) / 2.0)


def paired_min_effect(sigma_log: float, pairs: int, *, alpha: float, power: float = 0.8) -> float:
    """Relative slowdown the signed-rank test on ``pairs`` log ratios of spread ``sigma_log``
    detects with ``power`` (normal approximation, widened by its relative efficiency 3/π)."""
    if pairs == 0:
        return math.inf
    return math.expm1(_z(alpha, power) * sigma_log * math.sqrt(math.pi / 3 / pairs))


def log_ratios(base: FloatArray, current: FloatArray) -> FloatArray:
    """Each pair's log(current / base), pairs in order, those with a zero side left out."""
    n = min(base.size, current.size)
    b, c = base[:n], current[:n]
    keep = (b > 0) & (c > 0)
    return np.log(c[keep] / b[keep])


def log_spread(logs: FloatArray) -> float:
    """Robust standard deviation of log ratios (scaled MAD)."""
    if logs.size < 2:
        return 0.0
    return MAD_TO_SD * median(np.abs(logs - median(logs)))
