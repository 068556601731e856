"""Reading Chrome traces: real GPU traces, a live CPU capture, hand-written traces, bad files."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tprof_testing import gpu_trace

from tprof_engine.model.errors import ConfigError, TraceError
from tprof_engine.model.records import KIND_ANNOTATION, KIND_DEVICE, KIND_IGNORED, KIND_OP
from tprof_engine.store.trace_gzip import write_gzipped
from tprof_engine.store.traces import TraceData, read_trace, table_from_trace

CONTROL = "training_control.pt.trace.json.gz"
CHANGED = "training_changed.pt.trace.json.gz"
ALEXNET = "alexnet_small.pt.trace.json.gz"


@pytest.fixture(scope="module")
def control() -> TraceData:
    return read_trace(gpu_trace(CONTROL))


@pytest.fixture(scope="module")
def changed() -> TraceData:
    return read_trace(gpu_trace(CHANGED))


def _kernel_us(trace: TraceData) -> float:
    ev = trace.events
    device = ev.kind == KIND_DEVICE
    return float((ev.end_ns[device] - ev.start_ns[device]).sum()) / 1000.0


# --- real GPU traces ------------------------------------------------------------------------


@pytest.mark.parametrize("which", ["control", "changed"])
def test_a_training_trace_has_one_round_per_profiler_step(
    which: str, request: pytest.FixtureRequest
) -> None:
    table = table_from_trace(request.getfixturevalue(which))
    assert table.rounds == 6
    assert table.meta["whole_trace_as_round"] is False
    assert table.has_device
    # Steady-state training steps call the matmuls the same number of times every round.
    mm = table.op("aten::mm")["calls"]
    assert mm.min() == mm.max() > 0


@pytest.mark.parametrize(("which", "least_share"), [("control", 0.99), ("changed", 0.9)])
def test_kernel_time_of_a_training_trace_lands_on_the_ops_that_launched_it(
    which: str, least_share: float, request: pytest.FixtureRequest
) -> None:
    trace: TraceData = request.getfixturevalue(which)
    table = table_from_trace(trace)
    # The changed trace holds ~6 % kernel time launched before profiling began: no launch.
    assert table.self_device_us.sum() >= least_share * _kernel_us(trace)
    ix = table.index()
    for name in ("aten::mm", "aten::addmm", "aten::copy_"):
        assert table.self_device_us[ix[name]].min() > 0, name
    # The runtime call is the launch, not the op: torch's tables give it no device time.
    assert table.self_device_us[ix["cudaLaunchKernel"]].sum() == 0
    assert table.self_cpu_us[ix["cudaLaunchKernel"]].sum() > 0
    assert np.all(table.total_device_us >= table.self_device_us)


def test_training_trace_kernels_are_linked_through_the_runtime_launch_not_the_external_id(
    control: TraceData,
) -> None:
    ev = control.events
    device = np.flatnonzero(ev.kind == KIND_DEVICE)
    assert device.size == 8568 + 654 + 228  # kernels, memsets, memcpys
    owners = ev.link[device] - 1
    assert np.all(owners >= 0)
    assert np.all(ev.kind[owners] != KIND_DEVICE)
    owner_names = {ev.names[i] for i in ev.name_idx[owners].tolist()}
    assert "aten::mm" in owner_names
    assert not any(n.startswith("cuda") for n in owner_names)


def test_the_two_training_traces_name_different_gpus(
    control: TraceData, changed: TraceData
) -> None:
    assert set(control.device_names) == {"NVIDIA A100-PG509-200"}
    assert set(changed.device_names) == {"Tesla V100-SXM2-16GB"}
    assert control.metadata["distributedInfo"]["rank"] == 3
    assert "traceEvents" not in control.metadata
    table = table_from_trace(control)
    assert table.meta["source"] == "trace"
    assert table.meta["path"] == str(gpu_trace(CONTROL))
    assert table.meta["device_names"] == list(control.device_names)


def test_a_trace_without_profiler_steps_is_one_round() -> None:
    table = table_from_trace(gpu_trace(ALEXNET))
    assert table.rounds == 1
    assert table.meta["whole_trace_as_round"] is True
    assert table.has_device
    trace = read_trace(gpu_trace(ALEXNET))
    assert table.self_device_us.sum() == pytest.approx(_kernel_us(trace))
    assert table.op("aten::cudnn_convolution")["self_device_us"][0] > 0


# --- a live capture, written and read back ---------------------------------------------------


def test_a_captured_trace_reads_back_as_the_live_table(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    from tprof_engine.capture.backends import CPU
    from tprof_engine.capture.session import capture

    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)
    )
    x = torch.randn(64, 256)

    def step() -> None:
        model.zero_grad()
        model(x).sum().backward()

    path = tmp_path / "mlp.pt.trace.json.gz"
    result = capture(
        step, rounds=4, warmup=2, trace_path=path, write_trace=write_gzipped, device=CPU
    )
    live = result.table
    read = table_from_trace(path)

    assert read.rounds == live.rounds == 4  # the trace's warm-up round was dropped
    assert sorted(read.names) == sorted(live.names)
    live_totals = live.session_totals()
    read_totals = read.session_totals()
    for name in live.names:
        assert np.array_equal(read.op(name)["calls"], live.op(name)["calls"]), name
        want = live_totals[name]["self_cpu_us"]
        if want > 100:
            assert read_totals[name]["self_cpu_us"] == pytest.approx(want, rel=0.01), name
    assert read.probe_cpu_us == pytest.approx(live.probe_cpu_us, rel=0.01)
    assert not read.has_device


# --- hand-written traces -------------------------------------------------------------------


def _x(
    name: str, cat: str, ts: float, dur: float, *, pid: int = 7, tid: int = 1, **args: Any
) -> dict[str, Any]:
    return {
        "ph": "X",
        "cat": cat,
        "name": name,
        "pid": pid,
        "tid": tid,
        "ts": ts,
        "dur": dur,
        "args": args,
    }


def _write(path: Path, doc: Any) -> Path:
    data = json.dumps(doc).encode()
    path.write_bytes(gzip.compress(data) if path.suffix == ".gz" else data)
    return path


def _small_gpu_trace() -> dict[str, Any]:
    # Old kineto style: the kernel's "External id" is the runtime's correlation, not the op's.
    events = [
        {"ph": "M", "name": "process_name", "pid": 7, "tid": 0, "args": {"name": "python"}},
        _x("ProfilerStep#3", "user_annotation", 1000.0, 100.0, **{"External id": 1}),
        _x("aten::linear", "cpu_op", 1010.0, 50.0, **{"External id": 2}),
        _x("aten::addmm", "cpu_op", 1020.0, 30.5, **{"External id": 3}),
        _x("cudaLaunchKernel", "cuda_runtime", 1025.0, 5.25, correlation=40, **{"External id": 40}),
        _x("aten::is_leaf", "cpu_op", 1060.0, 1.0, **{"External id": 4}),
        _x("python_fn", "python_function", 1000.0, 100.0),
        {"ph": "f", "id": 40, "pid": 7, "tid": 1, "ts": 1025.0, "cat": "ac2g", "name": "ac2g"},
        _x("gemm", "kernel", 1030.0, 20.0, pid=0, tid=7, correlation=40, **{"External id": 40}),
        _x("early", "kernel", 990.0, 3.0, pid=0, tid=7, correlation=39, **{"External id": 39}),
        {"ph": "i", "s": "t", "cat": "cpu_instant_event", "name": "[memory]", "ts": 1030.0},
    ]
    return {
        "schemaVersion": 1,
        "deviceProperties": [{"id": 0, "name": "GPU-A"}, {"id": 1, "name": "GPU-B"}],
        "traceEvents": events,
    }


@pytest.mark.parametrize("suffix", [".json", ".json.gz"])
def test_read_trace_maps_categories_to_kinds_and_times_to_ns(tmp_path: Path, suffix: str) -> None:
    trace = read_trace(_write(tmp_path / f"t{suffix}", _small_gpu_trace()))
    ev = trace.events
    by_name = {ev.names[j]: i for i, j in enumerate(ev.name_idx.tolist())}
    assert set(by_name) == {
        "ProfilerStep#3",
        "aten::linear",
        "aten::addmm",
        "cudaLaunchKernel",
        "aten::is_leaf",
        "python_fn",
        "gemm",
        "early",
    }
    kinds = {n: int(ev.kind[i]) for n, i in by_name.items()}
    assert kinds == {
        "ProfilerStep#3": KIND_ANNOTATION,
        "aten::linear": KIND_OP,
        "aten::addmm": KIND_OP,
        "cudaLaunchKernel": KIND_OP,
        "aten::is_leaf": KIND_IGNORED,  # torch filters it out of its tables
        "python_fn": KIND_IGNORED,
        "gemm": KIND_DEVICE,
        "early": KIND_DEVICE,
    }
    i = by_name["cudaLaunchKernel"]
    assert int(ev.end_ns[i] - ev.start_ns[i]) == 5250
    assert int(ev.start_ns[i] - ev.start_ns[by_name["ProfilerStep#3"]]) == 25_000
    assert ev.thread[by_name["aten::addmm"]] == ev.thread[by_name["ProfilerStep#3"]]
    assert ev.thread[by_name["gemm"]] != ev.thread[by_name["aten::addmm"]]
    # The kernel belongs to the op around its launch; an unmatched one belongs to nobody.
    assert ev.link[by_name["gemm"]] == ev.corr[by_name["aten::addmm"]]
    assert ev.link[by_name["early"]] == 0
    assert trace.device_names == ("GPU-A", "GPU-B")
    assert trace.metadata == {
        "schemaVersion": 1,
        "deviceProperties": [{"id": 0, "name": "GPU-A"}, {"id": 1, "name": "GPU-B"}],
    }


def test_table_from_a_hand_written_trace_has_exact_self_times(tmp_path: Path) -> None:
    table = table_from_trace(_write(tmp_path / "t.json", _small_gpu_trace()))
    assert table.rounds == 1
    assert table.meta["whole_trace_as_round"] is False
    assert set(table.names) == {"aten::linear", "aten::addmm", "cudaLaunchKernel"}
    assert table.op("aten::linear")["self_cpu_us"].tolist() == [19.5]
    assert table.op("aten::addmm")["self_cpu_us"].tolist() == [25.25]
    assert table.op("aten::addmm")["self_device_us"].tolist() == [20.0]
    assert table.op("aten::linear")["self_device_us"].tolist() == [0.0]
    assert table.op("aten::linear")["total_device_us"].tolist() == [20.0]
    assert table.op("cudaLaunchKernel")["self_device_us"].tolist() == [0.0]
    assert table.wall_us.tolist() == [100.0]


def test_a_launch_outside_any_op_keeps_its_kernel_time(tmp_path: Path) -> None:
    doc = {
        "traceEvents": [
            _x("cudaLaunchKernel", "cuda_runtime", 10.0, 2.0, correlation=5),
            _x("k", "kernel", 15.0, 4.0, pid=0, tid=99, correlation=5),
        ]
    }
    table = table_from_trace(_write(tmp_path / "t.json", doc))
    assert table.op("cudaLaunchKernel")["self_device_us"].tolist() == [4.0]


def _tprof_trace(warmup: int, rounds: int, steps: int) -> dict[str, Any]:
    events = []
    for r in range(steps):
        events.append(_x(f"ProfilerStep#{r}", "user_annotation", 100.0 * r, 50.0))
        events.append(_x("aten::add", "cpu_op", 100.0 * r + 10, float(r + 1)))
    return {
        "traceEvents": events,
        "tprof": {"warmup": warmup, "rounds": rounds, "iterations": 1},
    }


def test_a_tprof_trace_loses_its_recorded_warmup_rounds(tmp_path: Path) -> None:
    table = table_from_trace(_write(tmp_path / "t.json", _tprof_trace(2, 3, 5)))
    assert table.rounds == 3
    assert table.op("aten::add")["self_cpu_us"].tolist() == [3.0, 4.0, 5.0]


def test_a_trace_from_another_tool_keeps_every_round(tmp_path: Path) -> None:
    doc = _tprof_trace(2, 3, 5)
    del doc["tprof"]
    table = table_from_trace(_write(tmp_path / "t.json", doc))
    assert table.op("aten::add")["self_cpu_us"].tolist() == [1.0, 2.0, 3.0, 4.0, 5.0]


def test_a_tprof_trace_whose_rounds_disagree_with_its_metadata_is_an_error(
    tmp_path: Path,
) -> None:
    path = _write(tmp_path / "t.json", _tprof_trace(2, 5, 5))
    with pytest.raises(TraceError) as info:
        table_from_trace(path)
    assert str(info.value) == (
        f"{path}: 'tprof' metadata says 2 warm-up + 5 measured rounds but the trace holds "
        "5 ProfilerStep rounds; re-export the trace"
    )


def test_a_bare_event_array_is_a_trace(tmp_path: Path) -> None:
    path = _write(tmp_path / "t.json", [_x("aten::add", "cpu_op", 1.0, 2.0)])
    trace = read_trace(path)
    assert trace.metadata == {}
    assert trace.device_names == ()
    assert table_from_trace(trace).op("aten::add")["calls"].tolist() == [1]


# --- bad files -----------------------------------------------------------------------------


def _error(path: Path) -> str:
    with pytest.raises(TraceError) as info:
        read_trace(path)
    return str(info.value)


def test_a_missing_trace_is_an_error_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "nope.pt.trace.json.gz"
    assert _error(path) == f"{path}: no such trace file; check the path"


def test_garbage_bytes_are_an_error_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    assert _error(path) == (
        f"{path}: not a JSON text file (undecodable bytes); re-export the trace"
    )


def test_text_that_is_not_json_is_an_error_saying_where(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_text('{"traceEvents": [\n  {"ph": "X",,}\n]}')
    assert _error(path) == (
        f"{path}: not valid JSON (Expecting property name enclosed in double quotes "
        "at line 2 col 14); re-export the trace"
    )


def test_a_truncated_gzip_trace_is_an_error_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "t.pt.trace.json.gz"
    data = gzip.compress(json.dumps(_small_gpu_trace()).encode())
    path.write_bytes(data[: len(data) // 2])
    assert _error(path) == f"{path}: truncated gzip stream; re-export the trace"


def test_an_empty_file_is_an_error_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_bytes(b"")
    assert _error(path) == f"{path}: empty file, no trace in it; re-export the trace"


def test_json_without_trace_events_is_an_error_naming_the_file(tmp_path: Path) -> None:
    path = _write(tmp_path / "t.json", {"schemaVersion": 1, "events": []})
    assert _error(path) == (
        f"{path}: no 'traceEvents' list at the top level, so it is not a Chrome trace; "
        "pass a trace written by torch.profiler (export_chrome_trace) or by pytest --tprof"
    )


def test_an_event_without_a_timestamp_is_an_error_naming_the_event(tmp_path: Path) -> None:
    bad = _x("aten::add", "cpu_op", 1.0, 2.0)
    del bad["ts"]
    path = _write(tmp_path / "t.json", {"traceEvents": [_x("a", "cpu_op", 0.0, 1.0), bad]})
    assert _error(path) == (
        f"{path}: traceEvents[1] is not a well-formed trace event (no 'ts'); re-export the trace"
    )


def test_early_warm_up_rounds_run_before_the_profiler_and_a_late_change_extends_warm_up(
    tmp_path: Path,
) -> None:
    import torch

    from tprof_engine.capture.backends import CPU
    from tprof_engine.capture.session import PROFILED_WARMUP, capture

    x = torch.ones(4)
    called: list[int] = []

    def step() -> torch.Tensor:
        called.append(1)
        if len(called) <= 3:  # lazy work in the first three calls
            torch.relu(x)
        return torch.add(x, x)

    path = tmp_path / "t.pt.trace.json.gz"
    result = capture(
        step, rounds=3, warmup=3, trace_path=path, write_trace=write_gzipped, device=CPU
    )
    # The third call (the profiled warm-up round) still did the lazy work and the fourth
    # didn't, so warm-up was extended to 6 rounds and the capture taken again.
    assert result.warmup_used == 6
    assert len(called) == (3 + 3) + (6 + 3)
    assert "aten::relu" not in result.table.names and result.table.rounds == 3
    trace = json.loads(gzip.decompress(path.read_bytes()))
    steps = [e for e in trace["traceEvents"] if str(e.get("name", "")).startswith("ProfilerStep#")]
    assert len(steps) == PROFILED_WARMUP + 3  # the 5 earlier warm-up rounds weren't profiled
    assert trace["tprof"]["warmup"] == PROFILED_WARMUP


def test_a_trace_path_without_its_writer_is_refused_naming_the_writer(tmp_path: Path) -> None:
    """The capture stage exports, the store writes: a capture given a path and no writer
    says which to pass, rather than writing nothing."""
    torch = pytest.importorskip("torch")
    from tprof_engine.capture.session import capture

    path = tmp_path / "t.pt.trace.json.gz"
    with pytest.raises(ConfigError, match=r"trace_gzip\.write_gzipped"):
        capture(torch.relu, (torch.randn(4),), rounds=2, warmup=0, trace_path=path)
    assert not path.exists()
