"""The row model: what every report shows of one verdict, as plain data.

The terminal text, JSON-driven Markdown and HTML, and ``tprof diff`` take their op rows,
family lines, the one-line cause of a verdict and the drift phrase from here, so one verdict
reads the same in each (docs/reports.md names every column).  The functions take the JSON
form of a verdict: ``TestVerdict.to_dict()``, or one test of the ``--tprof-json`` report.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from tprof_engine.model.verdicts import (
    COMMUNICATION,
    NOT_GATED,
    REGRESSED,
    SAVED,
    SETTINGS,
    STRUCTURAL_OPS,
    UNCHANGED,
)
from tprof_engine.render import fmt

# Column headers of the op table, in every report.
OP_COLUMNS: Final = (
    "op",
    "family",
    "calls/round",
    "baseline µs",
    "current µs",
    "Δ µs",
    "Δ %",
    "floor",
    "p (Holm)",
    "verdict",
)


# Column headers of the table of tests (Markdown and HTML).
SUMMARY_COLUMNS: Final = ("test", "verdict", "why", "machine drift")
NUMERIC_COLUMNS: Final = frozenset(range(2, 9))  # right-aligned where a report aligns


# Points between the judged total's change and its op rows' summed change worth explaining.
SPLIT_SHOWN_PCT: Final = 10.0


# Below this many percent either way, the drift of the machine is not worth a phrase.
DRIFT_SHOWN_PCT: Final = 10.0


# A probe that moved less than this is steady: a shift of all ops is then not the machine.
PROBE_STEADY_PCT: Final = 5.0


@dataclass(frozen=True, slots=True)
class OpRow:
    """One op of one family as every report shows it: cells already formatted."""

    op: str
    family: str
    calls: str
    baseline_us: str
    current_us: str
    delta_us: str
    delta_pct: str
    floor: str
    p: str
    verdict: str
    note: str

    def cells(self) -> tuple[str, ...]:
        """The cells under :data:`OP_COLUMNS`, the note in brackets after the verdict."""
        word = self.verdict + (f" ({self.note})" if self.note else "")
        return (
            self.op,
            self.family,
            self.calls,
            self.baseline_us,
            self.current_us,
            self.delta_us,
            self.delta_pct,
            self.floor,
            self.p,
            word,
        )


def op_row(o: Mapping[str, Any], *, timing_compared: bool = True) -> OpRow:
    """One op row of a verdict's JSON form.

    The floor and p belong to the timing test, so rows that were not timed (structure,
    device waits, a test whose timings were not compared) show ``-`` for both.
    """
    verdict = str(o.get("verdict", ""))
    timed = (
        timing_compared
        and verdict not in STRUCTURAL_OPS
        and verdict != NOT_GATED
        and o.get("p_value") is not None
    )
    return OpRow(
        op=str(o.get("op", "")) + (f" (in {o['inside']})" if o.get("inside") else ""),
        family=fmt.family(o.get("family", "")),
        calls=f"{o.get('calls_baseline')} → {o.get('calls_current')}",
        baseline_us=fmt.us(o.get("baseline_median_us")),
        current_us=fmt.us(o.get("current_median_us")),
        delta_us=fmt.us(o.get("delta_us"), signed=True),
        delta_pct=fmt.pct(o.get("delta_pct"), verdict),
        floor=fmt.share(o.get("floor_pct")) if timed else "-",
        p=fmt.p_value_floored(o.get("p_value")) if timed else "-",
        # An op whose timing wasn't compared was judged on its calls alone: not "unchanged".
        verdict=verdict if timing_compared or verdict != UNCHANGED else "calls unchanged",
        note=str(o.get("note") or ""),
    )


def op_rows(test: Mapping[str, Any], *, flagged_only: bool = False) -> list[OpRow]:
    """A verdict's op rows, flagged first, then by the size of their delta."""
    ops = [o for o in test.get("ops", []) if isinstance(o, Mapping)]
    ordered = fmt.ops_by_interest(ops)
    if flagged_only:
        ordered = [o for o in ordered if fmt.is_flagged(o)]
    compared = test.get("timing_compared") is not False
    return [op_row(o, timing_compared=compared) for o in ordered]


