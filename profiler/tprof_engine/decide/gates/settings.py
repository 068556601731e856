"""The settings gate: the numeric settings the test's code chose (TF32, matmul precision,
cuDNN, SDPA backends, threads).  They choose the kernels, so a change is named as a cause, not
exact: the timing still decides."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from tprof_engine.decide.gates.finding import NOTHING, Finding, Gate
from tprof_engine.model import settings
from tprof_engine.model.verdicts import CHANGED, SETTINGS

__all__ = ["GATE", "settings_finding"]


def settings_finding(before: Mapping[str, Any], after: Mapping[str, Any]) -> Finding:
    """The numeric settings that differ, as a cause: a test the change didn't make slower
    reads at least changed."""
    changes = settings.differences(before, after)
    if not changes:
        return NOTHING
    text = settings.described(changes)
    return Finding(word=CHANGED, text=text, cause=GATE.cause(text))


GATE: Final = Gate(
    kind=SETTINGS,
    exact=False,
    find=lambda s: settings_finding(s.baseline.settings, s.current.settings),
)
