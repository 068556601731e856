"""Every report renders one verdict the same way: the same rows, numbers and words.

One verdict with regressed, improved, unchanged, new and removed ops in both families and
work rows is rendered by the failure text, the JSON report and, from that JSON file,
``tprof report --markdown/--html``; each output is parsed back and compared.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Mapping

import numpy as np
import pytest

from tprof_engine.cli import main
from tprof_engine.decide.gates.finding import applied
from tprof_engine.decide.gates.work import work_finding
from tprof_engine.decide.timing.compare import compare
from tprof_engine.decide.timing.rule import Rule
from tprof_engine.model.records import OpTable
from tprof_engine.model.results import ProfiledTest
from tprof_engine.model.work import WorkRow, WorkTable
from tprof_engine.render.report import failure_text, json_report, summary_line
from tprof_engine.render.rows import OP_COLUMNS, SUMMARY_COLUMNS

NODEID = "tests/test_m.py::test_mix"
BASE_OPS = {
    "aten::mm": (3, 600.0),
    "aten::add": (2, 200.0),
    "aten::relu": (2, 60.0),
    "aten::sum": (1, 40.0),
}
# mm twice as slow, add twice as fast, relu as it was, sum gone, cat new.
CURRENT_OPS = {
    "aten::mm": (3, 1200.0),
    "aten::add": (2, 100.0),
    "aten::relu": (2, 60.0),
    "aten::cat": (1, 50.0),
}


def table(ops: Mapping[str, tuple[int, float]], *, seed: int) -> OpTable:
    rng = np.random.default_rng(seed)
    names = tuple(sorted(ops))
    rounds = 20
    calls = np.array([[ops[n][0]] * rounds for n in names], dtype=np.int64)
    cpu = np.array([ops[n][1] * rng.lognormal(0.0, 0.04, rounds) for n in names])
    # kernels vary less than the host does (0.04-0.1 % between sessions on an H100)
    device = np.array([0.5 * ops[n][1] * rng.lognormal(0.0, 0.005, rounds) for n in names])
    return OpTable(
        names=names,
        calls=calls,
        self_cpu_us=cpu,
        total_cpu_us=cpu,
        self_device_us=device,
        total_device_us=device,
        wall_us=cpu.sum(axis=0),
        probe_cpu_us=np.full(rounds, 1000.0),
        probe_device_us=np.full(rounds, 500.0),
        has_device=True,
    )


def mm(module: str, flops: int) -> WorkRow:
    return WorkRow(
        op="aten::mm", module=module, phase="forward", calls=1, flops=flops,
        bytes_read=100, bytes_written=100,
    )  # fmt: skip


@pytest.fixture(scope="module")
def test() -> ProfiledTest:
    verdict = compare([table(BASE_OPS, seed=s) for s in range(3)], table(CURRENT_OPS, seed=9))
    base = WorkTable(rows=(mm("fc1", 1000), mm("fc2", 1000)))
    wider = WorkTable(rows=(mm("fc1", 3000), mm("fc2", 1000)))
    verdict = applied(verdict, work_finding(base, wider, Rule()))
    return ProfiledTest(nodeid=NODEID, verdict=verdict, trace="traces/t.json.gz")


@pytest.fixture(scope="module")
def rendered(test: ProfiledTest, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The failure text, and the Markdown and HTML that ``tprof report`` writes."""
    pytest.importorskip("matplotlib")
    folder = tmp_path_factory.mktemp("reports")
    doc = json_report([test], environment={})
    (folder / "r.json").write_text(json.dumps(doc))
    md, page = folder / "r.md", folder / "r.html"
    assert main(["report", str(folder / "r.json"), "--markdown", str(md), "--html", str(page)]) == 0
    return {
        "terminal": failure_text(test, verbose=True),
        "markdown": md.read_text(),
        "html": page.read_text(),
        "json": (folder / "r.json").read_text(),
    }


Row = tuple[str, ...]


