"""A verdict short of its floor measured again (decide.again): which verdicts are, the step the
policy names, the two looks pooled (tprof ab's pairs, a stored baseline's processes), and the
loop that runs it."""

from __future__ import annotations

from dataclasses import replace

import pytest
from tprof_testing import table

from tprof_engine import confirm
from tprof_engine.decide import again, judge, policy
from tprof_engine.decide.judge import Recorded
from tprof_engine.decide.timing.rule import Rule, paired_rule
from tprof_engine.model.results import ProfiledTest
from tprof_engine.model.verdicts import REGRESSED, UNCHANGED, TestVerdict

OPS = {"aten::addmm": (800.0, 6), "aten::relu": (120.0, 3), "aten::copy_": (60.0, 4)}
RULE = paired_rule(Rule())


def paired(scale: float, *, seed: int = 2, cv: float = 0.03) -> TestVerdict:
    """A paired verdict: the head's rounds ``scale`` times the base's."""
    base = Recorded(tables=(table(OPS, seed=1, cv=cv),))
    head = Recorded(tables=(table(OPS, seed=seed, cv=cv, scale=scale),))
    return judge.judge(base, head, Rule(), paired=True)


def with_cpu(v: TestVerdict, **figures: object) -> TestVerdict:
    """``v`` with its CPU family's figures replaced (its change the same in both units unless
    ``to_other_units`` says otherwise)."""
    if "delta_pct" in figures:
        figures.setdefault("to_other_units", 1.0)
    families = tuple(replace(f, **figures) if f.family == "cpu" else f for f in v.families)  # type: ignore[arg-type]
    return replace(v, families=families)


@pytest.fixture(scope="module")
def short() -> TestVerdict:
    """The +10 % plant's miss beside one busy process: CPU +9.2 % over 20 pairs, p=0.035, its
    floor the pairs' detectable effect, 8.9 %."""
    v = with_cpu(paired(1.0), delta_pct=9.2, p_value=0.035, floor_pct=8.9, mde_pct=8.9)
    assert v.verdict == UNCHANGED
    return v


def test_a_change_beyond_half_its_floor_that_did_not_regress_is_short(short: TestVerdict) -> None:
    assert [f.family for f in again.short_families(short, RULE)] == ["cpu"]
    assert again.short_families(paired(1.0), RULE) == []  # unchanged pairs: within ±1 %
    slower = paired(1.3)
    assert slower.verdict == REGRESSED
    assert again.short_families(slower, RULE) == []  # regressed: confirmed, not measured again
    leaning = with_cpu(short, delta_pct=4.0)  # under half the floor
    assert again.short_families(leaning, RULE) == []
    far = with_cpu(short, p_value=0.4)  # beyond half the floor, but far from significant
    assert again.short_families(far, RULE) == []


def test_the_policy_measures_a_short_verdict_again_where_a_rule_says_how(
    short: TestVerdict,
) -> None:
    assert policy.next_step(short, in_process=False, again_rule=RULE) == policy.MEASURE_AGAIN
    assert policy.next_step(short, in_process=False, again_rule=Rule()) == policy.MEASURE_AGAIN
    assert policy.next_step(short, in_process=False) == policy.DONE  # no rule: it stands
    # under xdist it waits for the workers, as a regression's confirmation does
    waiting = policy.next_step(short, in_process=False, again_rule=RULE, workers=2)
    assert waiting == policy.AFTER_WORKERS
    assert (
        policy.next_step(short, in_process=False, in_fresh_process=True, again_rule=RULE)
        == policy.DONE
    )
    assert policy.next_step(short, confirm=False, again_rule=RULE) == policy.DONE


