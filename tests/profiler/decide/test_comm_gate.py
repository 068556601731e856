"""The communication census and its exact gate, on censuses built by hand (no torch)."""

from __future__ import annotations

from dataclasses import replace

from tprof_testing import table

from tprof_engine.decide.gates.communication import judge_communication
from tprof_engine.decide.judge import Recorded, judge
from tprof_engine.decide.policy import REMEASURE, next_step
from tprof_engine.decide.timing.rule import Rule
from tprof_engine.model.communication import communication
from tprof_engine.model.ranks import tagged
from tprof_engine.model.verdicts import COMMUNICATION, IMPROVED, REGRESSED, UNCHANGED
from tprof_engine.model.work import WorkRow, WorkTable

BUCKET = 340_008  # one bucket of a 85,002-parameter float32 model


def row(op: str, *, rank: int | None = 0, phase: str = "backward", calls: int = 1,
        nbytes: int = BUCKET, dtypes: tuple[str, ...] = ("float32",), module: str = "module.0",
        group: int = 2, varies: bool = False) -> WorkRow:  # fmt: skip
    name = op if rank is None else tagged(rank, op)
    return WorkRow(
        op=name, module=module, phase=phase, calls=calls, flops=0, bytes_read=nbytes,
        bytes_written=nbytes, dtypes=dtypes, signature="", group=group, varies=varies,
    )  # fmt: skip


MATMUL = WorkRow(
    op=tagged(0, "aten::addmm"), module="module.0", phase="forward", calls=1, flops=2_000_000,
    bytes_read=4096, bytes_written=1024, dtypes=("float32",), signature="",
)  # fmt: skip


def census(*rows: WorkRow, iterations: int = 1) -> WorkTable:
    return WorkTable(rows=(MATMUL, *rows), iterations=iterations)


def both_ranks(**kw: object) -> tuple[WorkRow, ...]:
    return tuple(row("c10d::allreduce_", rank=r, **kw) for r in (0, 1))  # type: ignore[arg-type]


def test_the_census_counts_each_collective_per_step_summed_over_its_modules() -> None:
    work = census(
        row("c10d::allreduce_", calls=4, nbytes=4 * 1000, module="module.2"),
        row("c10d::allreduce_", calls=2, nbytes=2 * 1000, module="module.0"),
        iterations=2,
    )
    (only,) = communication(work).values()
    assert (only.rank, only.op, only.phase, only.group) == (0, "c10d::allreduce_", "backward", 2)
    assert (only.calls, only.bytes) == (3.0, 3000.0)
    assert only.modules == ("module.0", "module.2")


def test_lost_bucketing_fails_naming_the_collective_its_phase_and_the_counts() -> None:
    before = census(*both_ranks())
    after = census(*both_ranks(calls=161))
    v = judge_communication(before, after)
    assert v.verdict == "regressed"
    assert v.lines == (
        "c10d::allreduce_ in backward (group of 2): 1 → 161 calls per step, "
        "340,008 B → 340,008 B (ranks 0, 1)",
    )


