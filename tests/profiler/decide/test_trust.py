"""Verdicts a user can act on: hosts, too-noisy tests, saves unlike their window, accepting
(and refusing to accept before the change was saved)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from tprof_engine import cli, window
from tprof_engine.decide import judge
from tprof_engine.decide.timing.rule import Rule
from tprof_engine.model.environment import Fingerprint, host_id
from tprof_engine.model.records import OpTable
from tprof_engine.model.verdicts import INCONCLUSIVE, REGRESSED, UNCHANGED
from tprof_engine.model.work import WorkRow, WorkTable
from tprof_engine.store import baselines, paths, schema

NODEID = "tests/test_m.py::test_step"
PROTOCOL = {"rounds": 20, "warmup": 1, "iterations": 1, "activities": ["cpu"], "probe": "p1"}
FP = Fingerprint(hard={"torch": "2.13.0", "device": "cpu", "cpu_model": "Test CPU"})


def table(scale: float = 1.0, *, spread: float = 0.01, seed: int = 0, mm_calls: int = 1) -> OpTable:
    """Two ops of 600 µs and 400 µs per round, ``scale`` times that, with a little noise;
    ``aten::mm`` called ``mm_calls`` times a round."""
    rng = np.random.default_rng(seed)
    base = np.array([[600.0], [400.0]]) * scale
    self_cpu = base * (1 + spread * rng.standard_normal((2, 20)))
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


def recorded(tables: list[OpTable], hosts: list[str | None]) -> judge.Recorded:
    return judge.Recorded(
        tables=tuple(tables), fingerprint=FP, protocol=PROTOCOL, hosts=tuple(hosts)
    )


# --------------------------------------------------------------------------- hosts


def test_host_id_names_the_hostname_and_this_boot() -> None:
    assert host_id() == host_id()
    assert host_id().count("·") <= 1


@pytest.mark.parametrize(
    ("hosts", "here", "judged"),
    [
        (["a", "a", "a"], "a", True),  # this host's sessions
        (["b", "b", "b"], "a", False),  # one other host: its floor knows nothing of a's speed
        (["b", "c", "b"], "a", True),  # sessions that span hosts: the floor spans them too
        (["a", "b"], "a", True),
        ([None, None], "a", False),  # no host recorded: could be from anywhere
        (["b"], None, True),  # a side with no host (a trace) isn't judged by the rule
    ],
)
def test_timings_are_judged_only_against_this_host_or_several(
    hosts: list[str | None], here: str | None, judged: bool
) -> None:
    why = judge.host_difference(hosts, here)
    assert (why is None) == judged
    if not judged:
        assert why is not None and why.startswith("host: ")


def test_a_baseline_from_one_other_host_compares_calls_not_timings() -> None:
    base = recorded([table(seed=s) for s in range(3)], ["runner-1·aaaa"] * 3)
    slower = recorded([table(2.0, seed=9)], ["runner-2·bbbb"])
    v = judge.judge(base, slower, Rule())
    assert v.verdict == INCONCLUSIVE and not v.timing_compared
    assert v.differences == (
        "host: baseline from one other host (runner-1·aaaa, this is runner-2·bbbb); timings "
        "are judged against sessions of this host or of 2+ hosts",
    )
    more_calls = replace(slower.tables[0], calls=slower.tables[0].calls * 2)
    v = judge.judge(base, replace(slower, tables=(more_calls,)), Rule())
    assert v.verdict == REGRESSED  # calls still gate across hosts


def test_a_baseline_spanning_hosts_judges_timing_on_a_new_host() -> None:
    base = recorded([table(seed=s) for s in range(3)], ["h1", "h2", "h1"])
    v = judge.judge(base, recorded([table(2.0, seed=9)], ["h3"]), Rule())
    assert v.timing_compared and v.verdict == REGRESSED


# --------------------------------------------------------------------------- too noisy


def test_an_unchanged_test_whose_floor_is_too_wide_is_inconclusive_with_advice() -> None:
    # Sessions 1.0×, 1.6×, 1.0×: the learned floor is far above 50 %.
    base = recorded([table(1.0, seed=1), table(1.6, seed=2), table(1.0, seed=3)], ["h"] * 3)
    v = judge.judge(base, recorded([table(1.1, seed=4)], ["h"]), Rule())
    assert v.verdict == INCONCLUSIVE
    assert v.reason.startswith("timing too noisy to judge: CPU floor ")
    assert "learned from 3 baseline sessions" in v.reason
    assert "--tprof-save" in v.reason and "--tprof-floor" in v.reason
    quiet = recorded([table(1.0, seed=1), table(1.02, seed=2), table(1.0, seed=3)], ["h"] * 3)
    assert judge.judge(quiet, recorded([table(1.0, seed=4)], ["h"]), Rule()).verdict == UNCHANGED


def test_a_fixed_floor_is_the_users_choice_and_a_regression_stays_one() -> None:
    base = recorded([table(1.0, seed=1), table(1.6, seed=2), table(1.0, seed=3)], ["h"] * 3)
    fixed = Rule(rel_floor=0.6)
    assert judge.judge(base, recorded([table(1.1, seed=4)], ["h"]), fixed).verdict == UNCHANGED
    v = judge.judge(base, recorded([table(6.0, seed=4)], ["h"]), Rule())
    assert v.verdict == REGRESSED


# --------------------------------------------------------------------------- saves


def test_a_session_slower_than_its_window_is_named_before_it_joins() -> None:
    base = recorded([table(seed=s) for s in range(3)], ["h"] * 3)
    rule = Rule()
    slower = judge.judge(base, recorded([table(3.0, seed=9)], ["h"]), rule)
    assert judge.unlike_window(slower) == (
        "unlike the window: aten::mm CPU +200% (kept: the floor learns that spread)"
    )
    same = judge.judge(base, recorded([table(1.0, seed=9)], ["h"]), rule)
    assert judge.unlike_window(same) is None


def _baseline(sessions: int) -> schema.Baseline:
    """``sessions`` sessions of ``NODEID``, the newest a saved timing change (the change
    accept is for)."""
    changed = session(table(3.0, seed=sessions - 1), sessions)
    return schema.Baseline(
        nodeid=NODEID, fingerprint=FP, protocol=PROTOCOL,
        sessions=(*same_code(sessions - 1), changed),
    )  # fmt: skip


def test_accept_keeps_only_the_newest_session(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = paths.baseline_path(tmp_path, "env", NODEID)
    path.parent.mkdir(parents=True)
    baselines.save_baseline(path, _baseline(4))
    assert cli.main(["accept", NODEID, "--baseline-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "kept the newest session (recorded 2026-01-04T00:00:00+00:00), dropped 3 older" in out
    kept = baselines.load_baseline(path)
    assert [s.recorded_at for s in kept.sessions] == ["2026-01-04T00:00:00+00:00"]
    assert cli.main(["accept", str(path)]) == 0
    assert "one session already" in capsys.readouterr().out


def test_accept_names_a_test_without_a_baseline(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["accept", "t.py::gone", "--baseline-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "t.py::gone: no baseline under" in err and "--tprof-save" in err


def test_rounds_too_short_for_the_absolute_floor_are_inconclusive_not_unchanged() -> None:
    # Rounds of 10 µs: the 20 µs minimum change is 200 % of the round, so a 4× slower body
    # (+30 µs) would be the first change timing could see at all.
    tiny = [
        replace(t, self_cpu_us=t.self_cpu_us / 100, total_cpu_us=t.self_cpu_us / 100)
        for t in (table(seed=s) for s in range(3))
    ]
    base = recorded(tiny, ["h"] * 3)
    now = replace(tiny[0], self_cpu_us=tiny[0].self_cpu_us * 1.5)
    v = judge.judge(base, recorded([now], ["h"]), Rule())
    assert v.verdict == INCONCLUSIVE
    assert v.reason.startswith("rounds too short to judge: CPU rounds of 10.0 µs, so a slowdown")
    assert "abs_floor_us" in v.reason
    assert judge.judge(base, recorded([now], ["h"]), Rule(abs_floor_us=0.0)).verdict == REGRESSED


def test_a_save_whose_time_outside_ops_moved_names_that_time_as_reports_do() -> None:
    from tprof_engine.model.verdicts import FamilyResult, TestVerdict

    host = FamilyResult.from_dict(
        {"family": "host", "verdict": "improved", "baseline_total_us": 100.0,
         "current_total_us": 27.0, "delta_pct": -73.0, "p_value": 0.001, "floor_pct": 20.0,
         "floor_source": "learned", "mde_pct": 5.0, "timing_regressed": False, "op_gate": [],
         "reasons": [], "structure_added_us": 0.0, "structure_regressed": False}
    )  # fmt: skip
    v = TestVerdict(verdict="improved", reason="", families=(host,))
    assert judge.unlike_window(v) == (
        "unlike the window: host time outside any op -73% (kept: the floor learns that spread)"
    )


# ------------------------------------------------- accepting before the change was saved
# `tprof accept` right after a failing run: the newest session is the code before, so
# nothing is dropped and the user is told to save first.  A node id with a space shows the
# commands it prints are quoted for a shell.

SPACED_ID = "tests/test_m.py::test_step[a b]"
QUOTED = "'tests/test_m.py::test_step[a b]'"


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
    path = paths.baseline_path(root, "env", SPACED_ID)
    base = schema.Baseline(nodeid=SPACED_ID, fingerprint=FP, protocol=PROTOCOL, sessions=sessions)
    return baselines.save_baseline(path, base)


def same_code(n: int) -> list[schema.Session]:
    """``n`` sessions of one code: same ops, calls and census, timings within the floor."""
    return [session(table(seed=i), i + 1) for i in range(n)]


def test_accept_right_after_a_failing_run_drops_nothing_and_says_to_save_first(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = saved(tmp_path, *same_code(4))
    before = path.read_bytes()
    assert cli.main(["accept", SPACED_ID, "--baseline-dir", str(tmp_path)]) == 2
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
        nodeid=SPACED_ID,
        fingerprint=FP,
        protocol=PROTOCOL,
        sessions=(*same_code(3), newest()),
    )
    assert window.same_code_as_older(base) is None
    same = schema.Baseline(
        nodeid=SPACED_ID, fingerprint=FP, protocol=PROTOCOL, sessions=tuple(same_code(4))
    )
    assert window.same_code_as_older(same) is not None


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