def test_two_pairs_pooled_beyond_their_floor_fail_the_test(short: TestVerdict) -> None:
    """+9.2 % (p=0.035) then +10 % (p=0.02, mde 8 %): averaged +9.6 %, its floor the
    average's detectable effect (5.9 %), the two p-values combined 0.003."""
    second = with_cpu(paired(1.0, seed=3), delta_pct=10.0, p_value=0.02, floor_pct=8.0, mde_pct=8.0)
    merged = again.after_looks(short, [second], RULE)
    assert merged.verdict == REGRESSED
    cpu = next(f for f in merged.families if f.family == "cpu")
    assert cpu.timing_regressed and round(cpu.delta_pct, 1) == 9.6
    assert round(cpu.floor_pct, 1) == 5.9 and round(cpu.p_value, 4) == 0.0031
    assert cpu.floor_source == "paired with the base's rounds, over two pairs"
    assert merged.reason.startswith("CPU: total op time +9.6% over two pairs (p=")
    assert merged.reason.endswith("paired with the base's rounds; +9.2% then +10.0%)")
    assert merged.notes[-1].startswith(
        "short of its floor, measured again in a fresh pair: CPU total op time +9.2% (p=0.035, "
        "floor 9%) then +10.0% (p=0.02); pooled +9.6%"
    )
    assert policy.needs_fresh_process(merged)  # a regression now, its second pair its confirmation


def test_a_second_pair_that_reads_no_slowdown_leaves_the_first_verdict(short: TestVerdict) -> None:
    second = with_cpu(paired(1.0, seed=3), delta_pct=0.5, p_value=0.9, floor_pct=7.0, mde_pct=7.0)
    merged = again.after_looks(short, [second], RULE)
    assert merged.verdict == UNCHANGED and merged.families == short.families
    assert merged.notes[-1].startswith(
        "short of its floor, measured again in a fresh pair: CPU total op time +9.2%"
    )
    assert merged.notes[-1].endswith("then +0.5% (p=0.9); pooled +4.8% (p=0.35, floor 6%)")


def test_a_second_pair_that_could_not_say_leaves_the_first_verdict_with_why(
    short: TestVerdict,
) -> None:
    gone = again.no_evidence(None, RULE, "the fresh pair timed out")
    assert gone == "not measured again: the fresh pair timed out"
    other = again.no_evidence(short, RULE, other_settings=("TF32",))
    assert other == "a fresh pair ran under TF32 unlike it"
    blind = again.no_evidence(replace(short, timing_compared=False), RULE)
    assert blind == "the fresh pair compared no timings"
    assert again.no_evidence(short, RULE) == ""
    # the loop keeps the first verdict, and says why
    steps = Looks(replace(short, timing_compared=False))
    kept = confirm.confirmed(ProfiledTest(nodeid="t.py::test_op", verdict=short), steps, PAIRS)
    assert kept.verdict.verdict == UNCHANGED
    assert kept.verdict.notes[-1] == "short of its floor; the fresh pair compared no timings"


class Looks:
    """An executor whose fresh looks read ``verdicts`` in turn; it counts its calls."""

    def __init__(self, *verdicts: TestVerdict | None) -> None:
        self.verdicts, self.calls = verdicts, 0

    def remeasure(self, test: ProfiledTest) -> confirm.Look:
        raise AssertionError("a pair is not captured again in its process")

    def fresh_process(self, test: ProfiledTest) -> confirm.Look:
        self.calls += 1
        verdict = self.verdicts[self.calls - 1]
        return confirm.Look(verdict=verdict, why="" if verdict else "the fresh pair timed out")

    def after_workers(self, test: ProfiledTest) -> confirm.Look:
        raise AssertionError("no workers")


PAIRS = confirm.Plan(in_process=False, again_rule=RULE)


def test_the_confirm_loop_runs_one_fresh_pair_for_a_short_verdict(short: TestVerdict) -> None:
    second = with_cpu(paired(1.0, seed=3), delta_pct=10.0, p_value=0.02, floor_pct=8.0, mde_pct=8.0)
    steps = Looks(second)
    test = ProfiledTest(nodeid="t.py::test_op", verdict=short)
    plan = confirm.Plan(in_process=False, again_rule=RULE)
    done = confirm.confirmed(test, steps, plan)
    assert steps.calls == 1 and done.verdict.verdict == REGRESSED
    # without a rule to measure again under, the verdict stands as it is, nothing started
    alone = Looks(second)
    kept = confirm.confirmed(test, alone, confirm.Plan(in_process=False))
    assert alone.calls == 0 and kept.verdict == short


