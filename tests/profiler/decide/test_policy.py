"""The confirmation policy as data (decide.policy.next_step), and the typed causes it reads."""

from __future__ import annotations

from dataclasses import replace

import pytest
from tprof_testing import table

from tprof_engine.decide import judge, policy
from tprof_engine.decide.gates.registry import GATES
from tprof_engine.decide.judge import Recorded
from tprof_engine.decide.timing.rule import Rule
from tprof_engine.model.verdicts import (
    BUSY,
    IMPROVED,
    INCONCLUSIVE,
    REGRESSED,
    UNCHANGED,
    Cause,
    TestVerdict,
)

OPS = {"aten::addmm": (800.0, 6), "aten::relu": (120.0, 3), "aten::copy_": (60.0, 4)}
SESSIONS = tuple(table(OPS, seed=s) for s in (10, 11, 12))


def verdict_on(ops: dict[str, tuple[float, int]]) -> TestVerdict:
    return judge.judge(Recorded(tables=SESSIONS), Recorded(tables=(table(ops, seed=1),)), Rule())


@pytest.fixture(scope="module")
def slower() -> TestVerdict:
    v = verdict_on({**OPS, "aten::addmm": (1600.0, 6)})
    assert v.verdict == REGRESSED and v.timing_regressed
    return v


def test_a_timing_regression_is_measured_again_then_run_in_a_fresh_process(
    slower: TestVerdict,
) -> None:
    assert policy.next_step(slower) == policy.REMEASURE
    assert policy.next_step(slower, in_process=False) == policy.FRESH_PROCESS
    assert policy.next_step(slower, in_process=False, workers=4) == policy.AFTER_WORKERS


def test_a_fresh_process_confirms_nothing_further_and_no_confirm_takes_the_verdict_as_is(
    slower: TestVerdict,
) -> None:
    assert policy.next_step(slower, in_process=False, in_fresh_process=True) == policy.DONE
    assert policy.next_step(slower, confirm=False) == policy.DONE
    assert policy.next_step(slower, confirm=False, in_process=False) == policy.DONE


def test_an_unchanged_verdict_needs_no_step() -> None:
    same = verdict_on(OPS)
    assert same.verdict == UNCHANGED
    assert policy.next_step(same) == policy.DONE
    assert policy.next_step(same, in_process=False) == policy.DONE


def test_a_fresh_process_that_found_the_machine_busy_is_no_evidence(slower: TestVerdict) -> None:
    busy = Cause(kind=BUSY, text="machine busy: 20 of 20 rounds waited for a CPU")
    child = TestVerdict(verdict=INCONCLUSIVE, reason="whatever it says", causes=(busy,))
    merged = policy.after_fresh_process(slower, child)
    assert merged.verdict == REGRESSED and merged.reason == slower.reason
    assert merged.notes[-1] == (
        "a fresh process neither confirmed nor refuted it: the machine busy: 20 of 20 rounds "
        "waited for a CPU"
    )


def test_a_confirmation_confirms_refutes_or_is_no_evidence(slower: TestVerdict) -> None:
    assert policy.slower_families(slower) == ["cpu"]
    again = verdict_on({**OPS, "aten::addmm": (1500.0, 6)})
    assert policy.evidence(slower, again) == (policy.CONFIRMS, "")
    assert policy.after_fresh_process(slower, again).notes[-1] == "confirmed in a fresh process"
    same = verdict_on(OPS)
    # the second block by itself rules the slowdown out (its upper bound inside the floor)
    assert policy.evidence(slower, same) == (
        policy.REFUTES,
        "CPU +82% then +0% (p=1); pooled +33%, floor 10%; the two disagree beyond their "
        "noise (p<1e-6)",
    )
    refuted = policy.after_fresh_process(slower, same)
    assert refuted.verdict == INCONCLUSIVE
    assert refuted.reason.startswith("slower in this process, not in a fresh one (unchanged there)")
    assert refuted.notes[-2].startswith("process-dependent: CPU +82% then +0%")
    # the child judged no CPU time: its word ("improved", "changed") says nothing of it
    noisy = replace(
        same,
        verdict=IMPROVED,
        families=tuple(replace(f, too_noisy=True) for f in same.families if f.family == "cpu"),
    )
    assert policy.evidence(slower, noisy) == (
        policy.NO_EVIDENCE,
        "it could not judge CPU time (improved there)",
    )
    assert policy.after_fresh_process(slower, noisy).verdict == REGRESSED
    untimed = replace(same, timing_compared=False, differences=("cpu_model a → b",))
    assert policy.evidence(slower, untimed)[1] == "it compared no timings (cpu_model a → b)"
    # other settings there: even a repeat is no evidence, and the regression stands
    other = ("cuBLAS fp32 precision tf32 → ieee",)
    merged = policy.after_fresh_process(slower, again, "", other)
    assert merged.verdict == REGRESSED
    assert merged.notes[-1] == (
        "a fresh process neither confirmed nor refuted it: it ran under other settings "
        "(cuBLAS fp32 precision tf32 → ieee)"
    )


