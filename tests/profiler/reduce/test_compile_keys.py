"""torch.compile in a profile: stable keys, compile time left out, compile structure gated."""

from __future__ import annotations

import numpy as np
from test_reduce_synthetic import Ev, arrays, step

from tprof_engine.decide.gates.compiled import compile_finding, compile_notes, compiled_graphs
from tprof_engine.decide.gates.finding import applied
from tprof_engine.model.verdicts import IMPROVED, REGRESSED, UNCHANGED, TestVerdict
from tprof_engine.reduce.compiled import COMPILE_OP
from tprof_engine.reduce.ops import reduce_events

GRAPH_A = "## Call CompiledFxGraph fkexlqocdhcs56pvngphn4spenxw4kbiswlohj2xvftchlqrrsdr ##"
GRAPH_B = "## Call CompiledFxGraph fbf6qdygmhx77kulwxiuono2assaej62vdxy4czdejtvvnxhcsa7 ##"


def compiled_call(t: int, frame: int, graph: str) -> list[Ev]:
    """One call of a compiled region (10 µs) holding its graph (6 µs) and an op (2 µs)."""
    return [
        Ev(f"Torch-Compiled Region: {frame}/0", t, t + 10_000),
        Ev(graph, t + 1_000, t + 7_000),
        Ev("aten::addmm", t + 2_000, t + 4_000),
    ]


def test_compiled_regions_and_graphs_are_keyed_by_first_appearance_not_ids_or_hashes() -> None:
    # Frame ids are process-wide counters and graph names hash the graph: a test's frame 7
    # here is another process's frame 0, and a changed graph gets another hash.
    one = arrays(
        [step(0, 0, 100_000), *compiled_call(0, 7, GRAPH_A), *compiled_call(20_000, 8, GRAPH_B)]
    )
    other = arrays(
        [step(0, 0, 100_000), *compiled_call(0, 0, GRAPH_B), *compiled_call(20_000, 1, GRAPH_A)]
    )
    for events in (one, other):
        table = reduce_events(events)
        assert table.names == (
            "## Call CompiledFxGraph #1 ##",
            "## Call CompiledFxGraph #2 ##",
            "Torch-Compiled Region #1",
            "Torch-Compiled Region #2",
            "aten::addmm",
        )
        graph = table.index()["## Call CompiledFxGraph #1 ##"]
        assert table.self_cpu_us[graph].tolist() == [4.0]  # 6 µs less its op's 2 µs


def test_a_recompiled_region_keeps_its_frames_key() -> None:
    events = arrays(
        [
            step(0, 0, 100_000),
            *compiled_call(0, 3, GRAPH_A),
            Ev("Torch-Compiled Region: 3/1", 20_000, 30_000),
        ]
    )
    table = reduce_events(events)
    assert table.calls[table.index()["Torch-Compiled Region #1"]].tolist() == [2]


def test_compile_time_is_one_compile_call_and_its_ops_are_no_rows() -> None:
    events = arrays(
        [
            step(0, 0, 1_000_000),
            Ev("dynamo", 0, 500_000),
            Ev("_compile.compile_inner (dynamo_timed)", 1_000, 400_000),
            Ev("bytecode_tracing", 2_000, 100_000),
            Ev("aten::empty_strided", 3_000, 4_000),
            Ev("prims::mul", 5_000, 6_000),
            *compiled_call(600_000, 0, GRAPH_A),
            step(1, 1_000_000, 2_000_000),
            *compiled_call(1_100_000, 0, GRAPH_A),
        ]
    )
    table = reduce_events(events)
    assert "aten::empty_strided" not in table.names
    assert "prims::mul" not in table.names
    assert "bytecode_tracing" not in table.names
    index = table.index()
    assert table.calls[index[COMPILE_OP]].tolist() == [1, 0]
    assert table.self_cpu_us[index[COMPILE_OP]].tolist() == [500.0, 0.0]
    assert table.calls[index["aten::addmm"]].tolist() == [1, 1]


def verdict_of(baseline: list[Ev], current: list[Ev]) -> TestVerdict:
    start = TestVerdict(verdict=UNCHANGED, reason="no op changed beyond its floor")
    return applied(
        start, compile_finding(reduce_events(arrays(baseline)), reduce_events(arrays(current)))
    )


