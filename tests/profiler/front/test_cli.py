"""The tprof command: show, diff and report on synthetic baselines and traces (no capture)."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tprof_engine import window
from tprof_engine.cli import main
from tprof_engine.model.environment import Fingerprint
from tprof_engine.model.records import OpTable
from tprof_engine.store import baselines, paths, schema

HARD = {
    "torch": "2.13.0",
    "device": "cpu",
    "cuda": None,
    "cudnn": None,
    "gpus": [],
    "cpu_model": "Test CPU",
    "threads": 2,
    "deterministic": False,
    "tf32_matmul": False,
    "tf32_cudnn": True,
    "python": "3.11",
}
FP = Fingerprint(hard=HARD, soft={"system": "linux", "machine": "x86_64"})
PROTOCOL = {
    "rounds": 20,
    "warmup": 3,
    "iterations": 1,
    "activities": ["cpu"],
    "record_shapes": False,
    "probe": "cpu-mm96x4-v1",
}
# op → (calls per round, self CPU µs per round)
OPS = {
    "aten::mm": (3, 600.0),
    "aten::add": (2, 80.0),
    "aten::relu": (2, 60.0),
    "aten::sum": (1, 40.0),
}
MLP = "tests/test_models.py::test_mlp"
CONV = "tests/test_models.py::test_conv[3x3|pad]"
FIX = "restore it from git or re-record it with --tprof-save"


def table(
    ops: Mapping[str, tuple[int, float]] = OPS,
    *,
    seed: int,
    rounds: int = 20,
    noise: float = 0.04,
    device: bool = False,
) -> OpTable:
    """Per-round samples around the given medians, log-normal noise, a steady probe."""
    rng = np.random.default_rng(seed)
    names = tuple(sorted(ops))
    calls = np.array([[ops[n][0]] * rounds for n in names], dtype=np.int64)
    cpu = np.array([ops[n][1] * rng.lognormal(0.0, noise, rounds) for n in names])
    dev = 0.5 * cpu if device else np.zeros_like(cpu)
    return OpTable(
        names=names,
        calls=calls,
        self_cpu_us=cpu,
        total_cpu_us=cpu,
        self_device_us=dev,
        total_device_us=dev,
        wall_us=cpu.sum(axis=0),
        probe_cpu_us=1000.0 * rng.lognormal(0.0, 0.01, rounds),
        probe_device_us=np.full(rounds, 500.0) if device else np.zeros(rounds),
        has_device=device,
    )


def write(
    root: Path,
    nodeid: str,
    tables: list[OpTable],
    *,
    fp: Fingerprint = FP,
    protocol: Mapping[str, Any] = PROTOCOL,
) -> Path:
    """A baseline file holding ``tables`` as its sessions, where --tprof-save would put it."""
    baseline: schema.Baseline | None = None
    for t in tables:
        session = schema.Session(table=t, recorded_at="2026-01-01T00:00:00+00:00", warmup_used=3)
        baseline, _ = window.with_session(
            baseline, nodeid=nodeid, fingerprint=fp, protocol=protocol, session=session
        )
    assert baseline is not None
    return baselines.save_baseline(paths.baseline_path(root, fp.key, nodeid), baseline)


def slower(factor: float, op: str = "aten::mm") -> dict[str, tuple[int, float]]:
    calls, us = OPS[op]
    return {**OPS, op: (calls, us * factor)}


@pytest.fixture
def suite(tmp_path: Path) -> dict[str, Path]:
    """A: three sessions of two tests; B: unchanged code; C: test_mlp's matmul 2x slower."""
    a, b, c = tmp_path / "A", tmp_path / "B", tmp_path / "C"
    for k, nodeid in enumerate((MLP, CONV)):
        write(a, nodeid, [table(seed=10 * s + k) for s in range(3)])
        write(b, nodeid, [table(seed=100 + k)])
        write(c, nodeid, [table(slower(2.0) if nodeid == MLP else OPS, seed=200 + k)])
    return {"A": a, "B": b, "C": c}


def stderr_lines(capsys: pytest.CaptureFixture[str]) -> list[str]:
    return capsys.readouterr().err.strip().splitlines()


# --- diff -----------------------------------------------------------------------------------


