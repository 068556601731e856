"""A timing regression must repeat in a fresh pytest process to fail the test."""

from __future__ import annotations

import fnmatch
import json
from typing import Any

import pytest
from tprof_testing import QUIET_READINGS_CONFTEST, with_quiet_readings

pytestmark = [pytest.mark.slow, pytest.mark.serial]

# As in test_flow: 8x the matmul work against a 100 % floor, so the machine's own swings
# can't pass for the slowdown, and rounds long enough that preemption can't either.  No work
# census: it would fail the planted work on its own, and these tests are about timing.
FAST = (
    "-p", "no:cacheprovider", "--tprof-rounds=12", "--tprof-warmup=1", "--tprof-floor=1.0",
    "--tprof-min-round-us=2000", "--no-tprof-census",
)  # fmt: skip
NODEID = "test_modes.py::test_matmul"

SUITE = """
import os
from pathlib import Path

import pytest
import torch

HERE = Path(__file__).parent
# "once.txt": this process (only) runs in a slow mode, like an op whose speed belongs to the
# process; "always.txt": the code itself got slower, in every process.
ONCE = HERE / "once.txt"
# "workers.txt": slow in xdist's workers only, as when other workers load the machine.
IN_WORKER = bool(os.environ.get("PYTEST_XDIST_WORKER"))
SLOW = ONCE.exists() or (HERE / "always.txt").exists() or (
    IN_WORKER and (HERE / "workers.txt").exists()
)
# "short_workers.txt": about +75 % in the workers, under the 100 % floor (short of it); "alone.txt":
# 8x in a process of its own, as a slowdown other workers' load happened to hide
SHORT = IN_WORKER and (HERE / "short_workers.txt").exists()
SLOW = SLOW or (not IN_WORKER and (HERE / "alone.txt").exists())
ONCE.unlink(missing_ok=True)


def test_matmul(tprof):
    if os.environ.get("TPROF_FRESH_PROCESS") and (HERE / "skip_fresh.txt").exists():
        pytest.skip("needs something only the first process has")
    k = 8 * 128 if SLOW else (256 if SHORT else 128)
    a = torch.randn(128, k)
    b = torch.randn(k, 128)
    assert tprof(lambda: a @ b).shape == (128, 128)
"""


def _report(pytester: pytest.Pytester) -> dict[str, object]:
    doc = json.loads((pytester.path / "report.json").read_text())
    (test,) = doc["tests"]
    assert test["nodeid"] == NODEID
    return dict(test)


@pytest.fixture
def suite(pytester: pytest.Pytester) -> pytest.Pytester:
    with_quiet_readings(pytester).makepyfile(test_modes=SUITE)
    pytester.runpytest(*FAST, "--tprof-save").assert_outcomes(passed=1)
    return pytester


def _run(
    suite: pytest.Pytester, flags: tuple[str, ...], *args: str
) -> tuple[pytest.RunResult, dict[str, object]]:
    """Drop the flag files in the suite, compare with --tprof: the run and the test's JSON row."""
    for flag in flags:
        (suite.path / flag).write_text("")
    # xdist's controller imports modules of its own, which an earlier test's import hooks in
    # this process (pygal's, through pytest-benchmark's histogram) would break: a process of
    # its own.
    run = suite.runpytest_subprocess if "-n" in args else suite.runpytest
    result = run(*FAST, "--tprof", "--tprof-json=report.json", *args)
    return result, _report(suite)


def test_a_slowdown_only_this_process_shows_does_not_fail(suite: pytest.Pytester) -> None:
    result, test = _run(suite, ("once.txt",))
    result.assert_outcomes(passed=1)
    assert test["verdict"] == "inconclusive"
    assert str(test["reason"]).startswith(
        "slower in this process, not in a fresh one (unchanged there): CPU: "
    )
    assert test["confirmed"]  # the in-process re-measurement repeated it


def test_a_slowdown_every_process_shows_fails_confirmed(suite: pytest.Pytester) -> None:
    result, test = _run(suite, ("always.txt",))
    result.assert_outcomes(failed=1)
    assert test["verdict"] == "regressed"
    assert "confirmed in a fresh process" in test["notes"]  # type: ignore[operator]
    # the note is on the test's progress line, not in its captured output
    noted = [line for line in result.outlines if "[tprof: slower; confirming" in line]
    assert len(noted) == 1 and noted[0].startswith("test_modes.py "), noted


def test_without_confirmation_no_fresh_process_runs(suite: pytest.Pytester) -> None:
    result, test = _run(suite, ("once.txt",), "--no-tprof-confirm")
    result.assert_outcomes(failed=1)
    assert test["verdict"] == "regressed"
    assert not any("fresh" in n for n in test["notes"])  # type: ignore[attr-defined]


