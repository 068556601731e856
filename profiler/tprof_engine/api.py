"""The engine's face to a harness (the pytest glue, or any other): the calls and words of the
working stages (capture, decide, store, render) a harness needs to run, judge, save and report
tests, beyond the front's own modules (:mod:`.runner`, :mod:`.config`, :mod:`.ranked`,
:mod:`.pairing`, :mod:`.ab`, :mod:`.torch_support`).  The records, words, errors and bounds every
stage shares are :mod:`tprof_engine.model`'s, imported from there (``ProfiledTest`` from
:mod:`.model.results`, the verdict words from :mod:`.model.verdicts`, the errors from
:mod:`.model.errors`, the option bounds from :mod:`.model.limits`, the GPU per worker from
:mod:`.model.environment`).

A harness imports these, the front's modules and ``model`` and nothing deeper
(``tests/test_boundaries.py`` holds the pytest glue to it), so the stages can move beneath it.
Nothing here loads torch: the calls that need it import their stage when called.

A test's outcome (decide):

- ``Outcome``: what a verdict does in a run: its word, whether the pytest test fails, its
  causes, its next steps.
- ``outcome_of``: a test's :class:`Outcome`, given whether the run records baselines.
- ``typed_nodeid``: a node id as the user would type it from where they ran pytest.
- ``not_profiled``: a test tprof meant to profile and couldn't (pytest-benchmark skipped
  its rounds), saying why.
- ``not_saved``: a result as not saved, saying why (the test failed, the save failed).
- ``found_none``: the run's note when no profiled test found a baseline.
- ``run_summary``: the run's summary lines on a busy machine (disturbed rounds).

The timing rule (decide):

- ``Rule``: the timing rule's parameters, as the options and the marker set them.
- ``paired_rule``: the rule for rounds paired with another side's (``tprof ab``).

Reports (render):

- ``failure_text``: a failing test's report text, with its next steps.
- ``summary_line``: one test's line in the terminal summary.
- ``junit_properties``: a test's JUnit XML properties.
- ``VERDICT_PROPERTY``: the property that carries the verdict word.
- ``json_report``: the run's JSON report as a document.
- ``markdown_summary``: the run's Markdown summary.
- ``html_report``: the JSON report as one HTML page (matplotlib loads when called).

Files (store):

- ``DEFAULT_WINDOW``: the sessions a baseline keeps unless asked otherwise.
- ``slug``: a test's baseline file name.
- ``iter_baselines``: the baseline files under a folder.
- ``read_nodeid``: the node id a baseline file holds, or None; never raises.
- ``check_not_baseline``: refuses a report path that would replace a baseline.
- ``file_in_the_way``: a file standing where a report's folder should be.
- ``write_atomic``: a file replaced whole or not at all.
- ``bounded``: the trace folder held to its bound, oldest first, the given traces kept.
- ``with_written``: a result naming the trace written for it, or saying why none was.

The machine and torch's state (capture, loaded when called):

- ``machine_now``: the header's line of tasks runnable on the machine besides this one.
- ``apply_torch_settings``: the numeric torch settings a fresh process takes from its parent.
- ``random_state``, ``restore_random_state``: the random generators' state, read and set.
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
from tprof_engine.decide.timing.busy import run_summary
from tprof_engine.decide.timing.rule import Rule, paired_rule
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
    "DEFAULT_WINDOW",
    "VERDICT_PROPERTY",
    "Outcome",
    "Rule",
    "apply_torch_settings",
    "bounded",
    "check_not_baseline",
    "failure_text",
    "file_in_the_way",
    "found_none",
    "html_report",
    "iter_baselines",
    "json_report",
    "junit_properties",
    "machine_now",
    "markdown_summary",
    "not_profiled",
    "not_saved",
    "outcome_of",
    "paired_rule",
    "random_state",
    "read_nodeid",
    "restore_random_state",
    "run_summary",
    "slug",
    "summary_line",
    "typed_nodeid",
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
