"""Which timing families judge a test (model.family_specs): a test whose ops ran kernels is
judged on its device time, in raw µs with its own floor, and its host time; its CPU time and
the device's idle time are reported beside it.  A test without device time is judged as on a
machine without a GPU."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from tprof_testing import table as op_table

from tprof_engine.decide.judge import with_noise_check
from tprof_engine.decide.timing.compare import compare
from tprof_engine.decide.timing.rule import Rule
from tprof_engine.model import family_specs
from tprof_engine.model.records import OpTable
from tprof_engine.model.verdicts import INCONCLUSIVE, REGRESSED, UNCHANGED, TestVerdict

OPS = {"aten::mm": (400.0, 2), "aten::add": (150.0, 3), "aten::relu": (80.0, 1)}


def table(
    *, seed: int, cpu: float = 1.0, device: float | None = 1.0, probe: float = 1.0
) -> OpTable:
    """Rounds of OPS: CPU times scaled by ``cpu`` (4 % noise per round), device times (half
    the CPU's) by ``device`` (0.5 % noise; None: no device at all); the probes by ``probe``."""
    return op_table(
        {name: (us * cpu, calls) for name, (us, calls) in OPS.items()},
        seed=seed,
        cv=0.04,
        probe=500.0 * probe,
        device=None
        if device is None
        else {name: 0.5 * us * device for name, (us, _) in OPS.items()},
        device_cv=0.005,
        device_probe=30.0 * probe,
    )


def judged(current: OpTable, base: list[OpTable]) -> TestVerdict:
    return with_noise_check(compare(base, current), Rule())


def family(v: TestVerdict, name: str):  # type: ignore[no-untyped-def]
    return next(f for f in v.families if f.family == name)


BASE = [table(seed=s, cpu=c) for s, c in enumerate((1.0, 1.03, 0.98))]


def test_a_device_tests_cpu_drift_is_reported_and_fails_nothing() -> None:
    v = judged(table(seed=9, cpu=1.4), BASE)  # the host 40 % slower, the kernels as they were
    assert v.verdict == UNCHANGED
    assert family(v, "cpu").timing_regressed and not family(v, "cpu").gates
    assert family(v, "cuda").gates and not v.timing_regressed
    assert "CPU (timing reported, not gated): total op time +" in v.reason
    assert (
        "timing judged on CUDA total op time and host time outside any op; reported, not "
        "gated: CPU total op time (on a GPU these follow the host's drift)"
    ) in v.notes


def test_device_time_is_judged_in_raw_us_with_its_own_floor_not_the_probes() -> None:
    # Kernels 8 % slower while the device probe also reads 8 % slower: divided by the
    # probe, nothing would have moved; in raw µs, beyond the 3 % floor, it regressed.
    v = judged(table(seed=9, device=1.08, probe=1.08), BASE)
    cuda = family(v, "cuda")
    assert v.verdict == REGRESSED and cuda.timing_regressed
    assert cuda.floor_pct == pytest.approx(100 * family_specs.FAMILIES["cuda"].min_floor)
    assert 7.0 < cuda.delta_pct < 9.0
    assert v.probe_shift_pct is None  # the CPU's drift probe says nothing of device time


def test_a_test_without_device_time_is_judged_on_its_cpu_time_as_before() -> None:
    for device in (None, 0.0):  # no GPU; or a GPU machine where the test's ops ran no kernels
        base = [table(seed=s, cpu=c, device=device) for s, c in enumerate((1.0, 1.03, 0.98))]
        v = judged(table(seed=9, cpu=1.4, device=device), base)
        assert v.verdict == REGRESSED, device
        assert family(v, "cpu").gates and family(v, "cpu").timing_regressed
        assert not any("timing judged on" in n for n in v.notes)


def test_a_family_too_noisy_to_judge_leaves_the_others_verdict_alone() -> None:
    # Sessions whose host drifts by half: the CPU is too noisy; the kernels still vouch.
    noisy = [table(seed=s, cpu=c) for s, c in enumerate((1.0, 1.6, 0.8))]
    v = judged(table(seed=9, cpu=1.2), noisy)
    assert v.verdict == UNCHANGED
    cpu = [table(seed=s, cpu=c, device=None) for s, c in enumerate((1.0, 1.6, 0.8))]
    alone = judged(table(seed=9, cpu=1.2, device=None), cpu)  # with nothing else to vouch
    assert alone.verdict == INCONCLUSIVE
    assert family(alone, "cpu").too_noisy and "too noisy to judge" in alone.reason


def test_the_shared_h100_sessions_replay_unchanged_and_the_plants_fail() -> None:
    data = Path(__file__).resolve().parents[4] / "shared" / "data" / "h100-torch2.11"
    if not data.is_dir():
        pytest.skip(f"{data}: the recorded H100 sessions are not beside this checkout")
    sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))
    try:
        import gpu_replay
    finally:
        sys.path.pop(0)
    files = sorted(data.glob("baselines/*/*.json"))
    rule = Rule()
    outcomes = [v for f in files for _, _, v in gpu_replay.leave_one_out(f, rule)]
    assert [v.verdict for v in outcomes] == [UNCHANGED] * 12
    assert all(family(v, "cuda").gates and not family(v, "cuda").too_noisy for v in outcomes)
    planted = {}
    for f in files:
        stem = f.name.rsplit("-", 1)[0]
        traces = [
            t
            for t in sorted(data.glob(f"run-traces/{stem}-*051758*.pt.trace.json.gz"))
            if "vs-baseline" not in t.name
        ]
        for nodeid, _, v in gpu_replay.planted(f, traces, rule):
            planted[nodeid.split("::")[-1]] = v
    conv, chain = planted["test_conv_block_fp32"], planted["test_softmax_chain"]
    assert conv.verdict == REGRESSED and family(conv, "cuda").fails
    assert conv.device_rows and conv.device_rows[0].op == "aten::cudnn_convolution"
    assert chain.verdict == REGRESSED and family(chain, "host").fails
