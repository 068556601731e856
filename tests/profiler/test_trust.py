"""Verdicts a user can act on: hosts, too-noisy tests, saves unlike their window, accepting."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from tprof_engine import cli
from tprof_engine.decide import judge
from tprof_engine.decide.rule import Rule
from tprof_engine.model.environment import Fingerprint, host_id
from tprof_engine.model.records import OpTable
from tprof_engine.model.verdicts import INCONCLUSIVE, REGRESSED, UNCHANGED
from tprof_engine.store import baselines, paths, schema

NODEID = "tests/test_m.py::test_step"
PROTOCOL = {"rounds": 20, "warmup": 1, "iterations": 1, "activities": ["cpu"], "probe": "p1"}
FP = Fingerprint(hard={"torch": "2.13.0", "device": "cpu", "cpu_model": "Test CPU"})


def table(scale: float = 1.0, *, spread: float = 0.01, seed: int = 0) -> OpTable:
    """Two ops of 600 µs and 400 µs per round, ``scale`` times that, with a little noise."""
    rng = np.random.default_rng(seed)
    base = np.array([[600.0], [400.0]]) * scale
    self_cpu = base * (1 + spread * rng.standard_normal((2, 20)))
    zeros = np.zeros((2, 20))
    return OpTable(
        names=("aten::mm", "aten::relu"),
        calls=np.ones((2, 20), dtype=np.int64),
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
    return schema.Baseline(
        nodeid=NODEID,
        fingerprint=FP,
        protocol=PROTOCOL,
        sessions=tuple(
            schema.Session(
                # the newest a saved timing change, the change accept is for
                table=table(3.0 if i == sessions - 1 else 1.0, seed=i),
                recorded_at=f"2026-01-0{i + 1}T00:00:00+00:00",
                warmup_used=1,
            )
            for i in range(sessions)
        ),
    )


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
