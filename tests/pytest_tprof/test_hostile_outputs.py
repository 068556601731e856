"""Real pytest runs where the plugin's outputs can't go where they are asked to, or would
overwrite a baseline, and where what it says must match what it did.

In-process runs with tiny bodies and few rounds; the concurrent saves run in two pytest
processes.  Each test asserts the exact lines a user reads.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

# torch.profiler imports torch._inductor when a session starts; import it once, outside the
# in-process runs (see tests/pytest_tprof/test_bad_input.py).
import torch._inductor.config  # noqa: F401
from tprof_testing import Suite, deadline, line, summary

from tprof_engine.store import baselines, paths

ONE = "test_one.py::test_one"
ONE_TEST = """
import torch

def test_one(tprof):
    tprof(torch.add, torch.ones(4), torch.ones(4))
"""


@pytest.fixture
def suite(pytester: pytest.Pytester) -> Suite:
    return Suite(pytester)


def no_traceback(result: pytest.RunResult) -> None:
    text = "\n".join(result.outlines + result.errlines)
    assert "INTERNALERROR" not in text, text[-3000:]
    assert "Traceback" not in text, text[-3000:]


def leftovers(*folders: Path) -> list[Path]:
    return [p for d in folders if d.exists() for p in d.rglob("*") if ".tmp" in p.name]


# --------------------------------------------------------------------------- unwritable reports


def test_reports_that_cant_be_written_keep_the_summary_name_the_path_and_fail_the_run(
    suite: Suite, monkeypatch: pytest.MonkeyPatch
) -> None:
    suite.pytester.makepyfile(test_one=ONE_TEST)
    folder = suite.pytester.mkdir("out")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(folder))

    result = suite.run("--tprof", f"--tprof-json={folder}", f"--tprof-markdown={folder}")

    no_traceback(result)
    result.assert_outcomes(passed=1)
    # A report asked for and not written fails the run, as a failed save does.
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    lines = summary(result)
    assert lines[0].startswith(f"NO-BASELINE  {ONE} | ")
    assert lines[-3:] == [
        f"JSON report not written: {folder}: is a folder; point --tprof-json at a file",
        f"Markdown summary not written: {folder}: is a folder; point --tprof-markdown at a file",
        f"GitHub step summary not written: {folder}: is a folder; point GITHUB_STEP_SUMMARY "
        "at a file",
    ]
    assert list(folder.iterdir()) == []


def test_a_report_path_under_a_file_names_the_file(suite: Suite) -> None:
    suite.pytester.makepyfile(test_one=ONE_TEST)
    blocking = suite.pytester.path / "out"
    blocking.write_text("a file", encoding="utf-8")
    target = blocking / "report.json"

    result = suite.run("--tprof", f"--tprof-json={target}")

    no_traceback(result)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert summary(result)[-1] == (
        f"JSON report not written: {target}: {blocking} is a file, not a folder; point "
        "--tprof-json at a path in a folder"
    )
    assert blocking.read_text(encoding="utf-8") == "a file"


def test_a_report_that_is_written_leaves_the_exit_status_alone(suite: Suite) -> None:
    suite.pytester.makepyfile(test_one=ONE_TEST)
    target = suite.pytester.path / "reports" / "r.json"

    result = suite.run("--tprof", f"--tprof-json={target}")

    assert result.ret == pytest.ExitCode.OK
    assert summary(result)[-1] == f"JSON report: {target}"
    assert [t["nodeid"] for t in json.loads(target.read_text(encoding="utf-8"))["tests"]] == [ONE]


# --------------------------------------------------------------------------- reports over baselines


def test_a_report_pointed_at_a_baseline_is_refused_and_the_baseline_kept(suite: Suite) -> None:
    suite.pytester.makepyfile(test_one=ONE_TEST)
    suite.run("--tprof-save").assert_outcomes(passed=1)
    path = suite.path_of(ONE)
    moved = suite.pytester.path / "kept-elsewhere.json"
    moved.write_bytes(path.read_bytes())
    before = suite.contents()

    result = suite.run("--tprof", f"--tprof-json={path}", f"--tprof-markdown={moved}")

    no_traceback(result)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert summary(result)[-2:] == [
        f"JSON report not written: {path}: is inside the baseline folder {suite.base}, and only "
        "--tprof-save writes baselines; write the report elsewhere",
        f"Markdown summary not written: {moved}: is a pytest-tprof baseline, and only "
        "--tprof-save writes baselines; write the report elsewhere",
    ]
    assert suite.contents() == before
    assert moved.read_bytes() == before[path]
    # The next run still reads its baseline.
    again = suite.run("--tprof")
    assert not any(x.startswith(("ERROR", "NO-BASELINE")) for x in summary(again))


def test_a_step_summary_pointed_at_a_baseline_is_not_appended_to(
    suite: Suite, monkeypatch: pytest.MonkeyPatch
) -> None:
    suite.pytester.makepyfile(test_one=ONE_TEST)
    suite.run("--tprof-save").assert_outcomes(passed=1)
    path = suite.path_of(ONE)
    before = suite.contents()
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(path))

    result = suite.run("--tprof")

    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert summary(result)[-1] == (
        f"GitHub step summary not written: {path}: is inside the baseline folder {suite.base}, "
        "and only --tprof-save writes baselines; write the report elsewhere"
    )
    assert suite.contents() == before


# --------------------------------------------------------------------------- unwritable traces


def test_a_trace_folder_that_is_a_file_is_a_note_and_the_save_goes_on(suite: Suite) -> None:
    suite.pytester.makepyfile(test_one=ONE_TEST)
    blocking = suite.pytester.path / "traces-file"
    blocking.write_text("a file", encoding="utf-8")
    trace = blocking / "test_one.test_one-"

    saved = suite.run("--tprof-save", "--tprof-save-trace", traces=blocking)

    no_traceback(saved)
    saved.assert_outcomes(passed=1)
    assert saved.ret == pytest.ExitCode.OK
    path = suite.path_of(ONE)
    [entry] = summary(saved)[:1]
    why = (
        f": trace not written: {blocking} is a file, not a folder; move it away or pass "
        "another --tprof-trace-dir"
    )
    recorded = f"recorded; {baselines.sessions_advice(1)}"
    assert entry.startswith(f"SAVED        {ONE} | {recorded}: {path} | {trace}")
    assert entry.endswith(why)
    assert baselines.load_baseline(path).nodeid == ONE

    report = suite.pytester.path / "r.json"
    compared = suite.run(
        "--tprof", "--tprof-collect=traces", f"--tprof-json={report}", traces=blocking
    )

    no_traceback(compared)
    compared.assert_outcomes(passed=1)
    [test] = json.loads(report.read_text(encoding="utf-8"))["tests"]
    assert test["trace"] is None
    assert next(n for n in test["notes"] if "trace not written" in n).endswith(why)
    assert summary(compared)[0].endswith(why)
    assert blocking.read_text(encoding="utf-8") == "a file"
    assert leftovers(suite.pytester.path) == []


def test_an_unwritable_trace_folder_is_a_note_and_the_save_goes_on(suite: Suite) -> None:
    suite.pytester.makepyfile(test_one=ONE_TEST)
    folder = suite.pytester.mkdir("ro-traces")
    folder.chmod(0o555)
    try:
        try:
            (folder / "probe").touch()
        except PermissionError:
            pass
        else:
            (folder / "probe").unlink()
            pytest.skip("this user can write into a 0555 folder (root or a permissive file system)")
        result = suite.run("--tprof-save", traces=folder)
    finally:
        folder.chmod(0o755)
    no_traceback(result)
    result.assert_outcomes(passed=1)
    assert summary(result)[0].endswith(
        ".pt.trace.json.gz: trace not written (Permission denied); free space on or fix the "
        f"permissions of {folder}, or pass another --tprof-trace-dir"
    )
    assert baselines.load_baseline(suite.path_of(ONE)).nodeid == ONE
    assert list(folder.iterdir()) == []


# --------------------------------------------------------------------------- concurrent saves

SLOW_DISK_CONFTEST = """
import os
import time
from pathlib import Path

