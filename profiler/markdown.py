"""Markdown summary of a run, a drop-in for a CI step summary (``$GITHUB_STEP_SUMMARY``).

Everything renders from the ``--tprof-json`` document (:func:`profiler.report.json_report`),
so the plugin's summary and ``tprof report --markdown`` are the same text.
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence
from typing import Any

from profiler.results import ProfiledTest

# Most urgent first: regressed tests lead every listing.
VERDICT_ORDER = (
    "regressed",
    "error",
    "changed",
    "incomparable",
    "inconclusive",
    "improved",
    "no-baseline",
    "unchanged",
    "saved",
)
FLAGGED = ("regressed", "new", "removed", "calls-changed")
FAMILY = {"cpu": "CPU", "cuda": "CUDA"}
TOP_OPS = 3
DETAIL_ROWS = 20


def markdown_summary(tests: Sequence[ProfiledTest]) -> str:
    """The Markdown summary of profiled tests (what ``--tprof-markdown`` writes)."""
    from profiler.report import json_report

    return markdown_from_report(json_report(tests, environment={}))


def ordered_tests(doc: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The report's tests, regressed first, then by :data:`VERDICT_ORDER`; stable otherwise."""
    tests = [t for t in doc.get("tests", []) if isinstance(t, Mapping)]
    return sorted(tests, key=lambda t: _rank(str(t.get("verdict", ""))))


def _rank(verdict: str) -> int:
    return VERDICT_ORDER.index(verdict) if verdict in VERDICT_ORDER else len(VERDICT_ORDER)


def counts_line(tests: Sequence[Mapping[str, Any]]) -> str:
    """``3 profiled tests: 1 regressed, 2 unchanged``."""
    counts: dict[str, int] = {}
    for t in tests:
        v = str(t.get("verdict", ""))
        counts[v] = counts.get(v, 0) + 1
    parts = [f"{n} {v}" for v, n in sorted(counts.items(), key=lambda kv: _rank(kv[0]))]
    noun = "test" if len(tests) == 1 else "tests"
    return f"{len(tests)} profiled {noun}" + (": " + ", ".join(parts) if parts else "")


def ops_by_interest(ops: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Flagged ops (regressed, structural) first, then the rest by the size of their delta."""

    def key(o: Mapping[str, Any]) -> tuple[int, float]:
        flagged = o.get("verdict") in FLAGGED
        return (0 if flagged else 1, -abs(num(o.get("delta_us")) or 0.0))

    return sorted(ops, key=key)


def num(v: Any) -> float | None:
    """A finite number from a JSON value, else None."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return float(v) if math.isfinite(v) else None


def fmt_us(v: Any, *, signed: bool = False) -> str:
    x = num(v)
    if x is None:
        return "-"
    if signed and abs(x) < 0.05:
        return "±0.0"
    return f"{x:+,.1f}" if signed else f"{x:,.1f}"


def fmt_pct(v: Any, verdict: str = "") -> str:
    x = num(v)
    if x is None:
        return "new" if verdict == "new" else "-"
    return "±0%" if abs(x) < 0.5 else f"{x:+.0f}%"


def fmt_share(v: Any) -> str:
    """A percentage without a sign (floors, detectable effects)."""
    x = num(v)
    return "-" if x is None else f"{x:.0f}%"


def fmt_p(v: Any) -> str:
    x = num(v)
    if x is None:
        return "-"
    # The JSON report keeps 4 decimals, so a tiny p arrives as 0.
    return "<0.0001" if x < 0.0001 else f"{x:.2g}"


def op_delta(o: Mapping[str, Any]) -> str:
    """``aten::mm CPU +31% (+120.5 µs)``, as plain text."""
    fam = FAMILY.get(str(o.get("family")), str(o.get("family", "")))
    verdict = str(o.get("verdict", ""))
    if verdict in ("new", "removed", "calls-changed"):
        calls = f"calls {o.get('calls_baseline')}→{o.get('calls_current')}"
        return f"{fam} {verdict}, {calls} ({fmt_us(o.get('delta_us'), signed=True)} µs)"
    delta = fmt_us(o.get("delta_us"), signed=True)
    return f"{fam} {fmt_pct(o.get('delta_pct'), verdict)} ({delta} µs)"


def family_line(f: Mapping[str, Any]) -> str:
    """``CPU total 775.7 → 1,384.0 µs/round (+78%), floor 5% (...), min detectable effect 4%``."""
    fam = FAMILY.get(str(f.get("family")), str(f.get("family", "")))
    totals = f"{fmt_us(f.get('baseline_total_us'))} → {fmt_us(f.get('current_total_us'))}"
    return (
        f"{fam} total {totals} µs/round ({fmt_pct(f.get('delta_pct'))}), "
        f"floor {fmt_share(f.get('floor_pct'))} ({f.get('floor_source', '')}), "
        f"min detectable effect {fmt_share(f.get('mde_pct'))}"
    )


def top_ops(t: Mapping[str, Any], n: int = TOP_OPS) -> list[Mapping[str, Any]]:
    """The ops worth naming in a one-line summary of a test."""
    ops = [
        o for o in t.get("ops", []) if isinstance(o, Mapping) and num(o.get("delta_us")) is not None
    ]
    return ops_by_interest(ops)[:n]


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
    tests = ordered_tests(doc)
    lines = ["## pytest-tprof", ""]
    if not tests:
        lines += ["No profiled tests.", ""]
        return "\n".join(lines)
    lines += [counts_line(tests) + ".", ""]
    lines += ["| test | verdict | top op deltas | uniform shift |", "|---|---|---|---|"]
    for t in tests:
        verdict = str(t.get("verdict", ""))
        shown = f"**{verdict}**" if verdict in ("regressed", "error") else verdict
        deltas = "<br>".join(f"{_code(str(o.get('op')))} {_cell(op_delta(o))}" for o in top_ops(t))
        shift = fmt_pct(t.get("uniform_shift"))
        lines.append(f"| {_code(str(t.get('nodeid')))} | {shown} | {deltas or '-'} | {shift} |")
    lines.append("")
    for t in tests:
        lines += _details(t)
    return "\n".join(lines)


def _details(t: Mapping[str, Any]) -> list[str]:
    verdict = str(t.get("verdict", ""))
    opened = " open" if verdict == "regressed" else ""
    nodeid = html.escape(str(t.get("nodeid", "")))
    out = [f"<details{opened}><summary><code>{nodeid}</code>: {html.escape(verdict)}</summary>", ""]
    reason = str(t.get("reason") or "")
    if reason:
        out += [_cell(reason), ""]
    listed = len(out)
    facts = [family_line(f) for f in t.get("families", []) if isinstance(f, Mapping)]
    facts += [str(n) for n in t.get("notes", []) if n]
    out += [f"- {_cell(x)}" for x in facts]
    for name in ("trace", "baseline"):
        if t.get(name):
            out.append(f"- {name}: {_code(str(t[name]))}")
    if len(out) > listed:
        out.append("")
    ops = ops_by_interest([o for o in t.get("ops", []) if isinstance(o, Mapping)])
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
                FAMILY.get(str(o.get("family")), str(o.get("family"))),
                fmt_us(o.get("baseline_median_us")),
                fmt_us(o.get("current_median_us")),
                fmt_us(o.get("delta_us"), signed=True),
                fmt_pct(o.get("delta_pct"), v),
                fmt_p(o.get("p_value")),
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
