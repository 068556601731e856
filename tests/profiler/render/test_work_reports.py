"""How the work verdict reads in a failure, the JSON report and the Markdown summary."""

from __future__ import annotations

import pytest

from tprof_engine.decide.gates.work import judge_work
from tprof_engine.decide.judge import with_enclosing_ops
from tprof_engine.model.results import ProfiledTest
from tprof_engine.model.verdicts import REGRESSED, OpVerdict, TestVerdict
from tprof_engine.model.work import WorkRow, WorkTable
from tprof_engine.render.markdown import markdown_summary
from tprof_engine.render.report import failure_text, json_report, summary_line, where_lines


def mm(module: str, flops: int, calls: int, source: str = "") -> WorkRow:
    return WorkRow(
        op="aten::mm", module=module, phase="backward", calls=calls, flops=flops,
        bytes_read=100, bytes_written=100, grad_fns=("AddmmBackward0",), source=source,
    )  # fmt: skip


BASE = WorkTable(rows=(mm("fc1", 1000, 1), mm("fc2", 1000, 2)))
WIDER = WorkTable(rows=(mm("fc1", 3000, 1, "model.py:12 in forward"), mm("fc2", 1000, 2)))
OP = OpVerdict(
    op="aten::mm", family="cpu", verdict=REGRESSED, baseline_median_us=100.0,
    current_median_us=180.0, delta_us=80.0, delta_pct=80.0, p_value=1e-5, calls_baseline=3,
    calls_current=3, share=0.5, floor_pct=10.0, mde_pct=5.0, gated=True,
)  # fmt: skip


def profiled(verdict: TestVerdict) -> ProfiledTest:
    return ProfiledTest(nodeid="test_m.py::test_step", verdict=verdict)


def regressed() -> TestVerdict:
    work = judge_work(BASE, WIDER)
    return TestVerdict(verdict=REGRESSED, reason="work: …", ops=(OP,), work=work)


def test_a_flagged_op_says_where_it_runs_from_the_census_largest_share_first() -> None:
    assert where_lines(regressed()) == [
        "aten::mm runs in fc1 (backward of AddmmBackward0) 75% of its FLOPs, 1 call, "
        "model.py:12 in forward; in fc2 (backward of AddmmBackward0) 25% of its FLOPs, 2 calls"
    ]


def test_a_timed_op_the_census_doesnt_name_is_shown_inside_the_census_op_it_runs_in() -> None:
    # the reduction's holders: the kernel's op in aten::_convolution in aten::convolution
    parents = {
        "aten::mkldnn_convolution": "aten::_convolution",
        "aten::_convolution": "aten::convolution",
    }
    conv = WorkRow(
        op="aten::convolution", module="conv2", phase="forward", calls=1, flops=9000,
        bytes_read=100, bytes_written=100,
    )  # fmt: skip
    census = WorkTable(rows=(conv, mm("fc1", 1000, 1)))
    slow = OP.__class__(**{**OP.to_dict(), "op": "aten::mkldnn_convolution"})
    timed = TestVerdict(
        verdict=REGRESSED, reason="CPU: …", ops=(slow, OP), work=judge_work(census, census)
    )
    v = with_enclosing_ops(timed, parents, census)
    assert [(o.op, o.inside) for o in v.ops] == [
        ("aten::mkldnn_convolution", "aten::convolution"),
        ("aten::mm", None),  # the census names it
    ]
    assert where_lines(v)[0] == (
        "aten::mkldnn_convolution runs inside aten::convolution, which runs in conv2 (forward) "
        "100% of its FLOPs, 1 call"
    )
    text = failure_text(profiled(v))
    assert "aten::mkldnn_convolution (in aten::convolution)  CPU" in text
    (doc,) = json_report([profiled(v)], environment={})["tests"]
    assert doc["ops"][0]["inside"] == "aten::convolution"
    assert "aten::mkldnn_convolution (in aten::convolution)" in markdown_summary([profiled(v)])


