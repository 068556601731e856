"""One self-contained HTML file for a run: per-test charts of per-op deltas, op tables, traces.

Charts are drawn by matplotlib (the optional ``html`` extra, imported only here and only when
a report is rendered) to SVG, embedded as ``data:`` URIs: the file loads nothing from the
network and no script runs in it.  Everything renders from the ``--tprof-json`` document.
"""

from __future__ import annotations

import html
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

from tprof_engine.model.errors import TprofError
from tprof_engine.model.verdicts import FLAGGED_OPS
from tprof_engine.render import charts, fmt
from tprof_engine.render.charts import COLOURS
from tprof_engine.render.rows import (
    NUMERIC_COLUMNS,
    OP_COLUMNS,
    SUMMARY_COLUMNS,
    OpRow,
    drift_of,
    family_lines,
    op_rows,
    why,
)

EXTRA = "html"
INSTALL_HINT = f"pip install 'pytest-tprof[{EXTRA}]'"
TABLE_ROWS = 25  # op rows shown before the rest is folded away


BADGE = {
    "regressed": "#c62828",
    "error": "#6a1b9a",
    "changed": "#ef6c00",
    "improved": "#2e7d32",
    "incomparable": "#616161",
    "inconclusive": "#616161",
}


class ExtraMissingError(TprofError, ImportError):
    """An optional dependency that a feature needs is not installed."""


def _matplotlib() -> Any:
    try:
        import matplotlib
        from matplotlib.figure import Figure  # noqa: F401  (fails early, before any drawing)
    except ImportError:
        raise ExtraMissingError(
            f"the HTML report draws its charts with matplotlib, which is not installed; "
            f"install the '{EXTRA}' extra: {INSTALL_HINT}"
        ) from None
    return matplotlib


# Said above a test's timing charts when its timings were not compared.
NOT_JUDGED = "Timings not compared (see why above): the charts show them as measured, not judged."


def html_report(doc: Mapping[str, Any], *, link_base: Path | None = None) -> str:
    """The HTML report of a JSON report document, as one self-contained page.

    ``link_base`` is the folder the page will be written to: trace links are made relative
    to it (relative trace paths in the report are taken from the current directory).
    """
    mpl = _matplotlib()
    tests = fmt.ordered_tests(doc)
    body: list[str] = [
        f"<h1>pytest-tprof report</h1><p class='counts'>{_e(fmt.counts_line(tests))}</p>"
    ]
    body += _environment(doc)
    if tests:
        body += _summary_table(tests)
    else:
        body.append("<p>No profiled tests.</p>")
    with mpl.rc_context(
        {"svg.fonttype": "none", "svg.hashsalt": "tprof", "font.size": 9, "axes.titlesize": 10}
    ):
        for i, t in enumerate(tests):
            body += _section(i, t, link_base)
    body.append(
        "<footer>Times are µs per round in drift-probe units: each side's fast-round time "
        "(the 25th percentile of its rounds) in the tables, and per-round distributions for "
        "the flagged ops. docs/reports.md explains every column and word.</footer>"
    )
    return _PAGE.format(style=_STYLE, body="\n".join(body))


def _e(text: Any) -> str:
    return html.escape(str(text), quote=True)


def _breakable(name: Any) -> str:
    """A test id escaped, with line-break chances after its path's ``/`` and ``::``, before
    its parameters and after each ``_`` of a name, so it wraps between words, never inside
    one."""
    parts = re.split(r"(?<=/)|(?<=::)|(?=\[)|(?<=_)", str(name))
    return "<wbr>".join(_e(p) for p in parts if p)


def _environment(doc: Mapping[str, Any]) -> list[str]:
    env = doc.get("environment")
    hard = env.get("hard") if isinstance(env, Mapping) else None
    if not isinstance(hard, Mapping) or not hard:
        return []
    rows = "".join(f"<tr><th>{_e(k)}</th><td>{_e(_plain(v))}</td></tr>" for k, v in hard.items())
    return [f"<details class='env'><summary>Environment</summary><table>{rows}</table></details>"]


def _plain(v: Any) -> str:
    if isinstance(v, list):
        return ", ".join(map(str, v)) or "none"
    return "none" if v is None else str(v)