import pytest


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session):
    # Both runs start saving together, on a disk whose fsync takes a second: without a lock
    # both read the same baseline and the second write drops the first one's session.
    barrier = Path(os.environ["TPROF_TEST_BARRIER"])
    (barrier / f"ready-{os.getpid()}").touch()
    end = time.monotonic() + 120
    while len(list(barrier.glob("ready-*"))) < 2 and time.monotonic() < end:
        time.sleep(0.01)
    real_fsync = os.fsync

    def slow_fsync(fd):
        time.sleep(1.0)
        real_fsync(fd)

    os.fsync = slow_fsync
"""


@pytest.mark.slow
def test_two_runs_saving_one_baseline_at_once_both_keep_their_session(suite: Suite) -> None:
    suite.pytester.makepyfile(test_one=ONE_TEST)
    suite.run("--tprof-save", "--tprof-window=10").assert_outcomes(passed=1)
    path = suite.path_of(ONE)
    assert len(baselines.load_baseline(path).sessions) == 1
    suite.pytester.makeconftest(SLOW_DISK_CONFTEST)
    barrier = suite.pytester.mkdir("barrier")
    env = {**os.environ, "TPROF_TEST_BARRIER": str(barrier)}
    cmd = [sys.executable, "-m", "pytest", *suite.args("--tprof-save", "--tprof-window=10")]
    procs = [
        subprocess.Popen(
            cmd,
            cwd=suite.pytester.path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for _ in range(2)
    ]
    outputs = [proc.communicate(timeout=300)[0] for proc in procs]

    for proc, out in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, out[-3000:]
    notes = sorted(
        x.split(" | ")[1] for out in outputs for x in out.splitlines() if x.startswith("SAVED")
    )
    two = f"appended (2 sessions); {baselines.sessions_advice(2)}"
    assert notes == [f"{two}: {path}", f"appended (3 sessions): {path}"]
    assert len(baselines.load_baseline(path).sessions) == 3
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]  # no lock or temp file


# --------------------------------------------------------------------------- limits


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
def test_a_fifo_in_the_baseline_folder_hangs_neither_the_run_nor_its_stale_listing(
    suite: Suite,
) -> None:
    suite.pytester.makepyfile(test_one=ONE_TEST)
    suite.run("--tprof-save").assert_outcomes(passed=1)
    stray = suite.path_of(ONE).with_name("stray.json")
    os.mkfifo(stray)
    os.mkfifo(suite.path_of(ONE).with_name("test_gone.test_x-0123456789.json"))

    with deadline(120):
        result = suite.run("--tprof")

    no_traceback(result)
    result.assert_outcomes(passed=1)
    assert result.ret == pytest.ExitCode.OK


def _edit(path: Path, change: Any) -> None:
    data = json.loads(path.read_text(encoding="utf-8"))
    change(data)
    path.write_text(json.dumps(data), encoding="utf-8")


def test_a_baseline_asking_for_a_million_iterations_is_an_error_not_a_stall(
    suite: Suite,
) -> None:
    suite.pytester.makepyfile(test_one=ONE_TEST)
    suite.run("--tprof-save").assert_outcomes(passed=1)
    path = suite.path_of(ONE)
    _edit(path, lambda d: d["protocol"].update(iterations=1_000_000))

    with deadline(120):
        result = suite.run("--tprof")

    no_traceback(result)
    result.assert_outcomes(failed=1)
    assert summary(result)[0] == line(
        "error",
        ONE,
        f"{path}: 'protocol.iterations' must be an integer from 1 to 1000 (got 1000000); "
        "restore it from git or re-record it with --tprof-save",
    )


def test_a_baseline_of_10000_sessions_is_judged_on_the_runs_window(suite: Suite) -> None:
    suite.pytester.makepyfile(test_one=ONE_TEST)
    suite.run("--tprof-save").assert_outcomes(passed=1)
    path = suite.path_of(ONE)
    _edit(path, lambda d: d.update(sessions=d["sessions"] * 10_000))
    report = suite.pytester.path / "r.json"

    result = suite.run("--tprof", f"--tprof-json={report}", "--tprof-window=3")

    no_traceback(result)
    result.assert_outcomes(passed=1)
    [test] = json.loads(report.read_text(encoding="utf-8"))["tests"]
    assert test["verdict"] != "error"
    assert test["sessions"] == 3


# --------------------------------------------------------------------------- saying what happened


TWO_TESTS = """
import torch

