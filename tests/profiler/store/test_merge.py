"""tprof merge: the baseline folders of several CI runs into one window per test."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tprof_engine import cli
from tprof_engine import window as restarts
from tprof_engine.model.environment import Fingerprint
from tprof_engine.model.errors import BaselineError, ConfigError
from tprof_engine.model.records import OpTable
from tprof_engine.model.work import WorkRow, WorkTable
from tprof_engine.store import baselines, merge, paths, reading, schema

NODEID = "tests/test_m.py::test_a"
ENV = "linux-x86_64-cpu-torch2.13.0-py3.11"
REL = Path(ENV) / f"{paths.slug(NODEID)}.json"
ROUNDS = 4


def merge_folders(inputs: list[Path], into: Path, *, window: int = 5) -> list[merge.MergedTest]:
    """``tprof merge``'s merge, under the saves' restart rule."""
    return merge.merge_folders(inputs, into, window=window, restart=restarts.restart_reason)


def table(seed: int) -> OpTable:
    rng = np.random.default_rng(seed)
    self_cpu = 10.0 + rng.random((2, ROUNDS))
    zeros = np.zeros((2, ROUNDS))
    return OpTable(
        names=("aten::add", "aten::mm"),
        calls=np.full((2, ROUNDS), 2, dtype=np.int64),
        self_cpu_us=self_cpu,
        total_cpu_us=self_cpu * 2,
        self_device_us=zeros,
        total_device_us=zeros,
        wall_us=100.0 + rng.random(ROUNDS),
        probe_cpu_us=50.0 + rng.random(ROUNDS),
        probe_device_us=np.zeros(ROUNDS),
    )


def session(minute: int, *, flops: int = 1000, **extra: Any) -> dict[str, Any]:
    """A session recorded at 10:<minute>, its op times seeded by the minute."""
    work = WorkTable(
        rows=(
            WorkRow(
                op="aten::mm", module="fc", phase="forward", calls=1, flops=flops,
                bytes_read=64, bytes_written=32,
            ),
        )
    )  # fmt: skip
    recorded = schema.Session(
        table=table(minute), recorded_at=f"2026-03-01T10:{minute:02d}:00+00:00", warmup_used=1,
        soft={"hostname": f"runner-{minute}"}, work=work,
    )  # fmt: skip
    return {**recorded.to_dict(), **extra}


def document(sessions: list[dict[str, Any]], **hard: Any) -> dict[str, Any]:
    base = schema.Baseline(
        nodeid=NODEID,
        fingerprint=Fingerprint(
            hard={"torch": "2.13.0", "device": "cpu", "cpu_model": "Test CPU", **hard},
            soft={"hostname": "ci"},
        ),
        protocol={"rounds": ROUNDS, "warmup": 1, "iterations": 1, "probe": "p1"},
        sessions=(),
    )
    return {**base.to_dict(), "sessions": sessions}


def folder(root: Path, *sessions: dict[str, Any], **hard: Any) -> Path:
    path = root / REL
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(reading.dumps(document(list(sessions), **hard)), encoding="utf-8")
    return root


def stored(root: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((root / REL).read_text(encoding="utf-8"))
    return data


def times(root: Path) -> list[str]:
    return [s["recorded_at"][11:16] for s in stored(root)["sessions"]]


def run_cli(*args: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = cli.main(["merge", *args])
    out, err = capsys.readouterr()
    return code, out, err


# --------------------------------------------------------------------------- merging


def test_two_runs_from_one_artifact_merge_into_one_window_in_time_order(tmp_path: Path) -> None:
    a = folder(tmp_path / "a", session(1), session(3))
    b = folder(tmp_path / "b", session(1), session(2))
    (result,) = merge_folders([a, b], tmp_path / "out")
    assert times(tmp_path / "out") == ["10:01", "10:02", "10:03"]
    assert result.outcome == merge.WRITTEN
    assert dict(result.dropped) == {"identical copies": 1}
    assert result.line() == (
        f"{NODEID} [{ENV}]: kept 3 sessions (newest 2026-03-01T10:03:00+00:00); "
        f"dropped 1 identical copies; written to {tmp_path / 'out' / REL}"
    )
    baselines.load_baseline(tmp_path / "out" / REL, expected_nodeid=NODEID)


def test_sessions_and_the_file_keep_fields_this_version_does_not_know(tmp_path: Path) -> None:
    a = folder(tmp_path / "a", session(1, host="runner-a"))
    b = folder(tmp_path / "b", session(2, host="runner-b", later={"x": [1, 2]}))
    data = stored(b)
    data["future_key"] = {"kept": True}
    (b / REL).write_text(reading.dumps(data), encoding="utf-8")
    merge_folders([a, b], tmp_path / "out")
    out = stored(tmp_path / "out")
    assert out["sessions"] == [session(1, host="runner-a"), stored(b)["sessions"][0]]
    assert out["sessions"][1]["later"] == {"x": [1, 2]}
    assert out["future_key"] == {"kept": True}


def test_into_may_be_an_input_and_a_second_merge_changes_nothing(tmp_path: Path) -> None:
    a = folder(tmp_path / "a", session(1), session(2))
    b = folder(tmp_path / "b", session(1), session(3))
    (first,) = merge_folders([a, b], a)
    assert first.outcome == merge.WRITTEN
    assert times(a) == ["10:01", "10:02", "10:03"]
    before = (a / REL).read_bytes()
    (again,) = merge_folders([a, b], a)
    assert again.outcome == merge.UNCHANGED
    assert dict(again.dropped) == {"identical copies": 2}
    assert (a / REL).read_bytes() == before


def test_baselines_already_in_into_are_merged_not_replaced(tmp_path: Path) -> None:
    out = folder(tmp_path / "out", session(5))
    a = folder(tmp_path / "a", session(1))
    merge_folders([a], out)
    assert times(out) == ["10:01", "10:05"]


def test_the_newest_sessions_of_the_window_are_kept(tmp_path: Path) -> None:
    a = folder(tmp_path / "a", *(session(m) for m in (1, 3, 5, 7)))
    b = folder(tmp_path / "b", *(session(m) for m in (2, 4, 6, 8)))
    (result,) = merge_folders([a, b], tmp_path / "out", window=5)
    assert times(tmp_path / "out") == ["10:04", "10:05", "10:06", "10:07", "10:08"]
    assert dict(result.dropped) == {"older than the window of 5": 3}


def test_a_file_longer_than_the_window_counts_its_unread_sessions(tmp_path: Path) -> None:
    a = folder(tmp_path / "a", *(session(m) for m in range(1, 5)))
    (result,) = merge_folders([a], tmp_path / "out", window=2)
    assert times(tmp_path / "out") == ["10:03", "10:04"]
    assert dict(result.dropped) == {"older than the window of 2": 2}


def test_sessions_of_other_work_than_the_newer_ones_are_dropped_with_the_reason(
    tmp_path: Path,
) -> None:
    a = folder(tmp_path / "a", session(1), session(2))
    b = folder(tmp_path / "b", session(1), session(3, flops=2000))
    (result,) = merge_folders([a, b], tmp_path / "out")
    assert times(tmp_path / "out") == ["10:03"]
    assert dict(result.dropped) == {
        "identical copies": 1,
        "older than a restart of the window (work changed: total FLOPs +100.0% "
        "(1,000 → 2,000) (+1 more))": 2,
    }


def test_a_session_from_another_environment_restarts_the_window(tmp_path: Path) -> None:
    a = folder(tmp_path / "a", session(1), session(2))
    b = folder(tmp_path / "b", session(3), cpu_model="Other CPU")
    (result,) = merge_folders([a, b], tmp_path / "out")
    assert times(tmp_path / "out") == ["10:03"]
    assert stored(tmp_path / "out")["environment"]["hard"]["cpu_model"] == "Other CPU"
    assert dict(result.dropped) == {
        "older than a restart of the window "
        "(environment changed: cpu_model Test CPU → Other CPU)": 2
    }


def test_a_session_of_another_probe_restarts_the_window(tmp_path: Path) -> None:
    a = folder(tmp_path / "a", session(1))
    b = folder(tmp_path / "b", session(2))
    data = stored(b)
    data["protocol"]["probe"] = "p2"
    (b / REL).write_text(reading.dumps(data), encoding="utf-8")
    (result,) = merge_folders([a, b], tmp_path / "out")
    assert dict(result.dropped) == {
        "older than a restart of the window (protocol changed: probe p1 → p2)": 1
    }
    assert stored(tmp_path / "out")["protocol"]["probe"] == "p2"


def test_a_schema_1_session_joins_a_schema_2_window_as_a_save_would(tmp_path: Path) -> None:
    old = {k: v for k, v in session(1).items() if k != "work"}
    a = folder(tmp_path / "a", old)
    data = stored(a)
    data["schema_version"] = 1
    (a / REL).write_text(reading.dumps(data), encoding="utf-8")
    b = folder(tmp_path / "b", session(2))
    merge_folders([b, a], tmp_path / "out")
    out = stored(tmp_path / "out")
    assert (out["schema_version"], times(tmp_path / "out")) == (2, ["10:01", "10:02"])


def packed_folder(root: Path, *sessions: dict[str, Any]) -> Path:
    """``folder`` as a save writes it: packed, its rows in the order of its own op names."""
    folder(root, *sessions)
    baselines.save_baseline(root / REL, baselines.load_baseline(root / REL))
    assert stored(root)["schema_version"] == schema.SCHEMA_VERSION
    return root


def test_packed_copies_of_other_ops_merge_each_session_with_its_own_ops(tmp_path: Path) -> None:
    first = session(1)
    second = session(2)
    second["ops"] = {"aten::sub" if k == "aten::add" else k: v for k, v in second["ops"].items()}
    a = packed_folder(tmp_path / "a", first)
    b = packed_folder(tmp_path / "b", second)
    merge.merge_folders([a, b], tmp_path / "out", window=5, restart=lambda *_: "")
    assert stored(tmp_path / "out")["schema_version"] == schema.SCHEMA_VERSION
    merged = baselines.load_baseline(tmp_path / "out" / REL).sessions
    assert [s.table.names for s in merged] == [("aten::add", "aten::mm"), ("aten::mm", "aten::sub")]
    for s, raw in zip(merged, (first, second), strict=True):
        for i, name in enumerate(s.table.names):
            assert s.table.calls[i].tolist() == raw["ops"][name]["calls"]
            assert s.table.self_cpu_us[i].tolist() == raw["ops"][name]["self_cpu_us"]


def test_a_packed_copy_carried_into_another_run_is_one_session_not_two(tmp_path: Path) -> None:
    other = session(2)
    other["ops"] = {**other["ops"], "aten::sub": other["ops"]["aten::add"]}
    a = packed_folder(tmp_path / "a", session(1))
    b = packed_folder(tmp_path / "b", session(1), other)  # its op list holds one op more
    (result,) = merge.merge_folders([a, b], tmp_path / "out", restart=lambda *_: "")
    assert times(tmp_path / "out") == ["10:01", "10:02"]
    assert dict(result.dropped) == {"identical copies": 1}


def test_each_write_happens_under_the_stores_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = baselines.write_baseline_data
    held = []

    def write(path: Path, data: Any) -> Path:
        held.append(path.with_name(f".{path.name}.lock").exists())
        return real(path, data)

    monkeypatch.setattr(baselines, "write_baseline_data", write)
    a = folder(tmp_path / "a", session(1))
    merge_folders([a], tmp_path / "out")
    assert held == [True]
    assert not (tmp_path / "out" / REL).with_name(f".{REL.name}.lock").exists()


# --------------------------------------------------------------------------- refusals


def test_a_newer_schema_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    a = folder(tmp_path / "a", session(1))
    b = folder(tmp_path / "b", session(2))
    data = stored(b)
    data["schema_version"] = 99
    (b / REL).write_text(reading.dumps(data), encoding="utf-8")
    with pytest.raises(BaselineError, match=r"written by a newer pytest-tprof \(schema_version 99"):
        merge_folders([a, b], a)
    assert times(a) == ["10:01"]


def test_a_damaged_file_stops_the_merge_before_any_write(tmp_path: Path) -> None:
    a = folder(tmp_path / "a", session(1))
    b = folder(tmp_path / "b", session(2))
    (b / REL).write_text((b / REL).read_text(encoding="utf-8")[:200], encoding="utf-8")
    with pytest.raises(BaselineError, match="truncated JSON"):
        merge_folders([a, b], tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_copies_of_one_file_name_holding_other_tests_are_refused(tmp_path: Path) -> None:
    a = folder(tmp_path / "a", session(1))
    b = folder(tmp_path / "b", session(2))
    data = stored(b)
    data["nodeid"] = "tests/test_m.py::test_b"
    (b / REL).write_text(reading.dumps(data), encoding="utf-8")
    with pytest.raises(BaselineError, match="under the same file name"):
        merge_folders([a, b], tmp_path / "out")


def test_a_window_out_of_range_is_refused(tmp_path: Path) -> None:
    a = folder(tmp_path / "a", session(1))
    with pytest.raises(ConfigError, match=r"'window' must be from 1 to 100 \(got 0\)"):
        merge_folders([a], tmp_path / "out", window=0)


# --------------------------------------------------------------------------- the command


def test_the_command_prints_a_line_per_test_and_a_total(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = folder(tmp_path / "a", session(1))
    b = folder(tmp_path / "b", session(1), session(2))
    code, out, err = run_cli(str(a), str(b), "--into", str(a), capsys=capsys)
    assert (code, err) == (0, "")
    assert out.splitlines() == [
        f"{NODEID} [{ENV}]: kept 2 sessions (newest 2026-03-01T10:02:00+00:00); "
        f"dropped 1 identical copies; written to {a / REL}",
        f"merged 2 folders into {a}: 1 tests, 1 written, 0 unchanged",
    ]


def test_a_missing_folder_is_an_error_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = folder(tmp_path / "a", session(1))
    missing = tmp_path / "nope"
    code, out, err = run_cli(str(a), str(missing), "--into", str(a), capsys=capsys)
    assert (code, out) == (2, "")
    assert err == (
        f"tprof: error: {missing}: no such folder; name the baseline folders of the runs to merge\n"
    )


def test_a_folder_without_baselines_is_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "README.md").write_text("not a baseline\n", encoding="utf-8")
    code, _, err = run_cli(str(empty), "--into", str(tmp_path / "out"), capsys=capsys)
    assert code == 2
    assert err == (
        f"tprof: error: {empty}: holds no baseline files (<environment>/<test>.json); name the "
        "folder --tprof-baseline-dir wrote\n"
    )


def test_an_environment_folder_given_for_the_baseline_folder_is_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = folder(tmp_path / "a", session(1))
    code, _, err = run_cli(str(a / ENV), "--into", str(tmp_path / "out"), capsys=capsys)
    assert code == 2
    assert err.startswith(f"tprof: error: {a / REL}: not in an environment folder of the ")
    assert not (tmp_path / "out").exists()


def test_a_file_given_for_a_folder_is_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = folder(tmp_path / "a", session(1))
    code, _, err = run_cli(str(a / REL), "--into", str(a), capsys=capsys)
    assert code == 2
    assert err.startswith(f"tprof: error: {a / REL}: is a file, not a baseline folder; ")


def test_a_file_given_for_into_is_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = folder(tmp_path / "a", session(1))
    code, _, err = run_cli(str(a), "--into", str(a / REL), capsys=capsys)
    assert (code, err) == (
        2,
        f"tprof: error: {a / REL}: is a file, not a folder; name a folder for --into\n",
    )


def test_an_unreadable_file_is_an_error_not_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = folder(tmp_path / "a", session(1))
    (a / REL).write_bytes(b"\xff\xfe not utf-8")
    code, _, err = run_cli(str(a), "--into", str(tmp_path / "out"), capsys=capsys)
    assert code == 2
    assert err.startswith(f"tprof: error: {a / REL}: not UTF-8 text (byte 0); ")


def test_the_window_option_is_checked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(str(tmp_path), "--into", str(tmp_path), "--window", "0", capsys=capsys)
    assert code == 2
    assert "argument --window: must be an integer from 1 to 100 (got '0')" in err


def test_deep_copies_of_a_session_are_one_session(tmp_path: Path) -> None:
    one = session(1)
    a = folder(tmp_path / "a", one)
    b = folder(tmp_path / "b", copy.deepcopy(one))
    (result,) = merge_folders([a, b], tmp_path / "out")
    assert (result.kept, dict(result.dropped)) == (1, {"identical copies": 1})
