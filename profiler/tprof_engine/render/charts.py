"""The HTML report's charts, drawn with matplotlib into self-contained SVG images: each
family's per-op deltas, the flagged ops' rounds, and the work that moved per module."""

from __future__ import annotations

import base64
import html
import io
import warnings
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from tprof_engine.model.family_specs import FAMILIES
from tprof_engine.model.verdicts import (
    CALLS_CHANGED,
    FAMILY_LABEL,
    IMPROVED,
    NEW,
    REGRESSED,
    REMOVED,
)
from tprof_engine.model.work import row_label
from tprof_engine.render import fmt

if TYPE_CHECKING:
    from matplotlib.figure import Figure

CHART_OPS = 15  # bars per family panel
LABEL_CHARS = 48


# One colour per op verdict, shared by the charts and the op tables: each its own, as a
# legend names them side by side; the other words draw as OTHER, named "other".
COLOURS = {
    REGRESSED: "#c62828",
    IMPROVED: "#2e7d32",
    NEW: "#ef6c00",
    CALLS_CHANGED: "#7b1fa2",
    REMOVED: "#1565c0",
}


OTHER = "#9e9e9e"
BASELINE = "#90a4ae"


CHART_WIDTH = 8.0  # inches, of a one-axes chart whose labels and caption fit in it
SPARE_WIDTH = 0.9  # inches beside the label column and the axes: ticks, pads, right margin
RIGHT_MARGIN = 0.25  # inches right of the axes, so the outermost points end inside the image
TEXT_ALLOWANCE = 1.1  # how much wider a viewer may set text than matplotlib's metrics say


def _label(name: str) -> str:
    return name if len(name) <= LABEL_CHARS else name[: LABEL_CHARS - 1] + "…"


def legend_entry(verdict: str) -> tuple[str, str]:
    """The name and colour an op verdict has in a legend: its own word and colour, or
    "other" for the words the charts don't colour."""
    return (verdict, COLOURS[verdict]) if verdict in COLOURS else ("other", OTHER)


def _text_width(text: str, size: str | float) -> float:
    """How wide ``text`` sets in inches at a font size (``"medium"``: the rc font size)."""
    from matplotlib.font_manager import FontProperties
    from matplotlib.textpath import text_to_path

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Glyph .* missing from", category=UserWarning)
        width, _, _ = text_to_path.get_text_width_height_descent(
            text, FontProperties(size=size), ismath=False
        )
    return TEXT_ALLOWANCE * width / 72.0


def _chart_width(
    labels: Sequence[str], caption: str, *, panels: int = 1, least: float = CHART_WIDTH
) -> float:
    """A chart's width in inches, ``least`` or more: per panel, its y labels' column beside
    an axes as wide as its caption.  Constrained layout makes room for text by shrinking the
    axes, never by widening the figure, so a caption wider than its axes would be cut off."""
    from matplotlib import rcParams

    column = max((_text_width(s, rcParams["ytick.labelsize"]) for s in labels), default=0.0)
    caption_width = _text_width(caption, rcParams["axes.labelsize"])
    return max(least, panels * (column + caption_width + SPARE_WIDTH))


def _figure(width: float, height: float) -> Figure:
    """A chart's figure, laid out with a margin right of its axes: with no right frame, the
    axes would otherwise end at the image's edge and cut its outermost points and labels."""
    from matplotlib.figure import Figure
    from matplotlib.layout_engine import ConstrainedLayoutEngine

    margin = ConstrainedLayoutEngine(rect=(0.0, 0.0, 1.0 - RIGHT_MARGIN / width, 1.0))
    return Figure(figsize=(width, height), layout=margin)


DELTA_CAPTION = "Δ self time per round (µs), current − baseline"


def delta_chart(ops: Sequence[Mapping[str, Any]], totals: Mapping[str, float], title: str) -> str:
    """Horizontal bars of Δ self time per round for each family's most telling ops.

    The axis spans at least 5 % of the family's round total, so noise on an unchanged test
    draws as short bars rather than filling the chart.
    """
    panels = []
    for fam in (s.name for s in FAMILIES.values() if s.column is not None):  # per-op times
        rows = [o for o in ops if o.get("family") == fam and fmt.num(o.get("delta_us")) is not None]
        if rows:
            panels.append((fam, fmt.ops_by_interest(rows)[:CHART_OPS]))
    if not panels:
        return ""
    from matplotlib.patches import Patch

    tallest = max(len(rows) for _, rows in panels)
    labels = [_label(str(o.get("op"))) for _, rows in panels for o in rows]
    width = _chart_width(labels, DELTA_CAPTION, panels=len(panels), least=5.6 * len(panels) + 1.5)
    fig = _figure(width, 0.26 * tallest + 1.3)
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
    entries = [legend_entry(str(o.get("verdict", ""))) for o in rows]
    used.update(entries)
    colours = [colour for _, colour in entries]
    y = list(range(len(rows)))
    ax.barh(y, deltas, color=colours, height=0.7)
    ax.set_yticks(y, [_label(str(o.get("op"))) for o in rows])
    ax.invert_yaxis()
    ax.axvline(0.0, color="#424242", linewidth=0.8)
    ax.set_xlabel(DELTA_CAPTION)
    ax.set_title(f"{fmt.family(fam)}: per-op deltas")
    span = max(max(abs(d) for d in deltas), 0.05 * total) or 1.0
    for yi, d, o in zip(y, deltas, rows, strict=True):
        text = _delta_text(o)
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


