"""A fresh process's verdict read back from its JSON report (confirm.look_in_report): every
figure the confirmation pools is there, an op's included."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from tprof_testing import table

from tprof_engine import confirm
from tprof_engine.decide import judge, policy
from tprof_engine.decide.judge import Recorded
from tprof_engine.decide.timing.rule import Rule
from tprof_engine.model.results import ProfiledTest
from tprof_engine.model.verdicts import REGRESSED, UNCHANGED, TestVerdict
from tprof_engine.render.report import json_report

OPS = {"aten::addmm": (800.0, 6), "aten::relu": (120.0, 3), "aten::copy_": (60.0, 4)}
SESSIONS = tuple(table(OPS, seed=s) for s in (10, 11, 12))
NODEID = "tests/test_m.py::test_op"


def op_gated(ratio_pct: float, *, regressed: bool) -> TestVerdict:
    """A verdict whose CPU family failed (or, not ``regressed``, only read) aten::addmm
    against the rest of its test, its total +5 % under its 19 % floor."""
    v = judge.judge(Recorded(tables=SESSIONS), Recorded(tables=(table(OPS, seed=1),)), Rule())
    word = REGRESSED if regressed else UNCHANGED
    ops = tuple(
        replace(
            o,
            verdict=word,
            vs_rest_pct=ratio_pct,
            vs_rest_floor_pct=19.0,
            vs_rest_mde_pct=8.0,
            vs_rest_only=regressed,
        )
        if o.op == "aten::addmm"
        else o
        for o in v.ops
    )
    gate = ("aten::addmm",) if regressed else ()
    families = tuple(
        replace(f, delta_pct=5.0, floor_pct=19.0, mde_pct=7.0, p_value=0.5, op_gate=gate)
        if f.family == "cpu"
        else f
        for f in v.families
    )
    return replace(v, verdict=word, ops=ops, families=families)


def written(verdict: TestVerdict, folder: Path) -> Path:
    """The ``--tprof-json`` report a fresh process writes for one test with ``verdict``."""
    doc = json_report([ProfiledTest(nodeid=NODEID, verdict=verdict)], environment={})
    path = folder / "child.json"
    path.write_text(json.dumps(doc))
    return path


def test_a_childs_op_rows_come_back_with_every_figure_its_pooling_reads(tmp_path: Path) -> None:
    child = op_gated(15.0, regressed=False)
    look = confirm.look_in_report(written(child, tmp_path), NODEID, {}, (0, ""))
    assert look.verdict is not None
    # the report's figures are the record's own, rounded as its JSON rounds them
    assert look.verdict.ops == TestVerdict.from_dict(child.to_dict()).ops


def test_a_family_failed_on_one_op_is_pooled_on_that_op_in_a_fresh_process(
    tmp_path: Path,
) -> None:
    """The op +25 % against the rest of its test, then +15 % in the child: pooled beyond the
    floor, confirmed; without the child's op rows it read "no change to pool" and was
    taken back."""
    first = op_gated(25.0, regressed=True)
    look = confirm.look_in_report(
        written(op_gated(15.0, regressed=False), tmp_path), NODEID, {}, (0, "")
    )
    assert look.verdict is not None
    said, why = policy.evidence(first, look.verdict)
    assert said == policy.CONFIRMS, why
    assert why.startswith("aten::addmm against the rest of the test +25% then +15%; pooled +")