def _badge(verdict: str) -> str:
    colour = BADGE.get(verdict, "#9e9e9e")
    return f"<span class='badge' style='background:{colour}'>{_e(verdict)}</span>"


def _summary_table(tests: Sequence[Mapping[str, Any]]) -> list[str]:
    head = "".join(f"<th>{_e(c)}</th>" for c in SUMMARY_COLUMNS)
    out = [f"<table class='summary'><tr>{head}</tr>"]
    for i, t in enumerate(tests):
        said = "<br>".join(_e(c) for c in why(t))
        moved = drift_of(t)
        out.append(
            f"<tr><td><a href='#t{i}'><code>{_breakable(t.get('nodeid'))}</code></a></td>"
            f"<td>{_badge(str(t.get('verdict')))}</td><td>{said or '-'}</td>"
            f"<td>{_e(moved or '-')}</td></tr>"
        )
    out.append("</table>")
    return out


def _section(i: int, t: Mapping[str, Any], link_base: Path | None) -> list[str]:
    verdict = str(t.get("verdict", ""))
    out = [
        f"<section id='t{i}'><h2><code>{_breakable(t.get('nodeid'))}</code> {_badge(verdict)}</h2>",
    ]
    if t.get("reason"):
        out.append(f"<p class='reason'>{_e(t['reason'])}</p>")
    moved = drift_of(t)
    timing = ([_e(moved)] if moved else []) + [_e(line) for line in family_lines(t)]
    head, where = fmt.work_facts(t.get("work"))
    work = [_e(head) + _list(where)] if head else []
    facts = [*work, *timing] if fmt.work_failed(t.get("work")) else [*timing, *work]
    facts += [_e(n) for n in t.get("notes", []) if n]
    if t.get("trace"):
        href = _href(str(t["trace"]), link_base)
        facts.append(
            f"trace: <a href='{_e(href)}'><code>{_e(t['trace'])}</code></a> "
            "(open it in Perfetto, chrome://tracing, TensorBoard or HTA)"
        )
    if t.get("baseline"):
        facts.append(f"baseline: <code>{_e(t['baseline'])}</code>")
    if facts:
        out.append("<ul class='facts'>" + "".join(f"<li>{x}</li>" for x in facts) + "</ul>")
    out += _module_table(fmt.module_rows(t.get("work")))
    work_chart = charts.work_chart(t.get("work"))
    if work_chart:
        out.append(work_chart)
    ops = [o for o in t.get("ops", []) if isinstance(o, Mapping)]
    totals = {
        str(f.get("family")): fmt.num(f.get("baseline_total_us")) or 0.0
        for f in t.get("families", [])
        if isinstance(f, Mapping)
    }
    chart = charts.delta_chart(ops, totals, str(t.get("nodeid", "")))
    if chart and t.get("timing_compared") is False:
        out.append(f"<p class='note'>{NOT_JUDGED}</p>")
    if chart:
        out.append(chart)
    rounds = [r for r in t.get("round_samples", []) if isinstance(r, Mapping)]
    if rounds:
        out.append(charts.rounds_chart(rounds))
    else:
        medians = charts.medians_chart([o for o in ops if o.get("verdict") in FLAGGED_OPS])
        if medians:
            out.append(medians)
    out += _op_table(op_rows(t))
    out += _device_rows_table([r for r in t.get("device_rows", []) if isinstance(r, Mapping)])
    out.append("</section>")
    return out


def _list(items: Sequence[str]) -> str:
    return "<ul>" + "".join(f"<li>{_e(x)}</li>" for x in items) + "</ul>" if items else ""


def _href(trace: str, link_base: Path | None) -> str:
    path = Path(trace)
    if link_base is None:
        return path.as_uri() if path.is_absolute() else quote(path.as_posix())
    target = path if path.is_absolute() else Path.cwd() / path
    try:
        rel = os.path.relpath(target, link_base)
    except ValueError:  # another drive on Windows
        return target.as_uri()
    return quote(Path(rel).as_posix())