def terminal_rows(text: str) -> list[Row]:
    lines = [line.strip() for line in text.splitlines()]
    start = next(i for i, line in enumerate(lines) if line.split()[:2] == ["op", "family"])
    assert re.split(r"\s{2,}", lines[start]) == list(OP_COLUMNS)
    rows = []
    for line in lines[start + 1 :]:
        cells = tuple(re.split(r"\s{2,}", line))
        if len(cells) != len(OP_COLUMNS):  # the lines under the table
            break
        rows.append(cells)
    return rows


def markdown_rows(text: str) -> list[Row]:
    lines = text.splitlines()
    head = "| " + " | ".join(OP_COLUMNS) + " |"
    start = lines.index(head)
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        cells = [c.strip().replace("\\|", "|") for c in line.strip("|").split(" | ")]
        cells[0] = cells[0].strip("`")
        rows.append(tuple(cells))
    return rows


def _cells(row: str, tag: str) -> list[str]:
    found = re.findall(rf"<{tag}[^>]*>(.*?)</{tag}>", row)
    return [html.unescape(re.sub(r"<[^>]+>", "", c)) for c in found]


def html_rows(page: str) -> list[Row]:
    table = re.search(r"<table class='ops'>(.*?)</table>", page, re.S)
    assert table is not None
    rows = re.findall(r"<tr>(.*?)</tr>", table.group(1), re.S)
    assert _cells(rows[0], "th") == list(OP_COLUMNS)
    return [tuple(_cells(r, "td")) for r in rows[1:]]


def test_the_verdict_mixes_every_kind_of_row(test: ProfiledTest) -> None:
    words = {(o.family, o.verdict) for o in test.verdict.ops}
    for word in ("regressed", "improved", "unchanged", "new", "removed"):
        assert ("cpu", word) in words and ("cuda", word) in words, word
    assert test.verdict.work is not None and test.verdict.work.verdict == "regressed"


def test_every_report_shows_the_same_op_rows(rendered: dict[str, str]) -> None:
    terminal = terminal_rows(rendered["terminal"])
    assert markdown_rows(rendered["markdown"]) == terminal
    assert html_rows(rendered["html"]) == terminal
    assert len(terminal) == 10  # five ops in each of two families


def test_the_rows_carry_the_json_numbers_and_words(rendered: dict[str, str]) -> None:
    doc = json.loads(rendered["json"])
    ops = {(o["family"], o["op"]): o for o in doc["tests"][0]["ops"]}
    for row in terminal_rows(rendered["terminal"]):
        cells = dict(zip(OP_COLUMNS, row, strict=True))
        o = ops[(cells["family"].lower(), cells["op"])]
        word = cells["verdict"].split(" (")[0]
        assert word == o["verdict"]
        assert cells["calls/round"] == f"{o['calls_baseline']} → {o['calls_current']}"
        assert float(cells["current µs"].replace(",", "")) == pytest.approx(
            o["current_median_us"], abs=0.05
        )
        if word in ("new", "removed"):
            assert cells["p (Holm)"] == cells["floor"] == "-"
            continue
        delta = cells["Δ %"].rstrip("%").replace("±", "")
        assert float(delta) == pytest.approx(o["delta_pct"], abs=0.5)
        assert float(cells["floor"].rstrip("%")) == pytest.approx(o["floor_pct"], abs=0.5)
        p = cells["p (Holm)"]
        assert p == "<0.0001" if o["p_value"] < 1e-4 else float(p) == float(f"{o['p_value']:.2g}")


def test_every_report_states_the_judged_totals_in_the_same_words(
    test: ProfiledTest, rendered: dict[str, str]
) -> None:
    lines = [
        line.strip()
        for line in rendered["terminal"].splitlines()
        if re.match(r"\s*(CPU|CUDA) total op time \(", line)
    ]
    # A test whose ops ran kernels is judged on its device time; its CPU time is reported.
    assert [line.split("(")[0] for line in lines] == ["CUDA total op time ", "CPU total op time "]
    cuda, cpu = (next(f for f in test.verdict.families if f.family == n) for n in ("cuda", "cpu"))
    assert lines[0].startswith(
        f"CUDA total op time (judged) {cuda.baseline_total_us:,.1f} → "
        f"{cuda.current_total_us:,.1f} µs/round ({cuda.delta_pct:+.0f}%)"
    )
    assert lines[1].startswith(
        f"CPU total op time (reported, not gated) {cpu.baseline_total_us:,.1f} → "
        f"{cpu.current_total_us:,.1f} µs/round ({cpu.delta_pct:+.0f}%)"
    )
    assert all("; its op rows sum to " in line for line in lines)
    for line in lines:
        assert f"- {line}" in rendered["markdown"]
        assert f"<li>{html.escape(line)}</li>" in rendered["html"]


