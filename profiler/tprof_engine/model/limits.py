"""Checks of values read from files and options, shared by the modules that validate them."""

from __future__ import annotations

import math
from typing import TypeGuard


def is_count(v: object, minimum: int | None = 1) -> TypeGuard[int]:
    """Whether ``v`` is an integer ``>= minimum`` (any integer when ``minimum`` is None).

    ``bool`` is not an integer here: JSON's ``true`` is no count.
    """
    if not isinstance(v, int) or isinstance(v, bool):
        return False
    return minimum is None or v >= minimum


# Upper bounds of what a user may ask for: beyond them a value is a typo, not a setting.
# Rounds: the rule's "needs ~N rounds" hints stay in the hundreds for any CV we measured, and
# every round's events stay in memory until the reduction.
ROUNDS_LIMIT = 10_000


# Warm-up: the automatic extension stops at 50 rounds; a thousand asked for is a typo.
WARMUP_LIMIT = 1_000


# A fixed relative floor: 10 is +1,000 %; a floor at or above it (``50`` meant as 50 %) is a
# typo.  The command line, the ini file, the marker and ``tprof diff`` share it.
FLOOR_LIMIT = 10.0


def number_problem(
    value: object,
    *,
    minimum: float,
    maximum: float,
    integer: bool = False,
    below_maximum: bool = False,
) -> str | None:
    """What is wrong with ``value`` as a setting, in the words after its name; None if fine.

    ``integer`` asks for an ``int`` (never a ``bool``); otherwise any finite real number.
    The maximum is inclusive unless ``below_maximum``.
    """
    if integer and not is_count(value, minimum=None):
        return f"must be an integer (got {_shown(value)})"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"must be a number (got {_shown(value)})"
    if isinstance(value, float) and not math.isfinite(value):
        return f"must be a finite number >= {_bound(minimum)} (got {value!r})"
    if value < minimum:
        return f"must be >= {_bound(minimum)} (got {_shown(value)})"
    if value > maximum or (below_maximum and value == maximum):
        rel = "<" if below_maximum else "<="
        return f"must be {rel} {_bound(maximum)} (got {_shown(value)})"
    return None


def _bound(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def _shown(value: object, limit: int = 40) -> str:
    """``repr`` of a user's value, cut so a huge one can't flood the message."""
    try:
        text = repr(value)
    except ValueError:  # an int too long for str()
        return "a huge number"
    return text if len(text) <= limit else text[: limit - 1] + "…"


# Body calls per round: calibration never asks for more (capture.calibrate_iterations), and a
# file that asks a 10 µs body for 10**6 calls per round would stall its test for minutes.
MAX_ITERATIONS = 1000
