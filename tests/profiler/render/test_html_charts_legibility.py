"""The HTML report's charts as a reader meets them: work from nothing reads "new" rather
than a doubling, every verdict a legend names has a colour of its own, a chart's caption and
outermost points lie inside its image, and top-level work reads as the terminal words it."""

from __future__ import annotations

import base64
import re
from typing import Any, get_args

import pytest

from tprof_engine.decide.gates.work import judge_work
from tprof_engine.model.results import ProfiledTest
from tprof_engine.model.verdicts import FLAGGED_OPS, REGRESSED, OpVerdict, OpWord, TestVerdict
from tprof_engine.model.work import WorkRow, WorkTable
from tprof_engine.render.report import json_report

FLIER_RADIUS = 3.0  # points: matplotlib's default flier marker, an "o" 6 points across


def svgs(page: str) -> list[str]:
    """The SVG documents embedded in a page (or one chart's ``<img>``)."""
    data = re.findall(r"src='data:image/svg\+xml;base64,([A-Za-z0-9+/=]+)'", page)
    return [base64.b64decode(d).decode("utf-8") for d in data]


def chart(page: str, title: str) -> str:
    (found,) = [s for s in svgs(page) if title in s]
    return found


def html(doc: dict[str, Any]) -> str:
    pytest.importorskip("matplotlib")
    from tprof_engine.render.html import html_report

    return html_report(doc)


def op(name: str, verdict: str, base: float, cur: float) -> dict[str, Any]:
    pct = (cur / base - 1.0) * 100.0 if base else float("nan")
    return OpVerdict(
        op=name, family="cpu", verdict=verdict, baseline_median_us=base,  # type: ignore[arg-type]
        current_median_us=cur, delta_us=cur - base, delta_pct=pct, p_value=1e-5,
        calls_baseline=1 if base else 0, calls_current=1 if cur else 0, share=0.2,
        floor_pct=10.0, mde_pct=5.0, gated=True,
    ).to_dict()  # fmt: skip


def report_doc(**fields: Any) -> dict[str, Any]:
    return {"tests": [{"nodeid": "t.py::test_step", "verdict": REGRESSED, "ops": [], **fields}]}


def bar_widths(svg: str, fill: str) -> list[float]:
    """The widths of a chart's bars of one colour (its legend's patches are not clipped)."""
    found = re.findall(
        r'<path d="M ([\d.]+) [\d.]+\s*L ([\d.]+) [\d.]+[^"]*" clip-path="[^"]*" '
        rf'style="fill: {fill}"',
        svg,
    )
    return [float(x1) - float(x0) for x0, x1 in found]


# --- 1. a quantity from nothing reads "new", one to nothing "gone" ---------------------------


def mm(module: str, phase: str, flops: int) -> WorkRow:
    return WorkRow(
        op="aten::mm", module=module, phase=phase, calls=1, flops=flops,  # type: ignore[arg-type]
        bytes_read=100, bytes_written=100,
    )  # fmt: skip


def work_page() -> str:
    """A step whose top level gained a backward matmul of 3,145,728 FLOPs and whose ``fc2``
    lost its forward one, beside an ``fc1`` that tripled."""
    base = WorkTable(rows=(mm("fc1", "forward", 1000), mm("fc2", "forward", 2048)))
    cur = WorkTable(rows=(mm("fc1", "forward", 3000), mm("", "backward", 3_145_728)))
    verdict = TestVerdict(verdict=REGRESSED, reason="work", work=judge_work(base, cur))
    doc = json_report([ProfiledTest(nodeid="t.py::test_step", verdict=verdict)], environment={})
    return html(doc)


def test_work_from_nothing_reads_new_and_draws_no_doubled_bar() -> None:
    from tprof_engine.render.charts import BASELINE, COLOURS

    work = chart(work_page(), "Work that moved, per module and phase")
    assert "FLOPs new, 0 → 3,145,728" in work
    assert "FLOPs gone, 2,048 → 0" in work
    assert "FLOPs +200%" in work  # a move from something still reads as a percentage
    assert "+100%" not in work and "-100%" not in work
    # Bars are over the baseline's amount: fc1's baseline and gone fc2's; the new top level
    # has none.  The only current bar is fc1's 3×: no 2× bar for the new work.
    base = bar_widths(work, BASELINE)
    assert len(base) == 3 and sorted(base)[0] == 0.0 and base.count(max(base)) == 2
    grew = [w / max(base) for w in bar_widths(work, COLOURS[REGRESSED]) if w > 0]
    assert grew == [pytest.approx(3.0)]


def test_work_from_nothing_alone_draws_no_bar_pretending_to_a_ratio() -> None:
    rows = [
        {"module": "", "phase": "backward", "base_flops": 0, "cur_flops": 3_145_728,
         "base_bytes": 0, "cur_bytes": 4096},
    ]  # fmt: skip
    work = chart(html(report_doc(work={"verdict": REGRESSED, "modules": rows})), "Work that moved")
    assert "FLOPs new, 0 → 3,145,728" in work
    assert all(w == 0.0 for w in bar_widths(work, "#[0-9a-f]{6}"))  # no ratio, so no bar
    ticks = [float(t) for t in re.findall(r">\s*(\d+\.\d)\s*<", work)]
    assert max(ticks) < 2.0, ticks  # nor an axis sized for a 2× one