def test_an_extra_all_reduce_of_the_loss_is_new_and_a_wider_dtype_sends_more() -> None:
    before = census(*both_ranks())
    loss = row("c10d::allreduce_", rank=1, phase="forward", nbytes=4)
    v = judge_communication(before, census(*both_ranks(), loss))
    assert v.verdict == "regressed"
    assert v.lines == (
        "c10d::allreduce_ in forward (group of 2): new, 1 call per step, 4 B (rank 1)",
    )
    wider = judge_communication(
        census(*both_ranks(nbytes=BUCKET // 2, dtypes=("bfloat16",))), census(*both_ranks())
    )
    assert wider.verdict == "regressed"
    assert "170,004 B → 340,008 B, dtype bfloat16 → float32" in wider.lines[0]


def test_a_collective_of_the_bodys_own_code_reads_at_top_level() -> None:
    loss = row("c10d::allreduce_", rank=0, phase="forward", nbytes=4, module="")
    v = judge_communication(census(), census(loss))
    assert v.lines == (
        "c10d::allreduce_ at top level, outside backward (group of 2): new, 1 call per step, "
        "4 B (rank 0)",
    )


def test_an_all_gather_sends_its_input_and_an_all_reduce_its_tensor() -> None:
    # _allgather_base_(output, input): reads both (1,024 B in, 2,048 B out), writes the output
    gather = replace(row("c10d::_allgather_base_", nbytes=0), bytes_read=3072, bytes_written=2048)
    ((_, only),) = communication(census(gather)).items()
    assert only.bytes == 1024
    (reduce,) = communication(census(row("c10d::allreduce_", nbytes=512))).values()
    assert reduce.bytes == 512


def test_fewer_collectives_improve_and_a_dtype_alone_changes() -> None:
    v = judge_communication(census(*both_ranks(calls=3)), census(*both_ranks()))
    assert v.verdict == "improved"
    gone = judge_communication(census(*both_ranks()), census())
    assert gone.verdict == "improved" and "gone (was 1 call per step" in gone.lines[0]
    retyped = judge_communication(census(*both_ranks()), census(*both_ranks(dtypes=("int32",))))
    assert retyped.verdict == "changed"
    same = judge_communication(census(*both_ranks()), census(*both_ranks()))
    assert same.verdict == "unchanged" and same.lines == ()


def test_a_collective_whose_counts_vary_between_census_rounds_is_reported_not_gated() -> None:
    v = judge_communication(census(*both_ranks()), census(*both_ranks(calls=5, varies=True)))
    assert v.verdict == "unchanged"
    assert v.not_gated == ("c10d::allreduce_ in backward (group of 2)",)


def test_a_judged_test_leads_with_its_collectives_and_needs_no_confirmation() -> None:
    ops = {tagged(0, "aten::addmm"): (800.0, 6), tagged(1, "aten::addmm"): (800.0, 6)}
    base = Recorded(tables=tuple(table(ops, seed=s) for s in (1, 2, 3)), work=census(*both_ranks()))
    now = Recorded(tables=(table(ops, seed=4),), work=census(*both_ranks(calls=4)))
    v = judge(base, now, Rule())
    assert v.verdict == REGRESSED
    (cause,) = [c for c in v.causes if c.kind == COMMUNICATION]
    assert cause.failing and cause.text.startswith("communication: c10d::allreduce_ in backward")
    assert v.reason.startswith("communication:")
    assert v.exact_regressed and next_step(v) != REMEASURE
    # the work gate doesn't judge collectives a second time
    assert v.work is not None and v.work.verdict == UNCHANGED
    fewer = judge(base, replace(now, work=census()), Rule())
    assert fewer.verdict == IMPROVED and not fewer.exact_regressed


def test_a_single_process_census_names_no_rank() -> None:
    before = census(row("c10d::allreduce_", rank=None, group=1))
    after = census(row("c10d::allreduce_", rank=None, group=1, calls=2))
    assert judge_communication(before, after).lines == (
        "c10d::allreduce_ in backward (group of 1): 1 → 2 calls per step, 340,008 B → 340,008 B",
    )


def test_the_json_report_and_tprof_show_list_the_collectives_per_step() -> None:
    from pathlib import Path

    from tprof_engine.model.results import ProfiledTest, Source
    from tprof_engine.model.verdicts import UNCHANGED as SAME
    from tprof_engine.model.verdicts import TestVerdict
    from tprof_engine.render.report import json_report
    from tprof_engine.render.show import show_lines

    work = census(*both_ranks(calls=2, nbytes=2 * BUCKET))
    test = ProfiledTest(
        nodeid="t.py::test", verdict=TestVerdict(verdict=SAME, reason=""), work=work
    )
    (doc,) = json_report([test], environment={})["tests"]
    assert [(r["rank"], r["where"], r["calls_per_step"], r["bytes_per_step"]) for r in
            doc["communication"]] == [
        (0, "c10d::allreduce_ in backward (group of 2)", 2.0, 2.0 * BUCKET),
        (1, "c10d::allreduce_ in backward (group of 2)", 2.0, 2.0 * BUCKET),
    ]  # fmt: skip
    tables = (table({tagged(0, "c10d::allreduce_"): (90.0, 2)}, seed=1),)
    source = Source(path=Path("b.json"), kind="baseline", nodeid="t.py::test", tables=tables,
                    work=work)  # fmt: skip
    text = "\n".join(show_lines(source))
    assert "communication per step:" in text
    assert "c10d::allreduce_ in backward (group of 2)           2          680,016" in text