def test_passes(tprof):
    tprof(torch.add, torch.ones(4), torch.ones(4))

def test_fails_after_profiling(tprof):
    tprof(torch.add, torch.ones(4), torch.ones(4))
    assert False, "the test's own assertion"
"""


def test_a_test_that_failed_reads_not_saved_and_is_not_saved(suite: Suite) -> None:
    suite.pytester.makepyfile(test_two=TWO_TESTS)

    result = suite.run("--tprof-save")

    result.assert_outcomes(passed=1, failed=1)
    lines = summary(result)
    assert lines[0] == line(
        "not-saved", "test_two.py::test_fails_after_profiling", "the test failed"
    )
    assert lines[1].startswith("SAVED        test_two.py::test_passes | recorded; 1 session so ")
    assert [baselines.load_baseline(p).nodeid for p in paths.iter_baselines(suite.base)] == [
        "test_two.py::test_passes"
    ]


CTRL_C = """
import torch

def test_first(tprof):
    tprof(torch.add, torch.ones(4), torch.ones(4))

def test_interrupted():
    raise KeyboardInterrupt
"""


def test_tests_of_an_interrupted_save_run_read_not_saved(suite: Suite) -> None:
    suite.pytester.makepyfile(test_ctrl_c=CTRL_C)

    result = suite.run("--tprof-save", no_reraise_ctrlc=True)

    assert result.ret == pytest.ExitCode.INTERRUPTED
    assert summary(result)[0] == line(
        "not-saved", "test_ctrl_c.py::test_first", "the run was interrupted before saving"
    )
    assert list(paths.iter_baselines(suite.base)) == []


def test_a_save_that_failed_reads_not_saved_with_the_right_hint_for_a_folder(
    suite: Suite,
) -> None:
    suite.pytester.makepyfile(test_one=ONE_TEST)
    suite.run("--tprof-save").assert_outcomes(passed=1)
    path = suite.path_of(ONE)
    path.unlink()
    path.mkdir()

    result = suite.run("--tprof-save")

    no_traceback(result)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    lines = summary(result)
    assert lines[0] == line("not-saved", ONE, "the save failed (see below)")
    assert lines[-1] == (
        f"save failed: {path}: can't write the baseline: it is a folder; move it away and "
        "re-run with --tprof-save"
    )
    assert path.is_dir()


def test_a_baseline_folder_that_is_a_file_is_an_error_naming_it_not_no_baseline(
    suite: Suite,
) -> None:
    suite.pytester.makepyfile(test_one=ONE_TEST)
    blocking = suite.pytester.path / "baselines-file"
    blocking.write_text("a file", encoding="utf-8")

    result = suite.run("--tprof", base=blocking)

    no_traceback(result)
    result.assert_outcomes(failed=1)
    assert summary(result)[0] == line(
        "error",
        ONE,
        f"{blocking}: is a file, not a baseline folder; move it away or point "
        "--tprof-baseline-dir at a folder",
    )
    assert blocking.read_text(encoding="utf-8") == "a file"
