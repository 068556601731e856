"""The figures the benchmarks print (medians, percentages, spreads, the tables' rule) and their
comma-separated list options."""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Iterable, Sequence


def med(values: Iterable[float]) -> float:
    """The median; NaN for no values (a cell with nothing measured)."""
    vals = list(values)
    return statistics.median(vals) if vals else float("nan")


def pct(part: float, whole: float) -> str:
    """``part`` as a percentage of ``whole``, one decimal ("-" without a whole)."""
    return f"{100.0 * part / whole:.1f}%" if whole else "-"


def spread(values: Iterable[float]) -> str:
    """The median of ``values`` with their lowest and highest ("-" for none)."""
    v = list(values)
    if not v:
        return "-"
    return f"median {statistics.median(v):.0f} (min {min(v):.0f}, max {max(v):.0f})"


def rule(width: int = 100) -> str:
    return "=" * width


def csv(text: str, allowed: Sequence[str], what: str) -> list[str]:
    """A comma-separated option's items, each one of ``allowed`` (an argparse type)."""
    out = [x.strip() for x in text.split(",") if x.strip()]
    wrong = [x for x in out if x not in allowed]
    if wrong:
        raise argparse.ArgumentTypeError(f"{what} {wrong}: choose from {', '.join(allowed)}")
    return out
