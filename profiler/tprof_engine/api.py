"""The engine's face to a harness (the pytest glue, or any other): the records, words,
errors and calls it needs beyond the front's own modules (:mod:`.runner`, :mod:`.config`,
:mod:`.ranked`, :mod:`.pairing`, :mod:`.ab`, :mod:`.torch_support`).

A harness imports these and nothing deeper (``tests/test_boundaries.py`` holds the pytest
glue to it), so the stages can move beneath it.  Nothing here loads torch: the calls that
need it import their stage when called.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tprof_engine.capture.load import machine_now
from tprof_engine.decide.outcome import (
    Outcome,
    found_none,
    not_profiled,
    not_saved,
    outcome_of,
    typed_nodeid,
)
from tprof_engine.decide.policy import (
    AFTER_WORKERS,
    FRESH_PROCESS,
    after_fresh_process,
    after_serial_confirmation,
    awaiting_serial_confirmation,
    next_step,
    under_xdist,
)
from tprof_engine.decide.timing.busy import run_summary
from tprof_engine.decide.timing.rule import Rule, paired_rule
from tprof_engine.model.environment import (
    VISIBLE_DEVICES,
    device_for_worker,
    line_tracer,
    nvml_gpu_count,
    sharing_warning,
    visible_devices,
)
from tprof_engine.model.errors import BaselineError, CaptureError, ConfigError, TprofError
from tprof_engine.model.limits import FLOOR_LIMIT, ROUNDS_LIMIT, WARMUP_LIMIT, number_problem
from tprof_engine.model.results import ProfiledTest
from tprof_engine.model.settings import differences as settings_differences
from tprof_engine.model.verdicts import (
    ERROR,
    NOT_SAVED,
    REGRESSED,
    UNCHANGED,
    Cause,
    FamilyResult,
    TestVerdict,
    verdict_rank,
)
from tprof_engine.render.markdown import markdown_summary
from tprof_engine.render.report import (
    VERDICT_PROPERTY,
    failure_text,
    json_report,
    junit_properties,
    summary_line,
)
from tprof_engine.store.baselines import DEFAULT_WINDOW
from tprof_engine.store.files import file_in_the_way, write_atomic
from tprof_engine.store.paths import iter_baselines, slug
from tprof_engine.store.reading import check_not_baseline, read_nodeid
from tprof_engine.store.trace_files import bounded, with_written

__all__ = [
    "AFTER_WORKERS",
    "DEFAULT_WINDOW",
    "ERROR",
    "FLOOR_LIMIT",
    "FRESH_PROCESS",
    "NOT_SAVED",
    "REGRESSED",
    "ROUNDS_LIMIT",
    "UNCHANGED",
    "VERDICT_PROPERTY",
    "VISIBLE_DEVICES",
    "WARMUP_LIMIT",
    "BaselineError",
    "CaptureError",
    "Cause",
    "ConfigError",
    "FamilyResult",
    "Outcome",
    "ProfiledTest",
    "Rule",
    "TestVerdict",
    "TprofError",
    "after_fresh_process",
    "after_serial_confirmation",
    "apply_torch_settings",
    "awaiting_serial_confirmation",
    "bounded",
    "check_not_baseline",
    "device_for_worker",
    "failure_text",
    "file_in_the_way",
    "found_none",
    "html_report",
    "iter_baselines",
    "json_report",
    "junit_properties",
    "line_tracer",
    "machine_now",
    "markdown_summary",
    "next_step",
    "not_profiled",
    "not_saved",
    "number_problem",
    "nvml_gpu_count",
    "outcome_of",
    "paired_rule",
    "random_state",
    "read_nodeid",
    "restore_random_state",
    "run_summary",
    "settings_differences",
    "sharing_warning",
    "slug",
    "summary_line",
    "typed_nodeid",
    "under_xdist",
    "verdict_rank",
    "visible_devices",
    "with_written",
    "write_atomic",
]


def apply_torch_settings(wanted: Mapping[str, Any]) -> list[str]:
    """Set the numeric torch settings ``wanted`` (a fresh process confirming a regression
    takes its parent's); the ones this torch refused, named."""
    from tprof_engine.capture import settings

    return settings.apply(wanted)


def random_state() -> dict[str, Any]:
    """The random generators' state now (Python's, numpy's, torch's): what a fresh process
    confirming a regression starts its test from."""
    from tprof_engine.capture import random_state as state

    return state.read()


def restore_random_state(state: dict[str, Any]) -> list[str]:
    """Set the generators to a :func:`random_state`; the ones that could not be set, named."""
    from tprof_engine.capture import random_state as generators

    return generators.restore(state)


def html_report(doc: Mapping[str, Any], *, link_base: Path) -> str:
    """The JSON report as one HTML page (matplotlib loads here)."""
    from tprof_engine.render.html import html_report as page

    return page(doc, link_base=link_base)
