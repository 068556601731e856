"""A test's outcome (decide.outcome): whether its verdict fails the pytest test, its causes
typed, and the next steps a failure ends with: accept the change if it was meant, else where
to look."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from tprof_testing import table

from tprof_engine.decide import outcome
from tprof_engine.decide.judge import Recorded, judge
from tprof_engine.decide.outcome import next_steps, outcome_of
from tprof_engine.decide.timing.rule import Rule
from tprof_engine.model.results import ProfiledTest
from tprof_engine.model.verdicts import (
    ERROR,
    INCOMPARABLE,
    INCONCLUSIVE,
    NO_BASELINE,
    NOT_SAVED,
    REGRESSED,
    UNCHANGED,
)
from tprof_engine.model.work import WorkRow, WorkTable
from tprof_engine.render.report import failure_text

OPS = {"aten::addmm": (800.0, 6), "aten::relu": (120.0, 3)}
SESSIONS = tuple(table(OPS, seed=s) for s in (10, 11, 12))
NODE = "tests/test_model.py::test_step[cpu]"


def profiled(ops: dict[str, tuple[float, int]]) -> ProfiledTest:
    verdict = judge(Recorded(tables=SESSIONS), Recorded(tables=(table(ops, seed=1),)), Rule())
    return ProfiledTest(nodeid=NODE, verdict=verdict, trace="/runs/t.pt.trace.json.gz")


def test_a_timing_regression_says_how_to_accept_it_and_where_its_trace_opens() -> None:
    test = profiled({**OPS, "aten::addmm": (1600.0, 6)})
    assert test.verdict.verdict == REGRESSED
    assert next_steps(test) == [
        "meant it? record it as the new baseline: "
        'pytest --tprof-save --tprof-reset "tests/test_model.py::test_step[cpu]"',
        "see the ops in time: open /runs/t.pt.trace.json.gz in https://ui.perfetto.dev",
        "see it beside the baseline's rounds: record baselines with --tprof-save-trace",
    ]
    assert failure_text(test, steps=next_steps(test)).endswith(
        "\n  next:\n    meant it? record it as the new baseline: "
        'pytest --tprof-save --tprof-reset "tests/test_model.py::test_step[cpu]"\n'
        "    see the ops in time: open /runs/t.pt.trace.json.gz in https://ui.perfetto.dev\n"
        "    see it beside the baseline's rounds: record baselines with --tprof-save-trace"
    )
    beside = replace(test, side_by_side="/runs/t.vs-baseline.pt.trace.json.gz")
    assert next_steps(beside)[1:] == [
        "see the ops in time: open /runs/t.vs-baseline.pt.trace.json.gz in https://ui.perfetto.dev"
    ]


def test_every_regression_names_its_trace_and_a_census_without_sources_the_stack_option() -> None:
    work = WorkTable(rows=(WorkRow(
        op="aten::addmm", module="fc1", phase="forward", calls=1, flops=1000,
        bytes_read=100, bytes_written=100,
    ),))  # fmt: skip
    wider = WorkTable(rows=(replace(work.rows[0], flops=3000),))
    verdict = judge(
        Recorded(tables=SESSIONS, work=work), Recorded(tables=(table(OPS, seed=1),), work=wider),
        Rule(),
    )  # fmt: skip
    test = ProfiledTest(nodeid=NODE, verdict=verdict, trace="/runs/t.pt.trace.json.gz")
    assert verdict.work_regressed and not verdict.timing_regressed
    from tprof_engine.render.report import junit_properties

    assert "tprof_top_op" not in dict(junit_properties(test))  # no timing figure as its cause
    assert next_steps(test)[1:] == [
        "which line of your code: pytest --tprof --tprof-collect=stack "
        '"tests/test_model.py::test_step[cpu]"',
        "see the ops in time: open /runs/t.pt.trace.json.gz in https://ui.perfetto.dev",
    ]
    # the run's settings repeated, its other --tprof-collect values kept beside stack
    given = ("--tprof-rounds=8", "--tprof-collect=memory")
    assert next_steps(test, record_args=given)[1] == (
        "which line of your code: pytest --tprof --tprof-rounds=8 --tprof-collect=stack,memory "
        '"tests/test_model.py::test_step[cpu]"'
    )
    sourced = WorkTable(rows=(replace(wider.rows[0], source="model.py:3 in forward"),))
    placed = judge(
        Recorded(tables=SESSIONS, work=work), Recorded(tables=(table(OPS, seed=1),), work=sourced),
        Rule(),
    )  # fmt: skip
    assert "--tprof-collect=stack" not in " ".join(next_steps(replace(test, verdict=placed)))


def test_a_test_that_passes_has_no_next_steps() -> None:
    test = profiled(OPS)
    assert test.verdict.verdict == UNCHANGED
    assert next_steps(test) == []
    assert "next:" not in failure_text(test, steps=next_steps(test))


def test_the_record_command_repeats_what_the_run_was_given_quoted_for_a_shell() -> None:
    test = profiled({**OPS, "aten::addmm": (1600.0, 6)})
    steps = next_steps(test, record_args=("--tprof-rounds=8", "--tprof-baseline-dir=ci runs/b"))
    assert steps[0] == (
        "meant it? record it as the new baseline: pytest --tprof-save --tprof-reset "
        "--tprof-rounds=8 '--tprof-baseline-dir=ci runs/b' \"tests/test_model.py::test_step[cpu]\""
    )


def test_junit_names_the_top_op_only_of_a_test_whose_ops_moved() -> None:
    from tprof_engine.render.report import junit_properties

    unchanged = dict(junit_properties(profiled(OPS)))
    assert unchanged == {
        "tprof_verdict": "unchanged",
        "tprof_why": "no op changed beyond its floor",
        "tprof_trace": "/runs/t.pt.trace.json.gz",
    }
    slower = dict(junit_properties(profiled({**OPS, "aten::addmm": (1600.0, 6)})))
    assert slower["tprof_verdict"] == "regressed"
    assert slower["tprof_top_op"].startswith("aten::addmm +")
    assert "aten::addmm" in slower["tprof_why"]


def test_a_new_op_is_no_top_op_and_time_outside_ops_alone_offers_no_stack_option() -> None:
    from tprof_engine.model.verdicts import NEW, FamilyResult, OpVerdict, TestVerdict
    from tprof_engine.render.report import junit_properties

    new = OpVerdict(
        op="aten::_slow_conv2d_forward", family="cpu", verdict=NEW, baseline_median_us=0.0,
        current_median_us=500.0, delta_us=500.0, delta_pct=float("inf"), p_value=None,
        calls_baseline=0, calls_current=2, share=0.0, floor_pct=20.0, mde_pct=None, gated=False,
    )  # fmt: skip
    host = FamilyResult.from_dict(
        {"family": "host", "verdict": "regressed", "baseline_total_us": 100.0,
         "current_total_us": 149.0, "delta_pct": 49.0, "p_value": 0.001, "floor_pct": 13.0,
         "floor_source": "learned", "mde_pct": 5.0, "timing_regressed": True, "op_gate": [],
         "reasons": ["time outside any op"], "structure_added_us": 0.0,
         "structure_regressed": False}
    )  # fmt: skip
    census = WorkTable(rows=(WorkRow(
        op="aten::convolution", module="conv1", phase="forward", calls=1, flops=1000,
        bytes_read=100, bytes_written=100,
    ),))  # fmt: skip
    from tprof_engine.decide.gates.work import judge_work

    v = TestVerdict(
        verdict=REGRESSED, reason="HOST: …", ops=(new,), families=(host,),
        work=judge_work(census, census),
    )  # fmt: skip
    test = ProfiledTest(nodeid=NODE, verdict=v, trace="/runs/t.pt.trace.json.gz")
    assert "tprof_top_op" not in dict(junit_properties(test))  # not "+inf%" of a new op
    hostonly = replace(test, verdict=replace(v, ops=()))
    assert not any("--tprof-collect=stack" in s for s in next_steps(hostonly))


def test_the_outcome_fails_a_failing_word_except_in_a_recording_run() -> None:
    slower = profiled({**OPS, "aten::addmm": (1600.0, 6)})
    said = outcome_of(slower)
    assert said.word == REGRESSED and said.fails and said.next_steps == tuple(next_steps(slower))
    assert not outcome_of(slower, recording=True).fails
    same = outcome_of(profiled(OPS))
    assert same.word == UNCHANGED and not same.fails and same.next_steps == ()


def test_the_outcome_types_every_cause_timing_calls_work_and_the_gates() -> None:
    work = WorkTable(rows=(WorkRow(
        op="aten::addmm", module="fc1", phase="forward", calls=1, flops=1000,
        bytes_read=100, bytes_written=100,
    ),))  # fmt: skip
    wider = WorkTable(rows=(replace(work.rows[0], flops=3000),))
    slower = {**OPS, "aten::addmm": (1600.0, 6), "aten::gelu": (300.0, 2)}
    verdict = judge(
        Recorded(tables=SESSIONS, work=work), Recorded(tables=(table(slower, seed=1),), work=wider),
        Rule(),
    )  # fmt: skip
    causes = outcome_of(ProfiledTest(nodeid=NODE, verdict=verdict)).causes
    kinds = {c.kind: c for c in causes}
    assert {"timing", "calls", "work"} <= set(kinds)
    assert kinds["work"].failing and kinds["work"].text.startswith("work: ")
    assert kinds["calls"].failing
    # work and calls are exact: the timing regression beside them is not measured again
    assert verdict.exact_regressed


def test_the_words_no_judgement_gives() -> None:
    assert outcome.no_baseline(required=False).verdict == NO_BASELINE
    required = outcome.no_baseline(required=True, folder=Path("/ci/baselines/linux-cpu"))
    assert required.verdict == ERROR
    assert required.reason == (
        "no baseline for this test in /ci/baselines/linux-cpu (--tprof-require-baseline): "
        "restore that folder (from git, or the CI cache or artifact that keeps it), check "
        "--tprof-baseline-dir, or record baselines with pytest --tprof-save"
    )
    assert outcome.recorded(("a note",)).notes == ("a note",)
    skipped = outcome.not_profiled(NODE, "benchmark disabled", recording=True)
    assert skipped.verdict.verdict == NOT_SAVED and skipped.benchmark
    assert outcome.not_profiled(NODE, "why", recording=False).verdict.verdict == INCONCLUSIVE
    kept = outcome.not_saved(replace(profiled(OPS), save_note="appended"), "the test failed")
    assert (kept.verdict.verdict, kept.save_note) == (NOT_SAVED, "")
    elsewhere = outcome.only_elsewhere("cpu-abc", ["torch 2.13.0 → 2.14.1"])
    assert elsewhere.verdict == INCOMPARABLE and elsewhere.differences == ("torch 2.13.0 → 2.14.1",)


def test_a_run_that_found_no_baseline_for_any_test_names_the_folder(tmp_path: Path) -> None:
    missing = tmp_path / "baselines" / "linux-cpu"
    none = outcome.no_baseline(required=False)
    assert outcome.found_none([none, none], missing, required=False) == (
        f"warning: no profiled test found a baseline in {missing}, which does not exist; "
        "restore that folder (from git, or the CI cache or artifact that keeps it), check "
        "--tprof-baseline-dir, or record baselines with pytest --tprof-save"
    )
    missing.mkdir(parents=True)
    errors = [outcome.no_baseline(required=True, folder=missing)]
    said = outcome.found_none(errors, missing, required=True)
    assert said is not None and said.startswith(
        f"error: no profiled test found a baseline in {missing};"
    )
    # one test that found its baseline: new tests beside it, not a wrong folder
    assert outcome.found_none([none, profiled(OPS).verdict], missing, required=False) is None
    assert outcome.found_none([], missing, required=False) is None


def test_a_node_id_is_typed_relative_to_the_folder_the_run_started_in() -> None:
    root = Path("/repo")
    assert outcome.typed_nodeid(NODE, root, root) == NODE
    assert outcome.typed_nodeid(NODE, root, root / "tests") == "test_model.py::test_step[cpu]"
    assert (
        outcome.typed_nodeid(NODE, root, root / "docs") == "../tests/test_model.py::test_step[cpu]"
    )
    assert outcome.typed_nodeid("t.py", root, root / "a") == "../t.py"


def test_a_paired_regression_gives_next_steps_in_tprof_abs_own_form() -> None:
    work = WorkTable(rows=(WorkRow(
        op="aten::addmm", module="fc1", phase="forward", calls=1, flops=1000,
        bytes_read=100, bytes_written=100,
    ),))  # fmt: skip
    wider = WorkTable(rows=(replace(work.rows[0], flops=3000),))
    verdict = judge(
        Recorded(tables=SESSIONS, work=work), Recorded(tables=(table(OPS, seed=1),), work=wider),
        Rule(),
    )  # fmt: skip
    test = ProfiledTest(
        nodeid=NODE, verdict=verdict, trace="/runs/t.pt.trace.json.gz", paired_base="origin/main",
        paired_trace="/runs/base/t.pt.trace.json.gz",
    )  # fmt: skip
    steps = next_steps(test, record_args=("--tprof-rounds=8",), typed_id="test_model.py::t")
    assert steps[1:] == [
        'again, alone: tprof ab origin/main -- --tprof-rounds=8 "test_model.py::t"',
        "which line of your code: tprof ab origin/main -- --tprof-rounds=8 "
        '--tprof-collect=stack "test_model.py::t"',
        "see the ops in time: open /runs/t.pt.trace.json.gz (this tree's) and "
        "/runs/base/t.pt.trace.json.gz (the base's) in https://ui.perfetto.dev",
    ]
    assert not any("--tprof-save" in s for s in steps)  # nothing stored to record or keep