def _module_table(rows: Sequence[tuple[str, str, str, str]]) -> list[str]:
    """Work per module path and phase, baseline → current (from the work census)."""
    if not rows:
        return []
    head = "<tr><th>module</th><th>phase</th><th>FLOPs</th><th>bytes</th></tr>"
    body = "".join(
        f"<tr><td><code>{_e(m)}</code></td><td>{_e(p)}</td><td class='num'>{_e(f)}</td>"
        f"<td class='num'>{_e(b)}</td></tr>"
        for m, p, f, b in rows
    )
    return [f"<h3>work per module</h3><table>{head}{body}</table>"]


def _device_rows_table(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """The flagged ops' kernels, copies and fills, baseline → current per round."""
    if not rows:
        return []
    head = (
        "<tr><th>op</th><th>kind</th><th>kernel / copy</th><th>calls</th>"
        "<th>baseline → current µs</th><th>Δ µs</th><th>bytes</th></tr>"
    )
    body = "".join(
        f"<tr><td><code>{_e(c[0])}</code></td><td>{_e(c[1])}</td>"
        f"<td><code title='{_e(r.get('name', ''))}'>{_e(c[2])}</code></td>"
        + "".join(f"<td class='num'>{_e(x)}</td>" for x in c[3:])
        + "</tr>"
        for r in rows
        for c in [fmt.device_row_cells(r)]
    )
    return [f"<h3>device time of the flagged ops</h3><table class='ops'>{head}{body}</table>"]


def _op_table(shown: Sequence[OpRow]) -> list[str]:
    """The op rows under :data:`rows.OP_COLUMNS`; past :data:`TABLE_ROWS`, folded away."""
    if not shown:
        return []
    head = "<tr>" + "".join(f"<th>{_e(c)}</th>" for c in OP_COLUMNS) + "</tr>"

    def row(r: OpRow) -> str:
        colour = COLOURS.get(r.verdict)
        style = f" style='color:{colour};font-weight:600'" if colour else ""
        cells = [f"<td><code>{_e(r.op)}</code></td>"]
        for i, c in enumerate(r.cells()[1:-1], start=1):
            cls = " class='num'" if i in NUMERIC_COLUMNS else ""
            cells.append(f"<td{cls}>{_e(c)}</td>")
        cells.append(f"<td{style}>{_e(r.cells()[-1])}</td>")
        return "<tr>" + "".join(cells) + "</tr>"

    out = ["<table class='ops'>" + head + "".join(row(r) for r in shown[:TABLE_ROWS]) + "</table>"]
    if len(shown) > TABLE_ROWS:
        rest = "".join(row(r) for r in shown[TABLE_ROWS:])
        out.append(
            f"<details><summary>{len(shown) - TABLE_ROWS} more ops</summary>"
            f"<table class='ops'>{head}{rest}</table></details>"
        )
    return out


_STYLE = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif;
       margin: 24px auto; max-width: 1180px; padding: 0 16px; color: #212121; }
h1 { font-size: 22px; margin: 0 0 4px; }
h2 { font-size: 16px; margin: 0 0 6px; overflow-wrap: break-word; }
code { font: 12.5px ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; }
table { border-collapse: collapse; margin: 8px 0; }
th, td { border-bottom: 1px solid #e0e0e0; padding: 3px 8px; text-align: left;
         vertical-align: top; }
th { background: #f5f5f5; font-weight: 600; white-space: nowrap; }
td.num { text-align: right; white-space: nowrap; font-variant-numeric: tabular-nums; }
table.summary td:first-child { overflow-wrap: break-word; min-width: 18ch; }
table.ops { display: block; max-width: 100%; overflow-x: auto; }  /* scrolls, not the page */
section { border-top: 2px solid #e0e0e0; margin-top: 28px; padding-top: 12px; }
.badge { color: #fff; border-radius: 3px; padding: 1px 7px; font-size: 12px;
         font-weight: 600; white-space: nowrap; vertical-align: middle; }
.reason { margin: 4px 0; }
.facts { margin: 4px 0 8px; padding-left: 20px; color: #424242; }
.facts code { overflow-wrap: anywhere; }  /* a trace's path wraps rather than widen the page */
img.chart { display: block; max-width: 100%; height: auto; margin: 8px 0; }
details { margin: 6px 0; }
summary { cursor: pointer; color: #424242; }
footer { margin-top: 32px; color: #757575; font-size: 12px; }
"""


_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>pytest-tprof report</title>
<style>{style}</style>
</head>
<body>
{body}
</body>
</html>
"""
