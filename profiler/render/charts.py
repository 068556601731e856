"""The HTML report's charts, drawn with matplotlib into self-contained SVG images: each
family's per-op deltas, the flagged ops' rounds, and the work that moved per module."""

from __future__ import annotations

import base64
import html
import io
import warnings
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from tprof_engine.render import fmt

if TYPE_CHECKING:
    from matplotlib.figure import Figure

CHART_OPS = 15  # bars per family panel
LABEL_CHARS = 48


# One colour per op verdict, shared by the charts and the badges.
COLOURS = {
    "regressed": "#c62828",
    "improved": "#2e7d32",
    "new": "#ef6c00",
    "calls-changed": "#ef6c00",
    "removed": "#1565c0",
}


OTHER = "#9e9e9e"
BASELINE = "#90a4ae"


def _label(name: str) -> str:
    return name if len(name) <= LABEL_CHARS else name[: LABEL_CHARS - 1] + "…"


def delta_chart(ops: Sequence[Mapping[str, Any]], totals: Mapping[str, float], title: str) -> str:
    """Horizontal bars of Δ self time per round for each family's most telling ops.

    The axis spans at least 5 % of the family's round total, so noise on an unchanged test
    draws as short bars rather than filling the chart.
    """
    panels = []
    for fam in ("cpu", "cuda"):
        rows = [o for o in ops if o.get("family") == fam and fmt.num(o.get("delta_us")) is not None]
        if rows:
            panels.append((fam, fmt.ops_by_interest(rows)[:CHART_OPS]))
    if not panels:
        return ""
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    tallest = max(len(rows) for _, rows in panels)
    fig = Figure(figsize=(5.6 * len(panels) + 1.5, 0.26 * tallest + 1.3), layout="constrained")
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    used: dict[str, str] = {}
    for ax, (fam, rows) in zip(axes, panels, strict=True):
        _delta_panel(ax, fam, rows, totals.get(fam, 0.0), used)
    handles = [Patch(color=c, label=v) for v, c in used.items()]
    fig.legend(handles=handles, loc="outside lower center", ncols=len(handles), frameon=False)
    return _img(fig, f"per-op deltas of {title}")


def _delta_panel(
    ax: Any, fam: str, rows: Sequence[Mapping[str, Any]], total: float, used: dict[str, str]
) -> None:
    """One family's bars, labelled with each op's change; ``used`` gathers the legend."""
    deltas = [fmt.num(o.get("delta_us")) or 0.0 for o in rows]
    colours = []
    for o in rows:
        v = str(o.get("verdict", ""))
        colour = COLOURS.get(v, OTHER)
        used[v if v in COLOURS else "other"] = colour
        colours.append(colour)
    y = list(range(len(rows)))
    ax.barh(y, deltas, color=colours, height=0.7)
    ax.set_yticks(y, [_label(str(o.get("op"))) for o in rows])
    ax.invert_yaxis()
    ax.axvline(0.0, color="#424242", linewidth=0.8)
    ax.set_xlabel("Δ self time per round (µs), current − baseline")
    ax.set_title(f"{fmt.FAMILY[fam]}: per-op deltas")
    span = max(max(abs(d) for d in deltas), 0.05 * total) or 1.0
    for yi, d, o in zip(y, deltas, rows, strict=True):
        text = fmt.pct(o.get("delta_pct"), str(o.get("verdict", "")))
        ax.text(
            d + (0.02 * span if d >= 0 else -0.02 * span),
            yi,
            text,
            va="center",
            ha="left" if d >= 0 else "right",
            fontsize=8,
            color="#212121",
        )
    lo = min(0.0, *deltas)
    hi = max(0.0, *deltas)
    left = lo - 0.22 * span if lo < 0 else -0.05 * span
    right = max(hi, span if hi > 0 else 0.0) + 0.22 * span
    ax.set_xlim(left, right)
    _plain_axes(ax)


