"""The ranks of a distributed test, started for real: two gloo ranks on the CPU.

What comes back is checked exactly where it is deterministic (calls, bytes, group sizes, the
traces' rank metadata); a rank that raises, hangs or is killed is named, within the timeout.
"""

from __future__ import annotations

import functools
import gzip
import json
import time
from pathlib import Path

import pytest
import rank_steps

from tprof_engine.capture import distributed
from tprof_engine.capture.session import RoundSpec
from tprof_engine.model.errors import CaptureError, ConfigError
from tprof_engine.reduce.ranks import join_tables, join_work
from tprof_engine.store.trace_gzip import write_gzipped

pytestmark = pytest.mark.slow


def plan(make_step, tmp_path: Path | None = None, *, timeout_s: float = 120.0, census=True):  # type: ignore[no-untyped-def]
    return distributed.RankPlan(
        make_step=make_step, world_size=2, backend="gloo",
        spec=RoundSpec(rounds=4, warmup=1, iterations=0, write_trace=write_gzipped),
        min_round_us=0.0, census=census,
        stack=False, threads=1, trace_dir=None if tmp_path is None else str(tmp_path),
        timeout_s=timeout_s,
    )  # fmt: skip


def test_every_rank_runs_the_protocol_and_its_census_sees_the_bucket_all_reduce(
    tmp_path: Path,
) -> None:
    results = distributed.launch(plan(rank_steps.make_ddp_step, tmp_path))
    assert [r.rank for r in results] == [0, 1]
    assert {r.iterations for r in results} == {1} and {r.table.rounds for r in results} == {4}
    table = join_tables([r.table for r in results])
    i = table.index()
    for rank in (0, 1):
        # one bucket all-reduce per step (the first micro-batch runs under no_sync)
        assert table.calls[i[f"[rank{rank}] c10d::allreduce_"]].tolist() == [1, 1, 1, 1]
        assert f"[rank{rank}] tprof::probe" not in str(table.names)
    work = join_work([r.work for r in results])
    assert work is not None
    found = {(r.op, r.phase, r.calls, r.bytes_read, r.group) for r in work.rows if "c10d" in r.op}
    nbytes = 4 * rank_steps.PARAMETERS
    assert found == {
        ("[rank0] c10d::allreduce_", "backward", 1, nbytes, 2),
        ("[rank1] c10d::allreduce_", "backward", 1, nbytes, 2),
    }
    for rank in (0, 1):
        with gzip.open(tmp_path / f"rank{rank}.pt.trace.json.gz") as f:
            info = json.load(f)["distributedInfo"]
        assert (info["rank"], info["world_size"], info["backend"]) == (rank, 2, "gloo")


def test_the_ranks_see_the_environment_the_test_had_when_it_started_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for plant, calls in (("", 1), ("extra", 2), ("", 1)):
        monkeypatch.setenv("TPROF_RANK_PLANT", plant)
        (r0, _) = distributed.launch(plan(rank_steps.make_step_from_environment, census=False))
        assert r0.table.calls[r0.table.index()["c10d::allreduce_"]].tolist() == [calls] * 4


@pytest.mark.parametrize(
    ("how", "said"),
    [
        ("raise", "rank 1 raised ValueError: rank 1 can't build its model"),
        ("kill", "rank 1 exited with code -9 before reporting"),
    ],
)
def test_a_rank_that_raises_or_dies_is_named(how: str, said: str) -> None:
    started = time.monotonic()
    with pytest.raises(CaptureError) as caught:
        distributed.launch(plan(functools.partial(rank_steps.make_failing_step, how=how)))
    assert said in str(caught.value)
    assert str(caught.value).startswith("distributed test of 2 ranks failed: ")
    if how == "raise":  # the cause first; rank 0, which lost its peer, after it
        assert str(caught.value).startswith(f"distributed test of 2 ranks failed: {said}")
    assert time.monotonic() - started < 60


def test_a_hanging_rank_is_stopped_at_the_timeout_and_named() -> None:
    started = time.monotonic()
    with pytest.raises(CaptureError) as caught:
        distributed.launch(
            plan(functools.partial(rank_steps.make_failing_step, how="hang"), timeout_s=15)
        )
    elapsed = time.monotonic() - started
    assert "didn't finish within 15 s" in str(caught.value)
    assert "rank 1" in str(caught.value) or "ranks 0, 1" in str(caught.value)
    assert elapsed < 15 + 20


def test_a_make_step_that_returns_no_step_is_named() -> None:
    # every rank fails the same way; whichever failed first is named (on a loaded machine,
    # not always rank 0)
    with pytest.raises(CaptureError, match=r"rank (\d) failed: make_step\(\1\) returned int"):
        distributed.launch(plan(rank_steps.make_nothing, census=False))


@pytest.mark.parametrize(
    ("kwargs", "said"),
    [
        ({"make_step": lambda rank: None}, "define it at the top level of a module"),
        ({"world_size": 0}, "'world_size' must be an integer 1-64 (got 0)"),
        ({"backend": "mpi"}, "'backend' must be one of gloo, nccl (got 'mpi')"),
        ({"timeout_s": -1}, "'timeout' must be seconds > 0 (got -1)"),
        ({"backend": "nccl"}, "backend 'nccl' needs a GPU per rank"),
    ],
)
def test_bad_arguments_are_named_before_any_rank_starts(kwargs: dict, said: str) -> None:
    given = {"make_step": rank_steps.make_ddp_step, "world_size": 2, "backend": "gloo",
             "timeout_s": 60.0, **kwargs}  # fmt: skip
    if kwargs.get("backend") == "nccl":
        pytest.importorskip("torch")
        import torch

        if torch.cuda.device_count() >= 2:
            pytest.skip("this machine has the GPUs nccl needs")
    with pytest.raises(ConfigError) as caught:
        distributed.check(
            given["make_step"], world_size=given["world_size"], backend=given["backend"],
            timeout_s=given["timeout_s"],
        )  # fmt: skip
    assert said in str(caught.value)