def stored(scale: float) -> TestVerdict:
    """A verdict against three stored sessions: the current rounds ``scale`` times theirs."""
    base = Recorded(tables=tuple(table(OPS, seed=s, cv=0.03) for s in (1, 2, 3)))
    return judge.judge(base, Recorded(tables=(table(OPS, seed=4, cv=0.03, scale=scale),)), Rule())


def test_a_stored_verdict_short_of_its_floor_is_pooled_over_two_processes_at_that_floor() -> None:
    """An LSTM step's host-loop plant read +8 % (p=0.02) in one process under a 10 % floor,
    then +14 % in a fresh one: averaged +11 %, beyond the floor the baseline sessions allow
    one process, which the average of two is held to as well."""
    first = with_cpu(stored(1.0), delta_pct=8.0, p_value=0.02, floor_pct=10.0, mde_pct=6.0)
    assert first.verdict == UNCHANGED
    assert [f.family for f in again.short_families(first, Rule())] == ["cpu"]
    second = with_cpu(stored(1.0), delta_pct=14.0, p_value=1e-4, floor_pct=10.0, mde_pct=6.0)
    merged = again.after_looks(first, [second], Rule())
    assert merged.verdict == REGRESSED
    cpu = next(f for f in merged.families if f.family == "cpu")
    assert round(cpu.delta_pct, 1) == 11.0 and cpu.floor_pct == 10.0
    assert cpu.floor_source.endswith(", over two processes")
    assert merged.reason.startswith("CPU: total op time +11.0% over two processes (p=")
    assert merged.notes[-1].startswith("short of its floor, measured again in a fresh process: ")
    # a second process that reads it smaller leaves the average inside the floor
    low = with_cpu(stored(1.0), delta_pct=9.0, p_value=0.01, floor_pct=10.0, mde_pct=6.0)
    kept = again.after_looks(first, [low], Rule())
    assert kept.verdict == UNCHANGED and kept.families == first.families
    assert kept.notes[-1].endswith("pooled +8.5% (p=0.00098, floor 10%)")
    # nor is a rise under the rule's least µs a regression, however far beyond the floor
    tiny = Rule(abs_floor_us=10_000.0)
    small = again.after_looks(first, [second], tiny)
    assert small.verdict == UNCHANGED and "so not read as a slowdown" not in small.notes[-1]
    # nor one the other units don't follow: probe units +11 %, raw µs +1 % (a slower probe),
    # and its readings say so
    raw_flat = with_cpu(second, to_other_units=0.94 / 1.14)  # +14 % in probe units, −6 % raw
    held = again.after_looks(first, [raw_flat], Rule())
    assert held.verdict == UNCHANGED
    assert held.notes[-1].endswith("in raw µs, so not read as a slowdown"), held.notes[-1]


def test_a_reading_beyond_its_floor_that_another_check_set_aside_is_not_short() -> None:
    """Significant and beyond the floor, yet unchanged (its other units didn't follow): a
    second look would change nothing of why."""
    raw_up_2 = 1.02 / 1.13  # +13 % in probe units, +2 % raw
    aside = with_cpu(
        stored(1.0), delta_pct=13.0, p_value=1e-6, floor_pct=10.0, to_other_units=raw_up_2
    )
    assert aside.verdict == UNCHANGED and again.set_aside(
        next(f for f in aside.families if f.family == "cpu"), Rule()
    )
    assert again.short_families(aside, Rule()) == []


def test_the_confirm_loop_runs_one_fresh_process_for_a_short_stored_verdict() -> None:
    first = with_cpu(stored(1.0), delta_pct=8.0, p_value=0.02, floor_pct=10.0, mde_pct=6.0)
    second = with_cpu(stored(1.0), delta_pct=14.0, p_value=1e-4, floor_pct=10.0, mde_pct=6.0)
    steps = Looks(second)
    test = ProfiledTest(nodeid="t.py::test_lstm", verdict=first)
    done = confirm.confirmed(test, steps, confirm.Plan(again_rule=Rule()))
    assert steps.calls == 1 and done.verdict.verdict == REGRESSED
    # the fresh process itself measures nothing again, nor does a run without confirmation
    for plan in (confirm.Plan(fresh=False, again_rule=Rule()), confirm.Plan(confirm=False)):
        idle = Looks(second)
        assert confirm.confirmed(test, idle, plan).verdict == first and idle.calls == 0


