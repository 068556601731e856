"""One Chrome trace holding the baseline run and the current run, regressed ops marked."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from tprof_engine.store.traces import side_by_side


def write_trace(path: Path, t0: float, addmm_us: float) -> Path:
    events = [
        {"ph": "M", "name": "process_name", "pid": 7, "args": {"name": "python"}},
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#0", "pid": 7, "tid": 1,
         "ts": t0, "dur": 1000.0},
        {"ph": "X", "cat": "cpu_op", "name": "aten::addmm", "pid": 7, "tid": 1, "ts": t0 + 10,
         "dur": addmm_us, "args": {"External id": 3}},
        {"ph": "X", "cat": "cpu_op", "name": "aten::relu", "pid": 7, "tid": 1, "ts": t0 + 500,
         "dur": 20.0},
    ]  # fmt: skip
    with gzip.open(path, "wt") as f:
        json.dump({"traceEvents": events, "deviceProperties": []}, f)
    return path


def test_both_runs_become_two_processes_from_time_zero_with_regressed_ops_marked(
    tmp_path: Path,
) -> None:
    base = write_trace(tmp_path / "base.pt.trace.json.gz", 5_000_000.0, 100.0)
    cur = write_trace(tmp_path / "cur.pt.trace.json.gz", 9_000_000.0, 180.0)
    out = side_by_side(
        base, cur, tmp_path / "x.vs-baseline.pt.trace.json.gz",
        flagged={"aten::addmm": "regressed +80% (cpu)"}, title="t.py::test",
    )  # fmt: skip
    with gzip.open(out, "rt") as f:
        doc = json.load(f)
    events = doc["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in events if e.get("name") == "process_name"}
    assert sorted(names.values()) == ["baseline: python", "current: python"]
    addmm = [e for e in events if e.get("name") == "aten::addmm"]
    assert [e["dur"] for e in addmm] == [100.0, 180.0]
    assert len({e["pid"] for e in addmm}) == 2
    assert all(
        e["args"]["tprof"] == "regressed +80% (cpu)" and e["cname"] == "terrible" for e in addmm
    )
    relu = [e for e in events if e.get("name") == "aten::relu"]
    assert all("tprof" not in e.get("args", {}) for e in relu)
    steps = [e["ts"] for e in events if e.get("name") == "ProfilerStep#0"]
    assert steps == [0.0, 0.0]
    assert doc["tprof"] == {"side_by_side": "t.py::test"}
    assert not list(tmp_path.glob(".*.tmp"))
