"""pytest-tprof follows pytest's conventions: markers, -p no:, --help, selection, usage errors."""

from __future__ import annotations

import json
import re

import pytest
from tprof_testing import SMALL, small_args

from pytest_tprof.options import _METAVAR, _OPTIONS, _PER_RUN
from tprof_engine.capture.facts import torch_facts
from tprof_engine.model.environment import Fingerprint
from tprof_engine.store import baselines, paths

# Tiny bodies, no timing claims here (SMALL: few rounds, no calibration of iterations); the
# cache kept where a test needs it (--lf).
SMALL_CACHED = small_args(keep_cache=True)
NO_CACHE = ("-p", "no:cacheprovider")

TWO_TESTS = """
import torch


def test_one(tprof):
    tprof(torch.relu, torch.ones(8))


def test_two(tprof):
    tprof(torch.sigmoid, torch.ones(8))
"""


def stale_lines(result: pytest.RunResult) -> list[str]:
    return [line for line in result.outlines if line.startswith("stale baseline")]


def summary_nodeids(result: pytest.RunResult) -> list[str]:
    """Node ids listed in the terminal summary's ``tprof`` section."""
    return re.findall(r"^[A-Z-]+ +(\S+::\S+) \|", result.stdout.str(), re.M)


@pytest.mark.parametrize("args", [("--tprof", *SMALL_CACHED), ()], ids=["with --tprof", "without"])
def test_the_marker_is_registered_and_warning_free(
    pytester: pytest.Pytester, args: tuple[str, ...]
) -> None:
    pytester.makepyfile(
        """
        import pytest
        import torch

        @pytest.mark.tprof(rounds=4, warmup=0, floor=0.2, ignore=["aten::empty*"])
        def test_marked(tprof):
            tprof(torch.relu, torch.ones(8))
        """
    )
    result = pytester.runpytest(
        *NO_CACHE, "--strict-markers", "-W", "error", "--tprof-json=r.json", *args
    )
    result.assert_outcomes(passed=1, warnings=0)
    if args:
        (test,) = json.loads((pytester.path / "r.json").read_text())["tests"]
        assert (test["rounds"], test["warmup_used"]) == (4, 0)


@pytest.mark.parametrize("profiled", [True, False], ids=["with --tprof", "without"])
@pytest.mark.parametrize(
    ("marker", "message"),
    [
        (
            "round=4",
            "@pytest.mark.tprof got an unknown keyword 'round'; "
            "valid: abs_floor_us, floor, ignore, rounds, strict, warmup, work_floor",
        ),
        ("rounds=1", "@pytest.mark.tprof 'rounds' must be >= 2 (got 1)"),
        ("4", "@pytest.mark.tprof takes keywords only (got (4,))"),
    ],
    ids=["unknown keyword", "bad value", "positional"],
)
def test_a_bad_marker_errors_its_test_at_setup_naming_the_problem(
    pytester: pytest.Pytester, marker: str, message: str, profiled: bool
) -> None:
    pytester.makepyfile(
        f"""
        import pytest
        import torch

        @pytest.mark.tprof({marker})
        def test_marked(tprof):
            tprof(torch.relu, torch.ones(8))

        def test_unmarked(tprof):
            tprof(torch.relu, torch.ones(8))
        """
    )
    result = pytester.runpytest(*SMALL, *(["--tprof"] if profiled else []))
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(["*_ ERROR at setup of test_marked _*", message])


