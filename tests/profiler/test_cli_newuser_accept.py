"""`tprof accept` right after a failing run, before the changed code was saved: the newest
session is the code before, so nothing is dropped and the user is told to save first."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from tprof_engine import cli
from tprof_engine.model.environment import Fingerprint
from tprof_engine.model.records import OpTable
from tprof_engine.model.work import WorkRow, WorkTable
from tprof_engine.store import baselines, paths, schema

NODEID = "tests/test_m.py::test_step[a b]"
QUOTED = "'tests/test_m.py::test_step[a b]'"
PROTOCOL = {"rounds": 20, "warmup": 1, "iterations": 1, "activities": ["cpu"], "probe": "p1"}
FP = Fingerprint(hard={"torch": "2.13.0", "device": "cpu", "cpu_model": "Test CPU"})


def table(scale: float = 1.0, *, seed: int = 0, mm_calls: int = 1) -> OpTable:
    """Two ops of 600 µs and 400 µs per round, ``scale`` times that, with a little noise."""
    rng = np.random.default_rng(seed)
    self_cpu = np.array([[600.0], [400.0]]) * scale * (1 + 0.01 * rng.standard_normal((2, 20)))
    zeros = np.zeros((2, 20))
    calls = np.ones((2, 20), dtype=np.int64)
    calls[0] = mm_calls
    return OpTable(
        names=("aten::mm", "aten::relu"),
        calls=calls,
        self_cpu_us=self_cpu,
        total_cpu_us=self_cpu,
        self_device_us=zeros,
        total_device_us=zeros,
        wall_us=self_cpu.sum(axis=0),
        probe_cpu_us=200.0 + rng.random(20),
        probe_device_us=np.zeros(20),
    )


def census(flops: int = 1_000_000) -> WorkTable:
    row = WorkRow(
        op="aten::mm", module="", phase="forward", calls=1, flops=flops, bytes_read=4096,
        bytes_written=2048, dtypes=("float32",),
    )  # fmt: skip
    return WorkTable(rows=(row,))


def session(
    t: OpTable, day: int, *, work: WorkTable | None = None, host: str = "h"
) -> schema.Session:
    return schema.Session(
        table=t,
        recorded_at=f"2026-01-0{day}T00:00:00+00:00",
        warmup_used=1,
        soft={"host": host},
        work=census() if work is None else work,
    )


def saved(root: Path, *sessions: schema.Session) -> Path:
    path = paths.baseline_path(root, "env", NODEID)
    base = schema.Baseline(nodeid=NODEID, fingerprint=FP, protocol=PROTOCOL, sessions=sessions)
    return baselines.save_baseline(path, base)


def same_code(n: int) -> list[schema.Session]:
    """``n`` sessions of one code: same ops, calls and census, timings within the floor."""
    return [session(table(seed=i), i + 1) for i in range(n)]


def test_accept_right_after_a_failing_run_drops_nothing_and_says_to_save_first(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = saved(tmp_path, *same_code(4))
    before = path.read_bytes()
    assert cli.main(["accept", NODEID, "--baseline-dir", str(tmp_path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (
        f"tprof: error: {path}: nothing dropped: its newest session (recorded "
        "2026-01-04T00:00:00+00:00) is the same code as the 3 older ones (the same ops, calls "
        "and work census; timings within their floor), so the change to accept is not recorded "
        f"yet; first record the changed code with pytest --tprof-save "
        f"--tprof-baseline-dir={tmp_path} {QUOTED}, then run tprof accept {QUOTED} again\n"
    )
    assert path.read_bytes() == before  # nothing stored is lost or rewritten


def test_accept_of_a_baseline_file_under_the_default_folder_names_the_plain_save(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    path = saved(Path("baselines"), *same_code(2))
    assert cli.main(["accept", str(path)]) == 2
    err = capsys.readouterr().err
    assert "is the same code as the 1 older one (" in err
    assert f"first record the changed code with pytest --tprof-save {QUOTED}, then" in err


def test_accept_keeps_the_newest_session_once_the_changed_timing_is_saved(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The intended change moved only time: a save appended it, warning "unlike the window".
    path = saved(tmp_path, *same_code(3), session(table(3.0, seed=9), 4))
    assert cli.main(["accept", str(path)]) == 0
    assert "kept the newest session (recorded 2026-01-04T00:00:00+00:00), dropped 3 older" in (
        capsys.readouterr().out
    )
    assert [s.recorded_at for s in baselines.load_baseline(path).sessions] == [
        "2026-01-04T00:00:00+00:00"
    ]


@pytest.mark.parametrize(
    "newest",
    [
        pytest.param(lambda: session(table(seed=9), 4, work=census(flops=2_000_000)), id="work"),
        pytest.param(lambda: session(table(seed=9, mm_calls=2), 4), id="calls"),
    ],
)
def test_a_newest_session_of_other_work_or_calls_is_other_code(
    newest: Callable[[], schema.Session],
) -> None:
    base = schema.Baseline(
        nodeid=NODEID,
        fingerprint=FP,
        protocol=PROTOCOL,
        sessions=(*same_code(3), newest()),
    )
    assert baselines.same_code_as_older(base) is None
    same = schema.Baseline(
        nodeid=NODEID, fingerprint=FP, protocol=PROTOCOL, sessions=tuple(same_code(4))
    )
    assert baselines.same_code_as_older(same) is not None


def test_when_timings_cant_be_compared_the_refusal_also_names_the_reset(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The older sessions come from one other host: timings aren't compared, so a change of
    # timing alone could be there unseen; the save that starts afresh is named too.
    older = [session(table(seed=i), i + 1, host="elsewhere") for i in range(2)]
    path = saved(tmp_path, *older, session(table(seed=9), 3))
    before = path.read_bytes()
    assert cli.main(["accept", str(path)]) == 2
    err = capsys.readouterr().err
    assert "(the same ops, calls and work census; timings not compared: host: " in err
    assert err.endswith(
        "; if you did and only its timing moved, start the window from a new session instead: "
        f"pytest --tprof-save --tprof-reset --tprof-baseline-dir={tmp_path} {QUOTED}\n"
    )
    assert path.read_bytes() == before


def test_one_session_is_left_as_it_is(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = saved(tmp_path, *same_code(1))
    assert cli.main(["accept", str(path)]) == 0
    assert "one session already (recorded 2026-01-01T00:00:00+00:00)" in capsys.readouterr().out


def test_accept_of_a_file_that_is_no_baseline_says_so_and_goes_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    models = tmp_path / "models.py"
    models.write_text("import torch\n", encoding="utf-8")
    path = saved(tmp_path, *same_code(3), session(table(3.0, seed=9), 4))
    assert cli.main(["accept", str(models), str(path)]) == 2
    captured = capsys.readouterr()
    assert captured.err == (
        f"tprof: error: {models} is not a tprof baseline (.json); name the test by its node id "
        "or give its baseline file\n"
    )
    assert "kept the newest session" in captured.out  # the next test named is still accepted