def test_diff_of_folders_from_unchanged_code_exits_0_and_lists_every_test(
    suite: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["diff", str(suite["A"]), str(suite["B"])]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].startswith(f"UNCHANGED    {CONV} | ")
    assert lines[1].startswith(f"UNCHANGED    {MLP} | ")
    assert lines[-1] == "tprof diff: 2 tests compared: 2 unchanged"


def test_diff_exits_1_naming_the_test_and_the_op_that_got_twice_as_slow(
    suite: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["diff", str(suite["A"]), str(suite["C"])]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(f"UNCHANGED    {CONV} | ")
    regressed = next(i for i, line in enumerate(lines) if line.startswith("REGRESSED"))
    assert lines[regressed].startswith(f"REGRESSED    {MLP} | aten::mm CPU +")
    # The op table under it: header, then the one flagged op.
    start = next(
        i for i in range(regressed + 1, len(lines)) if lines[i].split()[:2] == ["op", "family"]
    )
    assert lines[start + 1].split()[0] == "aten::mm"
    assert lines[start + 1].split()[-1] == "regressed"
    assert lines[-1] == "tprof diff: 2 tests compared: 1 regressed, 1 unchanged"


def test_diff_of_two_baseline_files_compares_that_one_test(
    suite: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    a = paths.baseline_path(suite["A"], FP.key, MLP)
    c = paths.baseline_path(suite["C"], FP.key, MLP)
    assert main(["diff", str(a), str(c)]) == 1
    out = capsys.readouterr().out
    assert f"REGRESSED    {MLP} | aten::mm CPU +" in out
    assert f"current: {c}" in out
    assert out.splitlines()[-1] == "tprof diff: 1 test compared: 1 regressed"


def test_diff_judges_the_last_session_of_b(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = write(tmp_path / "A", MLP, [table(seed=s) for s in range(3)])
    slow_then_fast = write(tmp_path / "B", MLP, [table(slower(2.0), seed=50), table(seed=51)])
    fast_then_slow = write(tmp_path / "C", MLP, [table(seed=60), table(slower(2.0), seed=61)])
    assert main(["diff", str(a), str(slow_then_fast), "-v"]) == 0
    assert f"current: the last of the 2 sessions in {slow_then_fast}" in capsys.readouterr().out
    assert main(["diff", str(a), str(fast_then_slow), "-v"]) == 1
    assert f"current: the last of the 2 sessions in {fast_then_slow}" in capsys.readouterr().out


def test_diff_lists_tests_found_in_one_folder_only(
    suite: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    only_a = "tests/test_models.py::test_removed"
    only_b = "tests/test_models.py::test_added"
    write(suite["A"], only_a, [table(seed=1)])
    path_b = write(suite["B"], only_b, [table(seed=2)])
    assert main(["diff", str(suite["A"]), str(suite["B"])]) == 0
    lines = capsys.readouterr().out.splitlines()
    path_a = paths.baseline_path(suite["A"], FP.key, only_a)
    assert f"only in {suite['A']}: {only_a} ({path_a})" in lines
    assert f"only in {suite['B']}: {only_b} ({path_b})" in lines
    assert lines[-1] == (
        f"tprof diff: 2 tests compared: 2 unchanged; 1 only in {suite['A']}, 1 only in {suite['B']}"
    )


def test_another_device_makes_the_pair_incomparable_and_another_torch_compares_calls(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = write(tmp_path / "A", MLP, [table(seed=1)])
    gpu = Fingerprint(hard={**HARD, "device": "cuda"}, soft=FP.soft)
    b = write(tmp_path / "B", MLP, [table(slower(2.0), seed=2)], fp=gpu)
    assert main(["diff", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == (
        f"INCOMPARABLE {MLP} | calls and timings not comparable: device cpu → cuda"
    )
    newer = Fingerprint(hard={**HARD, "torch": "2.14.0"}, soft=FP.soft)
    c = write(tmp_path / "C", MLP, [table(slower(2.0), seed=2)], fp=newer)
    assert main(["diff", str(a), str(c)]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith(f"INCONCLUSIVE {MLP} | calls")
    assert first.endswith("timings not compared: torch 2.13.0 → 2.14.0")


def test_other_hardware_compares_calls_but_not_timings(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = write(tmp_path / "A", MLP, [table(seed=s) for s in range(3)])
    other_cpu = Fingerprint(hard={**HARD, "cpu_model": "Other CPU"}, soft=FP.soft)
    b = write(tmp_path / "B", MLP, [table(slower(2.0), seed=9)], fp=other_cpu)
    assert main(["diff", str(a), str(b), "-v"]) == 0
    out = capsys.readouterr().out
    assert f"timings not compared: cpu_model {HARD['cpu_model']} → Other CPU" in out


def times(t: OpTable, k: int) -> OpTable:
    """``t`` as if each round ran the body ``k`` times."""
    fields = {f: getattr(t, f) for f in t.__dataclass_fields__}
    for m in ("calls", "self_cpu_us", "total_cpu_us", "self_device_us", "total_device_us"):
        fields[m] = fields[m] * k
    return OpTable(**fields)


def test_folders_calibrated_to_other_iterations_are_compared_per_iteration(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = write(tmp_path / "A", MLP, [table(seed=s) for s in range(3)])
    five = {**PROTOCOL, "iterations": 5}
    b = write(tmp_path / "B", MLP, [times(table(seed=8), 5)], protocol=five)
    c = write(tmp_path / "C", MLP, [times(table(slower(2.0), seed=9), 5)], protocol=five)
    assert main(["diff", str(a), str(b), "-v"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"UNCHANGED    {MLP} | ")
    assert "rounds of 1 and 5 iterations: compared per iteration" in out
    assert main(["diff", str(a), str(c)]) == 1
    assert capsys.readouterr().out.startswith(f"REGRESSED    {MLP} | aten::mm CPU +")


def test_strict_fails_on_a_call_change_that_is_otherwise_only_a_change(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = write(tmp_path / "A", MLP, [table(seed=s) for s in range(3)])
    # One more aten::sum call per round: 40 µs more, under 5 % of the ~780 µs round.
    extra = {**OPS, "aten::sum": (2, 40.5)}
    b = write(tmp_path / "B", MLP, [table(extra, seed=7)])
    assert main(["diff", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(
        f"CHANGED      {MLP} | CPU: calls changed, net +20 µs per round: aten::sum 1→2\n"
    )
    assert main(["diff", str(a), str(b), "--strict"]) == 1
    out = capsys.readouterr().out
    assert out.startswith(f"REGRESSED    {MLP} | CPU calls changed: aten::sum 1→2 (+")


def test_a_fixed_floor_above_the_slowdown_lets_it_pass(
    suite: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["diff", str(suite["A"]), str(suite["C"]), "--floor", "150%"]) == 0
    assert main(["diff", str(suite["A"]), str(suite["C"]), "--floor", "0.5"]) == 1
    out = capsys.readouterr().out
    assert "floor 50% configured" in out


@pytest.mark.parametrize("floor", ["ten", "50", "-0.1"])
def test_a_floor_that_is_not_a_number_or_out_of_bounds_is_a_usage_error(
    suite: dict[str, Path], capsys: pytest.CaptureFixture[str], floor: str
) -> None:
    # 50 (meant as 50 %) is refused as --tprof-floor=50 is: one bound for both.
    assert main(["diff", str(suite["A"]), str(suite["B"]), "--floor", floor]) == 2
    assert stderr_lines(capsys)[-1] == (
        "tprof diff: error: argument --floor: must be a fraction >= 0 and below 10 such as "
        f"0.1, or a percentage such as 10% (got '{floor}')"
    )


def test_a_damaged_baseline_exits_2_naming_the_file(
    suite: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    damaged = paths.baseline_path(suite["B"], FP.key, MLP)
    damaged.write_text("", encoding="utf-8")
    assert main(["diff", str(suite["A"]), str(suite["B"])]) == 2
    captured = capsys.readouterr()
    assert captured.err == f"tprof: error: {damaged}: empty file; {FIX}\n"
    # The readable test is still compared, and the damaged one is not reported as missing.
    assert captured.out.startswith(f"UNCHANGED    {CONV} | ")
    assert f"not compared: {MLP}, because its file in {suite['B']} is damaged: {damaged}" in (
        captured.out
    )
    assert "only in" not in captured.out


def test_a_truncated_baseline_file_exits_2_without_a_traceback(
    suite: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    path = paths.baseline_path(suite["C"], FP.key, MLP)
    text = path.read_text(encoding="utf-8")
    path.write_text(text[: len(text) // 2], encoding="utf-8")
    assert main(["diff", str(paths.baseline_path(suite["A"], FP.key, MLP)), str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"tprof: error: {path}: truncated JSON at line ")
    assert err.endswith(f"; {FIX}\n")
    assert "Traceback" not in err


def test_a_missing_path_exits_2_naming_it(
    suite: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nope"
    assert main(["diff", str(suite["A"]), str(missing)]) == 2
    assert (
        capsys.readouterr().err
        == f"tprof: error: {missing}: no such file or folder; check the path\n"
    )


def test_a_folder_and_a_file_are_a_usage_error(
    suite: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    file = paths.baseline_path(suite["B"], FP.key, MLP)
    assert main(["diff", str(suite["A"]), str(file)]) == 2
    assert capsys.readouterr().err == (
        f"tprof: error: {suite['A']} is a folder but {file} is a file; "
        "pass two baseline folders, or two files (baselines or traces)\n"
    )


def test_folders_with_no_test_in_common_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(tmp_path / "A", MLP, [table(seed=1)])
    write(tmp_path / "B", CONV, [table(seed=2)])
    assert main(["diff", str(tmp_path / "A"), str(tmp_path / "B")]) == 2
    assert capsys.readouterr().err == (
        f"tprof: error: no test is in both {tmp_path / 'A'} and {tmp_path / 'B'}, so nothing "
        "was compared; pass folders recorded from the same test suite\n"
    )


def test_diff_json_is_a_report_that_tprof_report_renders(
    suite: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = tmp_path / "out" / "diff.json"
    assert main(["diff", str(suite["A"]), str(suite["C"]), "--json", str(report)]) == 1
    doc = json.loads(report.read_text(encoding="utf-8"))
    assert doc["schema_version"] == 2
    assert doc["source"] == "tprof diff"
    assert doc["environment"] == FP.to_dict()
    assert [(t["nodeid"], t["verdict"]) for t in doc["tests"]] == [
        (CONV, "unchanged"),
        (MLP, "regressed"),
    ]
    md = tmp_path / "out" / "diff.md"
    assert main(["report", str(report), "--markdown", str(md)]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == f"Markdown summary: {md}"
    text = md.read_text(encoding="utf-8")
    assert text.index(f"`{MLP}` | **regressed**") < text.index("| unchanged |")


# --- show -----------------------------------------------------------------------------------


def steady(ops: Mapping[str, tuple[int, float]], *, device: bool = False) -> OpTable:
    """A table with the same samples in every round but one op whose rounds spread."""
    t = table(ops, seed=0, noise=0.0, rounds=4, device=device)
    cpu = t.self_cpu_us.copy()
    cpu[t.index()["aten::add"]] = [70.0, 80.0, 90.0, 100.0]  # median 85, IQR 15
    return OpTable(**{**{f: getattr(t, f) for f in t.__dataclass_fields__}, "self_cpu_us": cpu})


def test_show_prints_calls_median_and_iqr_per_op_sorted_by_self_cpu(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, MLP, [steady(OPS)], protocol={**PROTOCOL, "rounds": 4})
    assert main(["show", str(path)]) == 0
    assert capsys.readouterr().out.splitlines() == [
        f"{MLP}  ({path})",
        "  baseline, 4 rounds; self CPU 785.0 µs per round",
        f"  environment: {FP.key}",
        "  op          calls/round  self CPU µs   IQR  % CPU",
        "  aten::mm              3        600.0   0.0  76.4%",
        "  aten::add             2         85.0  15.0  10.8%",
        "  aten::relu            2         60.0   0.0   7.6%",
        "  aten::sum             1         40.0   0.0   5.1%",
    ]


def test_show_sorts_by_name_or_calls_and_limits_the_rows(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, MLP, [steady(OPS)], protocol={**PROTOCOL, "rounds": 4})
    assert main(["show", str(path), "--sort", "name", "--limit", "2"]) == 0
    rows = capsys.readouterr().out.splitlines()[4:]
    assert [r.split()[0] for r in rows[:2]] == ["aten::add", "aten::mm"]
    assert rows[2] == "  ... 2 more ops (--limit 0 shows all)"
    assert main(["show", str(path), "--sort", "calls", "--limit", "0"]) == 0
    rows = capsys.readouterr().out.splitlines()[4:]
    assert [r.split()[0] for r in rows] == ["aten::mm", "aten::add", "aten::relu", "aten::sum"]


def test_show_adds_cuda_columns_only_for_a_table_with_device_times(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cuda = Fingerprint(hard={**HARD, "device": "cuda", "cuda": "12.4"}, soft=FP.soft)
    path = write(
        tmp_path, MLP, [steady(OPS, device=True)], fp=cuda, protocol={**PROTOCOL, "rounds": 4}
    )
    assert main(["show", str(path), "--sort", "self_cuda"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert (
        lines[1]
        == "  baseline, 4 rounds; self CPU 785.0 µs per round, self CUDA 390.0 µs per round"
    )
    assert lines[3:6] == [
        "  op          calls/round  self CPU µs   IQR  % CPU  self CUDA µs  IQR  % CUDA",
        "  aten::mm              3        600.0   0.0  76.4%         300.0  0.0   76.9%",
        "  aten::add             2         85.0  15.0  10.8%          40.0  0.0   10.3%",
    ]


def test_show_sorted_by_cuda_on_a_cpu_table_says_it_sorted_by_cpu(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, MLP, [steady(OPS)], protocol={**PROTOCOL, "rounds": 4})
    assert main(["show", str(path), "--sort", "self_cuda"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[3] == "  (no CUDA times in this table: sorted by self CPU)"
    assert lines[5].split()[0] == "aten::mm"


def test_show_of_a_folder_shows_every_baseline_under_it(
    suite: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    other = Fingerprint(hard={**HARD, "python": "3.12"}, soft=FP.soft)
    write(suite["A"], MLP, [table(seed=3)], fp=other)  # a second environment folder
    assert main(["show", str(suite["A"])]) == 0
    headers = [line for line in capsys.readouterr().out.splitlines() if line.startswith("tests/")]
    assert [h.split()[0] for h in headers] == [CONV, MLP, MLP]


def test_show_of_a_pooled_baseline_says_how_many_sessions(
    suite: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["show", str(paths.baseline_path(suite["A"], FP.key, MLP))]) == 0
    line = capsys.readouterr().out.splitlines()[1]
    assert line.startswith("  baseline, 3 sessions of 20/20/20 rounds, pooled; self CPU ")


def test_show_of_a_folder_with_a_damaged_file_shows_the_rest_and_exits_2(
    suite: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    damaged = paths.baseline_path(suite["A"], FP.key, CONV)
    damaged.write_text("<<<<<<< HEAD\n", encoding="utf-8")
    assert main(["show", str(suite["A"])]) == 2
    captured = capsys.readouterr()
    assert captured.out.startswith(f"{MLP}  (")
    assert captured.err == (
        f"tprof: error: {damaged}: git conflict marker at line 1; resolve the merge by keeping "
        "one side (or re-record with --tprof-save)\n"
    )


def test_show_of_an_empty_folder_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["show", str(tmp_path)]) == 2
    assert capsys.readouterr().err == (
        f"tprof: error: {tmp_path}: no baseline files (*.json) or traces (*.json.gz) in this "
        "folder; pass a folder written by pytest --tprof-save, a baseline file or a Chrome trace\n"
    )


# --- report ---------------------------------------------------------------------------------


def report_doc(tmp_path: Path, doc: Any) -> Path:
    path = tmp_path / "report.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


DOC = {
    "schema_version": 1,
    "environment": {},
    "tests": [
        {
            "nodeid": MLP,
            "verdict": "unchanged",
            "reason": "no op changed beyond its floor",
            "ops": [],
        }
    ],
}


def test_report_writes_html_and_markdown(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("matplotlib")
    src = report_doc(tmp_path, DOC)
    html, md = tmp_path / "r" / "r.html", tmp_path / "r" / "r.md"
    assert main(["report", str(src), "--html", str(html), "--markdown", str(md)]) == 0
    assert capsys.readouterr().out.splitlines() == [
        f"HTML report: {html}",
        f"Markdown summary: {md}",
    ]
    assert MLP in html.read_text(encoding="utf-8").replace("<wbr>", "")
    assert f"`{MLP}`" in md.read_text(encoding="utf-8")


def test_report_html_without_matplotlib_exits_2_naming_the_extra(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("matplotlib", "matplotlib.figure"):
        monkeypatch.setitem(sys.modules, name, None)  # None in sys.modules makes import fail
    src = report_doc(tmp_path, DOC)
    out = tmp_path / "r.html"
    assert main(["report", str(src), "--html", str(out)]) == 2
    assert capsys.readouterr().err == (
        "tprof: error: the HTML report draws its charts with matplotlib, which is not installed; "
        "install the 'html' extra: pip install 'pytest-tprof[html]'\n"
    )
    assert not out.exists()


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ("{", "invalid JSON (Expecting property name enclosed in double quotes) at line 1 col 2"),
        ('{"schema_version": 1}', "not a pytest-tprof JSON report (no 'tests' list)"),
        (
            '{"schema_version": 1, "tests": [{"nodeid": 3, "verdict": "unchanged"}]}',
            "'tests[0].nodeid' must be a string",
        ),
    ],
)
def test_an_unreadable_report_exits_2_naming_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, problem: str
) -> None:
    src = tmp_path / "report.json"
    src.write_text(content, encoding="utf-8")
    assert main(["report", str(src), "--markdown", str(tmp_path / "r.md")]) == 2
    assert capsys.readouterr().err == (
        f"tprof: error: {src}: {problem}; pass the file written by pytest --tprof-json=PATH "
        "or tprof diff --json PATH\n"
    )


def test_a_report_from_a_newer_version_says_to_upgrade(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = report_doc(tmp_path, {**DOC, "schema_version": 3})
    assert main(["report", str(src), "--markdown", str(tmp_path / "r.md")]) == 2
    assert capsys.readouterr().err == (
        f"tprof: error: {src}: written by a newer pytest-tprof (schema_version 3 > 2); "
        "upgrade pytest-tprof to read it\n"
    )


def test_report_with_nothing_to_write_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["report", str(report_doc(tmp_path, DOC))]) == 2
    assert capsys.readouterr().err == (
        "tprof: error: nothing to write: give --html OUT.html and/or --markdown OUT.md\n"
    )


# --- the command itself ---------------------------------------------------------------------


def test_no_subcommand_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert stderr_lines(capsys)[-1] == "tprof: error: the following arguments are required: COMMAND"


def test_python_m_tprof_engine_help_lists_the_subcommands() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "tprof_engine", "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: tprof ")
    for command in ("show", "diff", "report"):
        assert f"    {command} " in done.stdout


def test_the_command_imports_neither_torch_nor_pytest_nor_matplotlib() -> None:
    code = (
        "import sys, tprof_engine.cli, tprof_engine.render.markdown, tprof_engine.render.html; "
        "print(sorted({m.split('.')[0] for m in sys.modules} & "
        "{'torch', 'pytest', '_pytest', 'pluggy', 'xdist', 'matplotlib'}))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "[]\n"


# --- traces (read by tprof_engine.traces) -------------------------------------------------------


def trace(path: Path, ops: Mapping[str, tuple[int, float]], *, seed: int, rounds: int = 12) -> Path:
    """A Chrome trace as torch.profiler writes it: one ProfilerStep#N per round, ops inside."""
    rng = np.random.default_rng(seed)
    events: list[dict[str, Any]] = []
    ts = 1000.0
    for r in range(rounds):
        start = ts
        for name, (calls, us) in sorted(ops.items()):
            for _ in range(calls):
                dur = round(us / calls * float(rng.lognormal(0.0, 0.04)), 3)
                events.append(
                    {
                        "ph": "X",
                        "cat": "cpu_op",
                        "name": name,
                        "pid": 1,
                        "tid": 1,
                        "ts": ts + 1,
                        "dur": dur,
                    }
                )
                ts += dur + 2
        events.append(
            {
                "ph": "X",
                "cat": "user_annotation",
                "name": f"ProfilerStep#{r}",
                "pid": 1,
                "tid": 1,
                "ts": start,
                "dur": ts - start + 1,
            }
        )
        ts += 10
    doc = {"schemaVersion": 1, "traceEvents": events}
    path.write_bytes(gzip.compress(json.dumps(doc).encode("utf-8")))
    return path


def test_diff_of_two_traces_names_the_slower_op(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = trace(tmp_path / "a.pt.trace.json.gz", OPS, seed=1)
    b = trace(tmp_path / "b.pt.trace.json.gz", OPS, seed=2)
    c = trace(tmp_path / "c.pt.trace.json.gz", slower(2.0), seed=3)
    assert main(["diff", str(a), str(b)]) == 0
    assert capsys.readouterr().out.startswith("UNCHANGED    b.pt.trace.json.gz | ")
    assert main(["diff", str(a), str(c)]) == 1
    out = capsys.readouterr().out
    assert out.startswith("REGRESSED    c.pt.trace.json.gz | aten::mm CPU +")
    assert "a trace carries no environment fingerprint: comparability was not checked" in out
    assert f"trace: {c}" in out


def test_diff_of_two_folders_of_traces_pairs_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for folder, seed, ops in (("A", 1, OPS), ("B", 2, slower(2.0))):
        (tmp_path / folder).mkdir()
        trace(tmp_path / folder / "test_mlp.pt.trace.json.gz", ops, seed=seed)
        trace(tmp_path / folder / "test_conv.pt.trace.json.gz", OPS, seed=seed + 10)
    assert main(["diff", str(tmp_path / "A"), str(tmp_path / "B")]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("UNCHANGED    test_conv.pt.trace.json.gz | ")
    assert lines[1].startswith("REGRESSED    test_mlp.pt.trace.json.gz | aten::mm CPU +")
    assert lines[-1] == "tprof diff: 2 tests compared: 1 regressed, 1 unchanged"


def test_show_of_a_trace_prints_its_rounds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = trace(tmp_path / "t.pt.trace.json.gz", {"aten::mm": (2, 300.0)}, seed=1, rounds=5)
    assert main(["show", str(path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"t.pt.trace.json.gz  ({path})"
    assert lines[1].startswith("  Chrome trace, 5 rounds; self CPU ")
    assert lines[2].startswith("  time outside any op ")  # the round's span less its ops
    assert lines[4].split()[:2] == ["aten::mm", "2"]


def test_a_corrupt_trace_exits_2_naming_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "bad.pt.trace.json.gz"
    path.write_bytes(gzip.compress(b"")[:5])
    assert main(["show", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"tprof: error: {path}: ")
    assert "re-export the trace" in err


# --- damaged files, next steps and files of other kinds, as tprof diff and show meet them ---
# A damaged file is not "only in" the other folder, a diff's next steps are about the files
# compared (not a pytest run), and a file that is no baseline or trace is named as such.

NOT_A_FILE_WE_READ = "is not a tprof baseline (.json) or a Chrome trace (.pt.trace.json[.gz])"


def truncate(path: Path) -> Path:
    text = path.read_text(encoding="utf-8")
    path.write_text(text[: len(text) // 2], encoding="utf-8")
    return path


# --- a damaged file is not "only in" the other folder --------------------------------------


@pytest.mark.parametrize("damaged_side", ["A", "B"])
def test_a_test_whose_file_is_damaged_on_one_side_is_not_compared_nor_only_on_the_other(
    suite: dict[str, Path],
    damaged_side: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    a, b = suite["A"], suite["B"]
    side = a if damaged_side == "A" else b
    damaged = truncate(paths.baseline_path(side, FP.key, CONV))
    report = tmp_path / "diff.json"
    assert main(["diff", str(a), str(b), "--json", str(report)]) == 2
    captured = capsys.readouterr()
    lines = captured.out.splitlines()
    assert lines[0].startswith(f"UNCHANGED    {MLP} | ")
    assert lines[1] == (
        f"not compared: {CONV}, because its file in {side} is damaged: {damaged} "
        "(its error says how)"
    )
    assert "only in" not in captured.out
    assert lines[2] == "tprof diff: 1 test compared: 1 unchanged; 1 not compared (a damaged file)"
    assert captured.err.startswith(f"tprof: error: {damaged}: truncated JSON at line ")
    assert captured.err.endswith(f"; {FIX}\n")
    doc = json.loads(report.read_text(encoding="utf-8"))
    assert [t["nodeid"] for t in doc["tests"]] == [MLP]
    assert doc["not_compared"] == [CONV]
    assert doc["only_in_baseline"] == doc["only_in_current"] == []


def test_a_test_really_missing_on_one_side_is_still_only_on_the_other(
    suite: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    a, b = suite["A"], suite["B"]
    paths.baseline_path(a, FP.key, CONV).unlink()
    truncate(paths.baseline_path(a, FP.key, MLP))  # damaged, but its test is on both sides
    write(b, "tests/test_new.py::test_new", [table(seed=7)])
    assert main(["diff", str(a), str(b)]) == 2
    out = capsys.readouterr().out
    assert f"only in {b}: {CONV} (" in out
    assert f"only in {b}: tests/test_new.py::test_new (" in out
    assert f"not compared: {MLP}, because its file in {a} is damaged: " in out
    assert out.splitlines()[-1] == (
        f"tprof diff: 0 tests compared; 0 only in {a}, 2 only in {b}; "
        "1 not compared (a damaged file)"
    )


def test_a_damaged_trace_in_a_folder_of_traces_is_matched_by_its_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for folder, seed in (("A", 1), ("B", 2)):
        (tmp_path / folder).mkdir()
        trace(tmp_path / folder / "test_mlp.pt.trace.json.gz", OPS, seed=seed)
        trace(tmp_path / folder / "test_conv.pt.trace.json.gz", OPS, seed=seed + 10)
    damaged = tmp_path / "A" / "test_conv.pt.trace.json.gz"
    damaged.write_bytes(damaged.read_bytes()[:40])
    assert main(["diff", str(tmp_path / "A"), str(tmp_path / "B")]) == 2
    out = capsys.readouterr().out
    assert f"not compared: test_conv.pt.trace.json.gz, because its file in {tmp_path / 'A'}" in out
    assert "only in" not in out


# --- a diff's next steps are about the files, not a pytest run --------------------------------


def test_a_regressed_pair_of_folders_says_how_to_show_each_side_not_how_to_rerun_pytest(
    suite: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a, c = suite["A"], suite["C"]  # C: test_mlp's matmul twice as slow
    assert main(["diff", str(a), str(c)]) == 1
    out = capsys.readouterr().out
    assert "pytest --" not in out and "--tprof" not in out  # the tmp path holds "pytest"
    base, cur = paths.baseline_path(a, FP.key, MLP), paths.baseline_path(c, FP.key, MLP)
    assert "\n      next:\n" in out and f"      current: {cur}\n" in out
    assert f"        every op of each side: tprof show {base}; tprof show {cur}\n" in out


def test_a_regressed_pair_of_traces_says_where_to_open_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = trace(tmp_path / "a.pt.trace.json.gz", OPS, seed=1)
    c = trace(tmp_path / "c.pt.trace.json.gz", slower(2.0), seed=3)
    assert main(["diff", str(a), str(c)]) == 1
    out = capsys.readouterr().out
    assert "pytest --" not in out and "--tprof" not in out
    steps = out[out.index("\n      next:\n") :].splitlines()[2:]
    assert steps[:-1] == [
        f"        every op of each side: tprof show {a}; tprof show {c}",
        f"        see the ops in time: open {a} in https://ui.perfetto.dev",
        f"        see the ops in time: open {c} in https://ui.perfetto.dev",
    ]


# --- a file that is no baseline or trace ------------------------------------------------------


@pytest.mark.parametrize("name", ["models.py", "notes.txt", "trace.gz", "baseline.json.bak"])
def test_show_of_a_file_that_is_no_baseline_or_trace_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    path = tmp_path / name
    path.write_text("import torch\n", encoding="utf-8")
    assert main(["show", str(path)]) == 2
    assert capsys.readouterr().err == (
        f"tprof: error: {path} {NOT_A_FILE_WE_READ}; give a baseline file, a baselines folder "
        "or a trace\n"
    )


def test_diff_of_a_file_that_is_no_baseline_or_trace_says_so(
    suite: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    models = tmp_path / "models.py"
    models.write_text("import torch\n", encoding="utf-8")
    base = paths.baseline_path(suite["A"], FP.key, MLP)
    assert main(["diff", str(base), str(models)]) == 2
    assert capsys.readouterr().err == (
        f"tprof: error: {models} {NOT_A_FILE_WE_READ}; pass two baseline folders, or two files "
        "(baselines or traces)\n"
    )


def test_a_damaged_baseline_still_says_to_restore_it(
    suite: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    damaged = truncate(paths.baseline_path(suite["A"], FP.key, MLP))
    assert main(["show", str(damaged)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"tprof: error: {damaged}: truncated JSON at line ")
    assert err.endswith(f"; {FIX}\n")