def _judged_how(f: Mapping[str, Any]) -> str:
    """How a compared family's total counted: judged, too noisy to judge, or reported beside
    the families that judge the test (model.family_specs)."""
    if not f.get("gates", True):
        return "(reported, not gated)"
    return "(too noisy to judge)" if f.get("too_noisy") else "(judged)"


def family_line(
    f: Mapping[str, Any], ops: Sequence[Mapping[str, Any]], *, judged: bool = True
) -> str:
    """The judged total of one family, and what its op rows add up to beside it; a total
    whose timings were not compared is shown as measured, not judged, with no floor.

    The total is the fast-round (lower quantile) time of the whole round's op time; each op
    row is that op's own fast-round time.  When different rounds were slow for different
    ops the two disagree, so both are shown, each named.
    """
    fam = str(f.get("family", ""))
    totals = f"{fmt.us(f.get('baseline_total_us'))} → {fmt.us(f.get('current_total_us'))}"
    moved = f"{totals} µs/round ({fmt.pct(f.get('delta_pct'))})"
    how = _judged_how(f) if judged else "(not judged: timings not compared)"
    line = (
        f"{fmt.total(fam)} {how} {moved}, floor {fmt.share(f.get('floor_pct'))} "
        f"({f.get('floor_source', '')}), min detectable effect {fmt.share(f.get('mde_pct'))}"
        if judged
        else f"{fmt.total(fam)} {how} {moved}"
    )
    base, cur = _row_sums([o for o in ops if o.get("family") == fam])
    if base > 0:
        change = (cur / base - 1.0) * 100.0
        line += f"; its op rows sum to {fmt.us(base)} → {fmt.us(cur)} µs ({fmt.pct(change)})"
        total = fmt.num(f.get("delta_pct"))
        if total is not None and abs(total - change) >= SPLIT_SHOWN_PCT:
            line += (
                " — they differ because the total is read from whole rounds and each row from"
                " its own op's fast rounds: different ops were slow in different rounds"
            )
    return line


def _row_sums(ops: Sequence[Mapping[str, Any]]) -> tuple[float, float]:
    base = sum(fmt.num(o.get("baseline_median_us")) or 0.0 for o in ops)
    cur = sum(fmt.num(o.get("current_median_us")) or 0.0 for o in ops)
    return base, cur


def family_lines(test: Mapping[str, Any]) -> list[str]:
    """:func:`family_line` for each family of a verdict's JSON form."""
    ops = [o for o in test.get("ops", []) if isinstance(o, Mapping)]
    judged = test.get("timing_compared") is not False
    return [
        family_line(f, ops, judged=judged)
        for f in test.get("families", [])
        if isinstance(f, Mapping)
    ]


def causes(test: Mapping[str, Any]) -> list[str]:
    """What failed a regressed verdict, each thing that crossed its floor once: ops that
    gate on their own, a family's total, its calls, torch.compile's structure, the work.

    Empty for any other verdict; a regressed verdict with no recorded cause gives its reason.
    """
    if test.get("verdict") != REGRESSED:
        return []
    ops = {
        (str(o.get("family")), str(o.get("op"))): o
        for o in test.get("ops", [])
        if isinstance(o, Mapping)
    }
    failing = [c for c in test.get("causes", []) if isinstance(c, Mapping) and c.get("failing")]
    exact = [str(c.get("text")) for c in failing if c.get("kind") == COMMUNICATION]
    out = fmt.work_cause(test.get("work")) + exact  # exact: they lead
    for f in test.get("families", []):
        if isinstance(f, Mapping):
            out += _family_causes(f, ops)
    out += [str(c.get("text")) for c in failing if c.get("kind") != COMMUNICATION]
    moved = [c for c in test.get("causes", []) if isinstance(c, Mapping)]
    out += [str(c.get("text")) for c in moved if c.get("kind") == SETTINGS]  # the likely why
    reason = str(test.get("reason") or "")
    return out or [reason]


def why(test: Mapping[str, Any]) -> list[str]:
    """What a one-line summary says of a verdict: a failure's :func:`causes`, else the
    verdict's reason (a saved test's line says where it was recorded instead)."""
    found = causes(test)
    if found or test.get("verdict") == SAVED:
        return found
    reason = str(test.get("reason") or "")
    return [reason] if reason else []


