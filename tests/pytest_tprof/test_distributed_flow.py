"""Distributed tests through pytest: ``tprof.distributed`` with two gloo ranks on the CPU."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import rank_steps

pytestmark = pytest.mark.slow

# Timing hardly gates these runs (floor 900 %): what fails them is the collectives.
FAST = ("-p", "no:cacheprovider", "--tprof-rounds=4", "--tprof-warmup=1", "--tprof-floor=9")

TESTS = """
import functools
import os

from rank_steps import make_ddp_step, make_failing_step


def test_ddp_step(tprof):
    ranks = tprof.distributed(
        functools.partial(make_ddp_step, plant=os.environ.get("PLANT", "")), world_size=2
    )
    assert [r.rank for r in ranks] == ([0, 1] if tprof.enabled else [])


def test_other_step(tprof):
    tprof.distributed(make_ddp_step, world_size=2, timeout=120)


def test_failing_rank(tprof):
    tprof.distributed(functools.partial(make_failing_step, how="raise"), world_size=2)
"""


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makepyfile(rank_steps=Path(rank_steps.__file__).read_text())
    pytester.makepyfile(test_ranks=TESTS)
    return pytester


def test_an_extra_all_reduce_fails_naming_the_collective_its_phase_and_ranks(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    node = "test_ranks.py::test_ddp_step"
    saved = project.runpytest_subprocess("--tprof", "--tprof-save", *FAST, node)
    assert saved.ret == 0, saved.stdout.str()
    monkeypatch.setenv("PLANT", "extra")
    run = project.runpytest_subprocess("--tprof", *FAST, "--tprof-json=out.json", node)
    assert run.ret == 1, run.stdout.str()
    line = (
        "communication: c10d::allreduce_ at top level, outside backward (group of 2): new, "
        "1 call per step, 4 B (ranks 0, 1)"
    )
    assert line in run.stdout.str()
    assert "INTERNALERROR" not in run.stdout.str()
    (test,) = json.loads((project.path / "out.json").read_text())["tests"]
    assert test["verdict"] == "regressed"
    assert {"kind": "communication", "text": line, "failing": True, "exact": True} in test["causes"]
    monkeypatch.setenv("PLANT", "")
    again = project.runpytest_subprocess("--tprof", *FAST, node)
    assert again.ret == 0, again.stdout.str()
    # every run left a folder of its ranks' traces: the save, the planted run and this one
    run_folders = [p for p in (project.path / ".tprof" / "traces").iterdir() if p.is_dir()]
    assert len(run_folders) == 3
    for run_folder in run_folders:
        assert sorted(p.name for p in run_folder.iterdir()) == [
            "rank0.pt.trace.json.gz", "rank1.pt.trace.json.gz",
        ]  # fmt: skip


def test_without_tprof_every_rank_runs_its_step_once_and_a_failing_rank_fails(
    project: pytest.Pytester,
) -> None:
    run = project.runpytest_subprocess("-p", "no:cacheprovider")
    run.assert_outcomes(passed=2, failed=1)
    assert "rank 1 raised ValueError: rank 1 can't build its model" in run.stdout.str()


def test_under_xdist_distributed_tests_run_side_by_side_and_a_failing_rank_is_named(
    project: pytest.Pytester,
) -> None:
    run = project.runpytest_subprocess("--tprof", "--tprof-save", *FAST, "-n", "2")
    out = run.stdout.str()
    run.assert_outcomes(passed=2, failed=1)
    assert out.count("SAVED ") == 2, out
    assert "rank 1 raised ValueError: rank 1 can't build its model" in out
    assert "INTERNALERROR" not in out
