"""A change of the numeric settings a test ran under, as a cause of its verdict.

The settings (TF32, matmul precision, cuDNN, SDPA backends, threads: :mod:`tprof_engine.model.
settings`) choose the kernels, so a change is named, and the timing is still judged: a test
the change made slower fails naming it; one it left as fast reads changed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from tprof_engine.model import settings
from tprof_engine.model.verdicts import CHANGED, FAILING, SETTINGS, Cause, TestVerdict, worst


def with_settings(
    verdict: TestVerdict, before: Mapping[str, Any], after: Mapping[str, Any]
) -> TestVerdict:
    """The verdict with the settings that differ as its cause: a test that doesn't fail
    reads at least changed."""
    changes = settings.differences(before, after)
    if not changes:
        return verdict
    text = settings.described(changes)
    verdict = verdict.with_cause(Cause(kind=SETTINGS, text=text))
    if verdict.verdict in FAILING:
        return replace(verdict, reason=f"{verdict.reason} | {text}")
    return replace(
        verdict, verdict=worst([verdict.verdict, CHANGED]), reason=f"{text} | {verdict.reason}"
    )