def test_a_fresh_process_without_a_verdict_leaves_the_regression_standing(
    suite: pytest.Pytester,
) -> None:
    result, test = _run(suite, ("always.txt", "skip_fresh.txt"))
    result.assert_outcomes(failed=1)
    assert test["verdict"] == "regressed"
    why = "not re-run in a fresh process: the fresh process did not run the test"
    assert why in test["notes"]  # type: ignore[operator]


def test_under_xdist_a_slowdown_the_workers_alone_show_passes_after_the_workers(
    suite: pytest.Pytester,
) -> None:
    result, test = _run(suite, ("workers.txt",), "-n", "2")
    result.assert_outcomes(passed=1)
    assert test["verdict"] == "inconclusive"
    assert str(test["reason"]).startswith("slower in this process, not in a fresh one")
    assert "found beside other xdist workers; re-run alone once they finished" in test["notes"]  # type: ignore[operator]
    result.stdout.fnmatch_lines(["tprof: confirming 1 timing regression(s) found under xdist*"])


def test_under_xdist_a_real_slowdown_fails_once_confirmed_alone(suite: pytest.Pytester) -> None:
    result, test = _run(suite, ("always.txt",), "-n", "2")
    result.assert_outcomes(failed=1)  # its pass in the worker no longer counts
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert test["verdict"] == "regressed" and test["outcome"] == "failed"
    assert "confirmed in a fresh process" in test["notes"]  # type: ignore[operator]
    result.stdout.fnmatch_lines(["*REGRESSED*test_modes.py::test_matmul*"])


def test_under_xdist_a_verdict_short_of_its_floor_is_judged_alone_after_the_workers(
    suite: pytest.Pytester,
) -> None:
    # about +75 % beside the other worker, under the 100 % floor: short, so it runs alone once
    # the workers finish, and the lone run's verdict (8x there) goes through a serial run's
    # steps.  In probe units the worker's reading moves with the drift probe (+36 % once on
    # the shared VM, which left it unchanged), so the run is tried up to three times for it.
    line = "tprof: measuring 1 verdict(s) short of their floor again found under xdist*"
    for _ in range(3):
        result, test = _run(suite, ("short_workers.txt", "alone.txt"), "-n", "2")
        if any(fnmatch.fnmatch(out, line) for out in result.outlines):
            break
    result.stdout.fnmatch_lines([line])
    result.assert_outcomes(failed=1)
    assert test["verdict"] == "regressed" and test["outcome"] == "failed"
    notes = " | ".join(test["notes"])  # type: ignore[arg-type]
    assert "short of its floor beside other xdist workers (CPU +" in notes
    assert "measured alone once they finished" in notes
    assert "confirmed in a fresh process" in notes


