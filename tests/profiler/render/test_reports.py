"""Markdown and HTML reports, rendered from real verdicts on synthetic op tables."""

from __future__ import annotations

import base64
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tprof_engine.decide.timing.compare import compare
from tprof_engine.decide.timing.rule import Rule
from tprof_engine.model import verdicts as cmp
from tprof_engine.model.records import OpTable
from tprof_engine.model.results import ProfiledTest
from tprof_engine.render.markdown import markdown_from_report, markdown_summary
from tprof_engine.render.report import json_report

OPS = {
    "aten::mm": (3, 600.0),
    "aten::add": (2, 80.0),
    "aten::relu": (2, 60.0),
    "aten::sum": (1, 40.0),
}


def table(
    ops: Mapping[str, tuple[int, float]] = OPS, *, seed: int, device: bool = False
) -> OpTable:
    rng = np.random.default_rng(seed)
    names = tuple(sorted(ops))
    rounds = 20
    calls = np.array([[ops[n][0]] * rounds for n in names], dtype=np.int64)
    cpu = np.array([ops[n][1] * rng.lognormal(0.0, 0.04, rounds) for n in names])
    dev = 0.5 * cpu if device else np.zeros_like(cpu)
    return OpTable(
        names=names,
        calls=calls,
        self_cpu_us=cpu,
        total_cpu_us=cpu,
        self_device_us=dev,
        total_device_us=dev,
        wall_us=cpu.sum(axis=0),
        probe_cpu_us=np.full(rounds, 1000.0),
        probe_device_us=np.full(rounds, 500.0) if device else np.zeros(rounds),
        has_device=device,
    )


def profiled(
    nodeid: str, current: Mapping[str, tuple[int, float]], *, device: bool = False
) -> ProfiledTest:
    baseline = [table(seed=s, device=device) for s in range(3)]
    verdict = compare(baseline, table(current, seed=99, device=device), Rule())
    return ProfiledTest(
        nodeid=nodeid,
        verdict=verdict,
        trace=f"traces/{nodeid.rsplit(':', 1)[-1]}.pt.trace.json.gz",
        baseline=f"baselines/{nodeid.rsplit(':', 1)[-1]}.json",
    )


SLOW_MM = {**OPS, "aten::mm": (3, 1200.0)}
FAST_MM = {**OPS, "aten::mm": (3, 300.0)}
UNCHANGED = "tests/test_m.py::test_same"
REGRESSED = "tests/test_m.py::test_slow"
IMPROVED = "tests/test_m.py::test_fast"


@pytest.fixture(scope="module")
def tests() -> list[ProfiledTest]:
    """Three tests in an order that is not the report's: unchanged, regressed, improved."""
    return [profiled(UNCHANGED, OPS), profiled(REGRESSED, SLOW_MM), profiled(IMPROVED, FAST_MM)]


@pytest.fixture(scope="module")
def doc(tests: list[ProfiledTest]) -> dict[str, Any]:
    return json_report(tests, environment={"hard": {"torch": "2.13.0", "device": "cpu"}})


def test_the_fixture_tests_have_the_verdicts_their_names_say(tests: list[ProfiledTest]) -> None:
    assert [t.verdict.verdict for t in tests] == ["unchanged", "regressed", "improved"]


# --- Markdown -------------------------------------------------------------------------------


def test_markdown_lists_regressed_tests_first_in_the_table_and_the_details(
    tests: list[ProfiledTest],
) -> None:
    text = markdown_summary(tests)
    rows = [line for line in text.splitlines() if line.startswith("| `tests/")]
    assert [r.split("`")[1] for r in rows] == [REGRESSED, IMPROVED, UNCHANGED]
    summaries = re.findall(r"<summary><code>(.*?)</code>: (\S+)</summary>", text)
    assert summaries == [(REGRESSED, "regressed"), (IMPROVED, "improved"), (UNCHANGED, "unchanged")]
    assert text.splitlines()[2] == "3 profiled tests: 1 regressed, 1 improved, 1 unchanged."