def _family_causes(
    f: Mapping[str, Any], ops: Mapping[tuple[str, str], Mapping[str, Any]]
) -> list[str]:
    fam = str(f.get("family", ""))
    label = fmt.family(fam)
    out = []
    gates = f.get("gates", True)  # a family that only reports fails nothing on its timing
    for name in f.get("op_gate", []) if gates else []:
        o = ops.get((fam, str(name)), {})
        if o.get("vs_rest_only") or "against the rest" in str(o.get("note", "")):
            out.append(
                f"{name} {label} {fmt.pct(o.get('vs_rest_pct'))} against the rest of the test "
                f"(floor {fmt.share(o.get('vs_rest_floor_pct'))})"
            )
        else:
            out.append(
                f"{name} {label} {fmt.pct(o.get('delta_pct'))} "
                f"(floor {fmt.share(o.get('floor_pct'))})"
            )
    if gates and f.get("timing_regressed"):
        out.append(
            f"{fmt.total(fam)} {fmt.pct(f.get('delta_pct'))} "
            f"(floor {fmt.share(f.get('floor_pct'))})"
        )
    if f.get("structure_regressed"):
        out.append(_structure_cause(label, f, [o for (k, _), o in ops.items() if k == fam]))
    return out


def _structure_cause(label: str, f: Mapping[str, Any], ops: Sequence[Mapping[str, Any]]) -> str:
    """``CPU calls changed: aten::sum 1→2 (+20.0 µs/round)``: the first ops, the time added."""
    changed = [o for o in ops if o.get("verdict") in STRUCTURAL_OPS]
    named = ", ".join(
        f"{o.get('op')} {o.get('calls_baseline')}→{o.get('calls_current')}" for o in changed[:3]
    )
    more = f" and {len(changed) - 3} more" if len(changed) > 3 else ""
    added = fmt.us(f.get("structure_added_us"), signed=True)
    return f"{label} calls changed: {named}{more} ({added} µs/round)"


def drift_of(t: Mapping[str, Any]) -> str:
    """:func:`drift` of one test of a report (or ``TestVerdict.to_dict()``)."""
    if t.get("beside_others"):
        return beside_drift(t.get("uniform_shift"))
    return drift(t.get("uniform_shift"), t.get("probe_shift"), raw=judged_raw(t.get("families")))


def beside_drift(uniform: Any) -> str:
    """The drift of a test judged beside other busy processes, over the ops' common shift."""
    u = fmt.num(uniform)
    shift = "" if u is None else f" ({fmt.pct(u)} in raw time)"
    return f"beside other busy processes: compared over the shift every op shared{shift}"


def judged_raw(families: Any) -> bool:
    """Whether a report's test had a family judged in raw µs by choice (``raw_us``)."""
    return any(isinstance(f, Mapping) and f.get("raw_us") for f in families or ())


def drift(uniform: Any, probe: Any, *, raw: bool = False) -> str:
    """The machine's drift in words, or ``""`` when it is too small to matter.

    ``uniform`` is the median change of the ops' raw times (before the drift probe corrects
    them), ``probe`` the drift probe's own change, both in percent.  When both moved alike
    the machine was slower or faster and the comparison is corrected for it (``raw``: a
    family was judged in raw µs, and a slowdown there had to show in probe units too); when
    only the ops moved, it is not the machine.
    """
    u, p = fmt.num(uniform), fmt.num(probe)
    if u is None:
        return ""
    if abs(u) < DRIFT_SHOWN_PCT and (p is None or abs(p) < DRIFT_SHOWN_PCT):
        return ""
    ops = f"ops {fmt.pct(u)} in raw time"
    if p is None:
        return ops
    if abs(p) >= PROBE_STEADY_PCT:
        who = "slower" if p > 0 else "faster"
        how = "raw µs held to probe units" if raw else "probe units"
        return f"machine {who}: drift probe {fmt.pct(p)}, {ops}; compared in {how}"
    return f"all {ops}, drift probe steady ({fmt.pct(p)}): not the machine"