def test_the_summary_names_what_failed_the_test_in_every_report(
    test: ProfiledTest, rendered: dict[str, str]
) -> None:
    line = summary_line(test)
    causes = line.split(" | ")[1:]
    # The work (exact) first, then the gating op and the totals that crossed their floors.
    assert causes[0].startswith("work regressed: ")
    assert re.fullmatch(r"aten::mm CUDA \+\d+% \(floor \d+%\)", causes[1])
    assert "CUDA total op time +" in line and "CPU total op time +" not in line
    md_head = "| " + " | ".join(SUMMARY_COLUMNS) + " |"
    assert md_head in rendered["markdown"]
    md_row = next(r for r in rendered["markdown"].splitlines() if r.startswith(f"| `{NODEID}`"))
    assert md_row.split(" | ")[2].split("<br>") == causes
    summary = re.search(r"<table class='summary'>(.*?)</table>", rendered["html"], re.S)
    assert summary is not None
    cells = _cells(summary.group(1).split("</tr>")[1], "td")
    assert cells[2] == "".join(causes)  # <br> between them, dropped with the tags


def many_small_ops(factor: float, *, seed: int, hit_one_per_round: bool = False) -> OpTable:
    """25 ops of 40 µs, none material alone; optionally one random op 10× slower per round."""
    ops = {f"aten::op{i:02d}": (1, 40.0 * factor) for i in range(25)}
    t = table(ops, seed=seed)
    if hit_one_per_round:
        rng = np.random.default_rng(seed)
        cpu = t.self_cpu_us.copy()
        for r in range(t.rounds):
            cpu[rng.integers(len(ops)), r] *= 10.0
        t = OpTable(**{**{f: getattr(t, f) for f in t.__dataclass_fields__}, "self_cpu_us": cpu})
    return t


def test_a_test_failed_by_its_total_names_the_total_not_an_op() -> None:
    base = [many_small_ops(1.0, seed=s) for s in range(3)]
    verdict = compare(base, many_small_ops(1.3, seed=9))
    assert verdict.verdict == "regressed"
    line = summary_line(ProfiledTest(nodeid=NODEID, verdict=verdict))
    causes = line.split(" | ")[1:]
    assert re.fullmatch(r"CUDA total op time \+3\d% \(floor \d+%\)", causes[0]), causes
    assert "aten::op" not in line and "CPU total op time" not in line  # CPU time reports


def test_the_judged_total_and_the_op_rows_sum_are_both_named_when_they_disagree() -> None:
    # A different op slow in every round: each op's fast rounds are untouched, every round's
    # total is not, so the total moves and the rows' sum does not.
    base = [many_small_ops(1.0, seed=s) for s in range(3)]
    verdict = compare(base, many_small_ops(1.0, seed=9, hit_one_per_round=True))
    text = failure_text(ProfiledTest(nodeid=NODEID, verdict=verdict), verbose=True)
    line = next(x.strip() for x in text.splitlines() if x.strip().startswith("CPU total op"))
    found = re.search(r"µs/round \(\+(\d+)%\).*its op rows sum to .* µs \(([-+±]\d+)%\)", line)
    assert found is not None, line
    assert int(found.group(1)) >= 20
    assert abs(int(found.group(2).replace("±", ""))) <= 5
    assert line.endswith("different ops were slow in different rounds")


def test_every_report_puts_the_work_that_failed_the_test_before_its_timing(
    rendered: dict[str, str],
) -> None:
    for name in ("terminal", "markdown", "html"):
        text = rendered[name]
        assert text.index("work regressed (deterministic") < text.index("total op time (judged)"), (
            name
        )
