"""Markdown summary of a run, a drop-in for a CI step summary (``$GITHUB_STEP_SUMMARY``).

Everything renders from the ``--tprof-json`` document (:func:`profiler.report.json_report`),
so the plugin's summary and ``tprof report --markdown`` are the same text.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from typing import Any

from profiler import fmt
from profiler.results import ProfiledTest
from profiler.verdicts import FAILING, REGRESSED

DETAIL_ROWS = 20


def markdown_summary(tests: Sequence[ProfiledTest]) -> str:
    """The Markdown summary of profiled tests (what ``--tprof-markdown`` writes)."""
    from profiler.report import json_report

    return markdown_from_report(json_report(tests, environment={}))


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
    if not tests:
        lines += ["No profiled tests.", ""]
        return "\n".join(lines)
    lines += [fmt.counts_line(tests) + ".", ""]
    lines += ["| test | verdict | top op deltas | uniform shift |", "|---|---|---|---|"]
    for t in tests:
        verdict = str(t.get("verdict", ""))
        shown = f"**{verdict}**" if verdict in FAILING else verdict
        deltas = "<br>".join(
            f"{_code(str(o.get('op')))} {_cell(fmt.op_delta(o))}" for o in fmt.top_ops(t)
        )
        shift = fmt.pct(t.get("uniform_shift"))
        lines.append(f"| {_code(str(t.get('nodeid')))} | {shown} | {deltas or '-'} | {shift} |")
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
    facts = [fmt.family_line(f) for f in t.get("families", []) if isinstance(f, Mapping)]
    facts += fmt.work_facts(t.get("work"))
    facts += [str(n) for n in t.get("notes", []) if n]
    out += [f"- {_cell(x)}" for x in facts]
    for name in ("trace", "baseline"):
        if t.get(name):
            out.append(f"- {name}: {_code(str(t[name]))}")
    if len(out) > listed:
        out.append("")
    modules = fmt.module_rows(t.get("work"))
    if modules:
        out += ["| module | phase | FLOPs | bytes |", "|---|---|--:|--:|"]
        out += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in modules]
        out.append("")
    ops = fmt.ops_by_interest([o for o in t.get("ops", []) if isinstance(o, Mapping)])
    if ops:
        out += [
            "| op | family | baseline µs | current µs | Δ µs | Δ % | p (adj) | calls | verdict |",
            "|---|---|--:|--:|--:|--:|--:|--:|---|",
        ]
        for o in ops[:DETAIL_ROWS]:
            v = str(o.get("verdict", ""))
            note = f" ({o['note']})" if o.get("note") else ""
            cells = [
                _code(str(o.get("op"))),
                fmt.family(o.get("family")),
                fmt.us(o.get("baseline_median_us")),
                fmt.us(o.get("current_median_us")),
                fmt.us(o.get("delta_us"), signed=True),
                fmt.pct(o.get("delta_pct"), v),
                fmt.p_value_floored(o.get("p_value")),
                f"{o.get('calls_baseline')} → {o.get('calls_current')}",
                _cell(v + note),
            ]
            out.append("| " + " | ".join(cells) + " |")
        if len(ops) > DETAIL_ROWS:
            out.append("")
            out.append(f"{len(ops) - DETAIL_ROWS} more ops in the JSON report.")
        out.append("")
    out += ["</details>", ""]
    return out
