"""Measurements of one test pooled: each capture a confirmation takes (a re-measurement in this
process, a fresh process, a fresh pair, the serial re-run after xdist) is a block of rounds,
and a family's change is judged on every block it has, not on the last one alone.

A block is read off the figures of what failed: a family's total
(:class:`~tprof_engine.model.verdicts.FamilyResult`), or an op that failed its family on its
own, by its own change or against the rest of its test (the policy picks which): the change
as a log ratio and that change's standard error, recovered from the minimum detectable effect
its own test reported (``mde = z · se`` with ``z`` the one-sided
normal quantiles of the rule's α and 80 % power).  Blocks pool by inverse variance; Cochran's
Q says whether they disagree by more than their noise (a speed that belongs to one process).

The rule (docs/design.md §5, "Confirmations add evidence"): a regression stands while the
pooled change is beyond the family's floor, unless the newest block is by itself significantly
inside the floor (its one-sided upper bound below it) and shows no slowdown of its own (a
quarter of the floor, or its own test's).  So a noisy or merely not-significant second look
doesn't take a clear first one back, nor does one that reads the same slowdown smaller; a
clear second look that contradicts it still does, and the verdict says so with both numbers.
Blocks that disagree beyond their noise are a finding (the slowdown's size depends on the
process), not a reason to take it back.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist

from tprof_engine.model.verdicts import FamilyResult

POWER = 0.8  # the power the families' minimum detectable effects are stated at


@dataclass(frozen=True, slots=True, kw_only=True)
class Block:
    """One measurement of a family's change: log ratio and its standard error."""

    effect: float  # log(current / baseline)
    se: float  # its standard error (inf: the block can't say how sure it is)
    # its own test's one-sided p for a slowdown beyond part of its floor (None: not known)
    p: float | None = None

    @property
    def pct(self) -> float:
        return math.expm1(self.effect) * 100.0


@dataclass(frozen=True, slots=True, kw_only=True)
class Pooled:
    """Blocks pooled by inverse variance, with their disagreement."""

    effect: float
    se: float  # the pooled change's standard error (inf: no block could say)
    q_p: float  # Cochran's Q test that the blocks measure one change (1.0 for one block)

    @property
    def pct(self) -> float:
        return math.expm1(self.effect) * 100.0


def block_of(family: FamilyResult, alpha: float) -> Block | None:
    """The family's change as a block, with its total's own p; None when it has no finite
    change to pool."""
    return block(family.delta_pct, family.mde_pct, alpha, p=family.p_value)


def block(
    delta_pct: float, mde_pct: float | None, alpha: float, *, p: float | None = None
) -> Block | None:
    """A change (percent) and its test's minimum detectable effect (percent) as a block, with
    that test's p (``p``) where known; None when the change is not finite."""
    if not math.isfinite(delta_pct) or delta_pct <= -100.0:
        return None
    effect = math.log1p(delta_pct / 100.0)
    mde = math.inf if mde_pct is None else mde_pct / 100.0
    z = z_power(alpha)
    se = math.log1p(mde) / z if math.isfinite(mde) and mde > 0 else math.inf
    return Block(effect=effect, se=max(se, 1e-6), p=p)


def pooled(blocks: Sequence[Block]) -> Pooled:
    """Inverse-variance pooling; blocks without a finite error count only when none has one."""
    sure = [b for b in blocks if math.isfinite(b.se)]
    if not sure:
        mean = sum(b.effect for b in blocks) / len(blocks)
        return Pooled(effect=mean, se=math.inf, q_p=1.0)
    weights = [1.0 / b.se**2 for b in sure]
    total = sum(weights)
    mean = sum(w * b.effect for w, b in zip(weights, sure, strict=True)) / total
    q = sum(w * (b.effect - mean) ** 2 for w, b in zip(weights, sure, strict=True))
    q_p = _chi2_sf(q, len(sure) - 1) if len(sure) > 1 else 1.0
    return Pooled(effect=mean, se=math.sqrt(1.0 / total), q_p=q_p)


def inside_floor(block: Block, floor_pct: float, alpha: float) -> bool:
    """The block by itself rules the regression out: its one-sided (1 − α) upper bound is
    below the floor."""
    upper = block.effect + _z_alpha(alpha) * block.se
    return upper < math.log1p(floor_pct / 100.0)