def medians_chart(flagged: Sequence[Mapping[str, Any]]) -> str:
    """Baseline and current fast-round time of the flagged ops, side by side."""
    rows = [
        o
        for o in fmt.ops_by_interest(flagged)[:CHART_OPS]
        if fmt.num(o.get("baseline_median_us")) is not None
        and fmt.num(o.get("current_median_us")) is not None
    ]
    if not rows:
        return ""
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    fig = Figure(figsize=(8.0, 0.42 * len(rows) + 1.3), layout="constrained")
    ax = fig.subplots()
    y = list(range(len(rows)))
    base = [fmt.num(o.get("baseline_median_us")) or 0.0 for o in rows]
    cur = [fmt.num(o.get("current_median_us")) or 0.0 for o in rows]
    colours = [COLOURS.get(str(o.get("verdict")), OTHER) for o in rows]
    ax.barh([v - 0.2 for v in y], base, height=0.38, color=BASELINE)
    ax.barh([v + 0.2 for v in y], cur, height=0.38, color=colours)
    labels = [
        f"{_label(str(o.get('op')))} ({fmt.FAMILY.get(str(o.get('family')), '')})" for o in rows
    ]
    ax.set_yticks(y, labels)
    ax.invert_yaxis()
    ax.set_xlabel("fast-round self time per round (µs, 25th percentile)")
    ax.set_title("Flagged ops: baseline vs current")
    _plain_axes(ax)
    handles = [Patch(color=BASELINE, label="baseline"), Patch(color=colours[0], label="current")]
    fig.legend(handles=handles, loc="outside lower center", ncols=2, frameon=False)
    return _img(fig, "baseline vs current fast-round times of the flagged ops")


def rounds_chart(rounds: Sequence[Mapping[str, Any]]) -> str:
    """Per-round distributions of the flagged ops: baseline rounds vs current rounds."""
    from matplotlib.figure import Figure

    rows = [r for r in rounds if r.get("baseline_us") or r.get("current_us")][:CHART_OPS]
    if not rows:
        return ""
    fig = Figure(figsize=(8.0, 0.75 * len(rows) + 1.3), layout="constrained")
    ax = fig.subplots()
    data: list[list[float]] = []
    positions: list[float] = []
    for i, r in enumerate(rows):
        data += [list(r.get("baseline_us") or [0.0]), list(r.get("current_us") or [0.0])]
        positions += [i - 0.18, i + 0.18]
    parts = ax.boxplot(data, positions=positions, orientation="horizontal", widths=0.3,
                       patch_artist=True, showfliers=True, manage_ticks=False)  # fmt: skip
    for k, box in enumerate(parts["boxes"]):
        box.set_facecolor(BASELINE if k % 2 == 0 else COLOURS.get("regressed", OTHER))
    labels = [
        f"{_label(str(r.get('op')))} ({fmt.FAMILY.get(str(r.get('family')), '')})" for r in rows
    ]
    ax.set_yticks(list(range(len(rows))), labels)
    ax.invert_yaxis()
    low, high, beyond = _box_axis(parts["whiskers"], data)
    ax.set_xlim(low, high)
    plural = "" if beyond == 1 else "s"
    clipped = f"; {beyond} outlying round{plural} beyond the axis" if beyond else ""
    ax.set_xlabel(
        "self time per round, drift-probe units (µs); upper box: baseline, lower: current" + clipped
    )
    ax.set_title("Flagged ops: per-round distributions")
    _plain_axes(ax)
    return _img(fig, "per-round distributions of the flagged ops, baseline vs current")


def _box_axis(whiskers: Sequence[Any], data: Sequence[Sequence[float]]) -> tuple[float, float, int]:
    """An axis that spans the whiskers (a lone slow round must not flatten every box),
    and how many rounds fall outside it."""
    ends = [float(x) for w in whiskers for x in w.get_xdata()]
    low, high = min(ends), max(ends)
    pad = 0.08 * (high - low or abs(high) or 1.0)
    low, high = max(0.0, low - pad), high + pad
    beyond = sum(1 for values in data for v in values if not low <= v <= high)
    return low, high, beyond