ONE_GRAPH = [step(0, 0, 100_000), *compiled_call(0, 0, GRAPH_A)]
TWO_GRAPHS = [*ONE_GRAPH, *compiled_call(20_000, 1, GRAPH_B)]


def test_a_new_graph_break_fails_the_test_and_one_fewer_is_improved() -> None:
    assert compiled_graphs(reduce_events(arrays(TWO_GRAPHS))) == (2, 0)
    broke = verdict_of(ONE_GRAPH, TWO_GRAPHS)
    assert broke.verdict == REGRESSED
    assert broke.reason == "compile: compiled graphs per call 1 → 2: a new graph break"
    mended = verdict_of(TWO_GRAPHS, ONE_GRAPH)
    assert mended.verdict == IMPROVED
    assert mended.reason.endswith("compile: compiled graphs per call 2 → 1: fewer graph breaks")
    assert verdict_of(ONE_GRAPH, ONE_GRAPH).verdict == UNCHANGED


def test_a_compilation_in_the_measured_rounds_fails_the_test() -> None:
    recompiled = [*ONE_GRAPH, Ev("dynamo", 30_000, 60_000), Ev("prims::add", 31_000, 32_000)]
    verdict = verdict_of(ONE_GRAPH, recompiled)
    assert verdict.verdict == REGRESSED
    assert verdict.reason.endswith("compile: recompiled during the measured rounds")
    assert np.array_equal(
        reduce_events(arrays(recompiled)).calls[0], reduce_events(arrays(ONE_GRAPH)).calls[0]
    )


def test_a_backward_compiled_lazily_in_a_round_is_compile_time_too() -> None:
    # AOT compiles a graph's backward at its first backward call, in its own ranges.
    events = arrays(
        [
            step(0, 0, 1_000_000),
            Ev("entire_backward_compile", 0, 300_000),
            Ev("entire_backward_compile_data: fn_name=backward._backward_impl, compile_id=1/1",
               1_000, 2_000),
            Ev("aten::mm", 3_000, 4_000),
            *compiled_call(600_000, 0, GRAPH_A),
        ]
    )  # fmt: skip
    table = reduce_events(events)
    assert [n for n in table.names if "compile" in n and n != COMPILE_OP] == []
    assert "aten::mm" not in table.names
    assert table.calls[table.index()[COMPILE_OP]].tolist() == [1]


def test_graphs_are_counted_per_call_of_the_body_not_per_round() -> None:
    # Three calls of the body per round: one graph each, then two each after a graph break.
    start = TestVerdict(verdict=UNCHANGED, reason="no op changed beyond its floor")
    one = [
        step(0, 0, 100_000),
        *[e for k in range(3) for e in compiled_call(k * 20_000, 0, GRAPH_A)],
    ]
    two = [
        *one,
        *[e for k in range(3) for e in compiled_call(60_000 + k * 10_000, 1, GRAPH_B)],
    ]
    broke = applied(
        start,
        compile_finding(reduce_events(arrays(one)), reduce_events(arrays(two)), per_call=3),
    )
    assert broke.reason.endswith("compile: compiled graphs per call 1 → 2: a new graph break")


def test_compile_notes_count_the_graph_breaks_and_guard_failures_of_the_test_only() -> None:
    before = (("Call to `torch._dynamo.graph_break()` (a.py:3)",), ("x.size()[0] == 4",))
    after = (
        (
            *before[0],
            "Call to `torch._dynamo.graph_break()` (m.py:16)",
            "Call to `torch._dynamo.graph_break()` (m.py:16)",
            "data-dependent branching (m.py:20)",
        ),
        (*before[1], "x.size()[0] == 8\nmore", "y.dtype == torch.float32"),
    )
    assert compile_notes(before, after) == [
        "graph break while compiling (×2): Call to `torch._dynamo.graph_break()` (m.py:16)",
        "graph break while compiling (×1): data-dependent branching (m.py:20)",
        "guard failures while profiling: 2 (first: x.size()[0] == 8)",
    ]
    # A reset of Dynamo's logs between the two reads is not a negative count.
    assert compile_notes(after, ((), ())) == []
