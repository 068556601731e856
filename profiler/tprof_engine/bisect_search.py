"""``tprof bisect``'s search, apart from any process: the commits between GOOD and BAD, which
one to measure next, each commit's class, and a paired effect with its interval
(docs/bisect.md).

A search keeps the last commit known good and the first known bad; a commit that could not be
measured (it fails to import, its test errors, its effect stays unsure) is skipped as ``git
bisect skip`` would, and the next one measured is the unskipped commit nearest the middle.
The answer is one commit, or, when skipped commits stand between the last good and the first
bad, the range they leave.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final, Literal

import numpy as np

from tprof_engine.decide.timing import stats

Word = Literal["good", "bad", "unsure", "skip"]
GOOD: Final = "good"
BAD: Final = "bad"
UNSURE: Final = "unsure"  # its interval holds the middle: measured again, then skipped
SKIP: Final = "skip"  # it could not be measured (import, build or test error), or stayed unsure
# Where a commit's effect must lie to be classed: beyond (or short of) this share of the
# GOOD→BAD effect, its whole interval on one side.
SHARE: Final = 0.5
_Z95: Final = 1.959964


@dataclass(frozen=True, slots=True, kw_only=True)
class Effect:
    """A paired change: the Hodges-Lehmann centre of the per-round log ratios and its 95 %
    interval, as fractions (0.25: 25 % slower), over ``pairs`` rounds."""

    centre: float
    low: float
    high: float
    pairs: int
    base_us: float = 0.0  # the base side's median per round
    cur_us: float = 0.0  # the base's median scaled by the centre

    def text(self) -> str:
        return f"{self.centre:+.1%} [{self.low:+.1%}, {self.high:+.1%}]"


def paired_effect(base: np.ndarray, cur: np.ndarray) -> Effect | None:
    """The change from ``base``'s rounds to ``cur``'s, pair by pair (the first rounds of the
    longer side when they differ); None without two positive pairs."""
    n = min(base.size, cur.size)
    b, c = np.asarray(base[:n], dtype=float), np.asarray(cur[:n], dtype=float)
    keep = (b > 0) & (c > 0)
    if int(keep.sum()) < 2:
        return None
    logs = stats.log_ratios(b[keep], c[keep])
    low, high = _interval(logs)
    centre = stats.hodges_lehmann(logs)
    base_us = stats.median(b[keep])
    return Effect(
        centre=math.expm1(centre),
        low=math.expm1(low),
        high=math.expm1(high),
        pairs=int(logs.size),
        base_us=base_us,
        cur_us=base_us * math.exp(centre),
    )


def _interval(logs: np.ndarray) -> tuple[float, float]:
    """The signed-rank (Walsh averages) 95 % interval of the centre, normal approximation."""
    n = logs.size
    i, j = np.triu_indices(n)
    walsh = np.sort((logs[i] + logs[j]) / 2.0)
    m = walsh.size
    k = math.floor(n * (n + 1) / 4 - _Z95 * math.sqrt(n * (n + 1) * (2 * n + 1) / 24))
    k = min(max(k, 0), (m - 1) // 2)
    return float(walsh[k]), float(walsh[m - 1 - k])


def classify(effect: Effect, bad: Effect) -> Word:
    """A commit by where its effect against GOOD lies between GOOD's (none) and BAD's: bad
    when its whole interval is beyond half of BAD's, good when it is short of it, unsure
    when the interval holds that middle."""
    middle = math.log1p(bad.centre) * SHARE
    if math.log1p(effect.low) > middle:
        return BAD
    if math.log1p(effect.high) < middle:
        return GOOD
    return UNSURE


@dataclass(slots=True)
class Search:
    """One bisection over ``commits`` (oldest first, GOOD excluded, BAD last): ``low`` the
    index of the last commit known good (-1: GOOD), ``high`` the first known bad."""

    commits: Sequence[str]
    skipped: set[int] = field(default_factory=set)
    low: int = -1
    high: int = -1

    def __post_init__(self) -> None:
        if self.high < 0:
            self.high = len(self.commits) - 1

    def next(self) -> int | None:
        """The index to measure next (None: the search is done)."""
        left = [i for i in range(self.low + 1, self.high) if i not in self.skipped]
        if not left:
            return None
        middle = (self.low + self.high) / 2
        return min(left, key=lambda i: (abs(i - middle), i))

    def record(self, index: int, word: Word) -> None:
        if word == GOOD:
            self.low = index
        elif word == BAD:
            self.high = index
        else:
            self.skipped.add(index)

    def culprits(self) -> list[str]:
        """The first bad commit, or the commits it may be when skipped ones stand between
        the last good and the first bad (oldest first, the first bad last)."""
        return list(self.commits[self.low + 1 : self.high + 1])

    @property
    def found(self) -> bool:
        return self.high - self.low == 1

    @property
    def last_good(self) -> str | None:
        """The last commit known good (None: GOOD itself)."""
        return self.commits[self.low] if self.low >= 0 else None


def max_steps(commits: int) -> int:
    """The bound the search keeps without skips: ⌈log2(commits + 1)⌉ measured commits."""
    return math.ceil(math.log2(commits + 1)) if commits > 0 else 0
