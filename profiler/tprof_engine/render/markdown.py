"""Markdown summary of a run, a drop-in for a CI step summary (``$GITHUB_STEP_SUMMARY``).

Everything renders from the ``--tprof-json`` document (:func:`tprof_engine.report.json_report`),
so the plugin's summary and ``tprof report --markdown`` are the same text.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from typing import Any

from tprof_engine.model.results import ProfiledTest
from tprof_engine.model.verdicts import FAILING, REGRESSED
from tprof_engine.render import fmt, rows
from tprof_engine.render.rows import NUMERIC_COLUMNS, OP_COLUMNS, SUMMARY_COLUMNS

DETAIL_ROWS = 20


def markdown_summary(tests: Sequence[ProfiledTest], extra: Mapping[str, Any] | None = None) -> str:
    """The Markdown summary of profiled tests (what ``--tprof-markdown`` writes); ``extra`` is
    the run's JSON keys beside its tests (``ab``: a tprof ab run's two sides)."""
    from tprof_engine.render.report import json_report

    return markdown_from_report(json_report(tests, environment={}, extra=extra))


def _cell(text: str) -> str:
    """Table-cell text: pipes escaped, line breaks flattened."""
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def _code(text: str) -> str:
    """An inline code span that survives backticks and pipes in the text."""
    fence = "``" if "`" in text else "`"
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    body = text.replace("|", "\\|")
    return f"{fence}{pad}{body}{pad}{fence}"


def markdown_from_report(doc: Mapping[str, Any]) -> str:
    """The Markdown summary of a JSON report: a table of tests, then details per test."""
    tests = fmt.ordered_tests(doc)
    lines = ["## pytest-tprof", ""]
    if isinstance(ab := doc.get("ab"), Mapping):
        lines += [
            f"`tprof ab`: head (working tree) against base {_code(str(ab.get('base')))}, "
            "each round paired with a base round run beside it.",
            "",
        ]
    if not tests:
        lines += ["No profiled tests.", ""]
        return "\n".join(lines)
    lines += [fmt.counts_line(tests) + ".", ""]
    lines += [
        "| " + " | ".join(SUMMARY_COLUMNS) + " |",
        "|" + "---|" * len(SUMMARY_COLUMNS),
    ]
    for t in tests:
        verdict = str(t.get("verdict", ""))
        shown = f"**{verdict}**" if verdict in FAILING else verdict
        why = "<br>".join(_cell(c) for c in rows.why(t))
        drift = _cell(rows.drift_of(t))
        lines.append(f"| {_code(str(t.get('nodeid')))} | {shown} | {why or '-'} | {drift or '-'} |")
    lines.append("")
    for t in tests:
        lines += _details(t)
    return "\n".join(lines)


def _details(t: Mapping[str, Any]) -> list[str]:
    verdict = str(t.get("verdict", ""))
    opened = " open" if verdict == REGRESSED else ""
    nodeid = html.escape(str(t.get("nodeid", "")))
    out = [f"<details{opened}><summary><code>{nodeid}</code>: {html.escape(verdict)}</summary>", ""]
    reason = str(t.get("reason") or "")
    if reason:
        out += [_cell(reason), ""]
    listed = len(out)
    head, moved = fmt.work_facts(t.get("work"))
    work = [f"- {_cell(head)}", *(f"  - {_cell(x)}" for x in moved)] if head else []
    timing = [rows.drift_of(t), *rows.family_lines(t)]
    timing_items = [f"- {_cell(x)}" for x in timing if x]
    exact_first = fmt.work_failed(t.get("work"))
    out += [*work, *timing_items] if exact_first else [*timing_items, *work]
    out += [f"- {_cell(str(n))}" for n in t.get("notes", []) if n]
    for name in ("trace", "baseline"):
        if t.get(name):
            out.append(f"- {name}: {_code(fmt.local_path(str(t[name])))}")
    if len(out) > listed:
        out.append("")
    modules = fmt.module_rows(t.get("work"))
    if modules:
        out += ["| module | phase | FLOPs | bytes |", "|---|---|--:|--:|"]
        out += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in modules]
        out.append("")
    op_rows = rows.op_rows(t)
    if op_rows:
        out += [
            "| " + " | ".join(OP_COLUMNS) + " |",
            "|"
            + "".join("--:|" if i in NUMERIC_COLUMNS else "---|" for i in range(len(OP_COLUMNS))),
        ]
        for r in op_rows[:DETAIL_ROWS]:
            cells = list(r.cells())
            cells[0] = _code(cells[0])
            out.append("| " + " | ".join(_cell(c) if i else c for i, c in enumerate(cells)) + " |")
        if len(op_rows) > DETAIL_ROWS:
            out.append("")
            out.append(f"{len(op_rows) - DETAIL_ROWS} more ops in the JSON report.")
        out.append("")
    out += ["</details>", ""]
    return out