def stands(together: Pooled, newest: Block, floor_pct: float, alpha: float) -> bool:
    """A regression found in the first block still stands with ``newest`` in: the blocks'
    pooled change (``together``) beyond the floor, and ``newest`` not significantly inside it
    unless it still shows a slowdown by itself (:func:`still_slower`).

    Blocks that disagree beyond their noise don't take it back: a plant's size moves with the
    process.  Shuffled lookups into a 128 MB table read +9 to +55 % over sorted ones from one
    fresh process to the next, run alone or after other work alike (``ab_reruns.py``: +52 %,
    then +9 % in a fresh process, pooled +36 % over a 19 % floor).  Simulated
    (``sequence.py``, 2,000 unchanged trials a cell, a +50 % slowdown that reads a fifth of
    its size in half the processes): without the clause that took disagreeing blocks back, no
    false-failure rate moved and no catch fell.  Taking a regression back only when the
    newest block reads significantly faster than the baseline (the bare "other way") failed
    8.55 % of unchanged trials of the memory-bound cell (1 process in 3 at 1.6×) against
    2.55 %: a normal fresh process reads such a test's slow one as inside the floor, and only
    that clause takes it back.  With :func:`still_slower` that rate is 2.65 %, two other
    cells' move by one to three trials in 2,000, and the moving slowdown is caught 2 to 18
    times more in 300 per cell (167 → 185 with 5 % per-op drift)."""
    if inside_floor(newest, floor_pct, alpha) and not still_slower(newest, floor_pct, alpha):
        return False
    return together.effect > math.log1p(floor_pct / 100.0)


# The share of its floor a block inside the floor must still be significantly slower by to
# keep a regression standing (its lower bound beyond it): more than a session's drift, less
# than a plant that reads a fifth of its size.
STILL_SLOWER_SHARE = 0.25


def still_slower(block: Block, floor_pct: float, alpha: float) -> bool:
    """The block by itself shows a slowdown, smaller than the floor maybe: its own test
    found one (slower by part of the floor), or its one-sided (1 − α) lower bound is beyond
    :data:`STILL_SLOWER_SHARE` of the floor.  A +25 % custom op read +28 % in one process and
    +12 % (p=0.0057) in a fresh one under a 17 % floor (``ab_reruns.py``, beside one busy
    process): a smaller slowdown, not none."""
    return _slower_by(block, STILL_SLOWER_SHARE * floor_pct, alpha)


def averaged(blocks: Sequence[Block]) -> Pooled:
    """Blocks of the same length averaged with equal weights (tprof ab's pairs, each the same
    number of rounds): a block's error read from its detectable effect rests on a robust
    spread of a few rounds, and one that came out small by chance would outweigh the rest."""
    mean = sum(b.effect for b in blocks) / len(blocks)
    se = math.sqrt(sum(b.se**2 for b in blocks)) / len(blocks)
    return Pooled(effect=mean, se=se, q_p=pooled(blocks).q_p)


def combined_p(ps: Sequence[float]) -> float:
    """One-sided p-values of independent blocks combined (Stouffer's sum of their normal
    scores): valid whatever each block's spread, since each p is its own test's."""
    clipped = [min(max(p, 1e-12), 1.0 - 1e-12) for p in ps]
    z = sum(_NORMAL.inv_cdf(1.0 - p) for p in clipped) / math.sqrt(len(clipped))
    return 1.0 - _NORMAL.cdf(z)


def slower_at_all(block: Block, alpha: float) -> bool:
    """The block by itself shows a slowdown: its own test significant (it tests beyond part of
    the floor, so beyond 0 too), or its one-sided (1 − α) lower bound above 0.  The own test
    first: an error read back from a detectable effect can be wider than the test's rounds say
    (HF Llama ``generate``'s fresh process read host time +13 % at p=0.00025, and its bound
    from the detectable effect reached below 0: the plant was read "process-dependent")."""
    return _slower_by(block, 0.0, alpha)


def _slower_by(block: Block, bar_pct: float, alpha: float) -> bool:
    """The block's own test found a slowdown, or its one-sided (1 − α) lower bound is beyond
    ``bar_pct``."""
    bound = block.effect - _z_alpha(alpha) * block.se
    return own_test_found(block, alpha) or bound > math.log1p(bar_pct / 100.0)


def own_test_found(block: Block, alpha: float) -> bool:
    """The block's own test found a slowdown (beyond the part of the floor it tests)."""
    return block.p is not None and block.p < alpha


def shows_itself(block: Block, bar_pct: float, alpha: float) -> bool:
    """The block by itself shows a slowdown of at least ``bar_pct``: significantly slower at
    all, its change beyond the bar."""
    return slower_at_all(block, alpha) and block.effect > math.log1p(bar_pct / 100.0)


def _z_alpha(alpha: float) -> float:
    return _NORMAL.inv_cdf(min(max(1.0 - alpha, 1e-12), 1.0 - 1e-12))


def z_power(alpha: float) -> float:
    """The multiple of a change's standard error that is its minimum detectable effect at
    ``alpha`` and :data:`POWER` (what :func:`block` divides by to recover the error)."""
    return _z_alpha(alpha) + _NORMAL.inv_cdf(POWER)


def _chi2_sf(q: float, df: int) -> float:
    """P(χ²_df ≥ q): exact for one degree of freedom, Wilson-Hilferty's cube root beyond."""
    if df == 1:
        return math.erfc(math.sqrt(max(q, 0.0) / 2.0))
    z = ((max(q, 0.0) / df) ** (1.0 / 3.0) - (1.0 - 2.0 / (9.0 * df))) / math.sqrt(2.0 / (9.0 * df))
    return 1.0 - _NORMAL.cdf(z)


_NORMAL = NormalDist()