def test_the_fresh_process_writes_no_step_summary_of_its_own(
    suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    summary = suite.path / "step_summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    result, test = _run(suite, ("always.txt",))
    result.assert_outcomes(failed=1)
    assert "confirmed in a fresh process" in test["notes"]  # type: ignore[operator]
    assert summary.read_text().count("## pytest-tprof") == 1


def test_the_fresh_process_judges_against_the_window_its_parent_was_given(
    pytester: pytest.Pytester,
) -> None:
    # Two older sessions were recorded slow, the newest one fast.  Against the newest session
    # alone (a window of 1) the slow code regressed; against all three (the default window)
    # it reads as it was recorded most of the time.  Processes of their own, as in CI.
    with_quiet_readings(pytester).makepyfile(test_modes=SUITE)
    for slow in (True, True, False):
        if slow:
            (pytester.path / "once.txt").write_text("")
        pytester.runpytest_subprocess(*FAST, "--tprof-save").assert_outcomes(passed=1)
    (path,) = (pytester.path / "baselines").rglob("*.json")
    assert len(json.loads(path.read_text())["sessions"]) == 3
    (pytester.path / "always.txt").write_text("")
    result = pytester.runpytest_subprocess(
        *FAST, "--tprof", "--tprof-json=report.json", "-o", "tprof_window=1"
    )
    result.assert_outcomes(failed=1)
    test = _report(pytester)
    assert test["verdict"] == "regressed" and test["sessions"] == 1
    assert "confirmed in a fresh process" in test["notes"]  # type: ignore[operator]


# An earlier test sets a torch setting (here cuDNN's benchmark flag, harmless on the CPU) and
# the later one runs slower under it, as an fp32 GEMM does with TF32 turned off.  The fresh
# process runs the later test alone, so it must start from the settings its parent measured.
LEAK = """
from pathlib import Path

import torch

HERE = Path(__file__).parent


def test_a_sets():
    if (HERE / "leak.txt").exists():
        torch.backends.cudnn.benchmark = True


def test_b_runs(tprof):
    k = 8 * 128 if torch.backends.cudnn.benchmark else 128
    a = torch.randn(128, k)
    b = torch.randn(k, 128)
    assert tprof(lambda: a @ b).shape == (128, 128)
"""


def _second_test_after_the_first_changed_state(
    pytester: pytest.Pytester, flag: str
) -> dict[str, Any]:
    """Two tests saved as they are; then, with ``flag`` in the folder (the first test changes
    the process's state, and the second runs slower under it), compared in processes of their
    own: the second fails, and its JSON row is returned."""
    pytester.runpytest_subprocess(*FAST, "--tprof-save").assert_outcomes(passed=2)
    (pytester.path / flag).write_text("")
    result = pytester.runpytest_subprocess(*FAST, "--tprof", "--tprof-json=report.json")
    result.assert_outcomes(passed=1, failed=1)
    (test,) = json.loads((pytester.path / "report.json").read_text())["tests"]
    return dict(test)


def test_a_setting_an_earlier_test_left_is_named_and_confirmed_under_it(
    pytester: pytest.Pytester,
) -> None:
    with_quiet_readings(pytester).makepyfile(test_leak=LEAK)
    test = _second_test_after_the_first_changed_state(pytester, "leak.txt")
    assert test["verdict"] == "regressed" and test["timing_compared"]
    assert test["settings"]["cudnn_benchmark"] is True
    said = "settings: cuDNN benchmark off → on"
    assert {"kind": "settings", "text": said, "failing": False, "exact": False} in test["causes"]
    assert "confirmed in a fresh process" in test["notes"]


# The code under test gets slower through the user's own command-line option and through an
# environment variable, as a benchmark's plant or a model-size switch does: the fresh process
# must run the test as its parent did, or it measures other code.
OWN_OPTION = """
def pytest_addoption(parser):
    parser.addoption("--size", default="small")
"""
SIZED = """
import os

import torch


def test_sized(tprof, request):
    k = 8 * 128 if request.config.getoption("--size") == "big" else 128
    k *= int(os.environ.get("TPROF_TEST_WIDEN", "1"))
    a = torch.randn(128, k)
    b = torch.randn(k, 128)
    assert tprof(lambda: a @ b).shape == (128, 128)
"""


@pytest.mark.parametrize(
    ("args", "env"), [(["--size", "big"], {}), ([], {"TPROF_TEST_WIDEN": "8"})],
    ids=["own-option", "environment"],
)  # fmt: skip
def test_the_fresh_process_runs_the_test_with_its_parents_options_and_environment(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, args: list[str],
    env: dict[str, str],
) -> None:  # fmt: skip
    pytester.makepyfile(test_sized=SIZED)
    pytester.makeconftest(QUIET_READINGS_CONFTEST + OWN_OPTION)
    pytester.runpytest_subprocess(*FAST, "--tprof-save").assert_outcomes(passed=1)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    result = pytester.runpytest_subprocess(*FAST, "--tprof", "--tprof-json=report.json", *args)
    result.assert_outcomes(failed=1)
    (test,) = json.loads((pytester.path / "report.json").read_text())["tests"]
    assert test["verdict"] == "regressed", test["reason"]
    assert "confirmed in a fresh process" in test["notes"]


# The code's speed depends on its random input, and an earlier test advanced the generator: the
# fresh process runs the later test alone, so it must start from the generator's state the
# parent's test started from, or it measures other data.
DRAWN = """
from pathlib import Path

import torch

HERE = Path(__file__).parent
torch.manual_seed(0)  # the first draw is 0.50, the second 0.77


def test_a_draws():
    if (HERE / "draw.txt").exists():
        torch.rand(1)


def test_b_runs(tprof):
    k = 8 * 128 if float(torch.rand(1)) > 0.6 else 128
    a = torch.randn(128, k)
    b = torch.randn(k, 128)
    assert tprof(lambda: a @ b).shape == (128, 128)
"""


def test_the_fresh_process_starts_the_test_from_the_random_state_its_parent_did(
    pytester: pytest.Pytester,
) -> None:
    with_quiet_readings(pytester).makepyfile(test_drawn=DRAWN)
    test = _second_test_after_the_first_changed_state(pytester, "draw.txt")
    assert test["nodeid"] == "test_drawn.py::test_b_runs"
    assert test["verdict"] == "regressed", test["reason"]
    assert "confirmed in a fresh process" in test["notes"]
