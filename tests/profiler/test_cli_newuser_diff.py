"""`tprof diff` and `tprof show` as a new user meets them: a damaged file is not "only in" the
other folder, a diff's next steps are about the files compared (not a pytest run), and a file
that is no baseline or trace at all is named as such."""

from __future__ import annotations

import gzip
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tprof_engine.cli import main
from tprof_engine.model.environment import Fingerprint
from tprof_engine.model.records import OpTable
from tprof_engine.store import baselines, paths, schema

FP = Fingerprint(
    hard={"torch": "2.13.0", "device": "cpu", "cpu_model": "Test CPU", "python": "3.11"},
    soft={"host": "h"},
)
PROTOCOL = {"rounds": 20, "warmup": 3, "iterations": 1, "activities": ["cpu"], "probe": "p1"}
OPS = {"aten::mm": (3, 600.0), "aten::add": (2, 80.0), "aten::relu": (2, 60.0)}
MLP = "tests/test_models.py::test_mlp"
CONV = "tests/test_models.py::test_conv"
FIX = "restore it from git or re-record it with --tprof-save"
NOT_A_FILE_WE_READ = "is not a tprof baseline (.json) or a Chrome trace (.pt.trace.json[.gz])"


def slower(factor: float) -> dict[str, tuple[int, float]]:
    return {**OPS, "aten::mm": (3, 600.0 * factor)}


def table(ops: Mapping[str, tuple[int, float]] = OPS, *, seed: int) -> OpTable:
    rng = np.random.default_rng(seed)
    names = tuple(sorted(ops))
    calls = np.array([[ops[n][0]] * 20 for n in names], dtype=np.int64)
    cpu = np.array([ops[n][1] * rng.lognormal(0.0, 0.03, 20) for n in names])
    return OpTable(
        names=names,
        calls=calls,
        self_cpu_us=cpu,
        total_cpu_us=cpu,
        self_device_us=np.zeros_like(cpu),
        total_device_us=np.zeros_like(cpu),
        wall_us=cpu.sum(axis=0),
        probe_cpu_us=1000.0 * rng.lognormal(0.0, 0.01, 20),
        probe_device_us=np.zeros(20),
    )


def write(root: Path, nodeid: str, tables: list[OpTable]) -> Path:
    """A baseline of ``tables`` where --tprof-save would put it."""
    base: schema.Baseline | None = None
    for t in tables:
        s = schema.Session(
            table=t, recorded_at="2026-01-01T00:00:00+00:00", warmup_used=3, soft={"host": "h"}
        )
        base, _ = baselines.with_session(
            base, nodeid=nodeid, fingerprint=FP, protocol=PROTOCOL, session=s
        )
    assert base is not None
    return baselines.save_baseline(paths.baseline_path(root, FP.key, nodeid), base)


def trace(path: Path, ops: Mapping[str, tuple[int, float]], *, seed: int) -> Path:
    """A gzipped Chrome trace: one ProfilerStep#N per round, the ops inside."""
    rng = np.random.default_rng(seed)
    events: list[dict[str, Any]] = []
    ts = 1000.0
    for r in range(12):
        start = ts
        for name, (calls, us) in sorted(ops.items()):
            for _ in range(calls):
                dur = round(us / calls * float(rng.lognormal(0.0, 0.03)), 3)
                events.append(
                    {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1,
                     "ts": ts + 1, "dur": dur}
                )  # fmt: skip
                ts += dur + 2
        events.append(
            {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{r}", "pid": 1,
             "tid": 1, "ts": start, "dur": ts - start + 1}
        )  # fmt: skip
        ts += 10
    doc = {"schemaVersion": 1, "traceEvents": events}
    path.write_bytes(gzip.compress(json.dumps(doc).encode("utf-8")))
    return path


def truncate(path: Path) -> Path:
    text = path.read_text(encoding="utf-8")
    path.write_text(text[: len(text) // 2], encoding="utf-8")
    return path


@pytest.fixture
def folders(tmp_path: Path) -> tuple[Path, Path]:
    """A: three sessions of two tests; B: one session each of the same code."""
    a, b = tmp_path / "A", tmp_path / "B"
    for k, nodeid in enumerate((MLP, CONV)):
        write(a, nodeid, [table(seed=10 * s + k) for s in range(3)])
        write(b, nodeid, [table(seed=100 + k)])
    return a, b


# --- a damaged file is not "only in" the other folder --------------------------------------


@pytest.mark.parametrize("damaged_side", ["A", "B"])
def test_a_test_whose_file_is_damaged_on_one_side_is_not_compared_nor_only_on_the_other(
    folders: tuple[Path, Path],
    damaged_side: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    a, b = folders
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
    folders: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    a, b = folders
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
    folders: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a, _ = folders
    c = tmp_path / "C"
    write(c, MLP, [table(slower(2.0), seed=200)])
    write(c, CONV, [table(seed=201)])
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
    folders: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    models = tmp_path / "models.py"
    models.write_text("import torch\n", encoding="utf-8")
    base = paths.baseline_path(folders[0], FP.key, MLP)
    assert main(["diff", str(base), str(models)]) == 2
    assert capsys.readouterr().err == (
        f"tprof: error: {models} {NOT_A_FILE_WE_READ}; pass two baseline folders, or two files "
        "(baselines or traces)\n"
    )


def test_a_damaged_baseline_still_says_to_restore_it(
    folders: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    damaged = truncate(paths.baseline_path(folders[0], FP.key, MLP))
    assert main(["show", str(damaged)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"tprof: error: {damaged}: truncated JSON at line ")
    assert err.endswith(f"; {FIX}\n")
