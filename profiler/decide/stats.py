"""Statistics for the verdicts; the only module that uses scipy."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from tprof_engine.model.arrays import FloatArray

MAD_TO_SD = 1.4826  # scale of the median absolute deviation for a normal distribution


def mwu_greater(current: FloatArray, baseline: FloatArray) -> float:
    """One-sided Mann-Whitney U p-value for "current is stochastically greater"."""
    if current.size == 0 or baseline.size == 0:
        return 1.0
    if np.all(current == current[0]) and np.all(baseline == current[0]):
        return 1.0
    from scipy import stats as _st  # imported on first use: plugin start-up stays light

    res = _st.mannwhitneyu(current, baseline, alternative="greater", method="auto")
    return float(res.pvalue)


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
        np.concatenate([la - np.median(la), lb - np.median(lb)])
        if la.size and lb.size
        else (la - np.median(la) if la.size else lb - np.median(lb))
    )
    return float(MAD_TO_SD * np.median(np.abs(resid - np.median(resid))))


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