def _delta_text(o: Mapping[str, Any]) -> str:
    """An op's change as its bar's label: ``+31%``, or ``new`` / ``gone`` when its time
    came from nothing or went to nothing."""
    moved = _from_or_to_nothing(o.get("baseline_median_us"), o.get("current_median_us"))
    return moved or fmt.pct(o.get("delta_pct"), str(o.get("verdict", "")))


def _from_or_to_nothing(base: Any, cur: Any) -> str:
    """``new`` for an amount that was 0 and is not, ``gone`` for one that went to 0, else
    ``""``: a change from nothing has no ratio, and one to nothing reads plainer as a word
    than as −100 %."""
    b, c = fmt.num(base), fmt.num(cur)
    if b == 0 and c:
        return "new"
    if c == 0 and b:
        return "gone"
    return ""


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
    from matplotlib.patches import Patch

    labels = [
        f"{_label(str(o.get('op')))} ({FAMILY_LABEL.get(str(o.get('family')), '')})" for o in rows
    ]
    caption = "fast-round self time per round (µs, 25th percentile)"
    fig = _figure(_chart_width(labels, caption), 0.42 * len(rows) + 1.3)
    ax = fig.subplots()
    y = list(range(len(rows)))
    base = [fmt.num(o.get("baseline_median_us")) or 0.0 for o in rows]
    cur = [fmt.num(o.get("current_median_us")) or 0.0 for o in rows]
    entries = [legend_entry(str(o.get("verdict"))) for o in rows]
    ax.barh([v - 0.2 for v in y], base, height=0.38, color=BASELINE)
    ax.barh([v + 0.2 for v in y], cur, height=0.38, color=[c for _, c in entries])
    ax.set_yticks(y, labels)
    ax.invert_yaxis()
    ax.set_xlabel(caption)
    ax.set_title("Flagged ops: baseline vs current")
    _plain_axes(ax)
    # The current bars are coloured by verdict: the legend names each colour it shows.
    used = {"baseline": BASELINE, **{f"current, {v}": c for v, c in entries}}
    handles = [Patch(color=c, label=v) for v, c in used.items()]
    fig.legend(handles=handles, loc="outside lower center", ncols=len(handles), frameon=False)
    return _img(fig, "baseline vs current fast-round times of the flagged ops")


def rounds_chart(rounds: Sequence[Mapping[str, Any]]) -> str:
    """Per-round distributions of the flagged ops: baseline rounds vs current rounds."""
    rows = [r for r in rounds if r.get("baseline_us") or r.get("current_us")][:CHART_OPS]
    if not rows:
        return ""
    labels = [
        f"{_label(str(r.get('op')))} ({FAMILY_LABEL.get(str(r.get('family')), '')})" for r in rows
    ]
    data: list[list[float]] = []
    for r in rows:
        data += [list(r.get("baseline_us") or [0.0]), list(r.get("current_us") or [0.0])]
    low, high, beyond = _box_axis(data)
    plural = "" if beyond == 1 else "s"
    clipped = f"; {beyond} outlying round{plural} beyond the axis" if beyond else ""
    caption = (
        "self time per round, drift-probe units (µs); upper box: baseline, lower: current" + clipped
    )
    fig = _figure(_chart_width(labels, caption), 0.75 * len(rows) + 1.3)
    ax = fig.subplots()
    positions = [i + side for i in range(len(rows)) for side in (-0.18, 0.18)]
    parts = ax.boxplot(
        data,
        positions=positions,
        orientation="horizontal",
        widths=0.3,
        patch_artist=True,
        showfliers=True,
        manage_ticks=False,
    )
    for k, box in enumerate(parts["boxes"]):
        box.set_facecolor(BASELINE if k % 2 == 0 else COLOURS[REGRESSED])
    ax.set_yticks(list(range(len(rows))), labels)
    ax.invert_yaxis()
    ax.set_xlim(low, high)
    ax.set_xlabel(caption)
    ax.set_title("Flagged ops: per-round distributions")
    _plain_axes(ax)
    return _img(fig, "per-round distributions of the flagged ops, baseline vs current")