def test_markdown_names_what_failed_the_regressed_test(tests: list[ProfiledTest]) -> None:
    text = markdown_summary(tests)
    row = next(line for line in text.splitlines() if line.startswith(f"| `{REGRESSED}`"))
    # The op that gates on its own, then the total that crossed its floor too.
    assert row == (
        f"| `{REGRESSED}` | **regressed** | aten::mm CPU +103% (floor 10%)"
        "<br>CPU total op time +78% (floor 10%) | - |"
    )
    # The regressed test's details are open, with the op's row first.
    block = text[text.index(f"<details open><summary><code>{REGRESSED}</code>") :]
    first_op = next(line for line in block.splitlines() if line.startswith("| `aten::"))
    cells = [c.strip() for c in first_op.strip("|").split(" | ")]
    assert cells[0] == "`aten::mm`"
    assert cells[-1] == "regressed"
    assert "- trace: `traces/test_slow.pt.trace.json.gz`" in block


def test_markdown_from_the_plugin_and_from_a_json_report_are_the_same(
    tests: list[ProfiledTest], doc: dict[str, Any]
) -> None:
    assert markdown_summary(tests) == markdown_from_report(doc)


def test_markdown_escapes_pipes_in_cells_and_markup_in_summaries() -> None:
    nodeid = "tests/test_m.py::test_p[a|b<c>]"
    text = markdown_summary([profiled(nodeid, OPS)])
    assert "| `tests/test_m.py::test_p[a\\|b<c>]` | unchanged |" in text
    assert (
        "<summary><code>tests/test_m.py::test_p[a|b&lt;c&gt;]</code>: unchanged</summary>" in text
    )


def test_markdown_of_no_tests_says_so() -> None:
    assert markdown_summary([]) == "## pytest-tprof\n\nNo profiled tests.\n"


def test_markdown_shows_a_p_value_rounded_to_zero_as_below_the_reports_precision() -> None:
    op = {
        "op": "aten::mm",
        "family": "cpu",
        "verdict": "regressed",
        "baseline_median_us": 600.0,
        "current_median_us": 1200.0,
        "delta_us": 600.0,
        "delta_pct": 100.0,
        "p_value": 0.0,
        "calls_baseline": 3,
        "calls_current": 3,
    }
    text = markdown_from_report({"tests": [{"nodeid": "t", "verdict": "regressed", "ops": [op]}]})
    assert (
        "| `aten::mm` | CPU | 3 → 3 | 600.0 | 1,200.0 | +600.0 | +100% | - | <0.0001 | regressed |"
        in text
    )


def test_markdown_of_a_test_without_a_baseline_has_no_op_table() -> None:
    test = ProfiledTest(
        nodeid="tests/t.py::test_new",
        verdict=cmp.TestVerdict(
            verdict=cmp.NO_BASELINE, reason="no baseline recorded for this test"
        ),
    )
    text = markdown_summary([test])
    assert (
        "| `tests/t.py::test_new` | no-baseline | no baseline recorded for this test | - |" in text
    )
    assert "| op |" not in text


# --- HTML -----------------------------------------------------------------------------------


def charts(page: str) -> list[str]:
    """The SVG documents embedded in the page."""
    data = re.findall(r"src='data:image/svg\+xml;base64,([A-Za-z0-9+/=]+)'", page)
    return [base64.b64decode(d).decode("utf-8") for d in data]


@pytest.fixture(scope="module")
def page(doc: dict[str, Any]) -> str:
    pytest.importorskip("matplotlib")
    from tprof_engine.render.html import html_report

    return html_report(doc)


def test_html_is_one_self_contained_file(page: str) -> None:
    assert page.startswith("<!DOCTYPE html>")
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", page)
    assert "<script" not in page
    assert "<link" not in page
    assert "@import" not in page
    for svg in charts(page):
        assert 'xlink:href="http' not in svg
        assert "<image" not in svg


def test_html_has_a_section_and_a_delta_chart_for_each_test_regressed_first(page: str) -> None:
    sections = re.findall(r"<section id='t\d+'><h2><code>(.*?)</code>", page)
    assert [s.replace("<wbr>", "") for s in sections] == [REGRESSED, IMPROVED, UNCHANGED]
    # One delta chart per test, plus the per-round distributions of the regressed op.
    svgs = charts(page)
    assert len(svgs) == 4
    assert "CPU: per-op deltas" in svgs[0]
    assert "Flagged ops: per-round distributions" in svgs[1]
    assert "aten::mm (CPU)" in svgs[1]
    assert all("aten::mm" in svg for svg in svgs)


