"""The numeric settings a test's code chooses: read per capture, stored per session, a named
cause of the verdict while timing is still judged, and set again in a fresh process."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from tprof_testing import table

from tprof_engine import window
from tprof_engine.decide import judge
from tprof_engine.decide.judge import Recorded
from tprof_engine.decide.timing.rule import Rule
from tprof_engine.model import settings
from tprof_engine.model.environment import Fingerprint
from tprof_engine.model.errors import BaselineError
from tprof_engine.model.verdicts import CHANGED, REGRESSED, SETTINGS, UNCHANGED
from tprof_engine.store import baselines, schema

OPS = {"aten::mm": (800.0, 4), "aten::add": (100.0, 2)}
SESSIONS = tuple(table(OPS, seed=s) for s in (10, 11, 12))
TF32 = {"cublas_fp32_precision": "tf32", "cudnn_benchmark": False, "intra_op_threads": 1}
IEEE = {**TF32, "cublas_fp32_precision": "ieee"}


def test_differences_name_each_setting_both_sides_read() -> None:
    assert settings.differences(TF32, IEEE) == ["cuBLAS fp32 precision tf32 → ieee"]
    assert settings.differences(TF32, {**TF32, "cudnn_benchmark": True}) == [
        "cuDNN benchmark off → on"
    ]
    assert settings.differences({}, IEEE) == []  # an older baseline read none: no difference
    many = [f"x{i}" for i in range(5)]
    assert settings.described(many) == "settings: x0, x1, x2 (+2 more)"


def judged(base: dict[str, object], now: dict[str, object], ops: dict[str, tuple[float, int]]):
    current = Recorded(tables=(table(ops, seed=1),), settings=now)
    return judge.judge(Recorded(tables=SESSIONS, settings=base), current, Rule())


def test_a_change_of_settings_is_a_cause_and_timing_is_still_judged() -> None:
    same = judged(TF32, IEEE, OPS)
    assert same.verdict == CHANGED and same.timing_compared
    assert same.reason == "settings: cuBLAS fp32 precision tf32 → ieee"  # nothing else moved
    (cause,) = [c for c in same.causes if c.kind == SETTINGS]
    assert not cause.failing
    slower = judged(TF32, IEEE, {**OPS, "aten::mm": (2400.0, 4)})
    assert slower.verdict == REGRESSED and slower.timing_regressed
    assert slower.reason.endswith(" | settings: cuBLAS fp32 precision tf32 → ieee")
    assert judged(TF32, TF32, OPS).verdict == UNCHANGED


def test_sessions_keep_their_settings_and_a_change_restarts_the_window(tmp_path: Path) -> None:
    fp = Fingerprint(hard={"torch": "2.13.0", "device": "cpu"})
    protocol = {"rounds": 20, "warmup": 1, "iterations": 1}
    first = schema.Session(table=SESSIONS[0], recorded_at="t", warmup_used=1, settings=TF32)
    base, _ = window.with_session(
        None, nodeid="t.py::t", fingerprint=fp, protocol=protocol, session=first
    )
    path = tmp_path / "b.json"
    baselines.save_baseline(path, base)
    assert baselines.load_baseline(path).settings == TF32
    again = replace(first, table=SESSIONS[1])
    kept, what = window.with_session(
        base, nodeid="t.py::t", fingerprint=fp, protocol=protocol, session=again
    )
    assert what == "appended (2 sessions)" and len(kept.sessions) == 2
    other = replace(first, settings=IEEE)
    restarted, what = window.with_session(
        kept, nodeid="t.py::t", fingerprint=fp, protocol=protocol, session=other
    )
    assert what == "restarted (settings changed: cuBLAS fp32 precision tf32 → ieee)"
    assert len(restarted.sessions) == 1


def test_a_stored_settings_object_that_is_not_one_names_the_file(tmp_path: Path) -> None:
    fp = Fingerprint(hard={"torch": "2.13.0", "device": "cpu"})
    session = schema.Session(table=SESSIONS[0], recorded_at="t", warmup_used=1)
    base = schema.Baseline(
        nodeid="t.py::t", fingerprint=fp, protocol={"rounds": 20}, sessions=(session,)
    )
    doc = base.to_dict()
    doc["sessions"][0]["settings"] = {"cudnn_benchmark": [1, 2]}
    with pytest.raises(
        BaselineError, match=r"b\.json: 'sessions\[0\]\.settings' must be an object"
    ):
        schema.baseline_from_dict(doc, path=tmp_path / "b.json")


# In a process of its own: these change torch's process-wide settings.
READ_AND_SET = """
import torch
from tprof_engine.capture import settings

start = settings.current()
assert start["cudnn_benchmark"] is False and start["float32_matmul_precision"] == "highest", start
if hasattr(torch.backends.cuda.matmul, "fp32_precision"):
    assert "cublas_fp32_precision" in start, start
    # the newer switch alone: torch's legacy getters now raise, and the reading leaves them out
    torch.backends.cuda.matmul.fp32_precision = "tf32"
    mixed = settings.current()
    assert "float32_matmul_precision" not in mixed and mixed["cublas_fp32_precision"] == "tf32"
else:  # a release before the fp32_precision switches: only the legacy one is read and set
    assert "cublas_fp32_precision" not in start, start
    torch.set_float32_matmul_precision("high")
    assert settings.current()["float32_matmul_precision"] == "high"
torch.backends.cudnn.benchmark = True
torch.backends.cuda.enable_math_sdp(False)
assert settings.apply(start) == []
back = settings.current()
assert {k: back[k] for k in start if k in back} == {k: start[k] for k in back if k in start}
print("ok")
"""


def test_settings_are_read_without_raising_and_set_again() -> None:
    done = subprocess.run(
        [sys.executable, "-W", "error", "-c", READ_AND_SET],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "ok"


def test_a_capture_reads_the_settings_its_body_left() -> None:
    import torch

    from tprof_engine.capture import session
    from tprof_engine.capture.backends import CPU

    before = torch.backends.cudnn.benchmark

    def body() -> torch.Tensor:
        torch.backends.cudnn.benchmark = True  # the body's own choice, read once it has run
        return torch.ones(4) + 1

    try:
        result = session.capture(body, rounds=2, warmup=0, device=CPU)
    finally:
        torch.backends.cudnn.benchmark = before
    assert result.settings["cudnn_benchmark"] is True
    assert result.settings["intra_op_threads"] == torch.get_num_threads()


def test_a_regression_s_summary_line_names_the_settings_that_moved() -> None:
    from tprof_engine.model.results import ProfiledTest
    from tprof_engine.render.report import summary_line

    slower = judged(TF32, IEEE, {**OPS, "aten::mm": (2400.0, 4)})
    line = summary_line(ProfiledTest(nodeid="t.py::t", verdict=slower))
    assert line.startswith("REGRESSED    t.py::t | ")
    assert "(floor 10%) | settings: cuBLAS fp32 precision tf32 → ieee" in line
