"""Beside other busy processes (no torch; docs/design.md §16): an op alone fails a test only
when it rose on both routes, its own time and against the rest of its test; a family's total
only when it rose beyond its floor over the shift every op shared.

A neighbour on another core slows an op's fixed cost (dispatch, Python, memory traffic) where
the drift probe's arithmetic doesn't show it: small ops read slower against a test's big
kernels, and every op slower together, though nothing in the code moved.  A slower op in the
code moves on both routes at once, and stands out from the others.
"""

from __future__ import annotations

import pytest
from test_busy import loaded
from tprof_testing import ROUNDS, table

from tprof_engine.decide.judge import Recorded, judge
from tprof_engine.decide.timing.beside import held_beside_others, over_common_shift
from tprof_engine.decide.timing.rule import Rule
from tprof_engine.model.records import OpTable
from tprof_engine.model.verdicts import (
    INCONCLUSIVE,
    REGRESSED,
    UNCHANGED,
    FamilyResult,
    TestVerdict,
)
from tprof_engine.render import rows

EVERY_ROUND = tuple(range(ROUNDS))
NOTE = "an op alone fails the test only when it slowed both in its own time and against the rest"


OPS = {"aten::addmm": (800.0, 6), "aten::relu": (300.0, 3), "aten::copy_": (60.0, 4)}


def relu_at(us: float, *, crowded: tuple[int, ...]) -> OpTable:
    return loaded(table({**OPS, "aten::relu": (us, 3)}, seed=1), [], crowded=crowded)


def verdict_of(current: OpTable, *, paired: bool = False) -> TestVerdict:
    base = tuple(loaded(table(OPS, seed=10 + i), []) for i in range(1 if paired else 3))
    return judge(Recorded(tables=base), Recorded(tables=(current,)), Rule(), paired=paired)


def relu_row(v: TestVerdict):  # type: ignore[no-untyped-def]
    return next(o for o in v.ops if o.op == "aten::relu")


def test_an_op_that_rose_only_against_the_rest_fails_a_quiet_test_and_not_one_beside_others() -> (
    None
):
    # relu +7.5 %: under its own 10 % floor; +8.4 % against the rest, over that floor of 7 %
    quiet = verdict_of(relu_at(327.0, crowded=()))
    assert quiet.verdict == REGRESSED and relu_row(quiet).vs_rest_only, quiet.reason
    assert not any(NOTE in n for n in quiet.notes)

    beside = verdict_of(relu_at(327.0, crowded=EVERY_ROUND))
    assert beside.verdict == UNCHANGED, beside.reason
    row = relu_row(beside)
    assert row.verdict == UNCHANGED and row.gated
    assert "against the rest of the test" in row.note and "both routes" in row.note
    assert any(
        n.startswith("20 of the 20 rounds judged ran beside") and NOTE in n for n in beside.notes
    )


def test_beside_others_an_op_that_rose_on_both_routes_still_fails_the_test() -> None:
    v = verdict_of(relu_at(400.0, crowded=EVERY_ROUND))  # +31 %: its own time and the ratio
    assert v.verdict == REGRESSED and v.timing_regressed, v.reason
    row = relu_row(v)
    assert row.verdict == REGRESSED and not row.vs_rest_only


def test_a_few_rounds_beside_others_leave_the_rule_as_it_is() -> None:
    v = verdict_of(relu_at(327.0, crowded=tuple(range(8))))  # 8 of 20: not most
    assert v.verdict == REGRESSED, v.reason
    assert not any(NOTE in n for n in v.notes)


def test_pairs_share_their_neighbour_so_the_paired_rule_is_not_changed() -> None:
    v = verdict_of(relu_at(400.0, crowded=EVERY_ROUND), paired=True)
    assert not any(NOTE in n for n in v.notes)


def every_op_times(factor: float, *, addmm: float = 1.0, crowded: tuple[int, ...]) -> OpTable:
    ops = {name: (us * factor, calls) for name, (us, calls) in OPS.items()}
    ops["aten::addmm"] = (ops["aten::addmm"][0] * addmm, 6)
    return loaded(table(ops, seed=1), [], crowded=crowded)