def test_html_draws_a_cuda_panel_when_the_test_has_device_times() -> None:
    pytest.importorskip("matplotlib")
    from tprof_engine.render.html import html_report

    test = profiled("tests/test_m.py::test_gpu", SLOW_MM, device=True)
    svgs = charts(html_report(json_report([test], environment={})))
    assert "CPU: per-op deltas" in svgs[0]
    assert "CUDA: per-op deltas" in svgs[0]


def test_html_links_traces_relative_to_the_folder_it_is_written_to(
    doc: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("matplotlib")
    from tprof_engine.render.html import html_report

    monkeypatch.chdir(tmp_path)
    page = html_report(doc, link_base=tmp_path / "reports")
    assert "<a href='../traces/test_slow.pt.trace.json.gz'>" in page


def test_html_escapes_node_ids() -> None:
    pytest.importorskip("matplotlib")
    from tprof_engine.render.html import html_report

    doc = {"tests": [{"nodeid": "t.py::test[<b>&'x']", "verdict": "unchanged", "ops": []}]}
    page = html_report(doc)
    assert "<code>t.py::<wbr>test<wbr>[&lt;b&gt;&amp;&#x27;x&#x27;]</code>" in page
    assert "<b>" not in page


def test_html_test_names_wrap_between_their_parts_and_words_not_inside_a_word() -> None:
    pytest.importorskip("matplotlib")
    from tprof_engine.render.html import html_report

    nodeid = "tests/models/test_vision.py::test_resnet_training_step[batch-32]"
    page = html_report({"tests": [{"nodeid": nodeid, "verdict": "unchanged", "ops": []}]})
    assert (
        "tests/<wbr>models/<wbr>test_<wbr>vision.py::<wbr>test_<wbr>resnet_<wbr>training_<wbr>step"
        "<wbr>[batch-32]"
    ) in page
    assert "break-all" not in page


def test_html_round_chart_axis_spans_the_boxes_not_one_slow_round() -> None:
    pytest.importorskip("matplotlib")
    import matplotlib

    from tprof_engine.render.charts import rounds_chart

    rng = np.random.default_rng(3)
    base = (100 + 200 * rng.random(20)).tolist()
    cur = [*(150 + 150 * rng.random(19)).tolist(), 8000.0]
    with matplotlib.rc_context({"svg.fonttype": "none"}):
        img = rounds_chart([{"op": "aten::mm", "family": "cpu", "baseline_us": base,
                              "current_us": cur}])  # fmt: skip
    (svg,) = charts(img)
    ticks = [float(t.replace(",", "")) for t in re.findall(r">\s*([\d,]+(?:\.\d+)?)\s*<", svg)]
    assert len(ticks) >= 3 and max(ticks) < 1000, ticks
    assert "1 outlying round beyond the axis" in svg


def test_html_without_matplotlib_raises_naming_the_extra(
    doc: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    from tprof_engine.render.html import ExtraMissingError, html_report

    for name in ("matplotlib", "matplotlib.figure"):
        monkeypatch.setitem(sys.modules, name, None)
    with pytest.raises(ExtraMissingError) as info:
        html_report(doc)
    assert str(info.value) == (
        "the HTML report draws its charts with matplotlib, which is not installed; "
        "install the 'html' extra: pip install 'pytest-tprof[html]'"
    )


def test_markdown_names_files_under_the_current_folder_relative_to_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    doc = {
        "tests": [
            {
                "nodeid": "t.py::test_a",
                "verdict": "regressed",
                "reason": "slower",
                "ops": [],
                "trace": str(tmp_path / ".tprof" / "traces" / "t.test_a.pt.trace.json.gz"),
                "baseline": "/elsewhere/baselines/t.test_a.json",
            }
        ]
    }
    text = markdown_from_report(doc)
    assert "- trace: `.tprof/traces/t.test_a.pt.trace.json.gz`" in text
    assert "- baseline: `/elsewhere/baselines/t.test_a.json`" in text


def test_html_says_timing_charts_were_not_judged_when_timings_were_not_compared(
    doc: dict[str, Any],
) -> None:
    pytest.importorskip("matplotlib")
    from tprof_engine.render.html import NOT_JUDGED, html_report

    assert NOT_JUDGED not in html_report(doc)
    busy = {**doc, "tests": [{**t, "timing_compared": False} for t in doc["tests"]]}
    assert html_report(busy).count(NOT_JUDGED) == len(doc["tests"])
