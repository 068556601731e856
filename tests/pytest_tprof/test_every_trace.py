"""Every profiled test of every run leaves its Chrome trace, written off the test's path, named
in the reports, kept for the last runs of each test, and paired with baselines by tprof diff."""

from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from tprof_testing import SMALL

from tprof_engine.cli import main as tprof

pytestmark = pytest.mark.slow

SUITE = """
import os
import signal

import torch


def test_mm(tprof):
    a = torch.randn(64, 64)
    tprof(lambda: a @ a)


def test_relu(tprof):
    x = torch.randn(256, 256)
    tprof(lambda: torch.relu(x))


def test_last(tprof):
    x = torch.randn(32, 32)

    def step():
        if os.environ.get("KILL_IN_LAST"):  # the run dies mid-test, past the earlier exports
            os.kill(os.getpid(), signal.SIGKILL)
        return x + 1

    tprof(step)
"""
TESTS = ("test_suite.py::test_mm", "test_suite.py::test_relu", "test_suite.py::test_last")


@pytest.fixture
def suite(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makepyfile(test_suite=SUITE)
    return pytester


def traces(pytester: pytest.Pytester) -> list[Path]:
    folder = pytester.path / ".tprof" / "traces"
    return sorted(folder.glob("*.pt.trace.json.gz")) if folder.is_dir() else []


def loads(path: Path) -> bool:
    with gzip.open(path, "rt") as f:
        return bool(json.load(f)["traceEvents"])


def run(pytester: pytest.Pytester, *args: str) -> dict[str, dict[str, object]]:
    """One run in a process of its own; its JSON report's tests by node id."""
    result = pytester.runpytest_subprocess(*SMALL, "--tprof-json=report.json", *args)
    assert result.ret == 0, result.stdout.str()[-3000:]
    doc = json.loads((pytester.path / "report.json").read_text())
    return {t["nodeid"]: t for t in doc["tests"]}


def test_every_run_leaves_a_trace_of_every_test_and_keeps_the_last_runs(
    suite: pytest.Pytester,
) -> None:
    first = run(suite, "--tprof")  # no baseline yet
    assert {t["verdict"] for t in first.values()} == {"no-baseline"}
    assert len(traces(suite)) == 3
    assert all(
        Path(str(t["trace"])).is_file() and loads(Path(str(t["trace"]))) for t in first.values()
    )
    run(suite, "--tprof-save")
    run(suite, "--tprof-save")
    compared = run(suite, "--tprof")
    assert set(compared) == set(TESTS)
    assert all(Path(str(t["trace"])) in traces(suite) for t in compared.values())
    # four runs, three kept per test (--tprof-trace-keep), said in the summary
    assert len(traces(suite)) == 9
    result = suite.runpytest_subprocess(*SMALL, "--tprof", "--tprof-trace-keep=1")
    result.stdout.fnmatch_lines(["*tprof: 9 older trace(s) removed: each test keeps its last 1 *"])
    assert len(traces(suite)) == 3
    # off: a test whose ops didn't move writes none
    before = set(traces(suite))
    run(suite, "--tprof", "--no-tprof-traces")
    assert set(traces(suite)) <= before


def test_tprof_diff_pairs_a_baseline_folder_with_a_run_s_trace_folder(
    suite: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    run(suite, "--tprof-save", "--tprof-save-trace")
    run(suite, "--tprof-save", "--tprof-save-trace")
    run(suite, "--tprof")
    run(suite, "--tprof")  # two runs' traces of each test: the newest stands for it
    baselines = suite.path / "baselines"
    assert tprof(["diff", str(baselines), str(suite.path / ".tprof" / "traces")]) in (0, 1)
    out = capsys.readouterr().out
    assert "tprof diff: 3 tests compared" in out, out[-2000:]
    # a folder of baselines with the traces kept beside them holds each test once
    assert tprof(["diff", str(baselines), str(baselines)]) == 0
    assert "tprof diff: 3 tests compared" in capsys.readouterr().out


def test_a_run_killed_mid_way_leaves_whole_traces_of_the_tests_that_finished(
    suite: pytest.Pytester,
) -> None:
    env = {**os.environ, "KILL_IN_LAST": "1"}
    cmd = [sys.executable, "-m", "pytest", *SMALL, "--tprof", "-p", "no:cacheprovider"]
    killed = subprocess.run(cmd, cwd=suite.path, env=env, capture_output=True, timeout=300)
    assert killed.returncode == -signal.SIGKILL
    left = traces(suite)
    assert sorted(p.name.split(".")[1].rsplit("-", 1)[0] for p in left) == ["test_mm", "test_relu"]
    assert all(loads(p) for p in left)  # whole, and no other file under a trace's name
    folder = suite.path / ".tprof" / "traces"
    assert all(p in left or p.name.startswith(".") for p in folder.iterdir())


def test_under_xdist_each_worker_writes_the_traces_of_its_tests(suite: pytest.Pytester) -> None:
    pytest.importorskip("xdist")
    found = run(suite, "--tprof", "-n", "2")
    assert set(found) == set(TESTS)
    assert sorted(Path(str(t["trace"])) for t in found.values()) == traces(suite)
    assert all(loads(p) for p in traces(suite))
