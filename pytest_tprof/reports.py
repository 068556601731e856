"""The run's reports as files: the JSON report, the Markdown summary, the GitHub step
summary and the HTML page; never written over a baseline, and a failure is a message, not a
traceback."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pytest_tprof.options import Settings
from tprof_engine.api import (
    check_not_baseline,
    file_in_the_way,
    html_report,
    json_report,
    markdown_summary,
    write_atomic,
)
from tprof_engine.model.errors import TprofError
from tprof_engine.model.results import ProfiledTest

# Each report: what the summary calls it, and where its path comes from.
_JSON = ("JSON report", "--tprof-json")
_MARKDOWN = ("Markdown summary", "--tprof-markdown")
_STEP_SUMMARY = ("GitHub step summary", "GITHUB_STEP_SUMMARY")
_HTML = ("HTML report", "--tprof-html")


def write_reports(
    settings: Settings,
    tests: Sequence[ProfiledTest],
    environment: Mapping[str, Any],
    extra: Mapping[str, Any],
) -> tuple[list[str], bool]:
    """Write the reports the settings ask for: the summary's lines about them, and False when
    one couldn't be written (its line says why)."""
    out: list[str] = []
    written = True
    baselines = settings.run.baseline_dir
    wanted = settings.json_path is not None or settings.html_path is not None
    doc = json_report(tests, environment=environment, extra=extra) if wanted else {}
    if settings.json_path is not None:
        text = json.dumps(doc, indent=2, sort_keys=True) + "\n"
        written &= _write(out, _JSON, settings.json_path, text, baselines)
    if settings.html_path is not None:
        written &= _write_html(out, settings.html_path, doc, baselines)
    md_target, step_summary = settings.markdown_path, settings.step_summary
    if md_target is not None or (step_summary and tests):
        text = markdown_summary(tests, extra)
        if md_target is not None:
            written &= _write(out, _MARKDOWN, md_target, text, baselines)
        if step_summary and tests:
            written &= _write(out, _STEP_SUMMARY, step_summary, text, baselines, append=True)
    return out, written


def _write_html(out: list[str], path: Path, doc: Mapping[str, Any], baseline_dir: Path) -> bool:
    """The HTML page of the run, its trace links relative to where it is written."""

    try:
        text = html_report(doc, link_base=path.parent)
    except TprofError as exc:  # the 'html' extra is missing
        out.append(f"{_HTML[0]} not written: {exc}")
        return False
    return _write(out, _HTML, path, text, baseline_dir)


def _write(
    out: list[str],
    report: tuple[str, str],
    path: Path,
    text: str,
    baseline_dir: Path,
    *,
    append: bool = False,
) -> bool:
    what, option = report
    try:
        _write_text(path, text, option, baseline_dir=baseline_dir, append=append)
    except TprofError as exc:
        out.append(f"{what} not written: {exc}")
        return False
    if not append:
        out.append(f"{what}: {path}")
    return True


def _write_text(path: Path, text: str, option: str, *, baseline_dir: Path, append: bool) -> None:
    """Write (or append to) a report; never over a baseline, never with a traceback."""
    check_not_baseline(path, baseline_dir)
    blocking = file_in_the_way(path.parent)
    if blocking is not None:
        raise TprofError(
            f"{path}: {blocking} is a file, not a folder; point {option} at a path in a folder"
        )
    if path.is_dir():
        raise TprofError(f"{path}: is a folder; point {option} at a file")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if append:  # non-blocking: a FIFO with no reader is an error, not a hang
            flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NONBLOCK", 0)
            with os.fdopen(os.open(path, flags, 0o666), "a", encoding="utf-8") as f:
                f.write(text)
        else:
            write_atomic(path, text)
    except OSError as exc:
        raise TprofError(
            f"{path}: can't write it ({exc.strerror}); free space on or fix the permissions of "
            f"{path.parent}, or point {option} elsewhere"
        ) from None
