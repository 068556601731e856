"""The ``@pytest.mark.tprof(...)`` marker: its keywords, each checked, as the rounds and the rule
a test runs under (the only reader of the marker, as :mod:`pytest_tprof.options` is of options)."""

from __future__ import annotations

import warnings
from dataclasses import replace
from typing import Any

import pytest

from tprof_engine.api import Rule
from tprof_engine.model.errors import ConfigError
from tprof_engine.model.limits import FLOOR_LIMIT, ROUNDS_LIMIT, WARMUP_LIMIT, number_problem

# Numeric marker keywords: (minimum, maximum, integer, below the maximum).  NaN or an
# infinite floor would switch a gate off; each maximum is where a value stops being a setting.
_MARKER_NUMBERS: dict[str, tuple[float, float, bool, bool]] = {
    "rounds": (2, ROUNDS_LIMIT, True, False),
    "warmup": (0, WARMUP_LIMIT, True, False),
    # A fraction (0.1 = 10 %), bounded as --tprof-floor: +1000 % is no floor but "never".
    "floor": (0.0, FLOOR_LIMIT, False, True),
    # The smallest slowdown of a round worth failing; rounds run 20+ times per test, so no
    # profiled round is long enough for a 10 s floor to be one.  'ignore' leaves ops out.
    "abs_floor_us": (0.0, 1e7, False, False),
    # A share of the test's total work: at 1 the work may double unnoticed; more is no gate.
    "work_floor": (0.0, 1.0, False, False),
}
MARKER_KWARGS = (*_MARKER_NUMBERS, "ignore", "strict")
MARKER_HELP = (
    "tprof(rounds=N, warmup=N, floor=F, abs_floor_us=F, ignore=[patterns], strict=bool, "
    "work_floor=F): per-test overrides for pytest-tprof"
)
# The marker's keyword → the Rule field it sets, where they differ; old keywords → new ones.
_RULE_FIELD = {"floor": "rel_floor", "strict": "strict_calls"}
_OLD_MARKER_KWARGS = {"rel_floor": "floor"}


def marker_overrides(item: pytest.Item, rule: Rule) -> tuple[dict[str, int], Rule]:
    """Rounds/warm-up and the rule after the test's ``@pytest.mark.tprof(...)`` keywords."""
    counts: dict[str, int] = {}
    changes: dict[str, Any] = {}
    for mark in reversed(list(item.iter_markers("tprof"))):  # closest marker wins
        if mark.args:
            raise ConfigError(f"@pytest.mark.tprof takes keywords only (got {mark.args!r})")
        for given, value in mark.kwargs.items():
            key = _marker_keyword(given)
            checked = _marker_value(key, value)
            if key in ("rounds", "warmup"):
                counts[key] = checked
            else:
                changes[_RULE_FIELD.get(key, key)] = checked
    return counts, replace(rule, **changes) if changes else rule


def _marker_keyword(given: str) -> str:
    """The keyword as this version spells it (an old spelling warns), or a ConfigError."""
    new = _OLD_MARKER_KWARGS.get(given)
    if new is not None:
        warnings.warn(
            f"@pytest.mark.tprof({given}=...) is deprecated and will be removed: use {new}=...",
            pytest.PytestDeprecationWarning,
            stacklevel=4,
        )
        return new
    if given not in MARKER_KWARGS:
        valid = ", ".join(sorted(MARKER_KWARGS))
        raise ConfigError(f"@pytest.mark.tprof got an unknown keyword {given!r}; valid: {valid}")
    return given


def _marker_value(key: str, value: Any) -> Any:
    """A marker keyword's value, checked: a ConfigError names the keyword and the value."""
    if key == "ignore":
        return _ignore_patterns(value)
    if key == "strict":
        if not isinstance(value, bool):
            raise ConfigError(f"@pytest.mark.tprof 'strict' must be True or False (got {value!r})")
        return value
    minimum, maximum, integer, below = _MARKER_NUMBERS[key]
    problem = number_problem(
        value, minimum=minimum, maximum=maximum, integer=integer, below_maximum=below
    )
    if problem is not None:
        raise ConfigError(f"@pytest.mark.tprof '{key}' {problem}")
    return value if integer else float(value)


def _ignore_patterns(value: Any) -> tuple[str, ...]:
    """The marker's ``ignore``: one op name pattern or a list of them."""
    patterns = (value,) if isinstance(value, str) else value
    if not isinstance(patterns, (list, tuple)) or not all(isinstance(p, str) for p in patterns):
        raise ConfigError(
            "@pytest.mark.tprof 'ignore' must be an op name pattern or a list of them "
            f"(got {value!r})"
        )
    return tuple(patterns)