def test_a_remeasurement_without_evidence_leaves_the_first_verdict(slower: TestVerdict) -> None:
    busy = Cause(kind=BUSY, text="machine busy: 20 of 20 rounds waited for a CPU")
    again = policy.after_remeasurement(slower, replace(verdict_on(OPS), causes=(busy,)))
    assert again.verdict == REGRESSED and again.families == slower.families
    assert policy.after_remeasurement(slower, verdict_on(OPS)).verdict == UNCHANGED


def test_causes_survive_the_json_round_trip(slower: TestVerdict) -> None:
    cause = Cause(kind="memory", text="MEMORY: aten::addmm allocates more", failing=True)
    v = replace(slower, causes=(cause,))
    assert TestVerdict.from_dict(v.to_dict()).causes == (cause,)


@pytest.mark.parametrize("kind", ["memory", "compile", "communication"])
def test_an_exact_cause_that_fails_the_test_needs_no_second_look(
    slower: TestVerdict, kind: str
) -> None:
    """The gate's cause carries its exactness (its ``GATE.exact``)."""
    (gate,) = [g for g in GATES if g.kind == kind]
    failing = replace(slower, causes=(gate.cause(f"{kind}: more", failing=True),))
    assert failing.exact_regressed
    assert policy.next_step(failing) == policy.DONE
    assert not policy.needs_fresh_process(failing)
    assert policy.with_exact_note(failing).notes[-1].startswith("timing not re-measured: ")
    said = replace(slower, causes=(gate.cause(f"{kind}: less"),))
    assert not said.exact_regressed and policy.next_step(said) == policy.REMEASURE


def test_the_policy_says_how_often_a_busy_capture_is_taken_again() -> None:
    """A recording and a judged run retry up to the run's number; a run with nothing to
    judge against, or a side of tprof ab (paced, every round kept), never."""
    assert policy.busy_retries(2, recording=True, judged=False, paired=False) == 2
    assert policy.busy_retries(2, recording=False, judged=True, paired=False) == 2
    assert policy.busy_retries(2, recording=False, judged=False, paired=False) == 0
    assert policy.busy_retries(2, recording=False, judged=True, paired=True) == 0


def with_cpu(v: TestVerdict, **figures: object) -> TestVerdict:
    """``v`` with its CPU family's figures replaced."""
    families = tuple(replace(f, **figures) if f.family == "cpu" else f for f in v.families)  # type: ignore[arg-type]
    return replace(v, families=families)


def test_a_second_look_that_is_only_not_significant_adds_evidence_and_takes_nothing_back(
    slower: TestVerdict,
) -> None:
    # +82 % first; then +30 % in a noisy block that reached no significance on its own: the
    # two pooled are still beyond the floor, and the second doesn't rule the slowdown out
    noisy = with_cpu(verdict_on(OPS), delta_pct=30.0, p_value=0.2, mde_pct=60.0)
    said, why = policy.evidence(slower, noisy)
    assert said == policy.CONFIRMS
    assert why.startswith("CPU +82% then +30% (p=0.2); pooled +")
    assert policy.after_fresh_process(slower, noisy).verdict == REGRESSED
    merged = policy.after_remeasurement(slower, noisy)
    assert merged.verdict == REGRESSED and merged.families == slower.families
    assert merged.notes[-1].startswith("confirmed by a second measurement pooled with it: CPU")
    assert not policy.second_is_kept(said, noisy)


def test_a_second_look_inside_the_floor_pooled_with_the_first_takes_it_back(
    slower: TestVerdict,
) -> None:
    # a first block barely past its floor, a second one at +2 %: pooled inside the floor
    barely = with_cpu(slower, delta_pct=14.0, mde_pct=6.0)
    close = with_cpu(verdict_on(OPS), delta_pct=2.0, p_value=0.4, mde_pct=8.0)
    said, why = policy.evidence(barely, close)
    assert said == policy.REFUTES, why
    assert policy.second_is_kept(said, close)


def test_a_slower_kernel_path_in_the_second_look_confirms_the_first(slower: TestVerdict) -> None:
    # the fresh pair booked its time rise to the calls that changed (a replaced kernel): its
    # family failed on the structure, not the timing, and that repeats the regression
    path = with_cpu(
        verdict_on(OPS), verdict=REGRESSED, structure_regressed=True, timing_regressed=False
    )
    assert policy.evidence(slower, path) == (policy.CONFIRMS, "")


def with_family(v: TestVerdict, family: str, **figures: object) -> TestVerdict:
    """``v`` with one family's figures replaced."""
    families = tuple(replace(f, **figures) if f.family == family else f for f in v.families)  # type: ignore[arg-type]
    return replace(v, families=families)


