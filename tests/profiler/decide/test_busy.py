"""A busy machine: which rounds waited for a CPU, and what timing is judged on (no torch).

The readings are real where they can be (a thread that shares its CPU with a spinning
process waits for it; one that sleeps blocks without waiting); the rule's answers are checked
on synthetic tables whose waits are known.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, replace

import numpy as np
import pytest
from tprof_testing import ROUNDS, table

from tprof_engine import window
from tprof_engine.capture import load
from tprof_engine.decide.judge import Recorded, judge, quiet_rounds
from tprof_engine.decide.timing import busy
from tprof_engine.decide.timing.rule import Rule
from tprof_engine.model.errors import BaselineError
from tprof_engine.model.records import OpTable, RoundLoad, concat_rounds
from tprof_engine.model.verdicts import CHANGED, INCONCLUSIVE, REGRESSED, UNCHANGED
from tprof_engine.model.work import WorkRow, WorkTable
from tprof_engine.recording import quiet_enough
from tprof_engine.store import baselines, reading, schema
from tprof_engine.store.trace_gzip import write_gzipped

OPS = {"aten::addmm": (800.0, 6), "aten::relu": (120.0, 3), "aten::copy_": (60.0, 4)}
linux_only = pytest.mark.skipif(
    not os.path.exists("/proc/thread-self/schedstat"), reason="reads Linux's schedstat"
)


def loaded(
    t: OpTable, waited: list[int], *, wait_us: float = 3000.0, crowded: tuple[int, ...] = ()
) -> OpTable:
    """``t`` with readings on a 2-CPU machine: the rounds in ``waited`` waited ``wait_us`` for
    a CPU, and that wait landed in its first op (a preemption inside an op), as it does on a
    busy machine; the rounds in ``crowded`` ran beside another busy process."""
    neighbours = np.zeros(t.rounds, dtype=np.int64)
    neighbours[list(crowded)] = 1
    queued = np.zeros(t.rounds)
    queued[waited] = wait_us
    cpu = t.self_cpu_us.copy()
    cpu[0, waited] += wait_us
    wall = t.wall_us + queued
    load = RoundLoad(
        cpu_us=t.wall_us.copy(),
        queued_us=queued,
        switches=(queued > 0).astype(np.int64),
        blocks=np.zeros(t.rounds, dtype=np.int64),
        neighbours=neighbours,
        cpus=2,
    )
    return replace(t, self_cpu_us=cpu, total_cpu_us=cpu, wall_us=wall, load=load)


EVERY_ROUND = tuple(range(ROUNDS))


def sessions(n: int = 3) -> tuple[OpTable, ...]:
    return tuple(loaded(table(OPS, seed=10 + i), []) for i in range(n))


def verdict_of(current: OpTable, base: tuple[OpTable, ...] | None = None):  # type: ignore[no-untyped-def]
    return judge(Recorded(tables=base or sessions()), Recorded(tables=(current,)), Rule())


def test_rounds_that_waited_for_a_cpu_are_left_out_of_the_timing() -> None:
    # 9 of 20 rounds had a 3 ms preemption inside aten::addmm (+375 % in those rounds)
    waited = [0, 2, 4, 6, 8, 10, 12, 14, 16]
    current = loaded(table(OPS, seed=1), waited)
    v = verdict_of(current)
    assert v.verdict == UNCHANGED, v.reason
    quiet = current.with_rounds(np.setdiff1d(np.arange(ROUNDS), waited))
    judged = {f.family: f.current_total_us for f in v.families}
    assert judged == {f.family: f.current_total_us for f in verdict_of(quiet).families}
    raw = {f.family: f.current_total_us for f in verdict_of(replace(current, load=None)).families}
    assert raw["cpu"] > judged["cpu"]


def test_too_few_quiet_rounds_read_inconclusive_machine_busy_and_never_fail_on_timing() -> None:
    current = loaded(table(OPS, seed=1), list(range(14)))
    v = verdict_of(current)
    assert v.verdict == INCONCLUSIVE
    assert v.reason == (
        "calls and work unchanged; timings not compared: machine busy: 14 of 20 rounds "
        "waited for a CPU (75% of their time)"
    )
    assert not v.timing_regressed


def conv_census(out_channels: int) -> WorkTable:
    conv = WorkRow(
        op="aten::convolution", module="conv2", phase="forward", calls=1,
        flops=9216 * out_channels, bytes_read=4096, bytes_written=256 * out_channels,
        dtypes=("float32",), signature=f"weight f32[{out_channels}, 16, 3, 3]",
    )  # fmt: skip
    return WorkTable(rows=(conv,))


def test_a_work_change_on_a_busy_machine_does_not_read_as_work_unchanged() -> None:
    base = Recorded(tables=sessions(), work=conv_census(32))
    busy_now = loaded(table(OPS, seed=1), list(range(14)))
    v = judge(base, Recorded(tables=(busy_now,), work=conv_census(64)), Rule())
    assert v.verdict == REGRESSED and v.work_regressed
    assert v.reason.startswith("work: FLOPs +100.0%")
    assert "calls unchanged; timings not compared: machine busy" in v.reason
    assert "work unchanged" not in v.reason


def test_a_neighbour_that_did_not_slow_this_process_is_reported_and_not_a_veto() -> None:
    # another process on the other CPU, and this one's rounds neither waited nor read its
    # drift probe slower: the run is judged (and the +50 % fails it)
    slow = table({**OPS, "aten::addmm": (1200.0, 6)}, seed=1)
    current = loaded(slow, [], crowded=tuple(range(ROUNDS)))
    v = verdict_of(current)
    assert v.verdict == REGRESSED and v.timing_regressed, v.reason
    said = busy.busy_of(current, Rule(), busy.quiet_reference(sessions()))
    assert said is not None and said.disturbed == 0 and said.crowded == ROUNDS
    assert said.describe() == "20 of 20 ran beside other processes busy on the machine's 2 CPU(s)"


def test_rounds_beside_busy_processes_that_slowed_this_one_are_left_out() -> None:
    # the neighbour shares caches and memory bandwidth: no wait, but the probe reads +40 %
    slow = table({**OPS, "aten::addmm": (1200.0, 6)}, seed=1)
    crowded = loaded(slow, [], crowded=tuple(range(ROUNDS)))
    current = replace(crowded, probe_cpu_us=crowded.probe_cpu_us * 1.4)
    v = verdict_of(current)
    assert v.verdict == INCONCLUSIVE and not v.timing_regressed
    assert v.reason.endswith(
        "machine busy: 20 of 20 ran beside other processes busy on the machine's 2 CPU(s) "
        "(20 of them slower for it, by the drift probe or the memory read)"
    )
    # the run's own xdist workers are not neighbours: beside one, no round shared the machine
    said = busy.busy_of(current, replace(Rule(), siblings=1), busy.quiet_reference(sessions()))
    assert said is not None and said.crowded == 0 and said.disturbed == 0


def with_memory_read(t: OpTable, us: float) -> OpTable:
    """``t`` with a memory read of ``us`` before each round (``RoundLoad.memory_us``)."""
    assert t.load is not None
    return replace(t, load=replace(t.load, memory_us=np.full(t.rounds, us)))


def test_rounds_beside_a_neighbour_that_took_the_memory_bandwidth_are_left_out() -> None:
    """A memory-bandwidth hog on the other CPU: no wait, the drift probe (arithmetic, in
    cache) steady, but the memory read +55 %: this process was slowed, and the +50 % it
    reads is not judged.  A neighbour that leaves the memory read within its share (+10 %) is
    reported, not a veto, and the same +50 % fails the test."""
    base = tuple(with_memory_read(t, 96.0) for t in sessions())
    slow = loaded(table({**OPS, "aten::addmm": (1200.0, 6)}, seed=1), [], crowded=EVERY_ROUND)
    v = verdict_of(with_memory_read(slow, 149.0), base)
    assert v.verdict == INCONCLUSIVE and not v.timing_regressed, v.reason
    assert v.reason.endswith("(20 of them slower for it, by the drift probe or the memory read)")
    light = verdict_of(with_memory_read(slow, 106.0), base)
    assert light.verdict == REGRESSED and light.timing_regressed, light.reason
    assert busy.quiet_reference(base) == busy.Reference(
        probe=busy.quiet_reference(sessions()).probe,
        memory=96.0,  # type: ignore[union-attr]
    )


def test_calls_still_gate_on_a_busy_machine() -> None:
    busy_run = loaded(table({**OPS, "aten::clone": (900.0, 2)}, seed=1), list(range(20)))
    v = verdict_of(busy_run)
    assert v.verdict == REGRESSED
    assert v.structure_regressed and not v.timing_regressed


def test_a_baseline_session_whose_rounds_all_waited_teaches_no_floor() -> None:
    base = (*sessions(2), loaded(table(OPS, seed=3, scale=3.0), list(range(ROUNDS))))
    kept, _, why = quiet_rounds(list(base), loaded(table(OPS, seed=1), []), Rule())
    assert why is None and len(kept) == 2


def test_a_round_that_blocked_itself_did_not_wait_for_a_cpu() -> None:
    t = table(OPS, seed=1)
    off_cpu = t.wall_us * 0.5  # half of each round off the CPU
    blocked = RoundLoad(
        cpu_us=t.wall_us - off_cpu,
        queued_us=np.zeros(ROUNDS),
        switches=np.zeros(ROUNDS, dtype=np.int64),
        blocks=np.ones(ROUNDS, dtype=np.int64),
    )
    assert not busy.waited_rounds(replace(t, load=blocked), share=0.01, minimum_us=20).any()
    # the same time off the CPU without blocking is a hypervisor's steal: it counts
    stolen = replace(blocked, blocks=np.zeros(ROUNDS, dtype=np.int64))
    assert busy.waited_rounds(replace(t, load=stolen), share=0.01, minimum_us=20).all()


def test_the_readings_travel_with_the_table_and_a_bad_one_is_named() -> None:
    t = loaded(table(OPS, seed=1), [2])
    again = OpTable.from_dict(t.to_dict())
    assert again.load is not None and again.load.queued_us is not None
    assert again.load.queued_us[2] == 3000.0
    assert again.load.switches is not None and list(again.load.switches[:3]) == [0, 0, 1]
    read = OpTable.from_dict(with_memory_read(t, 96.5).to_dict()).load
    assert read is not None and read.memory_us is not None and (read.memory_us == 96.5).all()
    assert read.rounds_slice(np.arange(3)).memory_us.tolist() == [96.5] * 3  # type: ignore[union-attr]
    with pytest.raises(ValueError, match="'neighbours' must hold whole numbers"):
        RoundLoad.from_dict({"cpu_us": [1.0, 2.0], "neighbours": [0.5, 1]}, 2)


def test_a_baseline_with_a_malformed_load_is_an_error_naming_it(tmp_path: object) -> None:
    from pathlib import Path

    from tprof_engine.model.environment import Fingerprint

    path = Path(str(tmp_path)) / "b.json"
    t = loaded(table(OPS, seed=1), [])
    session = schema.Session(table=t, recorded_at="2026-11-25T00:00:00Z", warmup_used=3)
    fp = Fingerprint.collect({"torch": "2.13.0", "threads": 1, "cuda_available": False})
    updated, _ = window.with_session(
        None, nodeid="t.py::t", fingerprint=fp, protocol={"rounds": ROUNDS, "iterations": 1},
        session=session, window=5,
    )  # fmt: skip
    data = updated.to_dict()
    data["sessions"][0]["load"]["queued_us"] = [1.0]
    path.write_text(reading.dumps(data))
    with pytest.raises(BaselineError, match=r"'sessions\[0\]\.load': 'queued_us' must hold one"):
        baselines.load_baseline(path)


def test_captures_join_round_by_round_with_the_union_of_their_ops() -> None:
    a = loaded(table(OPS, seed=1), [1])
    b = loaded(table({"aten::relu": (120.0, 3), "aten::mul": (5.0, 1)}, seed=2), [])
    both = concat_rounds([a, b])
    assert both.rounds == 2 * ROUNDS
    assert both.names == ("aten::addmm", "aten::copy_", "aten::mul", "aten::relu")
    assert both.calls[both.names.index("aten::mul"), :ROUNDS].sum() == 0
    assert both.load is not None and both.load.queued_us is not None
    assert both.load.queued_us[1] == 3000.0


def test_time_outside_any_op_is_judged_as_its_own_family() -> None:
    def with_host(t: OpTable, host_us: float) -> OpTable:
        assert t.load is not None  # the thread ran all that time: no round waited
        load = replace(t.load, cpu_us=t.load.cpu_us + host_us)
        return replace(t, wall_us=t.wall_us + host_us, load=load)

    base = tuple(with_host(t, 300.0) for t in sessions())
    slower = with_host(loaded(table(OPS, seed=1), []), 1300.0)  # a 1 ms Python loop added
    v = verdict_of(slower, base)
    assert v.verdict == REGRESSED and v.timing_regressed
    (host,) = [f for f in v.families if f.family == "host"]
    assert host.verdict == REGRESSED
    assert "time outside any op 294 → 1,287 µs per round (+338%" in host.reasons[0]
    assert verdict_of(with_host(loaded(table(OPS, seed=1), []), 300.0), base).verdict == UNCHANGED


# --------------------------------------------------------------------------- real readings


def measure(body: object, rounds: int = 5) -> RoundLoad:
    with load.LoadMeter() as meter:
        for _ in range(rounds):
            meter.before()
            body()  # type: ignore[operator]
            meter.after()
        return meter.result()


def spin(ms: float) -> None:
    end = time.perf_counter() + ms / 1000.0
    while time.perf_counter() < end:
        pass


@linux_only
def test_a_thread_that_sleeps_blocks_and_does_not_wait() -> None:
    load = measure(lambda: time.sleep(0.01))
    assert load.blocks is not None and (load.blocks >= 1).all()
    assert (load.cpu_us < 5000).all()  # it slept: little CPU time in a 10 ms round
    # and the memory was read around the rounds, outside them: one reading for each
    assert load.memory_us is not None and load.memory_us.shape == (5,)
    assert (load.memory_us > 0).all()


@linux_only
def test_a_thread_sharing_its_cpu_with_a_spinning_process_waits_for_it() -> None:
    cpu = sorted(os.sched_getaffinity(0))[0]
    before = os.sched_getaffinity(0)
    neighbour = subprocess.Popen(
        [sys.executable, "-c", f"import os; os.sched_setaffinity(0, {{{cpu}}})\nwhile True: pass"]
    )
    try:
        os.sched_setaffinity(0, {cpu})
        time.sleep(0.2)  # the neighbour is running
        load = measure(lambda: spin(20.0))
    finally:
        os.sched_setaffinity(0, before)
        neighbour.kill()
        neighbour.wait()
    assert load.queued_us is not None and load.switches is not None
    # two CPU-bound tasks on one CPU: each 20 ms round waits for the other's time slices
    assert (load.queued_us > 1000).sum() >= 4, load
    assert (load.switches > 0).sum() >= 4


@linux_only
def test_a_round_whose_work_runs_in_a_pool_thread_sharing_a_cpu_with_a_spinning_process_waits() -> (
    None
):
    """The body's work runs in another thread of the process (as on torch's intra-op pool)
    while the calling thread blocks on it: that thread's run-queue wait is the round's."""
    cpu = sorted(os.sched_getaffinity(0))[0]
    go, done, stop = threading.Event(), threading.Event(), threading.Event()

    def pool_thread() -> None:
        os.sched_setaffinity(0, {cpu})  # this thread only, beside the neighbour
        while go.wait() and not stop.is_set():
            go.clear()
            spin(20.0)
            done.set()

    def body() -> None:
        go.set()
        done.wait()
        done.clear()

    worker = threading.Thread(target=pool_thread, daemon=True)
    worker.start()
    neighbour = subprocess.Popen(
        [sys.executable, "-c", f"import os; os.sched_setaffinity(0, {{{cpu}}})\nwhile True: pass"]
    )
    try:
        time.sleep(0.2)  # the neighbour is running
        load_ = measure(body)
    finally:
        neighbour.kill()
        neighbour.wait()
        stop.set()
        go.set()
        worker.join()
    assert load_.queued_us is not None and load_.blocks is not None
    assert (load_.blocks >= 1).all()  # the calling thread itself only waited on the pool
    assert (load_.queued_us > 1000).sum() >= 4, load_


# --------------------------------------------------------------------------- a verdict that holds


def test_a_calls_change_is_sized_by_its_share_of_its_own_round_whatever_the_process_speed() -> None:
    # oneDNN off: other convolution kernels (new ops), the old one gone.  Measured in a
    # process 1.0x, 1.3x or 1.6x as slow as the baseline's, the µs it adds move with the
    # process; its share of its own round does not, nor does the verdict.
    base = sessions()
    swapped = {k: v for k, v in OPS.items() if k != "aten::copy_"}
    for extra_us, verdict in ((20.0, CHANGED), (100.0, REGRESSED)):  # ≈ +2 % and +9 %
        ops = {**swapped, "aten::thnn_conv2d": (60.0 + extra_us, 4)}
        for speed in (1.0, 1.3, 1.6):
            cur = loaded(table(ops, seed=1, scale=speed), [])
            v = judge(Recorded(tables=base), Recorded(tables=(cur,)), replace(Rule(), probe=False))
            assert v.structure_regressed == (verdict == REGRESSED), (extra_us, speed, v.reason)


# --------------------------------------------------------------------------- a real capture


def test_each_round_carries_its_readings_into_the_table_and_the_trace(tmp_path: object) -> None:
    import gzip
    import json
    from pathlib import Path

    import torch

    from tprof_engine.capture import session as capture

    layer, x = torch.nn.Linear(32, 32), torch.randn(4, 32)
    path = Path(str(tmp_path)) / "t.pt.trace.json.gz"
    result = capture.capture(
        lambda: layer(x), rounds=4, warmup=2, trace_path=path, write_trace=write_gzipped
    )
    load = result.table.load
    assert load is not None and load.cpu_us.shape == (4,) and (load.cpu_us > 0).all()
    assert load.cpus == os.cpu_count()
    trace = json.loads(gzip.decompress(path.read_bytes()))
    rounds = trace["tprof_rounds"]
    # the profiled warm-up round too (the earlier one runs before the profiler starts)
    assert [r["round"] for r in rounds] == list(range(capture.PROFILED_WARMUP + 4))
    steps = sorted(
        (e["ts"], e["ts"] + e["dur"])
        for e in trace["traceEvents"]
        if str(e.get("name", "")).startswith("ProfilerStep#")
    )
    counters = [e for e in trace["traceEvents"] if e.get("ph") == "C"]
    assert [c["name"] for c in counters] == ["tprof round"] * len(rounds)
    for (start, end), c in zip(steps, counters, strict=True):
        assert start <= c["ts"] <= end  # the sample sits in its own round
        assert set(c["args"]) >= {"wall_us", "cpu_us"}


def test_a_confirmation_on_a_busy_machine_is_no_evidence() -> None:
    from tprof_engine.decide.policy import after_fresh_process, after_remeasurement

    slower = verdict_of(loaded(table({**OPS, "aten::addmm": (1600.0, 6)}, seed=1), []))
    assert slower.verdict == REGRESSED and slower.timing_regressed
    busy_again = verdict_of(loaded(table(OPS, seed=2), list(range(ROUNDS))))
    assert busy_again.verdict == INCONCLUSIVE
    again = after_remeasurement(slower, busy_again)
    assert again.verdict == REGRESSED
    assert again.notes[-1].startswith(
        "a second measurement neither confirmed nor refuted it: the machine busy: "
        "20 of 20 rounds waited for a CPU"
    )
    merged = after_fresh_process(slower, busy_again)
    assert merged.verdict == REGRESSED
    assert merged.notes[-1].startswith("a fresh process neither confirmed nor refuted it")


def test_the_time_outside_any_op_is_charged_to_the_op_after_it() -> None:
    import torch

    from tprof_engine.capture import session as capture

    a = torch.randn(64, 64)

    def body() -> None:
        torch.mm(a, a)
        spin(3.0)  # 3 ms of Python between the two ops
        torch.relu(a)

    t = capture.capture(body, rounds=6, warmup=1).table
    assert t.host_before_us is not None
    before = dict(zip(t.names, t.host_before_us, strict=True))
    assert (before["aten::relu"] > 2_900).all(), before
    # Another process may take the CPU inside any round and only ever adds time, so the
    # bound above holds in every round and this one in the quietest: the body's start to its
    # first op (about 100 µs on a quiet machine, a few hundred beside busy ones), far from
    # the 3 ms spin.
    assert before["aten::mm"].min() < 1_500, before
    assert (t.host_us > 2_900).all()


def with_gap_before_relu(t: OpTable, gap_us: float) -> OpTable:
    """``t`` with ``gap_us`` of time outside any op before its ``aten::relu`` each round."""
    before = np.zeros(t.self_cpu_us.shape)
    before[t.names.index("aten::relu")] = gap_us
    load = replace(t.load, cpu_us=t.load.cpu_us + gap_us) if t.load is not None else None
    return replace(t, wall_us=t.wall_us + gap_us, host_before_us=before, load=load)


def test_a_host_regression_names_the_op_the_time_grew_before() -> None:
    base = tuple(with_gap_before_relu(t, 100.0) for t in sessions())
    v = verdict_of(with_gap_before_relu(loaded(table(OPS, seed=1), []), 900.0), base)
    (host,) = [f for f in v.families if f.family == "host"]
    assert host.verdict == REGRESSED
    # 800 µs more, in the total's drift-probe units, so the two figures add up
    grew = host.current_total_us - host.baseline_total_us
    assert 700 < grew < 900
    assert host.reasons[0].endswith(f"; it grew before aten::relu ({grew:+,.0f} µs)")


# --------------------------------------------------------------------------- the runner and glue


@dataclass(frozen=True)
class _Captured:  # the part of a capture's result the runner's retries look at
    table: OpTable


def test_a_busy_capture_is_taken_again_up_to_twice_and_its_rounds_joined() -> None:
    runs = []

    def run() -> _Captured:
        runs.append(1)
        return _Captured(loaded(table(OPS, seed=len(runs)), list(range(15))))  # 5 quiet each

    result = quiet_enough(run, Rule(), 2, None)
    assert len(runs) == 2  # 5 + 5 undisturbed rounds reach the 10 needed
    assert result.table.rounds == 2 * ROUNDS
    stays_busy = quiet_enough(
        lambda: _Captured(loaded(table(OPS, seed=1), list(range(ROUNDS)))), Rule(), 2, None
    )
    assert stays_busy.table.rounds == 3 * ROUNDS  # at most 3x the rounds


def test_a_recording_keeps_the_protocols_rounds_undisturbed_first_in_the_order_they_ran() -> None:
    # Two captures of 20 rounds, 5 and 12 of them quiet: the recording keeps 17 quiet rounds
    # and the 3 earliest disturbed ones, so a session judged against later has 17 to offer.
    first = loaded(table(OPS, seed=1), list(range(15)))
    second = loaded(table(OPS, seed=2), [0, 3, 5, 7, 9, 11, 13, 15])
    kept = busy.quietest(concat_rounds([first, second]), Rule(), ROUNDS)
    assert kept.rounds == ROUNDS
    assert kept.load is not None and kept.load.queued_us is not None
    assert int((kept.load.queued_us > 0).sum()) == 3
    assert np.array_equal(kept.wall_us[:3], first.wall_us[:3])  # the disturbed ones, in order
    assert np.array_equal(kept.wall_us[3:8], first.wall_us[15:])
    assert busy.quietest(first, Rule(), ROUNDS) is first


def test_a_quiet_run_of_few_rounds_is_not_captured_again() -> None:
    runs = []

    def run() -> _Captured:
        runs.append(1)
        return _Captured(loaded(table(OPS, seed=1, rounds=5), []))

    quiet_enough(run, Rule(), 2, None)
    assert len(runs) == 1


def test_a_run_beside_a_neighbour_that_did_not_slow_it_is_not_captured_again() -> None:
    # every round beside another busy process, the probe as fast as the baseline's: read
    # against the baseline's quiet probe, as the judge reads it, the rounds are undisturbed
    runs = []

    def run() -> _Captured:
        runs.append(1)
        return _Captured(loaded(table(OPS, seed=1), [], crowded=tuple(range(ROUNDS))))

    reference = busy.quiet_reference(sessions())
    quiet_enough(run, Rule(), 2, reference)
    assert len(runs) == 1
    quiet_enough(run, Rule(), 2, None)
    assert len(runs) == 1 + 3  # without a baseline to read them against: taken again twice


def test_the_runs_own_workers_and_threads_are_not_neighbours() -> None:
    from pytest_tprof.options import own_load

    assert own_load({}, 1) == 0
    assert own_load({"PYTEST_XDIST_WORKER": "gw1", "PYTEST_XDIST_WORKER_COUNT": "2"}, 1) == 1
    assert own_load({}, 4) == 3
    assert own_load({"PYTEST_XDIST_WORKER": "gw0", "PYTEST_XDIST_WORKER_COUNT": "x"}, 2) == 1


def test_the_summary_line_gives_the_share_of_disturbed_rounds_and_the_worst_tests() -> None:
    tables = [
        ("t.py::quiet", loaded(table(OPS, seed=1), [])),
        ("t.py::half", loaded(table(OPS, seed=2), list(range(10)))),
        ("t.py::crowded", loaded(table(OPS, seed=3), [], crowded=tuple(range(ROUNDS)))),
    ]
    line = (
        "machine: 30 of 60 measured rounds (50%) disturbed (10 waited for a CPU); timing is "
        "judged on the others; most: t.py::crowded (20 of 20), t.py::half (10 of 20)"
    )
    assert busy.run_summary(tables, Rule()) == [line]
    assert busy.run_summary(tables, Rule(), saving=True) == [
        line,
        "machine: 1 session(s) saved on a busy machine keep no timing (calls and work still "
        "gate; timing is judged on the other sessions): save again when the machine is "
        'quieter: pytest --tprof-save "t.py::crowded"',
    ]
    assert busy.run_summary([("t", table(OPS, seed=1))], Rule()) == []  # no readings
    (every,) = busy.run_summary(tables[2:], Rule())
    assert every.endswith(
        "disturbed (0 waited for a CPU); no round was undisturbed, so no timing could be "
        "judged; most: t.py::crowded (20 of 20)"
    )
    # a run that judged says what its verdicts found: the judge reads rounds beside other
    # processes against the baseline's probe, which the tables alone can't
    (judged,) = busy.run_summary(tables[2:], Rule(), unjudged=[])
    assert "; timing is judged on the rounds this process ran undisturbed; most:" in judged
    (busy_one,) = busy.run_summary(tables[2:], Rule(), unjudged=["t.py::crowded"])
    assert "; the timing of 1 test(s) was not judged (machine busy); most:" in busy_one


def test_a_baseline_session_saved_on_a_busy_machine_is_named_as_left_out() -> None:
    crowded = loaded(table(OPS, seed=12), [], crowded=tuple(range(ROUNDS)))
    slowed = replace(crowded, probe_cpu_us=crowded.probe_cpu_us * 1.4)  # and slower for it
    base = (*sessions(2), slowed)
    v = verdict_of(loaded(table(OPS, seed=1), []), base)
    assert v.sessions == 2  # the ones the timing learned from
    assert (
        "1 of 3 baseline sessions left out of the timing: saved on a busy machine (fewer "
        "than 2 undisturbed rounds)"
    ) in v.notes


def test_a_host_familys_ops_travel_in_the_json_form() -> None:
    from tprof_engine.model.verdicts import FamilyResult

    v = verdict_of(
        with_gap_before_relu(loaded(table(OPS, seed=1), []), 900.0),
        tuple(with_gap_before_relu(t, 100.0) for t in sessions()),
    )
    (host,) = [f for f in v.families if f.family == "host"]
    assert FamilyResult.from_dict(host.to_dict()).grew_before == ("aten::relu",)
    again = OpTable.from_dict(with_gap_before_relu(table(OPS, seed=1), 50.0).to_dict())
    assert again.host_before_us is not None
    assert list(again.host_before_us[again.names.index("aten::relu")][:2]) == [50.0, 50.0]


def test_a_trace_of_many_rounds_keeps_its_counter_track(tmp_path: object) -> None:
    import gzip
    import json
    from pathlib import Path

    import torch

    from tprof_engine.capture import session as capture

    x = torch.randn(4, 4)
    path = Path(str(tmp_path)) / "t.pt.trace.json.gz"
    capture.capture(
        lambda: torch.relu(x), rounds=120, warmup=2, trace_path=path, write_trace=write_gzipped
    )
    trace = json.loads(gzip.decompress(path.read_bytes()))
    assert len([e for e in trace["traceEvents"] if e.get("ph") == "C"]) == 120 + 1  # + warm-up


def test_the_family_that_added_the_most_time_leads_the_reason() -> None:
    # 800 µs more outside any op, and aten::relu 120 → 240 µs: both fail, the host first
    base = tuple(with_gap_before_relu(t, 100.0) for t in sessions())
    slower = table({**OPS, "aten::relu": (240.0, 3)}, seed=1)
    v = verdict_of(with_gap_before_relu(loaded(slower, []), 900.0), base)
    assert v.verdict == REGRESSED
    assert [f.family for f in v.families][:2] == ["host", "cpu"]
    assert v.reason.startswith("HOST: time outside any op")
    assert " | CPU: " in v.reason


def test_the_policy_captures_a_busy_test_again_while_too_few_rounds_were_quiet() -> None:
    from tprof_engine.decide.policy import capture_again

    rule = Rule()
    busy_rounds = loaded(table(OPS, seed=1), list(range(ROUNDS)))  # every round waited
    quiet = loaded(table(OPS, seed=2), [])
    assert capture_again([busy_rounds], rule, retries=2)
    assert capture_again([busy_rounds, busy_rounds], rule, retries=2)
    assert not capture_again([busy_rounds] * 3, rule, retries=2)  # retries spent
    assert not capture_again([quiet], rule, retries=2)
    assert not capture_again([busy_rounds, quiet], rule, retries=2)  # enough quiet rounds now
    from tprof_testing import dev, event_arrays, op, step

    from tprof_engine.reduce.ops import reduce_events

    kernels = reduce_events(
        event_arrays([step(0, 0, 10), op("aten::mm", 1, 5, 1), dev("k", 6, 9, 1)])
    )
    on_device = replace(busy_rounds, device=kernels.device)  # not joined across captures
    assert on_device.device is not None and not capture_again([on_device], rule, retries=2)


def test_a_pairs_own_turn_taking_is_not_counted_as_disturbance() -> None:
    """tprof ab's first round of each turn begins beside the other side, still runnable for
    a moment after passing the turn, and waits tens of µs in the run queue for it."""
    from tprof_engine.decide.timing.rule import paired_rule

    turns = list(range(0, ROUNDS, 2))
    handed = loaded(table({"aten::mm": (800.0, 4)}, seed=1), turns, wait_us=60.0, crowded=turns)
    rule = Rule()
    assert busy.busy_of(handed, rule).disturbed == len(turns)  # alone, each one is disturbed
    assert busy.busy_of(handed, paired_rule(rule)).disturbed == 0
    # a neighbour's slice on the pair's CPU is still a disturbance, paired or not
    taken = loaded(table({"aten::mm": (800.0, 4)}, seed=1), [3], wait_us=3000.0)
    assert busy.busy_of(taken, paired_rule(rule)).waited == 1
    summary = busy.run_summary([("t", handed)], paired_rule(rule), paired=True)
    assert summary[0].startswith(f"machine: 0 of {ROUNDS} measured rounds (0%) disturbed")


def test_readings_that_are_not_one_per_round_say_nothing_of_a_neighbour() -> None:
    """A probe of another length than the rounds (no reading per round) can't clear a round
    beside others: every such round counts as slowed, as without a probe."""
    crowded = loaded(table(OPS, seed=1), [], crowded=EVERY_ROUND)
    odd = replace(crowded, probe_cpu_us=crowded.probe_cpu_us[:5])
    shared = np.ones(ROUNDS, dtype=bool)
    reference = busy.quiet_reference(sessions())
    assert not busy.slowed_beside_others(crowded, Rule(), shared, reference).any()
    assert busy.slowed_beside_others(odd, Rule(), shared, reference).all()