def _plain_axes(ax: Any) -> None:
    """Every chart's axes: light vertical grid lines behind the data, no top or right frame."""
    ax.grid(axis="x", color="#e0e0e0", linewidth=0.6)
    ax.set_axisbelow(True)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)


def _img(fig: Figure, alt: str) -> str:
    buf = io.StringIO()
    with warnings.catch_warnings():
        # A glyph missing from the layout font only changes how a label measures.
        warnings.filterwarnings("ignore", message="Glyph .* missing from", category=UserWarning)
        fig.savefig(buf, format="svg", metadata={"Date": None})
    data = base64.b64encode(buf.getvalue().encode("utf-8")).decode("ascii")
    alt = html.escape(alt, quote=True)
    return f"<img class='chart' alt='{alt}' src='data:image/svg+xml;base64,{data}'>"


WORK_MODULES = 12  # bars in the work chart


def work_chart(work: Any) -> str:
    """The work that moved, per module path and phase: baseline and current FLOPs (bytes
    where a module moved no FLOPs) side by side, largest move first; ``""`` when none moved."""
    if not isinstance(work, Mapping) or work.get("verdict") == "unchanged":
        return ""
    rows = [m for m in work.get("modules", []) if isinstance(m, Mapping) and _work_move(m)[0]]
    rows = sorted(rows, key=lambda m: -abs(_work_move(m)[0]))[:WORK_MODULES]
    if not rows:
        return ""
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    fig = Figure(figsize=(8.0, 0.42 * len(rows) + 1.4), layout="constrained")
    ax = fig.subplots()
    y = list(range(len(rows)))
    shares = [_work_share(m) for m in rows]
    ax.barh([v - 0.2 for v in y], [1.0] * len(rows), height=0.38, color=BASELINE)
    grew = [COLOURS["regressed"] if s > 1 else COLOURS["improved"] for s in shares]
    ax.barh([v + 0.2 for v in y], shares, height=0.38, color=grew)
    for v, m, s in zip(y, rows, shares, strict=True):
        text = f"{_work_move(m)[1]} {s - 1:+.0%}"
        ax.text(max(s, 1.0) * 1.02, v + 0.2, text, va="center", fontsize=8)
    labels = [_label(f"{m.get('module') or '(top)'} ({m.get('phase', '')})") for m in rows]
    ax.set_yticks(y, labels)
    ax.invert_yaxis()
    ax.set_xlim(0, max(*shares, 1.0) * 1.3)
    ax.set_xlabel("current work over baseline work (FLOPs, or bytes where no FLOPs moved)")
    ax.set_title("Work that moved, per module and phase (exact)")
    _plain_axes(ax)
    handles = [
        Patch(color=BASELINE, label="baseline"),
        Patch(color=COLOURS["regressed"], label="current, more"),
        Patch(color=COLOURS["improved"], label="current, less"),
    ]
    fig.legend(handles=handles, loc="outside lower center", ncols=3, frameon=False)
    return _img(fig, "work per module and phase, baseline vs current")


def _work_move(m: Mapping[str, Any]) -> tuple[int, str]:
    """A module row's change in FLOPs, or in bytes when its FLOPs didn't move, and which."""
    flops = int(m.get("cur_flops", 0)) - int(m.get("base_flops", 0))
    if flops:
        return flops, "FLOPs"
    return int(m.get("cur_bytes", 0)) - int(m.get("base_bytes", 0)), "bytes"


def _work_share(m: Mapping[str, Any]) -> float:
    """Current over baseline of the measure that moved (a new module reads as 2×: all new)."""
    key = "flops" if _work_move(m)[1] == "FLOPs" else "bytes"
    base, cur = int(m.get(f"base_{key}", 0)), int(m.get(f"cur_{key}", 0))
    return cur / base if base else 2.0