def test_the_failure_lists_the_work_verdict_and_the_rows_that_moved() -> None:
    text = failure_text(profiled(regressed()))
    assert (
        "work regressed (deterministic; floor 1% of the test's FLOPs or bytes): "
        "FLOPs 2,000 → 4,000 (+100.0%), bytes 400 → 400"
    ) in text
    assert (
        "aten::mm in fc1 (backward of AddmmBackward0): FLOPs +200.0% [model.py:12 in forward]"
    ) in text
    row = next(line for line in text.splitlines() if line.strip().startswith("aten::mm  fc1"))
    assert row.split() == [
        "aten::mm", "fc1", "backward", "of", "AddmmBackward0",
        "1,000", "→", "3,000", "200", "→", "200", "1", "→", "1", "increased",
    ]  # fmt: skip


def test_verbose_adds_the_work_per_module() -> None:
    text = failure_text(profiled(regressed()), verbose=True)
    assert "  module  phase" in text
    assert "  fc1     backward  1,000 → 3,000  200 → 200" in text
    assert "  fc2     backward  1,000 → 1,000  200 → 200" in text


def test_the_summary_line_leads_with_the_work_totals_and_the_first_row() -> None:
    assert summary_line(profiled(regressed())) == (
        "REGRESSED    test_m.py::test_step | work regressed: FLOPs +100.0%; aten::mm in fc1 "
        "(backward of AddmmBackward0): FLOPs +200.0% [model.py:12 in forward]"
    )


def test_json_keeps_the_rows_that_moved_and_the_work_per_module() -> None:
    (doc,) = json_report([profiled(regressed())], environment={})["tests"]
    work = doc["work"]
    assert work["verdict"] == "regressed"
    assert [(r["op"], r["module"], r["status"]) for r in work["rows"]] == [
        ("aten::mm", "fc1", "increased")
    ]
    assert work["modules"][0] == {
        "module": "fc1", "phase": "backward", "base_flops": 1000, "cur_flops": 3000,
        "base_bytes": 200, "cur_bytes": 200,
    }  # fmt: skip


def test_markdown_lists_the_work_reasons_and_a_module_table() -> None:
    text = markdown_summary([profiled(regressed())])
    assert (
        "- work regressed (deterministic): FLOPs 2,000 → 4,000 (+100.0%), bytes 400 → 400\n"
        "  - aten::mm in fc1 (backward of AddmmBackward0): FLOPs +200.0% [model.py:12 in forward]"
    ) in text
    assert "| fc1 | backward | 1,000 → 3,000 | 200 → 200 |" in text


def test_a_round_trip_through_xdist_keeps_the_work_verdict() -> None:
    original = profiled(regressed())
    again = ProfiledTest.from_dict(original.to_dict())
    assert again.verdict.work == original.verdict.work


def test_html_draws_the_work_that_moved_per_module() -> None:
    pytest.importorskip("matplotlib")
    import base64
    import re

    from tprof_engine.render.html import html_report

    page = html_report(json_report([profiled(regressed())], environment={}))
    svgs = [
        base64.b64decode(d).decode("utf-8")
        for d in re.findall(r"src='data:image/svg\+xml;base64,([A-Za-z0-9+/=]+)'", page)
    ]
    (work,) = [s for s in svgs if "Work that moved, per module and phase" in s]
    assert "fc1 (backward)" in work
    assert "FLOPs +200%" in work
    assert "fc2 (backward)" not in work  # its work didn't move


def test_an_op_whose_timing_was_not_compared_reads_calls_unchanged_not_unchanged() -> None:
    from tprof_engine.render.rows import op_row

    o = {**OP.to_dict(), "verdict": "unchanged", "delta_pct": -96.0}
    assert op_row(o, timing_compared=False).verdict == "calls unchanged"
    assert op_row(o, timing_compared=True).verdict == "unchanged"
    assert op_row({**o, "verdict": "new"}, timing_compared=False).verdict == "new"


