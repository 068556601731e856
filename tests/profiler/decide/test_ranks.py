"""A distributed test's ranks joined into one table and census, and what the busy rule and
the trace folder make of them (no torch)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from tprof_testing import table

from tprof_engine.decide.gates.communication import diverged
from tprof_engine.decide.timing import busy
from tprof_engine.decide.timing.rule import Rule
from tprof_engine.model.errors import CaptureError
from tprof_engine.model.ranks import bare, ranks_in, ranks_text, split, tagged
from tprof_engine.model.records import RoundLoad
from tprof_engine.model.work import WorkRow, WorkTable
from tprof_engine.reduce.ranks import join_tables, join_work, rank_notes
from tprof_engine.store import trace_files

OPS = {"aten::addmm": (800.0, 6), "c10d::allreduce_": (90.0, 1)}


def with_load(t, *, queued: float, neighbours: int):  # type: ignore[no-untyped-def]
    n = t.rounds
    load = RoundLoad(
        cpu_us=t.wall_us * 0.5, queued_us=np.full(n, queued), switches=np.ones(n, np.int64),
        blocks=np.ones(n, np.int64), neighbours=np.full(n, neighbours, np.int64), cpus=2,
    )  # fmt: skip
    return replace(t, load=load)


def test_rank_tags_read_back() -> None:
    assert tagged(1, "aten::addmm") == "[rank1] aten::addmm"
    assert split("[rank12] c10d::allreduce_") == (12, "c10d::allreduce_")
    assert split("aten::addmm") == (None, "aten::addmm")
    assert bare("[rank0] [weird] name") == "[weird] name"
    assert ranks_in(["[rank0] a", "[rank1] a", "b"]) == {0, 1}
    assert ranks_text([1, 0, 1]) == "ranks 0, 1" and ranks_text([None]) == ""


def test_joined_tables_keep_each_ranks_ops_and_add_up_each_round() -> None:
    r0, r1 = table(OPS, seed=1), table(OPS, seed=2, scale=1.2)
    r0 = replace(r0, wall_us=r0.wall_us + 100.0)
    joined = join_tables(
        [with_load(r0, queued=10, neighbours=1), with_load(r1, queued=30, neighbours=3)]
    )
    assert joined.names == (
        "[rank0] aten::addmm", "[rank0] c10d::allreduce_",
        "[rank1] aten::addmm", "[rank1] c10d::allreduce_",
    )  # fmt: skip
    i = joined.index()
    assert np.array_equal(joined.self_cpu_us[i["[rank1] aten::addmm"]], r1.self_cpu_us[0])
    assert np.allclose(joined.wall_us, r0.wall_us + r1.wall_us)
    assert np.allclose(joined.probe_cpu_us, r0.probe_cpu_us + r1.probe_cpu_us)
    assert np.allclose(joined.host_us, r0.host_us + r1.host_us)
    assert joined.load is not None
    assert np.allclose(joined.load.queued_us, 40.0) and set(joined.load.neighbours) == {3}
    with pytest.raises(CaptureError, match="different rounds"):
        join_tables([r0, table(OPS, seed=3, rounds=5)])


def test_the_busy_rule_counts_the_ranks_threads_as_the_runs_own_load() -> None:
    # two ranks on two CPUs: each sees the other rank and both backends' workers runnable,
    # and waits 3 % of its round for a CPU, in the baseline as in every later run
    quiet = join_tables(
        [with_load(table(OPS, seed=s), queued=0.03 * 890, neighbours=3) for s in (1, 2)]
    )
    found = busy.busy_of(quiet, Rule())
    assert found is not None and found.disturbed == 0
    # a busy loop on each core: a third of each round waiting, and more runnable tasks
    loaded = join_tables(
        [with_load(table(OPS, seed=s), queued=0.35 * 890, neighbours=5) for s in (1, 2)]
    )
    hit = busy.busy_of(loaded, Rule())
    assert hit is not None and hit.waited == hit.rounds == hit.disturbed
    # one process's table keeps the rule as it was: 3 % waiting is a disturbed round
    alone = busy.busy_of(with_load(table(OPS, seed=1), queued=0.03 * 890, neighbours=0), Rule())
    assert alone is not None and alone.waited == alone.rounds


def work_of(*rows: tuple[str, str, int]) -> WorkTable:
    return WorkTable(
        rows=tuple(
            WorkRow(
                op=op,
                module="",
                phase=phase,
                calls=calls,
                flops=0,
                bytes_read=8,
                bytes_written=8,
                group=2 if op.startswith("c10d") else 0,
            )
            for op, phase, calls in rows
        )
    )


def test_joined_censuses_tag_every_row_and_ranks_that_diverge_are_named() -> None:
    same = work_of(("aten::addmm", "forward", 1), ("c10d::allreduce_", "backward", 1))
    joined = join_work([same, same])
    assert joined is not None
    assert sorted(r.op for r in joined.rows) == [
        "[rank0] aten::addmm", "[rank0] c10d::allreduce_",
        "[rank1] aten::addmm", "[rank1] c10d::allreduce_",
    ]  # fmt: skip
    assert join_work([same, None]) is None
    assert diverged([same, same]) is None
    other = work_of(("aten::addmm", "forward", 1), ("c10d::allreduce_", "backward", 2))
    why = diverged([same, other])
    assert why == (
        "the ranks called different collectives: ranks 0: c10d::allreduce_ in backward ×1; "
        "ranks 1: c10d::allreduce_ in backward ×2"
    )


def test_rank_notes_name_the_slowest_rank_and_the_time_outside_ops() -> None:
    fast, slow = table(OPS, seed=1), table(OPS, seed=2, scale=1.5)
    slow = replace(slow, wall_us=slow.wall_us + 2000.0)  # 2 ms outside any op per round
    first, second = rank_notes([fast, slow])
    assert first.startswith("slowest rank per round: rank 1 in 20 of 20;")
    comm = [float(np.median(t.total_cpu_us[t.index()["c10d::allreduce_"]])) for t in (fast, slow)]
    share = 2000.0 / float(np.median(slow.wall_us))
    assert second == (
        f"per round (median), in collectives' ops: rank 0 {comm[0]:,.0f} µs, rank 1 "
        f"{comm[1]:,.0f} µs; outside any op (waiting for a collective to finish, Python): "
        f"rank 0 0 µs (0%), rank 1 2,000 µs ({share:.0%})"
    )


def test_a_distributed_runs_traces_share_a_folder_that_goes_when_the_test_passes(
    tmp_path: Path,
) -> None:
    nodeid = "test_ddp.py::test_step"
    older = trace_files.trace_path(tmp_path, nodeid, "20261126T100000.000001")
    newer = trace_files.trace_path(tmp_path, nodeid, "20261126T110000.000001")
    for run in (older, newer):
        folder = trace_files.rank_folder(run)
        folder.mkdir()
        for rank in (0, 1):
            (folder / f"rank{rank}.pt.trace.json.gz").write_bytes(b"x" * 10)
    found = trace_files.traces_of(tmp_path, nodeid)
    assert len(found) == 4
    kept = trace_files.rank_folder(newer) / "rank0.pt.trace.json.gz"
    gone = trace_files.prune_runs(tmp_path, nodeid, 1)
    assert sorted(p.name for p in gone) == ["rank0.pt.trace.json.gz", "rank1.pt.trace.json.gz"]
    assert not trace_files.rank_folder(older).exists()
    assert sorted(p.name for p in trace_files.rank_folder(newer).iterdir()) == [
        "rank0.pt.trace.json.gz", "rank1.pt.trace.json.gz",
    ]  # fmt: skip
    beside = trace_files.beside_path(kept)
    assert beside == tmp_path / (
        trace_files.rank_folder(newer).name + ".vs-baseline.pt.trace.json.gz"
    )
    assert trace_files.bounded(tmp_path, limit_bytes=10) != []
    assert len(trace_files.traces_of(tmp_path, nodeid)) == 1


def test_a_work_change_that_reads_the_same_on_every_rank_is_said_once() -> None:
    from tprof_engine.decide.gates.work import judge_work

    def rows(*, extra: bool) -> WorkTable:
        found = []
        for rank in (0, 1):
            found.append(
                WorkRow(
                    op=tagged(rank, "aten::addmm"),
                    module="fc",
                    phase="forward",
                    calls=1,
                    flops=10**9,
                    bytes_read=10**6,
                    bytes_written=10**5,
                )
            )
            if extra:
                found.append(
                    WorkRow(
                        op=tagged(rank, "aten::clone"),
                        module="fc",
                        phase="forward",
                        calls=1,
                        flops=0,
                        bytes_read=64,
                        bytes_written=64,
                    )
                )
        return WorkTable(rows=tuple(found))

    v = judge_work(rows(extra=False), rows(extra=True))
    assert v.verdict == "changed"
    assert v.reasons == (
        "aten::clone in fc (forward): new, below the floor, bytes +128 (ranks 0, 1)",
    )