def _box_axis(data: Sequence[Sequence[float]]) -> tuple[float, float, int]:
    """An axis that spans the boxes' whiskers (a lone slow round must not flatten every
    box), and how many rounds fall outside it."""
    from matplotlib import cbook, rcParams

    stats = cbook.boxplot_stats(data, whis=rcParams["boxplot.whiskers"])  # as boxplot draws
    ends = [float(s[end]) for s in stats for end in ("whislo", "whishi")]
    low, high = min(ends), max(ends)
    pad = 0.08 * (high - low or abs(high) or 1.0)
    low, high = max(0.0, low - pad), high + pad
    points = sorted(v for values in data for v in values)
    high = _headroom(points, high, 0.04 * (high - low))
    beyond = sum(1 for v in points if not low <= v <= high)
    return low, high, beyond


def _headroom(points: Sequence[float], end: float, room: float) -> float:
    """The axis's upper end moved past ``end`` until no point it shows lies within ``room``
    of it: a point at the very end would be drawn cut in half, at the image's edge.  Points
    past the end stay beyond the axis (``points`` ascending)."""
    for v in points:
        if v > end:
            break
        if v > end - room:
            end = v + room
    return end


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
    from matplotlib.patches import Patch

    labels = [_where(m) for m in rows]
    caption = "current work over baseline work (FLOPs, or bytes where no FLOPs moved)"
    fig = _figure(_chart_width(labels, caption), 0.42 * len(rows) + 1.4)
    ax = fig.subplots()
    y = list(range(len(rows)))
    bars = [_work_bars(m) for m in rows]
    ax.barh([v - 0.2 for v in y], [b for b, _, _ in bars], height=0.38, color=BASELINE)
    grew = [COLOURS[REGRESSED] if c > b else COLOURS[IMPROVED] for b, c, _ in bars]
    ax.barh([v + 0.2 for v in y], [c for _, c, _ in bars], height=0.38, color=grew)
    right = max(1.0, *(c for _, c, _ in bars)) * 1.3
    for v, (_, c, text) in zip(y, bars, strict=True):
        ax.text(c + 0.015 * right, v + 0.2, text, va="center", fontsize=8)
    ax.set_yticks(y, labels)
    ax.invert_yaxis()
    ax.set_xlim(0, right)
    ax.set_xlabel(caption)
    ax.set_title("Work that moved, per module and phase (exact)")
    _plain_axes(ax)
    handles = [
        Patch(color=BASELINE, label="baseline"),
        Patch(color=COLOURS[REGRESSED], label="current, more"),
        Patch(color=COLOURS[IMPROVED], label="current, less"),
    ]
    fig.legend(handles=handles, loc="outside lower center", ncols=3, frameon=False)
    return _img(fig, "work per module and phase, baseline vs current")


def _work_move(m: Mapping[str, Any]) -> tuple[int, str]:
    """A module row's change in FLOPs, or in bytes when its FLOPs didn't move, and which."""
    flops = int(m.get("cur_flops", 0)) - int(m.get("base_flops", 0))
    if flops:
        return flops, "FLOPs"
    return int(m.get("cur_bytes", 0)) - int(m.get("base_bytes", 0)), "bytes"


def _work_bars(m: Mapping[str, Any]) -> tuple[float, float, str]:
    """A module row's baseline and current bars, over the baseline's amount of the measure
    that moved, and the current bar's label: ``FLOPs +200%``.  Work from nothing has no
    ratio, so it draws no bars and reads ``FLOPs new, 0 → 3,145,728``; work that went to
    nothing reads ``FLOPs gone, 2,048 → 0``."""
    what = _work_move(m)[1]
    key = "flops" if what == "FLOPs" else "bytes"
    base, cur = int(m.get(f"base_{key}", 0)), int(m.get(f"cur_{key}", 0))
    word = _from_or_to_nothing(base, cur)
    if word:
        return (1.0 if base else 0.0), 0.0, f"{what} {word}, {base:,} → {cur:,}"
    return 1.0, cur / base, f"{what} {cur / base - 1:+.0%}"


def _where(m: Mapping[str, Any]) -> str:
    """Where a module row's work ran, in the terminal report's words: ``in fc1 (backward)``,
    ``at top level (forward)``; a long module path loses its start rather than its phase."""
    module, phase = str(m.get("module") or ""), str(m.get("phase", ""))
    label = row_label(("", module, phase)).lstrip()
    over = len(label) - LABEL_CHARS
    if 0 < over < len(module):
        label = row_label(("", "…" + module[over + 1 :], phase)).lstrip()
    return _label(label)