def test_without_the_plugin_the_fixture_is_unknown(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(TWO_TESTS)
    result = pytester.runpytest(*NO_CACHE, "-p", "no:tprof")
    result.assert_outcomes(errors=2)
    result.stdout.fnmatch_lines(["E       fixture 'tprof' not found"])


def test_without_the_plugin_its_options_are_unknown(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(TWO_TESTS)
    result = pytester.runpytest(*NO_CACHE, "-p", "no:tprof", "--tprof")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*error: unrecognized arguments: --tprof"])


def _squeezed(lines: list[str]) -> str:
    return " ".join(" ".join(lines).split())


def test_help_lists_every_option_in_its_group_with_its_default(
    pytester: pytest.Pytester,
) -> None:
    result = pytester.runpytest(*NO_CACHE, "--help")
    assert result.ret == pytest.ExitCode.OK
    lines = result.outlines
    start = lines.index("op-level performance regression testing (pytest-tprof):")
    end = lines.index("", start)
    group = _squeezed(lines[start + 1 : end])
    for o in _OPTIONS:
        shown = {
            "switch": f"{o.flag}, --no-{o.flag.removeprefix('--')}",
            "action": o.flag,
        }.get(o.kind, f"{o.flag}={_METAVAR.get(o.kind, '')}")
        assert f"{shown} {o.help.replace('%%', '%')}" in group
        # a setting says its default; an action of one run, or a report's path, has none
        assert "(default: " in o.help or o.kind == "action" or o.dest in _PER_RUN, o.flag
    assert "--tprof-rounds=N measured rounds per test (default: 20)" in group
    ini = _squeezed(lines[end:])
    assert (
        "tprof_floor (string): fixed relative floor, e.g. 0.1 for 10% (default: learned "
        "from the sessions)"
    ) in ini


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--tprof-rounds=1"], "ERROR: '--tprof-rounds' must be >= 2 (got 1)"),
        (["--tprof-warmup=-1"], "ERROR: '--tprof-warmup' must be >= 0 (got -1)"),
        (["--tprof-floor=20"], "ERROR: '--tprof-floor' must be a fraction like 0.1 (got 20.0)"),
        (
            ["--tprof-rounds=many"],
            "*: error: argument --tprof-rounds: invalid int value: 'many'",
        ),
        (["-o", "tprof_rounds=many"], "ERROR: ini option 'tprof_rounds' must be int (got 'many')"),
        (
            ["--tprof-baseline-dir", "t.py::test_one"],
            "ERROR: '--tprof-baseline-dir' got 't.py::test_one', which names a test, not a "
            "folder: the option took the next word as its value; write "
            "--tprof-baseline-dir=FOLDER before the tests",
        ),
    ],
    ids=["rounds", "warm-up", "floor", "not a number", "ini", "a test as a folder"],
)
def test_a_bad_option_value_is_a_usage_error(
    pytester: pytest.Pytester, args: list[str], message: str
) -> None:
    pytester.makepyfile(TWO_TESTS)
    result = pytester.runpytest(*NO_CACHE, "--tprof", *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()


def test_k_profiles_only_the_selected_tests(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(TWO_TESTS)
    pytester.runpytest(*SMALL, "--tprof-save").assert_outcomes(passed=2)
    result = pytester.runpytest(*SMALL, "--tprof", "-k", "one")
    result.assert_outcomes(passed=1, deselected=1)
    assert summary_nodeids(result) == ["test_k_profiles_only_the_selected_tests.py::test_one"]
    assert stale_lines(result) == []


def test_x_stops_at_the_first_test_tprof_fails(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(TWO_TESTS)
    result = pytester.runpytest(*SMALL, "--tprof", "--tprof-require-baseline", "-x")
    result.assert_outcomes(failed=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        [
            "TPROF-ERROR test_x_stops_at_the_first_test_tprof_fails.py::test_one - tprof: *",
            "*! stopping after 1 failures !*",
        ]
    )


def test_lf_and_node_ids_run_a_subset_without_calling_the_rest_stale(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(
        test_lf="""
        from pathlib import Path

        import torch

        def test_steady(tprof):
            tprof(torch.relu, torch.ones(8))

        def test_flaky(tprof):
            tprof(torch.relu, torch.ones(8))
            assert not Path(__file__).with_name("fail").exists()
        """
    )
    # The cache provider stays on: --lf needs it.
    pytester.runpytest(*SMALL_CACHED, "--tprof-save").assert_outcomes(passed=2)
    (pytester.path / "fail").touch()
    pytester.runpytest(*SMALL_CACHED, "--tprof").assert_outcomes(passed=1, failed=1)

    last_failed = pytester.runpytest(*SMALL_CACHED, "--tprof", "--lf")
    last_failed.assert_outcomes(failed=1)
    assert summary_nodeids(last_failed) == ["test_lf.py::test_flaky"]
    assert stale_lines(last_failed) == []

    by_id = pytester.runpytest(*SMALL_CACHED, "--tprof", "test_lf.py::test_steady")
    by_id.assert_outcomes(passed=1)
    assert stale_lines(by_id) == []


def test_parametrized_and_class_tests_get_a_baseline_each(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_shapes="""
        import pytest
        import torch

        @pytest.mark.parametrize("n", [8, 16])
        def test_param(tprof, n):
            tprof(torch.relu, torch.ones(n))

        class TestGroup:
            def test_method(self, tprof):
                tprof(torch.relu, torch.ones(4))

            @pytest.mark.parametrize("kind", ["a/b", "a:b"])
            def test_odd_ids(self, tprof, kind):
                tprof(torch.relu, torch.ones(4))
        """
    )
    nodeids = [
        "test_shapes.py::test_param[8]",
        "test_shapes.py::test_param[16]",
        "test_shapes.py::TestGroup::test_method",
        "test_shapes.py::TestGroup::test_odd_ids[a/b]",
        "test_shapes.py::TestGroup::test_odd_ids[a:b]",
    ]
    pytester.runpytest(*SMALL, "--tprof-save").assert_outcomes(passed=5)
    folder = pytester.path / "baselines" / Fingerprint.collect(torch_facts()).key
    files = sorted(folder.iterdir())
    assert [p.name for p in files] == sorted(f"{paths.slug(n)}.json" for n in nodeids)
    assert sorted(baselines.load_baseline(p).nodeid for p in files) == sorted(nodeids)

    result = pytester.runpytest(*SMALL, "--tprof")
    result.assert_outcomes(passed=5)
    assert sorted(summary_nodeids(result)) == sorted(nodeids)
    assert "no-baseline" not in result.stdout.str().lower()


def test_coverage_and_profiling_run_together(pytester: pytest.Pytester) -> None:
    pytest.importorskip("pytest_cov")
    pytester.makepyfile(TWO_TESTS)
    result = pytester.runpytest(*SMALL, "--tprof", "--cov", "-W", "error")
    result.assert_outcomes(passed=2)
    assert len(summary_nodeids(result)) == 2
