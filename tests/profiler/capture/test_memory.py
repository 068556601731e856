"""Memory per op and per round (``profile_memory``): real CPU models, torch as the oracle,
and hand-built events for the exact rules."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile, record_function

from tprof_engine.capture.backends import CPU
from tprof_engine.capture.kineto import events_from_kineto
from tprof_engine.capture.session import capture
from tprof_engine.decide.gates.finding import applied
from tprof_engine.decide.gates.memory import judge_memory, memory_finding
from tprof_engine.decide.timing.compare import compare
from tprof_engine.decide.timing.rule import Rule
from tprof_engine.model.device_tables import MemoryTable
from tprof_engine.model.records import OpTable
from tprof_engine.model.verdicts import TestVerdict
from tprof_engine.reduce.memory import innermost
from tprof_engine.reduce.ops import reduce_events


def linear_step(width: int) -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    return nn.Linear(64, width), torch.randn(32, 64)


def profiled(width: int, *, memory: bool = True) -> OpTable:
    model, x = linear_step(width)
    return capture(
        lambda: model(x).relu().sum(),
        rounds=6,
        warmup=2,
        device=CPU,
        profile_memory=memory,
    ).table


def alloc(table: OpTable, op: str) -> list[int]:
    assert table.memory is not None
    return table.memory.alloc_bytes[table.memory.ops.index(op)].tolist()


def test_a_linear_layer_allocates_its_output_every_round() -> None:
    table = profiled(128)
    assert alloc(table, "aten::addmm") == [32 * 128 * 4] * 6
    assert alloc(table, "aten::clamp_min") == [32 * 128 * 4] * 6
    assert table.memory is not None
    assert table.memory.peak_bytes.tolist() == [2 * 32 * 128 * 4] * 6


def test_without_profile_memory_there_is_no_memory_table() -> None:
    assert profiled(128, memory=False).memory is None


def gated(base: OpTable, current: OpTable) -> TestVerdict:
    """Calls compared (timings not), then the memory gate's finding joined."""
    verdict = compare([base], current, same_hardware=False)
    return applied(verdict, memory_finding([base], current, Rule()))


def test_a_layer_widened_twice_fails_the_memory_gate_naming_the_op() -> None:
    base, wide = profiled(128), profiled(256)
    assert alloc(wide, "aten::addmm") == [2 * 16384] * 6
    v = gated(base, wide)
    assert v.verdict == "regressed"
    assert "MEMORY: aten::addmm allocates 16,384 → 32,768 B per round (+16,384 B)" in v.reason
    assert "round peak 32,768 → 65,536 B per round (+32,768 B)" in v.reason


def test_the_same_model_again_passes_the_memory_gate() -> None:
    v = gated(profiled(128), profiled(128))
    assert "MEMORY" not in v.reason


def test_allocations_agree_with_torchs_self_memory_per_op() -> None:
    model, x = linear_step(96)
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        for r in range(3):
            with record_function(f"ProfilerStep#{r}"):
                model(x).relu().sum()
    table = reduce_events(events_from_kineto(prof))
    assert table.memory is not None
    for avg in prof.key_averages():
        positive = avg.self_cpu_memory_usage
        if avg.key in table.memory.ops and positive > 0:
            # torch nets frees against allocations; these ops free nothing they allocate
            assert sum(alloc(table, avg.key)) == positive


def test_a_baseline_without_memory_says_so_and_gates_nothing() -> None:
    base = profiled(128, memory=False)
    v = gated(base, profiled(256))
    assert "no memory baseline: re-record with --tprof-save" in v.notes
    assert "MEMORY" not in v.reason


def mem(ops: dict[str, list[int]], peaks: list[int]) -> MemoryTable:
    names = tuple(ops)
    return MemoryTable(
        ops=names,
        alloc_bytes=np.asarray([ops[n] for n in names], dtype=np.int64),
        allocs=np.ones((len(names), len(peaks)), dtype=np.int64),
        peak_bytes=np.asarray(peaks, dtype=np.int64),
    )


def test_an_op_that_allocates_differently_each_round_is_reported_not_gated() -> None:
    base = [mem({"aten::nonzero": [100, 300], "aten::mm": [1000, 1000]}, [900, 1000])]
    verdict = judge_memory(base, mem({"aten::nonzero": [900, 100], "aten::mm": [1000, 1000]},
                                     [900, 1000]), floor=0.01)  # fmt: skip
    assert (verdict.verdict, verdict.varying_ops) == ("unchanged", 1)


def test_a_change_within_the_floor_is_unchanged_and_beyond_it_counts() -> None:
    base = [mem({"aten::mm": [10_000, 10_000]}, [10_000, 10_000])]
    small = judge_memory(base, mem({"aten::mm": [10_050, 10_050]}, [10_000, 10_000]), floor=0.01)
    assert small.verdict == "unchanged"
    less = judge_memory(base, mem({"aten::mm": [5_000, 5_000]}, [5_000, 5_000]), floor=0.01)
    assert less.verdict == "improved"
    assert less.reasons == (
        "aten::mm allocates 10,000 → 5,000 B per round (-5,000 B)",
        "round peak 10,000 → 5,000 B per round (-5,000 B)",
    )


def test_a_new_allocating_op_is_a_regression() -> None:
    base = [mem({"aten::mm": [1000, 1000]}, [1000, 1000])]
    now = mem({"aten::mm": [1000, 1000], "aten::clone": [4000, 4000]}, [1000, 1000])
    assert judge_memory(base, now, floor=0.01).reasons == (
        "aten::clone allocates 0 → 4,000 B per round (+4,000 B)",
    )


def test_innermost_finds_the_deepest_running_interval_of_the_same_thread() -> None:
    thread = np.asarray([1, 1, 1, 2])
    start = np.asarray([0, 10, 30, 0])
    end = np.asarray([100, 20, 40, 100])
    parent = np.asarray([-1, 0, 0, -1])
    at_thread = np.asarray([1, 1, 1, 2, 3])
    at = np.asarray([15, 25, 35, 50, 50])
    assert innermost(thread, start, end, parent, at_thread, at).tolist() == [1, 0, 2, 3, -1]


def test_the_memory_table_round_trips() -> None:
    table = profiled(128)
    again = OpTable.from_dict(table.to_dict())
    assert again.memory is not None and table.memory is not None
    assert again.memory.to_dict() == table.memory.to_dict()
    data = table.to_dict()
    data["memory"]["peak_bytes"] = [1]
    with pytest.raises(ValueError, match="'peak_bytes' must hold one finite number per round"):
        OpTable.from_dict(data)


def test_memory_profiling_on_one_side_says_which_and_what_to_do() -> None:
    from tprof_engine.model.environment import protocol_differences

    plain, memory = {"iterations": 1}, {"iterations": 1, "profile_memory": True}
    assert protocol_differences(plain, memory) == [
        "the baseline was saved without --tprof-collect=memory, this run profiles memory "
        "(which slows each op): re-save with it, or run without it"
    ]
    assert protocol_differences(memory, plain) == [
        "the baseline was saved with --tprof-collect=memory, which slows each op: run with it, "
        "or re-save without it"
    ]
    assert protocol_differences(memory, dict(memory)) == []
    assert protocol_differences(plain, {**plain, "profile_memory": False}) == []