def test_a_failure_lists_its_first_work_reasons_and_how_many_more_minus_v_shows() -> None:
    base = WorkTable(rows=tuple(mm(f"fc{i}", 1000, 1) for i in range(12)))
    wider = WorkTable(rows=tuple(mm(f"fc{i}", 3000, 1) for i in range(12)))
    v = TestVerdict(verdict=REGRESSED, reason="work: …", work=judge_work(base, wider))
    short = failure_text(profiled(v)).splitlines()
    assert sum(line.startswith("    aten::mm in fc") for line in short) == 8
    assert "    … 4 more (-v lists every one)" in short
    full = failure_text(profiled(v), verbose=True).splitlines()
    assert sum(line.startswith("    aten::mm in fc") for line in full) == 12


def test_a_total_whose_timing_was_not_compared_reads_not_judged_without_a_floor() -> None:
    from tprof_engine.render.rows import family_lines

    fam = {
        "family": "cpu", "baseline_total_us": 1768.6, "current_total_us": 2307.7,
        "delta_pct": 30.5, "floor_pct": 26.0, "floor_source": "learned", "mde_pct": 5.0,
    }  # fmt: skip
    (judged,) = family_lines({"families": [fam], "ops": []})
    assert judged.startswith("CPU total op time (judged) 1,768.6 → 2,307.7 µs/round (+30%), floor")
    (shown,) = family_lines({"families": [fam], "ops": [], "timing_compared": False})
    assert shown == (
        "CPU total op time (not judged: timings not compared) 1,768.6 → 2,307.7 µs/round (+30%)"
    )


def test_an_op_the_current_run_no_longer_calls_is_placed_by_the_baselines_holders() -> None:
    from dataclasses import replace

    from tprof_testing import table

    from tprof_engine.decide.judge import Recorded, census_holders, judge
    from tprof_engine.decide.timing.rule import Rule

    conv = WorkRow(
        op="aten::convolution", module="conv1", phase="forward", calls=1, flops=9000,
        bytes_read=100, bytes_written=100,
    )  # fmt: skip
    census = WorkTable(rows=(conv,))
    ops = {"aten::convolution": (50.0, 1), "aten::_convolution": (20.0, 1)}
    before = {**ops, "aten::mkldnn_convolution": (300.0, 1)}
    after = {**ops, "aten::_slow_conv2d_forward": (900.0, 1)}
    parents = {"aten::_convolution": "aten::convolution"}
    held = census_holders(
        {**parents, "aten::mkldnn_convolution": "aten::_convolution", "aten::convolution": "x"},
        census,
    )
    assert held == {
        "aten::_convolution": "aten::convolution",
        "aten::mkldnn_convolution": "aten::_convolution",
    }  # the census's own ops aren't kept
    now = table(after, seed=1)
    now = replace(
        now, meta={"parents": {**parents, "aten::_slow_conv2d_forward": "aten::_convolution"}}
    )
    v = judge(
        Recorded(tables=tuple(table(before, seed=s) for s in (2, 3, 4)), work=census, holders=held),
        Recorded(tables=(now,), work=census),
        Rule(),
    )
    inside = {o.op: o.inside for o in v.ops}
    assert inside["aten::mkldnn_convolution"] == "aten::convolution"  # removed: the baseline's
    assert inside["aten::_slow_conv2d_forward"] == "aten::convolution"  # new: this run's


def test_a_failure_places_the_six_ops_that_moved_most_and_says_how_many_more() -> None:
    names = [f"aten::op{i}" for i in range(8)]
    census = WorkTable(rows=tuple(
        WorkRow(op=n, module="m", phase="forward", calls=1, flops=0, bytes_read=8,
                bytes_written=8)
        for n in names
    ))  # fmt: skip
    ops = tuple(
        OpVerdict(**{**OP.to_dict(), "op": n, "delta_us": float(i), "delta_pct": float(i)})
        for i, n in enumerate(names)
    )
    v = TestVerdict(verdict=REGRESSED, reason="CPU: …", ops=ops, work=judge_work(census, census))
    shown = where_lines(v, limit=6)
    assert [line.split()[0] for line in shown[:6]] == names[::-1][:6]  # largest move first
    assert shown[6:] == ["… where 2 more ops run: -v places every one"]
    assert len(where_lines(v)) == 8
