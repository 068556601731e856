"""The pieces of ``tprof ab`` that decide without running anything: each side's import path,
code loaded from the wrong tree, the CPU list, the common tests' order, what was judged."""

from __future__ import annotations

import argparse
import json
import os
import types
from pathlib import Path

import pytest

from pytest_tprof.ab_side import in_order
from tprof_engine import ab


def test_each_side_imports_from_its_own_tree_first(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    found = ab.import_path(tmp_path, {"PYTHONPATH": "/elsewhere"}).split(os.pathsep)
    assert found == [str(tmp_path / "src"), str(tmp_path), "/elsewhere"]
    assert ab.import_path(tmp_path / "nosrc", {}) == str(tmp_path / "nosrc")


def test_a_module_from_the_other_tree_is_named(tmp_path: Path) -> None:
    base, head = tmp_path / "base", tmp_path / "head"
    modules = {
        "mypkg": types.SimpleNamespace(__file__=str(head / "lib" / "mypkg" / "__init__.py")),
        "ours": types.SimpleNamespace(__file__=str(base / "ours.py")),
        "builtin": types.SimpleNamespace(),
    }
    found = ab.foreign_modules(modules, str(base), str(head))
    assert found == [("mypkg", str(head / "lib" / "mypkg" / "__init__.py"))]
    text = ab.foreign_message("base", found)
    assert "mypkg" in text and "compiled extension" in text and "src/" in text
    # a worktree inside the working tree: its own files are not the other side's
    inside = head / ".wt"
    modules["ours"] = types.SimpleNamespace(__file__=str(inside / "ours.py"))
    assert ab.foreign_modules({"ours": modules["ours"]}, str(inside), str(head)) == []


def test_cpu_lists() -> None:
    assert ab.cpu_list("3") == (3,)
    assert ab.cpu_list("0-2,5") == (0, 1, 2, 5)
    with pytest.raises(argparse.ArgumentTypeError, match="a CPU list like"):
        ab.cpu_list("two")
    if hasattr(os, "sched_getaffinity"):
        allowed = sorted(os.sched_getaffinity(0))
        assert ab.default_cpus("alternate") == (allowed[-1],)
        assert ab.default_cpus("duet") == tuple(allowed[-2:])


class Item:
    def __init__(self, nodeid: str) -> None:
        self.nodeid = nodeid

    def __repr__(self) -> str:
        return self.nodeid


def test_the_common_tests_take_the_base_order_in_their_own_places() -> None:
    items = [Item(n) for n in ("c", "x", "a", "b")]
    ordered = in_order(items, ["a", "b", "c"])  # type: ignore[arg-type]
    assert [i.nodeid for i in ordered] == ["a", "x", "b", "c"]


def test_what_counts_as_judged() -> None:
    assert ab.timing_judged({"verdict": "unchanged"})
    assert ab.timing_judged({"verdict": "regressed"})
    assert not ab.timing_judged({"verdict": "inconclusive"})
    assert not ab.timing_judged({"verdict": "changed", "timing_compared": False})


def test_unjudged_tests_are_listed_from_the_head_report(tmp_path: Path) -> None:
    report = tmp_path / "head.json"
    report.write_text(
        '{"tests": [{"nodeid": "t::a", "verdict": "inconclusive", "reason": "too noisy\\nmore"},'
        ' {"nodeid": "t::b", "verdict": "unchanged", "reason": ""}]}'
    )
    assert ab.unjudged_tests(report) == ["t::a (inconclusive: too noisy)"]
    assert ab.unjudged_tests(tmp_path / "missing.json") == []


def test_a_paired_regression_says_what_to_do_on_the_users_machine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tprof_engine.decide.outcome import next_steps
    from tprof_engine.model.results import ProfiledTest
    from tprof_engine.model.verdicts import REGRESSED, TestVerdict
    from tprof_engine.render.markdown import markdown_summary

    monkeypatch.chdir(tmp_path)
    trace = tmp_path / ".tprof" / "traces" / "t.pt.trace.json.gz"
    test = ProfiledTest(
        nodeid="tests/test_m.py::test_step", verdict=TestVerdict(verdict=REGRESSED, reason="x"),
        trace=str(trace), paired_base="origin/main",
    )  # fmt: skip
    steps = next_steps(test)
    assert "nothing is stored" in steps[0]
    assert steps[1] == 'again, alone: tprof ab origin/main -- "tests/test_m.py::test_step"'
    assert steps[2].startswith("see the ops in time: open .tprof/traces/t.pt.trace.json.gz")
    text = markdown_summary([test], {"ab": {"base": "origin/main at 1a2b3c"}})
    assert "head (working tree) against base `origin/main at 1a2b3c`" in text


def test_a_source_whose_rounds_cant_take_turns_runs_alone_on_each_side() -> None:
    import socket

    from tprof_engine import paired_run
    from tprof_engine.pairing import HEAD, Channel, Pairing, SideConfig

    a, b = socket.socketpair()
    try:
        pairing = Pairing(SideConfig(side=HEAD, fd=-1), Channel(a), test="t::ddp", alone=False)
        ranks = types.SimpleNamespace(pairable=False)
        assert paired_run.active(pairing, types.SimpleNamespace(pairable=True)) is pairing
        assert paired_run.active(pairing, ranks) is None
        assert pairing.alone and pairing.why_alone == "a distributed test's ranks are not paired"
    finally:
        a.close()
        b.close()


def test_the_exit_status_is_one_for_a_regression_and_two_when_a_side_could_not_run() -> None:
    assert ab.exit_status(0, 0) == 0
    assert ab.exit_status(0, 1) == 1
    assert ab.exit_status(4, 1) == 1  # the head's failures stand
    assert ab.exit_status(4, 4) == 2  # a node id pytest could not find: a usage error
    assert ab.exit_status(0, 2) == 2  # a collection error
    assert ab.exit_status(0, 3) == 2
    assert ab.exit_status(-1, -1) == 2  # a timeout
    assert ab.exit_status(1, 0) == 0  # the base's own failing tests are the base's
    assert ab.exit_status(0, 5) == 5


def test_a_timing_judged_and_not_confirmed_is_not_called_unjudged(tmp_path: Path) -> None:
    report = tmp_path / "head.json"
    tests = [
        {"nodeid": "t.py::a", "verdict": "inconclusive", "reason": "machine busy: …"},
        {
            "nodeid": "t.py::b",
            "verdict": "inconclusive",
            "reason": "slower in this process, not in a fresh one (unchanged there): CPU +9%",
        },
        {"nodeid": "t.py::c", "verdict": "unchanged", "reason": ""},
    ]
    report.write_text(json.dumps({"tests": tests}))
    assert ab.unjudged_tests(report) == ["t.py::a (inconclusive: machine busy: …)"]
    assert ab.unconfirmed_tests(report) == [
        "t.py::b (inconclusive: slower in this process, not in a fresh one (unchanged there): "
        "CPU +9%)"
    ]


def test_options_before_ref_say_where_they_go(capsys: pytest.CaptureFixture[str]) -> None:
    from tprof_engine import cli

    assert cli.main(["ab", "-n", "2", "HEAD"]) == cli.EXIT_ERROR
    err = capsys.readouterr().err
    assert err.startswith("usage: tprof ab ")
    assert err.endswith(
        "tprof ab: error: unrecognized arguments: -n (before REF, on the command line): "
        "tprof ab runs each side serially: drop -n/--numprocesses/--dist\n"
    )
    assert cli.main(["ab", "--tprof-rounds=3", "HEAD"]) == cli.EXIT_ERROR
    assert capsys.readouterr().err.endswith(
        "(before REF, on the command line): pytest's options go after REF: "
        "tprof ab REF -- --tprof-rounds=3\n"
    )
