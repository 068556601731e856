"""Text and JSON renderings of verdicts; pure functions of their inputs."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from profiler.compare import REGRESSED, OpVerdict, TestVerdict, shift_message
from profiler.results import ProfiledTest

JSON_SCHEMA_VERSION = 1
_FAMILY = {"cpu": "CPU", "cuda": "CUDA"}


def _us(v: float) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    return f"{v:,.1f}"


def _pct(v: float | None) -> str:
    if v is None or math.isnan(v):
        return "-"
    if math.isinf(v):
        return "new"
    return f"{v:+.0f}%"


def _p(v: float | None) -> str:
    return "-" if v is None else f"{v:.2g}"


def op_table(ops: Sequence[OpVerdict], *, limit: int | None = None) -> list[str]:
    """Aligned rows: op, family, baseline → current median µs, Δ µs, Δ %, p, calls, verdict."""
    header = ("op", "family", "baseline → current µs", "Δ µs", "Δ %", "p (adj)", "calls", "verdict")
    rows = [header]
    shown = list(ops if limit is None else ops[:limit])
    for o in shown:
        rows.append(
            (
                o.op,
                _FAMILY.get(o.family, o.family),
                f"{_us(o.baseline_median_us)} → {_us(o.current_median_us)}",
                f"{o.delta_us:+,.1f}",
                _pct(o.delta_pct),
                _p(o.p_value),
                f"{o.calls_baseline} → {o.calls_current}",
                o.verdict + (f" ({o.note})" if o.note else ""),
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(header) - 1)]
    lines = []
    for r in rows:
        cells = [r[0].ljust(widths[0]), r[1].ljust(widths[1])]
        cells += [c.rjust(w) for c, w in zip(r[2:-1], widths[2:], strict=True)]
        lines.append("  ".join(cells) + "  " + r[-1])
    if limit is not None and len(ops) > limit:
        lines.append(f"... {len(ops) - limit} more ops (-v shows all)")
    return lines


def failure_text(test: ProfiledTest, *, verbose: bool = False) -> str:
    """The message of a test that tprof failed: verdict, per-op table, trace path."""
    v = test.verdict
    lines = [f"tprof: {v.verdict} — {v.reason}"]
    ops = list(v.ops) if verbose else v.flagged_ops()
    if ops:
        lines.append("")
        lines.extend("  " + line for line in op_table(ops, limit=None if verbose else 12))
    lines.append("")
    lines.extend("  " + line for line in details(test))
    return "\n".join(lines)


def details(test: ProfiledTest) -> list[str]:
    """Context lines under a verdict: shift, floors, notes, files."""
    v = test.verdict
    out = []
    shift = shift_message(v)
    if shift:
        out.append(shift)
    for f in v.families:
        out.append(
            f"{_FAMILY.get(f.family, f.family)} total {_us(f.baseline_total_us)} → "
            f"{_us(f.current_total_us)} µs/round ({f.delta_pct:+.1f}%), floor {f.floor_pct:.0f}% "
            f"({f.floor_source}), min detectable effect {f.mde_pct:.0f}%"
        )
    if v.families and not any(f.family == "cuda" for f in v.families) and v.timing_compared:
        if not any("CUDA" in n for n in v.notes):
            out.append("CUDA was not profiled")
    out.extend(v.notes)
    if test.trace:
        out.append(f"trace: {test.trace}")
    if test.side_by_side:
        out.append(f"baseline and current side by side: {test.side_by_side}")
    if test.baseline and v.verdict not in ("no-baseline",):
        out.append(f"baseline: {test.baseline}")
    return out


def top_op(v: TestVerdict) -> OpVerdict | None:
    flagged = v.flagged_ops()
    if flagged:
        return flagged[0]
    timed = [o for o in v.ops if o.gated]
    return max(timed, key=lambda o: o.delta_us, default=None)


def summary_line(test: ProfiledTest) -> str:
    """One line per test for the terminal summary."""
    v = test.verdict
    parts = [f"{v.verdict.upper():<12} {test.nodeid}"]
    top = top_op(v)
    if top is not None and v.verdict not in ("saved",):
        parts.append(f"{top.op} {_FAMILY.get(top.family, top.family)} {_pct(top.delta_pct)}")
    if v.uniform_shift_pct is not None:
        parts.append(f"shift {v.uniform_shift_pct:+.0f}%")
    if v.verdict in ("error", "incomparable", "inconclusive", "no-baseline"):
        parts.append(v.reason)
    elif v.differences:
        parts.append("timings not compared: " + ", ".join(v.differences))
    if test.save_note:
        parts.append(test.save_note)
    return " | ".join(parts)


def json_report(
    tests: Iterable[ProfiledTest],
    *,
    environment: Mapping[str, Any],
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The ``--tprof-json`` document."""
    out: dict[str, Any] = {"schema_version": JSON_SCHEMA_VERSION, "environment": dict(environment)}
    out.update(extra or {})
    out["tests"] = [_test_json(t) for t in tests]
    return out


def _test_json(t: ProfiledTest) -> dict[str, Any]:
    v = t.verdict.to_dict()
    keep = (
        "op", "family", "verdict", "baseline_median_us", "current_median_us", "delta_us",
        "delta_pct", "p_value", "calls_baseline", "calls_current", "share", "mde_pct", "floor_pct",
        "peer_pct", "peer_floor_pct", "note",
    )  # fmt: skip
    return {
        "nodeid": t.nodeid,
        "verdict": t.verdict.verdict,
        "reason": t.verdict.reason,
        "outcome": t.outcome,
        "trace": t.trace,
        "side_by_side": t.side_by_side,
        "baseline": t.baseline,
        "uniform_shift": v["uniform_shift"],
        "probe_shift": v["probe_shift"],
        "sessions": v["sessions"],
        "confirmed": t.confirmed,
        "rounds": t.rounds,
        "warmup_used": t.warmup_used,
        "iterations": t.iterations,
        "families": v["families"],
        "notes": v["notes"],
        "differences": v["differences"],
        "ops": [{k: o[k] for k in keep} for o in v["ops"]],
        # per-round samples (probe units, µs) of the first flagged ops, for distribution plots
        "round_samples": v["round_samples"],
    }


def is_failure(test: ProfiledTest) -> bool:
    return test.verdict.verdict in (REGRESSED, "error")