def test_a_verdict_still_short_over_two_pairs_gets_a_third(short: TestVerdict) -> None:
    """+9.2 % (p=0.035), then +6 % (p=0.2): pooled still short; a third pair at +9 %
    (p=0.01) makes three looks pooled beyond the floor."""
    second = with_cpu(paired(1.0, seed=3), delta_pct=6.0, p_value=0.2, floor_pct=8.0, mde_pct=8.0)
    assert again.another_look(short, [second], RULE)
    assert not again.another_look(short, [second], RULE, most=2)
    third = with_cpu(paired(1.0, seed=4), delta_pct=9.0, p_value=0.01, floor_pct=8.0, mde_pct=8.0)
    steps = Looks(second, third)
    done = confirm.confirmed(ProfiledTest(nodeid="t.py::test_op", verdict=short), steps, PAIRS)
    assert steps.calls == 2 and done.verdict.verdict == REGRESSED
    assert done.verdict.reason.startswith("CPU: total op time +8.1% over three pairs (p=")
    assert done.verdict.reason.endswith("; +9.2% then +6.0% then +9.0%)")
    assert done.verdict.notes[-1].startswith("short of its floor, measured again in two pairs: ")
    # with two looks at most, the second leaves it short, and it stands
    two = Looks(second, third)
    plan = replace(PAIRS, most_looks=2)
    kept = confirm.confirmed(ProfiledTest(nodeid="t.py::test_op", verdict=short), two, plan)
    assert two.calls == 1 and kept.verdict.verdict == UNCHANGED


def test_a_second_look_that_leaves_it_far_from_its_floor_ends_the_looks(
    short: TestVerdict,
) -> None:
    flat = with_cpu(paired(1.0, seed=3), delta_pct=0.5, p_value=0.9, floor_pct=7.0, mde_pct=7.0)
    assert not again.another_look(short, [flat], RULE)
    steps = Looks(flat, flat)
    done = confirm.confirmed(ProfiledTest(nodeid="t.py::test_op", verdict=short), steps, PAIRS)
    assert steps.calls == 1 and done.verdict.verdict == UNCHANGED
    # a look that gave nothing ends them too, the looks before it judged as they are
    gone = Looks(None)
    left = confirm.confirmed(ProfiledTest(nodeid="t.py::test_op", verdict=short), gone, PAIRS)
    assert gone.calls == 1 and left.verdict.notes[-1] == (
        "short of its floor; not measured again: the fresh pair timed out"
    )


def test_a_regression_a_fresh_pair_took_back_is_measured_a_third_time() -> None:
    """+13 % in the first pair, +2 % in a fresh one (taken back, process-dependent), +9 % in
    a third: pooled over three pairs, beyond the floor."""
    first, low, again_slow = paired(1.13), paired(1.03, seed=3), paired(1.09, seed=4)
    assert first.verdict == REGRESSED
    steps = Looks(low, again_slow)
    done = confirm.confirmed(ProfiledTest(nodeid="t.py::test_op", verdict=first), steps, PAIRS)
    assert steps.calls == 2 and done.verdict.verdict == REGRESSED
    assert " over three pairs (p=" in done.verdict.reason
    assert done.verdict.notes[-1].startswith(
        "taken back, then measured a third time in a fresh pair: CPU total op time +13.0%"
    )
    # a third pair that reads nothing leaves it process-dependent, with every reading
    flat = Looks(low, paired(1.0, seed=4))
    kept = confirm.confirmed(ProfiledTest(nodeid="t.py::test_op", verdict=first), flat, PAIRS)
    assert flat.calls == 2 and policy.not_confirmed(kept.verdict.reason)
    assert kept.verdict.notes[-1].startswith("taken back, then measured a third time")
    # a third pair that gave nothing leaves it as the second left it, and says so
    gone = Looks(low, None)
    left = confirm.confirmed(ProfiledTest(nodeid="t.py::test_op", verdict=first), gone, PAIRS)
    assert policy.not_confirmed(left.verdict.reason)
    assert left.verdict.notes[-1] == "not measured a third time: the fresh pair timed out"
    # a confirmed regression, or a plan of two looks, starts no third
    for plan, second in ((PAIRS, again_slow), (replace(PAIRS, most_looks=2), low)):
        two = Looks(second, again_slow)
        confirm.confirmed(ProfiledTest(nodeid="t.py::test_op", verdict=first), two, plan)
        assert two.calls == 1