def test_a_fresh_process_in_another_context_is_no_evidence_while_the_slowdown_shows_there(
    slower: TestVerdict,
) -> None:
    """HF Llama ``generate``'s decoding-loop plant: host +75 % in its suite, and alone, where
    its CPU ops read −18 % against the baseline, host still +13 %: the context can't take
    back a slowdown that shows through it."""
    both = with_family(
        slower,
        "host",
        verdict=REGRESSED,
        timing_regressed=True,
        delta_pct=75.0,
        floor_pct=17.0,
        p_value=1e-6,
        mde_pct=5.0,
    )
    alone = with_cpu(verdict_on(OPS), verdict=IMPROVED, delta_pct=-18.0, p_value=1.0, mde_pct=5.0)
    # host +13 % there, unsure (detectable effect 20 %): it can't take the +75 % back
    unsure = with_family(alone, "host", delta_pct=13.0, floor_pct=17.0, p_value=0.2, mde_pct=20.0)
    said, why = policy.evidence(both, unsure)
    assert said == policy.CONFIRMS
    assert why == (
        "host +75% then +13% (p=0.2); pooled +70%, floor 17%; the two disagree beyond their "
        "noise (p<1e-6): process-dependent, its size moves with the process"
    )
    assert policy.after_fresh_process(both, unsure).verdict == REGRESSED
    # +9 % there, sure enough to be inside the floor and not a slowdown by itself: the context
    # it ran in is what the child measured
    sure = with_family(alone, "host", delta_pct=9.0, floor_pct=17.0, p_value=0.2, mde_pct=8.0)
    said, why = policy.evidence(both, sure)
    assert said == policy.NO_EVIDENCE
    assert why == (
        "it read CPU time -18% against the baseline where this process read +82%, and host "
        "time still +9%: it ran in another context (alone, a test can run faster than in the "
        "suite its baseline was recorded in)"
    )
    assert policy.after_fresh_process(both, sure).verdict == REGRESSED


def test_a_fresh_process_that_reads_every_slower_family_faster_takes_the_slowdown_back(
    slower: TestVerdict,
) -> None:
    """HF Llama ``generate`` unchanged: CPU +26 % in one process, −19 % alone.  With no
    family that failed still slower there, the child is evidence that the slowdown was its
    parent process's: inconclusive, not a failure."""
    alone = with_cpu(verdict_on(OPS), verdict=IMPROVED, delta_pct=-20.0, p_value=1.0, mde_pct=5.0)
    said, why = policy.evidence(slower, alone)
    assert said == policy.REFUTES, why
    merged = policy.after_fresh_process(slower, alone)
    assert merged.verdict == INCONCLUSIVE and policy.not_confirmed(merged.reason)
    assert merged.notes[-2].startswith("process-dependent: CPU +82% then -20%")


def op_gated(ratio_pct: float, total_pct: float, regressed: bool) -> TestVerdict:
    """A verdict whose CPU family failed on one op against the rest of its test alone (its
    total +``total_pct``, under its 19 % floor), or only read it there."""
    v = verdict_on(OPS)
    op = next(o for o in v.ops if o.op == "aten::addmm")
    moved = replace(
        op,
        verdict=REGRESSED if regressed else UNCHANGED,
        vs_rest_pct=ratio_pct,
        vs_rest_floor_pct=19.0,
        vs_rest_mde_pct=8.0,
        vs_rest_only=regressed,
    )
    ops = tuple(moved if o is op else o for o in v.ops)
    cpu = {"delta_pct": total_pct, "floor_pct": 19.0, "mde_pct": 7.0, "p_value": 0.5}
    if regressed:
        cpu["op_gate"] = ("aten::addmm",)
    return with_cpu(replace(v, ops=ops, verdict=REGRESSED if regressed else UNCHANGED), **cpu)


def test_a_family_failed_by_one_op_is_pooled_on_that_op_not_on_its_total() -> None:
    """A custom op +25 % against the rest of its test (the test +11 %, under its floor), then
    +15 % in a fresh process: pooled +20 %, beyond the 19 % floor, so it stands; the total,
    +11 % then +5 %, never was beyond it and can't take the op's failure back."""
    first = op_gated(25.0, 11.0, regressed=True)
    assert policy.slower_families(first) == ["cpu"]
    said, why = policy.evidence(first, op_gated(15.0, 5.0, regressed=False))
    assert said == policy.CONFIRMS, why
    assert why.startswith("aten::addmm against the rest of the test +25% then +15%; pooled +")
    # a fresh process that reads the op as it was takes it back, with both numbers
    said, why = policy.evidence(first, op_gated(0.0, 5.0, regressed=False))
    assert said == policy.REFUTES
    assert why.startswith("aten::addmm against the rest of the test +25% then +0%; pooled +")
