"""tprof ab's judgement: the head's rounds against the base's rounds run beside them, pair by
pair (Rule.paired, samples.paired_total, stats' signed-rank test)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.stats

from tprof_engine.decide import judge, policy
from tprof_engine.decide.timing import stats
from tprof_engine.decide.timing.rule import Rule
from tprof_engine.model.environment import Fingerprint
from tprof_engine.model.records import OpTable
from tprof_engine.model.verdicts import CHANGED, REGRESSED, UNCHANGED, TestVerdict

FP = Fingerprint(hard={"torch": "2.13.0", "device": "cpu", "cpu_model": "Test CPU"})
PROTOCOL = {"rounds": 20, "warmup": 1, "iterations": 1, "activities": ["cpu"], "probe": "p1"}
ROUNDS = 20


def table(ops: dict[str, float], load: np.ndarray, *, seed: int, spread: float = 0.01) -> OpTable:
    """Ops of the given µs per round, each round slowed by ``load`` (the machine both sides
    of a pair share), with a little noise of their own."""
    rng = np.random.default_rng(seed)
    names = tuple(ops)
    base = np.array([[ops[n]] for n in names])
    self_cpu = base * load * (1 + spread * rng.standard_normal((len(names), ROUNDS)))
    zeros = np.zeros((len(names), ROUNDS))
    return OpTable(
        names=names, calls=np.ones((len(names), ROUNDS), dtype=np.int64), self_cpu_us=self_cpu,
        total_cpu_us=self_cpu, self_device_us=zeros, total_device_us=zeros,
        wall_us=self_cpu.sum(axis=0) * 1.05, probe_cpu_us=200.0 * load,
        probe_device_us=np.zeros(ROUNDS),
    )  # fmt: skip


def verdict(base: OpTable, head: OpTable, *, paired: bool = True) -> TestVerdict:
    side = {"fingerprint": FP, "protocol": PROTOCOL}
    return judge.judge(
        judge.Recorded(tables=(base,), **side),  # type: ignore[arg-type]
        judge.Recorded(tables=(head,), **side),  # type: ignore[arg-type]
        Rule(),
        paired=paired,
    )


def busy_machine(seed: int) -> np.ndarray:
    """Each round slowed by 1x to 3x: another job sharing the core, its share changing."""
    return 1.0 + 2.0 * np.random.default_rng(seed).random(ROUNDS)


OPS = {"aten::mm": 600.0, "aten::relu": 300.0, "aten::add": 100.0}


def test_an_unchanged_test_on_a_machine_that_slows_each_round_differently_is_unchanged() -> None:
    for seed in range(10):
        load = busy_machine(seed)
        v = verdict(table(OPS, load, seed=seed), table(OPS, load, seed=seed + 100))
        assert v.verdict == UNCHANGED, v.reason
        assert any(n.startswith("paired: 20 head rounds") for n in v.notes)


def test_one_op_ten_percent_slower_is_caught_through_the_load_and_named() -> None:
    slower = {**OPS, "aten::mm": 660.0}
    for seed in range(5):
        load = busy_machine(seed)
        v = verdict(table(OPS, load, seed=seed), table(slower, load, seed=seed + 100))
        assert v.verdict == REGRESSED, v.reason
        assert "aten::mm" in v.reason and "paired with the base's rounds" in v.reason


def test_the_same_rounds_unpaired_cannot_see_what_the_pairing_sees() -> None:
    """Against the stored-baseline rule the load's spread hides the 10 % (and the readings
    would have left the rounds out): the pairing is what makes it visible."""
    slower = {**OPS, "aten::mm": 660.0}
    load = busy_machine(3)
    unpaired = verdict(
        table(OPS, load, seed=3), table(slower, busy_machine(4), seed=103), paired=False
    )
    assert unpaired.verdict != REGRESSED


def test_noisy_pairs_raise_the_floor_to_what_they_can_see() -> None:
    load = busy_machine(1)
    v = verdict(table(OPS, load, seed=1, spread=0.15), table(OPS, load, seed=2, spread=0.15))
    cpu = next(f for f in v.families if f.family == "cpu")
    assert cpu.floor_pct > 5.0 and cpu.floor_pct == pytest.approx(cpu.mde_pct)
    assert v.verdict == UNCHANGED


def test_work_and_calls_still_gate_exactly() -> None:
    load = busy_machine(5)
    more = table(OPS, load, seed=6)
    more.calls[2] = 3  # aten::add called three times a round now
    assert verdict(table(OPS, load, seed=5), more).verdict in (CHANGED, REGRESSED)


def test_a_paired_timing_regression_is_confirmed_by_a_fresh_pair_not_in_process() -> None:
    load = busy_machine(0)
    v = verdict(table(OPS, load, seed=0), table({**OPS, "aten::mm": 900.0}, load, seed=9))
    assert v.verdict == REGRESSED
    assert policy.next_step(v, in_process=False) == policy.FRESH_PROCESS
    assert policy.next_step(v, in_process=False, in_fresh_process=True) == policy.DONE
    assert policy.next_step(v) == policy.REMEASURE  # unpaired: in this process first


@pytest.mark.parametrize("seed", range(6))
def test_the_signed_rank_p_value_is_scipys_exact_one(seed: int) -> None:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(5 + 3 * seed) + 0.3
    ours = stats.signed_rank_greater(x)
    theirs = scipy.stats.wilcoxon(x, alternative="greater", method="exact").pvalue
    assert ours == pytest.approx(theirs, rel=1e-9)


@pytest.mark.parametrize("n", [51, 200, 2000])
def test_many_pairs_take_scipys_normal_approximation(n: int) -> None:
    """Past 50 pairs (rounds up to 10,000) the exact sum would cost n³: the approximation."""
    rng = np.random.default_rng(n)
    x = np.round(rng.standard_normal(n) + 0.1, 1)  # rounded: ties, and the tie correction
    theirs = scipy.stats.wilcoxon(x, alternative="greater", method="approx", correction=True)
    assert stats.signed_rank_greater(x) == pytest.approx(theirs.pvalue, rel=1e-9)
    if n > stats.HODGES_LEHMANN_MAX_N:  # the Walsh averages would number n²/2
        assert stats.hodges_lehmann(x) == pytest.approx(float(np.median(x)))
    else:
        walsh = [(x[a] + x[b]) / 2 for a in range(n) for b in range(a, n)]
        assert stats.hodges_lehmann(x) == pytest.approx(float(np.median(walsh)))


def test_signed_ranks_of_tied_differences_count_half_ranks() -> None:
    x = np.array([0.1, 0.1, -0.2, 0.3, 0.3, 0.3, 0.0])  # ties, and a zero dropped
    p = stats.signed_rank_greater(x)
    assert 0.0 < p < 0.2
    assert stats.signed_rank_greater(np.zeros(5)) == 1.0


def test_the_paired_centre_is_the_hodges_lehmann_estimate() -> None:
    assert stats.hodges_lehmann(np.array([1.0, 2.0, 3.0])) == 2.0
    assert stats.hodges_lehmann(np.array([0.0, 0.0, 10.0])) == pytest.approx(2.5)
    assert stats.log_ratios(np.array([1.0, 0.0, 2.0]), np.array([2.0, 1.0, 2.0])).tolist() == [
        pytest.approx(np.log(2.0)),
        0.0,
    ]
