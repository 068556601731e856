"""reduce_events on hand-built events (no torch, no GPU), with exact expected numbers."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tprof_engine.model.records import (
    KIND_ANNOTATION,
    KIND_DEVICE,
    KIND_IGNORED,
    KIND_OP,
    EventArrays,
    OpTable,
)
from tprof_engine.reduce.ops import drop_leading_rounds, reduce_events

CPU = 1  # thread ids
CPU2 = 2
STREAM = 100


@dataclass(frozen=True)
class Ev:
    name: str
    start_ns: int
    end_ns: int
    kind: int = KIND_OP
    thread: int = CPU
    corr: int = 0
    link: int = 0


def step(n: int, start_ns: int, end_ns: int) -> Ev:
    return Ev(f"ProfilerStep#{n}", start_ns, end_ns, KIND_ANNOTATION)


def kernel(name: str, start_ns: int, end_ns: int, link: int) -> Ev:
    return Ev(name, start_ns, end_ns, KIND_DEVICE, STREAM, link=link)


def arrays(events: list[Ev]) -> EventArrays:
    names: dict[str, int] = {}
    for e in events:
        names.setdefault(e.name, len(names))

    def col(attr: str) -> np.ndarray:
        return np.asarray([getattr(e, attr) for e in events], dtype=np.int64)

    return EventArrays(
        names=tuple(names),
        name_idx=np.asarray([names[e.name] for e in events], dtype=np.int64),
        start_ns=col("start_ns"),
        end_ns=col("end_ns"),
        thread=col("thread"),
        kind=col("kind").astype(np.int8),
        corr=col("corr"),
        link=col("link"),
    )


def reduce(events: list[Ev]) -> OpTable:
    return reduce_events(arrays(events))


def metric(table: OpTable, name: str, m: str) -> list[float]:
    return [float(v) for v in table.op(name)[m]]


def test_each_profiler_step_is_one_round_in_time_order() -> None:
    table = reduce(
        [
            # listed out of order: rounds follow time, not position
            step(1, 10_000, 12_000),
            Ev("aten::add", 10_500, 10_800),
            step(0, 0, 5_000),
            Ev("aten::add", 1_000, 1_100),
            Ev("aten::add", 2_000, 2_100),
        ]
    )
    assert table.rounds == 2
    assert table.names == ("aten::add",)
    assert table.calls.tolist() == [[2, 1]]
    assert metric(table, "aten::add", "self_cpu_us") == [0.2, 0.3]
    assert table.wall_us.tolist() == [5.0, 2.0]
    assert table.meta["whole_trace_as_round"] is False
    assert table.meta["events"] == 5


def test_given_wall_times_replace_the_round_spans() -> None:
    table = reduce_events(arrays([step(0, 0, 1_000), step(1, 1_000, 2_000)]), wall_us=[7.0, 8.0])
    assert table.wall_us.tolist() == [7.0, 8.0]
    assert table.names == ()


def test_self_cpu_time_excludes_direct_children_and_total_includes_them() -> None:
    table = reduce(
        [
            step(0, 0, 10_000),
            Ev("aten::linear", 1_000, 6_000),
            Ev("aten::t", 1_100, 1_600),
            Ev("aten::addmm", 2_000, 5_000),
            Ev("aten::empty", 2_500, 2_900),
        ]
    )
    assert metric(table, "aten::linear", "self_cpu_us") == [1.5]  # 5.0 - 0.5 - 3.0
    assert metric(table, "aten::linear", "total_cpu_us") == [5.0]
    assert metric(table, "aten::addmm", "self_cpu_us") == [2.6]
    assert metric(table, "aten::addmm", "total_cpu_us") == [3.0]
    assert metric(table, "aten::empty", "self_cpu_us") == [0.4]
    assert table.self_cpu_us.sum() == table.total_cpu_us[table.index()["aten::linear"]].sum()
    assert not table.has_device


def test_a_user_annotation_is_counted_and_is_the_parent_of_ops_inside_it() -> None:
    table = reduce(
        [
            step(0, 0, 10_000),
            Ev("## forward ##", 1_000, 4_000, KIND_ANNOTATION),
            Ev("aten::mm", 1_500, 3_500),
        ]
    )
    assert metric(table, "## forward ##", "calls") == [1]
    assert metric(table, "## forward ##", "self_cpu_us") == [1.0]
    assert metric(table, "aten::mm", "self_cpu_us") == [2.0]


def test_a_kernel_gives_its_launching_op_self_device_time_and_its_parent_total() -> None:
    table = reduce(
        [
            step(0, 0, 10_000),
            Ev("aten::linear", 1_000, 6_000, corr=1),
            Ev("aten::addmm", 2_000, 5_000, corr=2),
            Ev("cudaLaunchKernel", 3_000, 3_500, corr=3),
            # kernels run later than their launch, outside the op's CPU interval
            kernel("gemm", 7_000, 9_500, link=2),
            kernel("gemm", 20_000, 20_500, link=2),  # even past the round's end
        ]
    )
    assert table.has_device
    assert metric(table, "aten::addmm", "self_device_us") == [3.0]
    assert metric(table, "aten::addmm", "total_device_us") == [3.0]
    assert metric(table, "aten::linear", "self_device_us") == [0.0]
    assert metric(table, "aten::linear", "total_device_us") == [3.0]
    assert metric(table, "cudaLaunchKernel", "self_device_us") == [0.0]
    assert "gemm" not in table.names  # device events are attributed, never ops themselves
    assert metric(table, "aten::addmm", "self_cpu_us") == [2.5]


def test_kernels_with_an_unknown_or_missing_link_are_ignored() -> None:
    table = reduce(
        [
            step(0, 0, 10_000),
            Ev("aten::mm", 1_000, 2_000, corr=5),
            kernel("gemm", 3_000, 4_000, link=5),
            kernel("orphan", 3_000, 9_000, link=77),
            kernel("unlinked", 3_000, 9_000, link=0),
        ]
    )
    assert table.names == ("aten::mm",)
    assert metric(table, "aten::mm", "self_device_us") == [1.0]
    assert table.self_device_us.sum() == 1.0
    assert table.total_device_us.sum() == 1.0


def test_events_outside_the_rounds_are_not_counted() -> None:
    table = reduce(
        [
            Ev("aten::randn", 0, 500, corr=1),  # set-up before the first round
            kernel("init", 600, 900, link=1),
            step(0, 1_000, 2_000),
            Ev("aten::add", 1_200, 1_300),
            Ev("aten::add", 2_500, 2_900),  # between rounds
            step(1, 3_000, 4_000),
            Ev("aten::add", 3_200, 3_300),
            Ev("aten::sum", 4_000, 4_100),  # starts exactly as round 1 ends
        ]
    )
    assert table.names == ("aten::add",)
    assert table.calls.tolist() == [[1, 1]]
    assert table.self_device_us.sum() == 0.0


def test_probe_events_go_to_the_probe_times_not_to_ops() -> None:
    table = reduce(
        [
            step(0, 0, 10_000),
            Ev("tprof::probe#0", 100, 2_100, KIND_ANNOTATION),
            Ev("aten::mm", 200, 1_200, corr=1),
            Ev("aten::tanh", 1_300, 1_500),
            kernel("gemm", 1_400, 1_700, link=1),
            Ev("aten::mm", 3_000, 3_400, corr=2),
            kernel("gemm", 3_500, 4_500, link=2),
            step(1, 10_000, 20_000),
            Ev("tprof::probe#1", 10_100, 11_100, KIND_ANNOTATION),
            Ev("aten::mm", 10_200, 10_900),
        ]
    )
    assert table.names == ("aten::mm",)
    assert table.calls.tolist() == [[1, 0]]
    assert metric(table, "aten::mm", "self_cpu_us") == [0.4, 0.0]
    assert metric(table, "aten::mm", "self_device_us") == [1.0, 0.0]
    assert table.probe_cpu_us.tolist() == [1.2, 0.7]  # the probe's ops, not its own span
    assert table.probe_device_us.tolist() == [0.3, 0.0]


def test_the_rounds_closing_synchronize_is_the_plugins_own_and_in_no_family() -> None:
    table = reduce(
        [
            step(0, 0, 10_000),
            Ev("aten::mm", 1_000, 2_000, corr=1),
            kernel("gemm", 2_000, 6_000, link=1),
            Ev("tprof::sync#0", 2_100, 6_100, KIND_ANNOTATION),
            Ev("cudaDeviceSynchronize", 2_200, 6_000),
            step(1, 10_000, 20_000),
            Ev("aten::mm", 11_000, 12_000, corr=2),
            Ev("cudaDeviceSynchronize", 12_100, 12_300),  # the body's own: counted
            kernel("gemm", 12_000, 16_000, link=2),
            Ev("tprof::sync#1", 12_400, 16_100, KIND_ANNOTATION),
            Ev("cudaDeviceSynchronize", 12_500, 16_000),
        ]
    )
    assert table.names == ("aten::mm", "cudaDeviceSynchronize")
    assert metric(table, "cudaDeviceSynchronize", "self_cpu_us") == [0.0, 0.2]
    assert table.calls.tolist() == [[1, 1], [0, 1]]
    assert metric(table, "aten::mm", "self_device_us") == [4.0, 4.0]
    assert table.host_before_us.sum(axis=0).round(3).tolist() == [1.0, 1.1]  # no wait added


def test_ignored_events_are_neither_counted_nor_parents() -> None:
    table = reduce(
        [
            step(0, 0, 10_000),
            Ev("aten::add", 1_000, 2_000),
            # an async or profiler-internal event wrapping the op must not take its time
            Ev("async_thing", 500, 5_000, KIND_IGNORED),
            Ev("[memory]", 1_500, 1_500, KIND_IGNORED),
        ]
    )
    assert table.names == ("aten::add",)
    assert metric(table, "aten::add", "self_cpu_us") == [1.0]
    assert metric(table, "aten::add", "total_cpu_us") == [1.0]


def test_a_same_named_only_child_is_merged_into_its_parent() -> None:
    table = reduce(
        [
            step(0, 0, 10_000),
            Ev("aten::copy_", 1_000, 2_000, corr=1),
            Ev("aten::copy_", 1_100, 1_900, corr=2),
            Ev("aten::empty", 1_200, 1_300),
            kernel("copy_kernel", 5_000, 5_600, link=2),
        ]
    )
    # torch's EventList._remove_dup_nodes: one call; the parent keeps the child's time.
    assert metric(table, "aten::copy_", "calls") == [1]
    assert metric(table, "aten::copy_", "self_cpu_us") == [0.9]  # 1.0 - aten::empty's 0.1
    assert metric(table, "aten::copy_", "total_cpu_us") == [1.0]
    assert metric(table, "aten::copy_", "self_device_us") == [0.6]
    assert metric(table, "aten::copy_", "total_device_us") == [0.6]
    assert metric(table, "aten::empty", "calls") == [1]


def test_a_chain_of_same_named_only_children_merges_into_the_outermost() -> None:
    table = reduce(
        [
            step(0, 0, 10_000),
            Ev("aten::to", 1_000, 4_000),
            Ev("aten::to", 1_500, 3_500),
            Ev("aten::to", 2_000, 3_000),
        ]
    )
    assert metric(table, "aten::to", "calls") == [1]
    assert metric(table, "aten::to", "self_cpu_us") == [3.0]


def test_a_same_named_child_with_a_sibling_is_not_merged() -> None:
    table = reduce(
        [
            step(0, 0, 10_000),
            Ev("aten::copy_", 1_000, 2_000),
            Ev("aten::copy_", 1_100, 1_500),
            Ev("aten::empty", 1_600, 1_700),
        ]
    )
    assert metric(table, "aten::copy_", "calls") == [2]
    assert metric(table, "aten::copy_", "self_cpu_us") == [0.9]  # 0.5 + 0.4
    assert metric(table, "aten::copy_", "total_cpu_us") == [1.4]  # 1.0 + 0.4


def test_ops_on_other_threads_in_a_round_are_counted_but_not_nested() -> None:
    table = reduce(
        [
            step(0, 0, 10_000),
            Ev("aten::mm", 1_000, 6_000),
            # the autograd thread: overlaps aten::mm in time, but is not its child
            Ev("autograd::engine::evaluate_function: MmBackward0", 2_000, 5_000, thread=CPU2),
            Ev("aten::mm", 2_500, 4_500, thread=CPU2),
            step(1, 10_000, 20_000),
            Ev("aten::mm", 11_000, 12_000, thread=CPU2),
        ]
    )
    assert metric(table, "aten::mm", "calls") == [2, 1]
    assert metric(table, "aten::mm", "self_cpu_us") == [7.0, 1.0]  # 5.0 + 2.0
    backward = "autograd::engine::evaluate_function: MmBackward0"
    assert metric(table, backward, "self_cpu_us") == [1.0, 0.0]


def test_partly_overlapping_events_on_one_thread_are_not_nested() -> None:
    table = reduce(
        [
            step(0, 0, 10_000),
            Ev("a", 1_000, 3_000),
            Ev("b", 2_000, 4_000),  # starts inside "a", ends after it
        ]
    )
    assert metric(table, "a", "self_cpu_us") == [2.0]
    assert metric(table, "b", "self_cpu_us") == [2.0]


def test_a_profile_without_profiler_steps_is_one_round() -> None:
    table = reduce([Ev("aten::add", 1_000, 1_500), Ev("aten::add", 9_000, 9_250)])
    assert table.rounds == 1
    assert table.meta["whole_trace_as_round"] is True
    assert table.calls.tolist() == [[2]]
    assert metric(table, "aten::add", "self_cpu_us") == [0.75]
    assert table.wall_us.tolist() == [8.251]  # first start to last end, plus 1 ns


def test_dropping_leading_rounds_keeps_the_later_columns() -> None:
    table = reduce(
        [
            step(0, 0, 1_000),
            Ev("aten::add", 100, 200),
            step(1, 1_000, 2_000),
            Ev("aten::add", 1_100, 1_400),
            step(2, 2_000, 3_000),
            Ev("aten::add", 2_100, 2_600),
        ]
    )
    later = drop_leading_rounds(table, 2)
    assert later.rounds == 1
    assert metric(later, "aten::add", "self_cpu_us") == [0.5]
    assert drop_leading_rounds(table, 0) is table


def test_each_op_is_given_the_op_that_held_most_of_its_calls_when_one_held_most() -> None:
    table = reduce(
        [
            step(0, 0, 10_000),
            Ev("## block ##", 100, 9_900, KIND_ANNOTATION),  # an annotation holds no op
            Ev("aten::convolution", 200, 3_000),
            Ev("aten::_convolution", 300, 2_900),
            Ev("aten::mkldnn_convolution", 400, 2_800),
            Ev("aten::empty", 500, 600),  # once in a convolution, once in a copy: no holder
            Ev("aten::copy_", 3_100, 4_000),
            Ev("aten::empty", 3_200, 3_300),
            step(1, 10_000, 20_000),
            Ev("aten::convolution", 10_200, 13_000),
            Ev("aten::_convolution", 10_300, 12_900),
            Ev("aten::mkldnn_convolution", 10_400, 12_800),
        ]
    )
    assert table.meta["parents"] == {
        "aten::_convolution": "aten::convolution",
        "aten::mkldnn_convolution": "aten::_convolution",
    }