def test_a_stored_regression_a_fresh_process_took_back_gets_no_third_look() -> None:
    """Against a stored baseline a look's change carries the machine's state too: a slow
    state that comes back in one process of three would win the tie."""
    first, flat, slow = paired(1.13), paired(1.03, seed=3), paired(1.09, seed=4)
    assert not again.breaks_ties(first, Rule()) and again.breaks_ties(first, RULE)
    # on pairs too, a regression whose families failed on no total has nothing three looks pool
    assert not again.breaks_ties(with_cpu(first, timing_regressed=False), RULE)
    steps = Looks(flat, slow)
    plan = confirm.Plan(in_process=False, again_rule=Rule())
    done = confirm.confirmed(ProfiledTest(nodeid="t.py::test_op", verdict=first), steps, plan)
    assert steps.calls == 1 and policy.not_confirmed(done.verdict.reason)


class AfterWorkers(Looks):
    """An executor under xdist: its lone run after the workers reads ``alone``; any fresh
    process after it reads the ``verdicts`` in turn."""

    def __init__(self, alone: TestVerdict | None, *verdicts: TestVerdict | None) -> None:
        super().__init__(*verdicts)
        self.alone, self.lone_runs = alone, 0

    def after_workers(self, test: ProfiledTest) -> confirm.Look:
        self.lone_runs += 1
        return confirm.Look(verdict=self.alone, why="" if self.alone else "it timed out")


def test_under_xdist_a_short_stored_verdict_is_judged_alone_once_the_workers_finish() -> None:
    first = with_cpu(stored(1.0), delta_pct=8.0, p_value=0.02, floor_pct=10.0, mde_pct=6.0)
    test = ProfiledTest(nodeid="t.py::test_lstm", verdict=first)
    in_worker = confirm.confirmed(
        test, AfterWorkers(None), confirm.Plan(workers=2, again_rule=Rule())
    )
    assert in_worker.pending == first and in_worker.verdict.verdict == UNCHANGED
    assert in_worker.verdict.notes[-2] == (
        "short of its floor beside 1 other worker(s): measured alone once the workers finish"
    )
    serial = confirm.Plan(again_rule=Rule())
    # alone it reads short again: a second lone process, pooled with it (not with the worker's)
    alone = with_cpu(stored(1.0), delta_pct=9.0, p_value=0.03, floor_pct=10.0, mde_pct=6.0)
    second = with_cpu(stored(1.0), delta_pct=14.0, p_value=1e-4, floor_pct=10.0, mde_pct=6.0)
    steps = AfterWorkers(alone, second)
    done = confirm.confirmed(in_worker, steps, serial)
    assert steps.lone_runs == 1 and steps.calls == 1
    assert done.pending is None and done.verdict.verdict == REGRESSED
    assert done.verdict.reason.startswith("CPU: total op time +11.5% over two processes")
    assert done.verdict.notes[-2] == (
        "short of its floor beside other xdist workers (CPU +8.0% (p=0.02)); measured alone "
        "once they finished: this is that run's verdict"
    )
    # alone it reads unchanged: that verdict stands, nothing more is run
    steps = AfterWorkers(stored(1.0))
    kept = confirm.confirmed(in_worker, steps, serial)
    assert kept.verdict.verdict == UNCHANGED and steps.calls == 0
    assert "measured alone once they finished" in kept.verdict.notes[-1]
    # a lone run that gave no verdict leaves the worker's, with why
    lost = confirm.confirmed(in_worker, AfterWorkers(None), serial)
    assert lost.verdict == first.with_notes(
        "short of its floor beside other workers; not measured again: it timed out"
    )
    words = confirm.serial_words([first, paired(1.3)])
    assert words == (
        "confirming 1 timing regression(s) and measuring 1 verdict(s) short of their floor "
        "again found under xdist, each alone in a fresh process"
    )
