"""The confirmation policy as data (decide.policy.next_step), and the typed causes it reads."""

from __future__ import annotations

from dataclasses import replace

import pytest
from tprof_testing import table

from tprof_engine.decide import judge, policy
from tprof_engine.decide.judge import Recorded
from tprof_engine.decide.rule import Rule
from tprof_engine.model.verdicts import (
    BUSY,
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
    assert policy.next_step(slower, remeasured=True) == policy.FRESH_PROCESS
    assert policy.next_step(slower, remeasured=True, workers=4) == policy.AFTER_WORKERS


def test_a_fresh_process_confirms_nothing_further_and_no_confirm_takes_the_verdict_as_is(
    slower: TestVerdict,
) -> None:
    assert policy.next_step(slower, remeasured=True, in_fresh_process=True) == policy.DONE
    assert policy.next_step(slower, confirm=False) == policy.DONE
    assert policy.next_step(slower, confirm=False, remeasured=True) == policy.DONE


def test_an_unchanged_verdict_needs_no_step() -> None:
    same = verdict_on(OPS)
    assert same.verdict == UNCHANGED
    assert policy.next_step(same) == policy.DONE
    assert policy.next_step(same, remeasured=True) == policy.DONE


def test_a_fresh_process_that_found_the_machine_busy_confirms_nothing(
    slower: TestVerdict,
) -> None:
    busy = Cause(kind=BUSY, text="machine busy: 20 of 20 rounds waited for a CPU")
    child = TestVerdict(verdict=INCONCLUSIVE, reason="whatever it says", causes=(busy,))
    merged = policy.after_fresh_process(slower, child)
    assert merged.verdict == INCONCLUSIVE
    assert merged.busy == busy
    assert "the fresh process found the machine busy: 20 of 20" in merged.reason


def test_causes_survive_the_json_round_trip(slower: TestVerdict) -> None:
    cause = Cause(kind="memory", text="MEMORY: aten::addmm allocates more", failing=True)
    v = replace(slower, causes=(cause,))
    assert TestVerdict.from_dict(v.to_dict()).causes == (cause,)