def test_beside_others_every_op_slower_alike_reads_inconclusive_with_its_numbers() -> None:
    # every op +15 %, the drift probe steady: a regression quiet, the neighbour's or the
    # code's beside busy processes
    quiet = verdict_of(every_op_times(1.15, crowded=()))
    assert quiet.verdict == REGRESSED and quiet.timing_regressed, quiet.reason

    beside = verdict_of(every_op_times(1.15, crowded=EVERY_ROUND))
    assert beside.verdict == INCONCLUSIVE and not beside.timing_regressed, beside.reason
    cpu = next(f for f in beside.families if f.family == "cpu")
    assert cpu.verdict == INCONCLUSIVE and not cpu.fails
    (reason,) = cpu.reasons
    assert reason.startswith("total op time +1")
    assert "beside other busy processes that moved every op +1" in reason
    assert "within its 10% floor" in reason and "tprof ab" in reason
    assert beside.reason.startswith("CPU: total op time +1") and beside.beside_others
    said = beside.to_dict()
    assert said["beside_others"] is True
    assert rows.drift_of(said).startswith(
        "beside other busy processes: compared over the shift every op shared (+1"
    )
    assert "not the machine" in rows.drift_of(quiet.to_dict())  # the probe's words, quiet


def test_beside_others_a_slowdown_that_stands_out_from_every_ops_shift_still_fails() -> None:
    # every op +15 % and aten::addmm +60 % more: +27 % over the common shift
    v = verdict_of(every_op_times(1.15, addmm=1.6, crowded=EVERY_ROUND))
    assert v.verdict == REGRESSED and v.timing_regressed, v.reason


def test_the_common_shift_comes_out_of_the_cpu_times_and_the_probe_of_its_own() -> None:
    current = every_op_times(1.2, crowded=EVERY_ROUND)
    beside = Rule(beside_others=True)
    out = over_common_shift(current, 20.0, -8.0, beside)
    assert out.self_cpu_us == pytest.approx(current.self_cpu_us / 1.2)
    assert out.host_us == pytest.approx(current.host_us / 1.2)
    assert out.probe_cpu_us == pytest.approx(current.probe_cpu_us / 0.92)
    assert out.self_device_us is current.self_device_us  # the device's time is its own
    assert over_common_shift(current, 20.0, -8.0, Rule()) is current  # not beside others
    assert over_common_shift(current, -5.0, 0.0, beside) is current  # no slowdown to take out


def family(delta_pct: float, **fields: object) -> FamilyResult:
    values: dict[str, object] = {
        "family": "cpu",
        "verdict": UNCHANGED,
        "baseline_total_us": 1000.0,
        "current_total_us": 1000.0 * (1 + delta_pct / 100),
        "delta_pct": delta_pct,
        "p_value": 0.2,
        "floor_pct": 10.0,
        "floor_source": "learned from 3 baseline sessions",
        "mde_pct": 3.0,
        "timing_regressed": False,
        "op_gate": (),
        "structure_added_us": 0.0,
        "structure_regressed": False,
        "reasons": (),
        **fields,
    }
    return FamilyResult(**values)  # type: ignore[arg-type]


def test_only_a_family_that_failed_over_the_probe_and_not_over_the_shift_is_held() -> None:
    over = family(3.0)
    plain = family(
        15.4,
        verdict=REGRESSED,
        timing_regressed=True,
        p_value=1e-5,
        reasons=("total op time +15.4% (p=1e-05, floor 10%)",),
    )
    (held,) = held_beside_others([over], [plain], 12.0)
    assert held.verdict == INCONCLUSIVE and not held.fails
    assert held.reasons == (
        "total op time +15.4% (p=1e-05, floor 10%), beside other busy processes that moved "
        "every op +12% in raw time: over that shift +3.0%, within its 10% floor; stored mode "
        "can't tell that neighbour from the code here (tprof ab runs both sides beside it)",
    )
    # unchanged over the probe as well: nothing to hold
    assert held_beside_others([over], [family(8.0)], 12.0) == [over]
    # failing over the shift too: it stands
    failing = family(27.0, verdict=REGRESSED, timing_regressed=True)
    assert held_beside_others([failing], [plain], 12.0) == [failing]


TWO_OPS = {"myops::spin": (800.0, 5), "aten::addmm": (220.0, 10), "aten::relu": (4.0, 5)}


def test_beside_others_one_of_two_big_ops_slower_is_not_every_ops_shift() -> None:
    """Two ops of 1 % of the round or more, the bigger one +34 %: the change half of them
    share is the other's, none, so the test fails; the two's mean (+17 %) would have been
    taken out as the neighbour's."""
    base = tuple(loaded(table(TWO_OPS, seed=10 + i), []) for i in range(3))
    slower = {**TWO_OPS, "myops::spin": (800.0 * 1.34, 5)}
    current = loaded(table(slower, seed=1), [], crowded=EVERY_ROUND)
    v = judge(Recorded(tables=base), Recorded(tables=(current,)), Rule())
    assert v.beside_others and v.verdict == REGRESSED and v.timing_regressed, v.reason
    assert v.uniform_shift_pct is not None and abs(v.uniform_shift_pct) < 5.0
