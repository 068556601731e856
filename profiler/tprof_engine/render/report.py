"""Text and JSON renderings of verdicts; pure functions of their inputs."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from tprof_engine.model.communication import communication_rows
from tprof_engine.model.family_specs import device_spec, is_device
from tprof_engine.model.results import ProfiledTest
from tprof_engine.model.verdicts import (
    EXPLAINED,
    NO_BASELINE,
    NOT_SAVED,
    REGRESSED,
    SAVED,
    UNCHANGED,
    TestVerdict,
)
from tprof_engine.model.work import no_formula
from tprof_engine.model.work_verdict import WorkDelta, WorkVerdict
from tprof_engine.render import fmt, rows
from tprof_engine.render.rows import NUMERIC_COLUMNS, OP_COLUMNS, OpRow
from tprof_engine.render.work_rows import ModuleWork, by_module

# 2: op rows name the op-against-the-rest figures vs_rest_pct / vs_rest_floor_pct (were peer_*).
JSON_SCHEMA_VERSION = 2


def op_table(op_rows: Sequence[OpRow], *, limit: int | None = None) -> list[str]:
    """The op rows under :data:`rows.OP_COLUMNS`, columns aligned."""
    shown = list(op_rows if limit is None else op_rows[:limit])
    cells = [OP_COLUMNS, *(r.cells() for r in shown)]
    lines = aligned(cells, right=tuple(sorted(NUMERIC_COLUMNS)))
    if limit is not None and len(op_rows) > limit:
        lines.append(f"... {len(op_rows) - limit} more ops (-v shows all)")
    return lines


def failure_text(test: ProfiledTest, *, verbose: bool = False, steps: Sequence[str] = ()) -> str:
    """The message of a test that tprof failed: verdict, per-op table, trace path, and what
    to do next (``steps``: the outcome's, :func:`tprof_engine.decide.outcome.next_steps`, or
    a comparison of two files' own)."""
    v = test.verdict
    lines = [f"tprof: {v.verdict} — {v.reason}"]
    timing = _timing_lines(v, verbose=verbose, iterations=test.iterations or 1)
    work = [] if v.work is None else ["", *work_lines(v.work, verbose=verbose)]
    # The exact cause leads: a work regression before the timing rows it explains.
    blocks = [work, timing] if v.work_regressed else [timing, work]
    lines.extend("  " + line if line else "" for block in blocks for line in block)
    lines.append("")
    lines.extend("  " + line for line in details(test))
    if steps:
        lines += ["", "  next:", *("    " + line for line in steps)]
    return "\n".join(lines)


def _timing_lines(v: TestVerdict, *, verbose: bool, iterations: int = 1) -> list[str]:
    """The flagged op rows (every row, verbose) with where they ran, and the kernels; a round
    of several calls of the body says so, since the work rows count one call."""
    out: list[str] = _leading_kernels(v) if not verbose else []
    shown = rows.op_rows(v.to_dict(), flagged_only=not verbose)
    if shown:
        out += ["", *op_table(shown, limit=None if verbose else 12)]
        if iterations > 1:
            out.append(
                f"a round is {iterations} calls of the body: calls and µs above are per round"
            )
        out += where_lines(v, limit=None if verbose else WHERE_SHOWN)
    if verbose and v.device_rows:
        out += ["", *device_row_lines([r.to_dict() for r in v.device_rows])]
    return out


KERNELS_SHOWN = 6  # kernel rows a device failure leads with; -v shows every one


def _leading_kernels(v: TestVerdict) -> list[str]:
    """A failure of the device's time leads with the kernels of the ops that moved (the ones
    that moved most), before the op rows: which kernel got slower, or was swapped."""
    if not any(is_device(f.family) and f.gates and f.fails for f in v.families):
        return []
    found = [r.to_dict() for r in v.device_rows]
    if not found:
        return []
    more = len(found) - KERNELS_SHOWN
    tail = [f"({more} more kernel rows with -v)"] if more > 0 else []
    return ["", *device_row_lines(found[:KERNELS_SHOWN]), *tail]


VERDICT_PROPERTY = "tprof_verdict"


def junit_properties(test: ProfiledTest) -> list[tuple[str, str]]:
    """The test's properties in JUnit XML (docs/reports.md): its verdict; where something
    moved, the op that moved most; why; and its trace.  An unchanged test's largest op move
    is inside its floor, so it is left out."""
    v = test.verdict
    props: list[tuple[str, str]] = [(VERDICT_PROPERTY, v.verdict)]
    # The regressed op that moved most: a work or calls failure whose timings weren't
    # compared, or moved within their floors, has none (nor has a new op's +inf%).
    regressed = [o for o in v.flagged_ops() if o.verdict == REGRESSED and v.timing_compared]
    top = regressed[0] if regressed else None
    if top is not None and v.verdict not in _NOTHING_MOVED:
        props.append(("tprof_top_op", f"{top.op} {top.delta_pct:+.0f}%"))
    why = rows.why(v.to_dict())
    if why:
        props.append(("tprof_why", " | ".join(why)))
    if test.trace:
        props.append(("tprof_trace", test.trace))
    return props


_NOTHING_MOVED = frozenset({UNCHANGED, SAVED, NO_BASELINE})


def device_row_lines(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """The flagged ops' kernels, copies and fills (``device_rows`` of the JSON), one block
    per op, largest move first: which kernel got slower."""
    if not rows:
        return []
    head = ("op / kernel", "kind", "calls", "baseline → current µs", "Δ µs", "bytes")
    cells: list[tuple[str, ...]] = [head]
    op = None
    for r in rows:
        c = fmt.device_row_cells(r)
        if c[0] != op:
            op = c[0]
            cells.append((op, "", "", "", "", ""))
        cells.append(("  " + c[2], c[1], c[3], c[4], c[5], c[6]))
    return ["device time of the flagged ops, per round:", *aligned(cells, right=(2, 3, 4, 5))]


def where_lines(v: TestVerdict, *, limit: int | None = None) -> list[str]:
    """Where each flagged op runs, from the work census: its module paths and phases, with
    each one's share of the op's FLOPs (of its bytes for ops without FLOPs, else its calls);
    the ``limit`` ops that moved most, and how many more -v places."""
    if v.work is None:
        return []
    out = []
    flagged = {o.op: o.inside for o in v.flagged_ops()}  # once, not once per family
    for name, inside in flagged.items():
        found = [r for r in v.work.rows if r.op == (inside or name) and r.cur_calls > 0]
        if found:
            held = f" inside {inside}, which runs" if inside else ""
            out.append(f"{name} runs{held} " + "; ".join(_where(found)))
    if limit is not None and len(out) > limit:
        out = [*out[:limit], f"… where {len(out) - limit} more ops run: -v places every one"]
    for name in dict.fromkeys(op for f in v.families for op in f.grew_before):
        found = [r for r in v.work.rows if r.op == name and r.cur_calls > 0]
        if found:
            out.append(
                f"the time outside any op grew before {name}, which runs "
                + "; ".join(_where(found))
            )
    return out


def _where(rows: Sequence[WorkDelta]) -> list[str]:
    measure = next(
        (m for m in ("cur_flops", "cur_bytes", "cur_calls") if sum(getattr(r, m) for r in rows)),
        "cur_calls",
    )
    total = sum(getattr(r, measure) for r in rows)
    ranked = sorted(rows, key=lambda r: -getattr(r, measure))
    what = {"cur_flops": "FLOPs", "cur_bytes": "bytes", "cur_calls": "calls"}[measure]
    parts = [
        f"{'in ' + r.module if r.module else 'at top level'} "
        f"({r.phase}{' of ' + r.grad_fns[0] if r.grad_fns else ''}) "
        f"{getattr(r, measure) / total:.0%} of its {what}, {r.cur_calls} call"
        + ("" if r.cur_calls == 1 else "s")
        + (f", {r.source}" if r.source else "")
        for r in ranked[:4]
    ]
    if len(ranked) > 4:
        parts.append(f"{len(ranked) - 4} more")
    return parts


# A failure's lines placing its flagged ops, before -v: those that moved most.
WHERE_SHOWN = 6
# A failure's work reasons, before -v: the largest moves; the table below lists 12 rows.
WORK_REASONS_SHOWN = 8


def work_lines(work: WorkVerdict, *, verbose: bool = False) -> list[str]:
    """The work verdict: its reasons, the rows that moved and, verbose, work per module."""
    head = (
        f"work {work.verdict} (deterministic; floor {work.floor:.0%} of the test's FLOPs or "
        f"bytes): FLOPs {fmt.total_move(work.base_flops, work.cur_flops)}, "
        f"bytes {fmt.total_move(work.base_bytes, work.cur_bytes)}"
    )
    reasons = work.row_reasons if verbose else work.row_reasons[:WORK_REASONS_SHOWN]
    lines = [head, *(f"  {r}" for r in reasons)]
    if len(reasons) < len(work.row_reasons):
        lines.append(f"  … {len(work.row_reasons) - len(reasons)} more (-v lists every one)")
    # Views (no FLOPs, no bytes either side) come and go with the ops they feed: -v lists them.
    moved = sorted(
        (r for r in work.rows if r.status != "unchanged" and (verbose or r.does_work)),
        key=lambda r: (not r.gated, -abs(r.flops_delta), -abs(r.bytes_delta)),
    )
    if moved and (verbose or work.verdict != "unchanged"):
        lines.append("")
        lines.extend(work_table(moved, limit=None if verbose else 12, steps=work.iterations))
    if verbose:
        lines.append("")
        lines.extend(module_table(by_module(work.rows)))
    return lines


def work_table(rows: Sequence[WorkDelta], *, limit: int | None = None, steps: int = 1) -> list[str]:
    """Aligned rows: op, module, phase, FLOPs and bytes baseline → current, calls per call of
    the body (per ``steps`` calls, for a census of several), status, and for a row whose
    amounts didn't move, what did (its inputs or calls)."""
    header = ("op", "module", "phase", "FLOPs", "bytes", fmt.calls_per(steps), "status", "")
    cells = [header]
    for r in rows if limit is None else rows[:limit]:
        cells.append(
            (
                r.op,
                r.module or "(top)",
                r.phase + (f" of {r.grad_fns[0]}" if r.grad_fns else ""),
                _flops_cell(r),
                f"{r.base_bytes:,} → {r.cur_bytes:,}",
                f"{r.base_calls} → {r.cur_calls}",
                r.status,
                r.difference() if r.status == "changed" else "",
            )
        )
    lines = aligned(cells, right=(3, 4, 5))
    if limit is not None and len(rows) > limit:
        lines.append(f"... {len(rows) - limit} more rows (-v shows all)")
    return lines


def _flops_cell(r: WorkDelta) -> str:
    if no_formula(r.op, r.base_flops + r.cur_flops):
        return "unknown"
    return f"{r.base_flops:,} → {r.cur_flops:,}"


def module_table(modules: Sequence[ModuleWork]) -> list[str]:
    """Work per module path and phase, baseline → current."""
    cells = [("module", "phase", "FLOPs", "bytes")]
    for m in modules:
        cells.append(
            (
                m.module or "(top)",
                m.phase,
                f"{m.base_flops:,} → {m.cur_flops:,}",
                f"{m.base_bytes:,} → {m.cur_bytes:,}",
            )
        )
    return aligned(cells, right=(2, 3))


def aligned(cells: Sequence[Sequence[str]], *, right: tuple[int, ...]) -> list[str]:
    """Rows of cells in columns two spaces apart; the ``right`` columns right-aligned."""
    widths = [max(len(c[i]) for c in cells) for i in range(len(cells[0]))]
    return [
        "  ".join(
            v.rjust(w) if i in right else v.ljust(w)
            for i, (v, w) in enumerate(zip(c, widths, strict=True))
        ).rstrip()
        for c in cells
    ]


def details(test: ProfiledTest) -> list[str]:
    """Context lines under a verdict: drift, totals and floors, notes, files."""
    v = test.verdict
    doc = v.to_dict()
    out = []
    moved = rows.drift_of(doc)
    if moved:
        out.append(moved)
    out += rows.family_lines(doc)
    if v.families and not any(is_device(f.family) for f in v.families) and v.timing_compared:
        if not any(device_spec().label in n for n in v.notes):
            out.append(f"{device_spec().label} was not profiled")
    out.extend(v.notes)
    if test.trace:
        out.append(f"trace: {test.trace}")
    if test.paired_trace:  # tprof ab: the rounds it was paired with
        out.append(f"base side's trace: {test.paired_trace}")
    if test.side_by_side:
        out.append(f"baseline and current side by side: {test.side_by_side}")
    if test.baseline and v.verdict != NO_BASELINE and not v.reason.startswith("no baseline"):
        out.append(f"baseline: {test.baseline}")
    return out


def summary_line(test: ProfiledTest) -> str:
    """One line per test for the terminal summary: a failure names what failed it."""
    v = test.verdict
    doc = v.to_dict()
    parts = [f"{v.verdict.upper():<12} {test.nodeid}", *rows.why(doc)]
    if v.verdict not in (SAVED, NOT_SAVED):
        moved = rows.drift_of(doc)
        if moved:
            parts.append(moved)
    said = "timings not compared: " + ", ".join(v.differences)
    if v.differences and v.verdict not in EXPLAINED and said not in v.reason:
        parts.append(said)
    if test.save_note:
        parts.append(test.save_note)
    if test.trace_problem:
        parts.append(test.trace_problem)
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


# An op row's keys in the JSON report.
_OP_KEYS = (
    "op family verdict baseline_median_us current_median_us delta_us delta_pct p_value "
    "calls_baseline calls_current share mde_pct floor_pct gated vs_rest_pct vs_rest_floor_pct "
    "vs_rest_mde_pct vs_rest_only note inside"
).split()


def _test_json(t: ProfiledTest) -> dict[str, Any]:
    v = t.verdict.to_dict()
    return {
        "nodeid": t.nodeid,
        "verdict": t.verdict.verdict,
        "reason": t.verdict.reason,
        "outcome": t.outcome,
        "trace": t.trace,
        "side_by_side": t.side_by_side,
        "baseline": t.baseline,
        # where it ran: under xdist each worker names its own GPU
        "device": (t.environment.get("soft") or {}).get("device"),
        "uniform_shift": v["uniform_shift"],
        "probe_shift": v["probe_shift"],
        "beside_others": v["beside_others"],  # judged over the ops' common shift
        "sessions": v["sessions"],
        "confirmed": t.confirmed,
        "paired_base": t.paired_base,  # tprof ab: the base its rounds were paired with
        "paired_trace": t.paired_trace,  # and the base side's trace of them
        "rounds": t.rounds,
        "warmup_used": t.warmup_used,
        "iterations": t.iterations,
        # the numeric torch settings its capture ran under (TF32, precision, cuDNN, SDPA)
        "settings": dict(t.settings),
        "timing_compared": v["timing_compared"],
        "families": v["families"],
        "notes": v["notes"],
        # what decided the verdict beyond the families and the work: compile, memory, busy
        "causes": v["causes"],
        "differences": v["differences"],
        "ops": [{k: o[k] for k in _OP_KEYS} for o in v["ops"]],
        # per-round samples (probe units, µs) of the first flagged ops, for distribution plots
        "round_samples": v["round_samples"],
        "work": _work_json(t.verdict.work),
        # the census's collectives per rank, step and phase (distributed tests)
        "communication": [] if t.work is None else communication_rows(t.work),
        # device runs: each flagged op's kernels, copies and fills, largest move first
        "device_rows": v["device_rows"],
        # seconds per stage of its profiling: the profiled rounds and what the plugin added
        "costs": t.costs.to_dict(),
    }


def _work_json(work: WorkVerdict | None) -> dict[str, Any] | None:
    """The work verdict, the rows that moved, and work per module and phase."""
    if work is None:
        return None
    doc = work.to_dict()
    doc["rows"] = [r for r in doc["rows"] if r["status"] != "unchanged"]
    doc["modules"] = [m.to_dict() for m in by_module(work.rows)]
    return doc
