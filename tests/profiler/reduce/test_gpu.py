"""The device table: per-op device rows, copies, syncs, idle time and queue depth.

Hand-built events give exact figures; the real kineto traces (A100 / V100) check the counts and
that the rows add up to the op table's device time.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from tprof_testing import CPU, STREAM2, Row, dev, event_arrays, gpu_trace, op, step, sync

from tprof_engine.decide.judge import per_iteration
from tprof_engine.decide.timing.compare import compare
from tprof_engine.decide.timing.device import row_deltas
from tprof_engine.decide.timing.families import IDLE_FAMILY
from tprof_engine.model.device_tables import DeviceTable
from tprof_engine.model.environment import Fingerprint
from tprof_engine.model.errors import BaselineError
from tprof_engine.model.records import KIND_ANNOTATION, EventArrays, OpTable
from tprof_engine.model.results import ProfiledTest
from tprof_engine.model.verdicts import TestVerdict
from tprof_engine.reduce.device import blocks_host, copy_direction
from tprof_engine.reduce.ops import drop_leading_rounds, reduce_events
from tprof_engine.render import html, report
from tprof_engine.store import schema as store
from tprof_engine.store.traces import table_from_trace


def device_of(rows: list[Row]) -> DeviceTable:
    table = reduce_events(event_arrays(rows))
    assert table.device is not None
    return table.device


def row(table: DeviceTable, op_name: str, kind: str, name: str) -> dict[str, list[float]]:
    (i,) = [k for k in table.rows_of(op_name, kind) if table.names[k] == name]
    return {
        "calls": table.calls[i].tolist(),
        "device_us": table.device_us[i].tolist(),
        "bytes": table.bytes[i].tolist(),
    }


TWO_ROUNDS = [
    step(0, 0, 10_000),
    op("aten::mm", 1_000, 2_000, corr=1),
    dev("gemm", 3_000, 5_000, link=1, launch=1_500),
    dev("gemm", 5_000, 6_000, link=1, launch=1_600),
    op("aten::item", 2_000, 9_000, corr=2),
    dev("Memcpy DtoH (Device -> Pageable)", 7_000, 7_500, link=2, launch=2_100, nbytes=4),
    sync("Stream Sync", 7_500, 8_000, link=2),
    step(1, 10_000, 20_000),
    op("aten::mm", 11_000, 12_000, corr=3),
    dev("gemm", 13_000, 16_000, link=3, launch=11_500),
]


def test_each_op_gets_its_kernels_copies_and_syncs_per_round() -> None:
    table = device_of(TWO_ROUNDS)
    assert row(table, "aten::mm", "kernel", "gemm") == {
        "calls": [2, 1],
        "device_us": [3.0, 3.0],
        "bytes": [0, 0],
    }
    assert row(table, "aten::item", "memcpy", "Memcpy DtoH (Device -> Pageable)") == {
        "calls": [1, 0],
        "device_us": [0.5, 0.0],
        "bytes": [4, 0],
    }
    assert row(table, "aten::item", "sync", "Stream Sync")["calls"] == [1, 0]


def test_syncs_take_no_device_time_from_their_op() -> None:
    table = reduce_events(event_arrays(TWO_ROUNDS))
    assert table.op("aten::item")["self_device_us"].tolist() == [0.5, 0.0]


def test_idle_time_is_the_gaps_between_device_activities_on_any_stream() -> None:
    table = device_of(
        [
            step(0, 0, 100_000),
            op("aten::a", 1_000, 2_000, corr=1),
            dev("k1", 10_000, 20_000, link=1),
            dev("k2", 15_000, 30_000, link=1, stream=STREAM2),  # overlaps k1 on another stream
            op("aten::b", 2_000, 3_000, corr=2),
            dev("k3", 50_000, 60_000, link=2),  # 20 µs after the last end: waited for aten::b
            dev("k4", 40_000, 45_000, link=1),  # 10 µs after k2, before k3
        ]
    )
    assert table.span_us.tolist() == [50.0]
    assert table.idle_us.tolist() == [15.0]  # 30→40 and 45→50
    assert table.idle_fraction.tolist() == [0.3]
    assert dict(zip(table.idle_ops, table.idle_before_us[:, 0].tolist(), strict=True)) == {
        "aten::a": 10.0,
        "aten::b": 5.0,
    }
    assert idle_ranking(table) == [("aten::a", 10.0), ("aten::b", 5.0)]


def idle_ranking(table: DeviceTable) -> list[tuple[str, float]]:
    """Ops by the device idle time that ended at their activities (median µs per round),
    largest first; ops with none left out."""
    medians = np.median(table.idle_before_us, axis=1) if table.idle_ops else np.zeros(0)
    ranked = sorted(zip(table.idle_ops, medians.tolist(), strict=True), key=lambda x: -x[1])
    return [(op, us) for op, us in ranked if us > 0]


def test_queue_depth_counts_launched_unfinished_activities_at_each_launch() -> None:
    table = device_of(
        [
            step(0, 0, 100_000),
            op("aten::a", 1_000, 9_000, corr=1),
            dev("k1", 2_000, 20_000, link=1, launch=1_000),  # at launch: itself → 1
            dev("k2", 20_000, 30_000, link=1, launch=3_000),  # k1, itself → 2
            dev("k3", 30_000, 31_000, link=1, launch=25_000),  # k1 done: k2, itself → 2
        ]
    )
    assert table.queue_depth.tolist() == [pytest.approx(5 / 3)]


def test_queue_depth_is_unknown_without_launch_times() -> None:
    events = event_arrays(TWO_ROUNDS)
    table = reduce_events(EventArrays(**{**_fields(events), "launch_ns": None}))
    assert table.device is not None
    assert np.isnan(table.device.queue_depth).all()


def _fields(ev: EventArrays) -> dict[str, object]:
    return {k: getattr(ev, k) for k in EventArrays.__dataclass_fields__}


def test_device_work_of_the_drift_probe_and_outside_rounds_is_left_out() -> None:
    table = device_of(
        [
            op("aten::setup", 0, 500, corr=9),
            dev("init", 600, 700, link=9),
            step(0, 1_000, 10_000),
            ("tprof::probe#0", 1_000, 2_000, KIND_ANNOTATION, CPU, 0, 0, 0, 0),
            op("aten::mm", 1_100, 1_900, corr=1),
            dev("probe_gemm", 2_000, 3_000, link=1),
            op("aten::add", 2_100, 2_500, corr=2),
            dev("add_kernel", 3_000, 3_500, link=2),
        ]
    )
    assert table.ops == ("aten::add",)
    assert table.span_us.tolist() == [0.5]


def test_a_merged_duplicate_op_hands_its_kernels_to_the_op_that_kept_its_time() -> None:
    table = device_of(
        [
            step(0, 0, 10_000),
            op("aten::copy_", 1_000, 5_000, corr=1),
            op("aten::copy_", 1_500, 4_500, corr=2),  # only child, same name: merged
            dev("Memcpy HtoD (Pageable -> Device)", 6_000, 6_400, link=2, nbytes=1024),
        ]
    )
    assert row(table, "aten::copy_", "memcpy", "Memcpy HtoD (Pageable -> Device)")["bytes"] == [
        1024
    ]


def test_dropping_warm_up_rounds_drops_them_from_the_device_table() -> None:
    table = drop_leading_rounds(reduce_events(event_arrays(TWO_ROUNDS)), 1)
    assert table.device is not None
    assert row(table.device, "aten::mm", "kernel", "gemm")["calls"] == [1]
    assert table.device.span_us.tolist() == [3.0]


def test_a_cpu_only_run_has_no_device_table() -> None:
    table = reduce_events(event_arrays([step(0, 0, 1_000), op("aten::add", 100, 200, corr=1)]))
    assert table.device is None


def test_the_device_table_round_trips_and_older_files_read_as_none() -> None:
    table = reduce_events(event_arrays(TWO_ROUNDS))
    again = OpTable.from_dict(table.to_dict())
    assert again.device is not None and table.device is not None
    assert again.device.to_dict() == table.device.to_dict()
    old = table.to_dict()
    del old["device"]
    assert OpTable.from_dict(old).device is None


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d.update(rows=3), "must be an object with a 'rows' list"),
        (lambda d: d["rows"][0].update(kind="tensor"), "'rows[0].kind' must be one of"),
        (lambda d: d["rows"][0].update(calls=[1]), "'rows[0].calls' must hold one number per"),
        (lambda d: d.update(idle_us=[1.0, -2.0]), "'idle_us' must hold finite numbers >= 0"),
        (lambda d: d["rows"][0].update(bytes=[1, "x"]), "'bytes' must hold numbers only"),
    ],
)
def test_a_malformed_device_table_is_an_error_naming_the_part(change, message) -> None:  # type: ignore[no-untyped-def]
    data = reduce_events(event_arrays(TWO_ROUNDS)).to_dict()
    change(data["device"])
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace("[", r"\[")):
        OpTable.from_dict(data)


def test_copy_directions_and_what_blocks_the_host() -> None:
    assert copy_direction("Memcpy DtoH (Device -> Pageable)") == "DtoH"
    assert copy_direction("Memcpy HtoD (Pinned -> Device)") == "HtoD"
    assert copy_direction("gemm") == ""
    assert blocks_host("memcpy", "Memcpy DtoH (Device -> Pinned)")
    assert not blocks_host("memcpy", "Memcpy HtoD (Pinned -> Device)")
    assert blocks_host("sync", "Context Sync")
    assert not blocks_host("sync", "Stream Wait Event")


# --------------------------------------------------------------------------- real traces


@pytest.fixture(scope="module")
def control() -> OpTable:
    return table_from_trace(gpu_trace("training_control.pt.trace.json.gz"))


def test_real_trace_every_kernel_lands_in_a_row_and_rows_add_up_to_device_time(
    control: OpTable,
) -> None:
    table = control.device
    assert table is not None
    kernels = [i for i, k in enumerate(table.kinds) if k == "kernel"]
    # 8,568 kernels in the trace, 6 ProfilerStep rounds of 1,428 each.
    assert table.calls[kernels].sum(axis=0).tolist() == [1428] * 6
    timed = [i for i, k in enumerate(table.kinds) if k != "sync"]
    np.testing.assert_allclose(
        table.device_us[timed].sum(axis=0), control.self_device_us.sum(axis=0)
    )


def test_real_trace_copies_carry_direction_and_bytes(control: OpTable) -> None:
    table = control.device
    assert table is not None
    dtoh = row(table, "aten::_local_scalar_dense", "memcpy", "Memcpy DtoH (Device -> Pageable)")
    assert dtoh == {"calls": [4] * 6, "device_us": dtoh["device_us"], "bytes": [32] * 6}
    assert (
        row(table, "aten::copy_", "memcpy", "Memcpy DtoD (Device -> Device)")["bytes"]
        == [12881920] * 6
    )


def test_real_trace_idle_time_and_queue_depth_per_round(control: OpTable) -> None:
    table = control.device
    assert table is not None
    assert table.idle_us.tolist() == [17028.0, 14122.0, 10094.0, 10196.0, 8666.0, 13283.0]
    assert np.all((table.idle_fraction > 0.1) & (table.idle_fraction < 0.25))
    assert np.all(table.queue_depth > 1)
    assert idle_ranking(table)[0] == ("aten::mm", 2536.0)


def test_real_trace_syncs_go_to_the_op_that_waited() -> None:
    table = table_from_trace(gpu_trace("alexnet_small.pt.trace.json.gz")).device
    assert table is not None
    syncs = {
        (table.ops[i], table.names[i]): int(table.calls[i].sum())
        for i, k in enumerate(table.kinds)
        if k == "sync"
    }
    # 41 cuda_sync events: 16 stream syncs after the 16 host-to-device copies of aten::copy_.
    assert sum(syncs.values()) == 41
    assert syncs[("aten::copy_", "Stream Sync")] == 16


# --------------------------------------------------------------------------- against a baseline


def rounds_of(
    n: int,
    *,
    seed: int,
    gemm_ns: int = 40_000,
    gap_ns: int = 5_000,
    dtoh: bool = False,
) -> OpTable:
    """``n`` rounds of a device step: ``aten::mm`` launches two kernels with ``gap_ns`` of
    device idle time before the second (jittered); with ``dtoh``, ``aten::item`` copies a
    scalar to the host and syncs.  Every round is 100 µs of host time."""
    rng = np.random.default_rng(seed)
    rows: list[Row] = []
    corr = 0
    for r in range(n):
        t0 = r * 200_000
        rows.append(step(r, t0, t0 + 190_000))
        corr += 1
        rows.append(op("aten::mm", t0 + 1_000, t0 + 10_000, corr=corr))
        gap = int(gap_ns * rng.uniform(0.95, 1.05))
        g = int(gemm_ns * rng.uniform(0.98, 1.02))
        rows.append(dev("gemm", t0 + 20_000, t0 + 20_000 + g, link=corr, launch=t0 + 2_000))
        k2 = t0 + 20_000 + g + gap
        rows.append(dev("bias_add", k2, k2 + 2_000, link=corr, launch=t0 + 5_000))
        if dtoh:
            corr += 1
            rows.append(op("aten::item", t0 + 11_000, t0 + 100_000, corr=corr))
            c0 = k2 + 3_000
            rows.append(
                dev("Memcpy DtoH (Device -> Pageable)", c0, c0 + 1_000, link=corr, nbytes=4)
            )
            rows.append(sync("Stream Sync", c0 + 1_000, c0 + 1_500, link=corr))
    return reduce_events(event_arrays(rows))


def test_a_new_device_to_host_copy_and_sync_fail_the_test_naming_the_op() -> None:
    base = [rounds_of(12, seed=s) for s in range(3)]
    v = compare(base, rounds_of(12, seed=9, dtoh=True), same_hardware=False)
    cuda = next(f for f in v.families if f.family == "cuda")
    assert v.verdict == "regressed"
    assert cuda.structure_regressed
    assert (
        "aten::item: Memcpy DtoH (Device -> Pageable) 0 → 1 per round, 4 B "
        "(the host now waits for the device)" in cuda.reasons
    )
    assert "aten::item: Stream Sync 0 → 1 per round (the host now waits for the device)" in (
        cuda.reasons
    )
    assert any(r.op == "aten::item" and r.kind == "memcpy" for r in v.device_rows)


def test_a_host_wait_gone_is_a_change_not_a_regression() -> None:
    base = [rounds_of(12, seed=s, dtoh=True) for s in range(3)]
    v = compare(base, rounds_of(12, seed=9), same_hardware=False)
    cuda = next(f for f in v.families if f.family == "cuda")
    assert not cuda.structure_regressed
    assert "aten::item: Stream Sync 1 → 0 per round (the host waits less for the device)" in (
        cuda.reasons
    )


def test_a_baseline_without_device_tables_gates_no_host_waits() -> None:
    base = [replace(rounds_of(12, seed=s), device=None) for s in range(3)]
    v = compare(base, rounds_of(12, seed=9, dtoh=True), same_hardware=False)
    assert not any(f.family == IDLE_FAMILY for f in v.families)
    cuda = next(f for f in v.families if f.family == "cuda")
    assert not any("waits" in r for r in cuda.reasons)
    assert v.device_rows == ()


def test_more_device_idle_time_regresses_the_idle_family_naming_the_op_waited_for() -> None:
    base = [rounds_of(20, seed=s) for s in range(3)]
    v = compare(base, rounds_of(20, seed=9, gap_ns=60_000))
    idle = next(f for f in v.families if f.family == IDLE_FAMILY)
    assert idle.verdict == "regressed"
    assert idle.timing_regressed  # so it is re-measured and confirmed like other timing
    assert idle.baseline_total_us == pytest.approx(5.0, rel=0.05)
    assert idle.current_total_us == pytest.approx(60.0, rel=0.05)
    assert "it waited longer for aten::mm +" in idle.reasons[0]


def test_unchanged_idle_time_is_unchanged() -> None:
    base = [rounds_of(20, seed=s) for s in range(3)]
    v = compare(base, rounds_of(20, seed=9))
    idle = next(f for f in v.families if f.family == IDLE_FAMILY)
    assert idle.verdict == "unchanged"
    assert v.verdict != "regressed"


def test_a_slower_kernel_is_named_under_its_op_in_the_verdict_and_every_report() -> None:
    base = [rounds_of(20, seed=s) for s in range(3)]
    v = compare(base, rounds_of(20, seed=9, gemm_ns=80_000))
    assert any(o.op == "aten::mm" and o.family == "cuda" and o.flagged for o in v.ops)
    first = v.device_rows[0]
    assert (first.op, first.name) == ("aten::mm", "gemm")
    assert first.delta_us == pytest.approx(40.0, rel=0.05)
    assert TestVerdict.from_dict(v.to_dict()).device_rows == v.device_rows
    test = ProfiledTest(nodeid="t.py::test_step", verdict=v)
    text = report.failure_text(test, verbose=True)
    assert "device time of the flagged ops, per round:" in text
    assert "    gemm       kernel  1 → 1            40.0 → 80.8  +40.8" in text
    # Without -v too, a failure of the device's time leads with its kernels, before the ops.
    plain = report.failure_text(test)
    assert "    gemm       kernel  1 → 1            40.0 → 80.8  +40.8" in plain
    assert plain.index("device time of the flagged ops") < plain.index("  op  ")
    doc = report.json_report([test], environment={})
    assert doc["tests"][0]["device_rows"][0]["name"] == "gemm"
    page = html.html_report(doc)
    assert "<h3>device time of the flagged ops</h3>" in page
    assert "<code title='gemm'>gemm</code>" in page


def test_real_trace_the_kernel_that_moved_comes_first(control: OpTable) -> None:
    table = control.device
    assert table is not None
    mm = table.rows_of("aten::mm", "kernel")
    slowed = mm[3]  # one of aten::mm's 41 kernels, 1.5x slower
    device_us = table.device_us.copy()
    device_us[slowed] *= 1.5
    rows = row_deltas(["aten::mm"], [table], replace(table, device_us=device_us))
    assert len(mm) == 41
    assert rows[0].name == table.names[slowed]
    assert rows[0].delta_us == pytest.approx(0.5 * float(np.median(table.device_us[slowed])))
    assert all(r.delta_us == 0 for r in rows[1:])


def test_per_iteration_divides_the_device_table_like_the_op_table() -> None:
    table = reduce_events(event_arrays(TWO_ROUNDS))
    halved = per_iteration(table, 2).device
    assert halved is not None
    assert row(halved, "aten::mm", "kernel", "gemm") == {
        "calls": [1, 1],  # 2 → 1; 1 → 0.5, kept at one call
        "device_us": [1.5, 1.5],
        "bytes": [0, 0],
    }
    assert row(halved, "aten::item", "memcpy", "Memcpy DtoH (Device -> Pageable)")["bytes"] == [
        2,
        0,
    ]


def test_a_baseline_with_a_damaged_device_table_is_an_error_naming_the_file(
    tmp_path: Path,
) -> None:
    table = reduce_events(event_arrays(TWO_ROUNDS))
    fingerprint = Fingerprint.from_dict({"hard": {}, "soft": {}})
    session = store.Session(table=table, recorded_at="2026-01-01T00:00:00", warmup_used=1)
    saved = store.Baseline(
        nodeid="t.py::test_step",
        fingerprint=fingerprint,
        protocol={"rounds": 2, "warmup": 1, "iterations": 1},
        sessions=(session,),
    )
    data = saved.to_dict()
    assert store.baseline_from_dict(data, path=tmp_path / "b.json").tables[0].device is not None
    data["sessions"][0]["device"]["rows"][0]["kind"] = "tensor"
    with pytest.raises(BaselineError) as info:
        store.baseline_from_dict(data, path=tmp_path / "b.json")
    assert "'sessions[0].device': 'rows[0].kind' must be one of kernel, memcpy, memset, sync" in (
        str(info.value)
    )
    assert str(info.value).startswith(str(tmp_path / "b.json"))