def test_an_op_whose_time_went_to_nothing_reads_gone_and_a_new_one_new() -> None:
    ops = [op("aten::mm", REGRESSED, 100.0, 150.0), op("aten::clone", "removed", 8.0, 0.0)]
    ops.append(op("aten::to", "new", 0.0, 5.0))
    deltas = chart(html(report_doc(ops=ops)), "CPU: per-op deltas")
    assert ">gone<" in deltas and ">new<" in deltas and ">+50%<" in deltas
    assert "-100%" not in deltas


# --- 2. a colour per verdict in a legend ------------------------------------------------------


def test_every_op_verdict_a_legend_can_name_has_its_own_colour() -> None:
    from tprof_engine.render.charts import BASELINE, legend_entry

    named = dict(legend_entry(word) for word in get_args(OpWord))
    assert len(set(named.values())) == len(named), named
    # The flagged ops' chart names its verdicts beside the baseline's colour.
    shown = [BASELINE, *(legend_entry(w)[1] for w in FLAGGED_OPS)]
    assert len(set(shown)) == len(shown)


def test_new_and_calls_changed_ops_are_drawn_in_different_colours() -> None:
    from tprof_engine.render.charts import COLOURS

    ops = [op("aten::to", "new", 0.0, 5.0), op("aten::mm", "calls-changed", 50.0, 60.0)]
    page = html(report_doc(ops=ops))
    deltas = chart(page, "CPU: per-op deltas")
    assert COLOURS["new"] != COLOURS["calls-changed"]
    for word in ("new", "calls-changed"):
        assert f">{word}<" in deltas  # in the legend
        assert f"fill: {COLOURS[word]}" in deltas
    medians = chart(page, "Flagged ops: baseline vs current")
    for word in ("new", "calls-changed"):
        assert f">current, {word}<" in medians
        assert f"fill: {COLOURS[word]}" in medians


# --- 3. the caption and the outermost points inside the image ---------------------------------

LONG = "autograd::engine::evaluate_function: torch::autograd::AccumulateGrad"


def rounds_page() -> str:
    """Rounds with a long op name, a round far beyond the axis, and one just inside its end."""
    spread = [float(x) for x in range(0, 1001, 50)]  # whiskers 0 … 1000: the axis ends ~1080
    near_end = [500.0] * 10 + [499.0, 501.0, 1075.0]  # 1075: a flier just inside that end
    rounds = [
        {"op": LONG, "family": "cpu", "baseline_us": spread, "current_us": near_end},
        {"op": "aten::mm", "family": "cpu", "baseline_us": [100.0] * 5,
         "current_us": [110.0] * 5 + [9000.0]},
    ]  # fmt: skip
    return html(report_doc(round_samples=rounds))


def svg_width(svg: str) -> float:
    found = re.search(r'<svg[^>]* width="([\d.]+)pt"', svg)
    assert found is not None
    return float(found.group(1))


def test_the_round_charts_caption_fits_inside_its_image() -> None:
    from matplotlib.font_manager import FontProperties
    from matplotlib.textpath import text_to_path

    rounds = chart(rounds_page(), "Flagged ops: per-round distributions")
    caption = re.search(
        r'<text style="font-size: ([\d.]+)px;[^"]*text-anchor: middle" x="([\d.]+)"[^>]*>'
        r"(self time per round[^<]*)</text>",
        rounds,
    )
    assert caption is not None
    size, x, text = float(caption.group(1)), float(caption.group(2)), caption.group(3)
    assert text.endswith("; 1 outlying round beyond the axis")
    width, _, _ = text_to_path.get_text_width_height_descent(
        text, FontProperties(size=size), ismath=False
    )
    assert x - width / 2 >= 0.0
    assert x + width / 2 <= svg_width(rounds)


def test_the_round_charts_outermost_points_lie_inside_its_axes_and_image() -> None:
    rounds = chart(rounds_page(), "Flagged ops: per-round distributions")
    clip = re.search(
        r'<clipPath id="[^"]+">\s*<rect x="([\d.]+)" y="[\d.]+" width="([\d.]+)"', rounds
    )
    assert clip is not None
    right = float(clip.group(1)) + float(clip.group(2))
    fliers = [float(x) for x in re.findall(r'<use [^>]*x="([\d.]+)"[^>]*fill-opacity: 0', rounds)]
    shown = [x for x in fliers if x - FLIER_RADIUS < right]  # 9000 µs lies far beyond
    assert len(shown) == len(fliers) - 1
    assert max(shown) + FLIER_RADIUS <= right, (max(shown), right)  # drawn whole
    assert right + 9.0 <= svg_width(rounds)  # a margin right of the axes, not its edge


# --- 4. top-level work in the terminal's words -------------------------------------------------


def test_top_level_work_reads_at_top_level_and_modules_read_in_their_path() -> None:
    work = chart(work_page(), "Work that moved, per module and phase")
    assert ">at top level (backward)<" in work
    assert ">in fc1 (forward)<" in work
    assert "(top)" not in work


def test_a_long_module_path_loses_its_start_and_keeps_its_phase() -> None:
    path = "encoder.layers.11.self_attention.output_projection.dense"
    rows = [
        {"module": path, "phase": "backward", "base_flops": 10, "cur_flops": 30,
         "base_bytes": 1, "cur_bytes": 1},
    ]  # fmt: skip
    work = chart(html(report_doc(work={"verdict": REGRESSED, "modules": rows})), "Work that moved")
    label = re.search(r">(in …[^<]*)<", work)
    assert label is not None, "the path is cut at its start"
    assert label.group(1).endswith("output_projection.dense (backward)")
    assert len(label.group(1)) <= 48
