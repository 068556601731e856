"""--tprof under coverage: calls and work gate, timings are reported but not gated, no save."""

from __future__ import annotations

import json
import sys

import pytest
from tprof_testing import with_quiet_readings

# Timing hardly gates these tests anyway (floor 900 %); what must still gate is the work.
FAST = (
    "-p", "no:cacheprovider", "--tprof-rounds=6", "--tprof-warmup=1", "--tprof-floor=9",
    "--tprof-min-round-us=0",
)  # fmt: skip
COVERAGE = "coverage: coverage.py's CTracer traced every line while profiling"
HEADER = (
    "tprof: coverage (pytest-cov) traces every line: calls and work gate as usual; "
    "timings are reported, not gated"
)

MODEL = """
import os

import pytest
import torch
from torch import nn


def step_of(hidden):
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(32, hidden), nn.ReLU(), nn.Linear(hidden, 8))
    x = torch.randn(16, 32)

    def step():
        net.zero_grad()
        net(x).sum().backward()

    return step


def hidden():
    return 128 if os.environ.get("PLANT") == "wider" else 64


def test_step(tprof):
    tprof(step_of(hidden()))


@pytest.mark.no_cover
def test_step_uncovered(tprof):
    tprof(step_of(hidden()))
"""


@pytest.fixture
def model(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    with_quiet_readings(pytester).makepyfile(test_model=MODEL)
    monkeypatch.delenv("COVERAGE_CORE", raising=False)  # coverage's default tracer
    monkeypatch.setenv("PLANT", "")
    return pytester


def verdicts_of(pytester: pytest.Pytester) -> dict[str, dict[str, object]]:
    doc = json.loads((pytester.path / "report.json").read_text())
    return {t["nodeid"].split("::")[1]: t for t in doc["tests"]}


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    report = f"--tprof-json={pytester.path / 'report.json'}"
    return pytester.runpytest_subprocess(*FAST, report, *args)


@pytest.mark.slow
@pytest.mark.serial
def test_under_pytest_cov_timings_are_reported_not_gated_and_work_still_gates(
    model: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    run(model, "--tprof-save").assert_outcomes(passed=2)
    cov = ("--cov=.", "--cov-report=", "--tprof")
    result = run(model, *cov)
    result.assert_outcomes(passed=2)
    assert HEADER in result.outlines
    tests = verdicts_of(model)
    covered, uncovered = tests["test_step"], tests["test_step_uncovered"]
    assert covered["verdict"] == "inconclusive"  # calls and work unchanged, timing unknown
    assert covered["differences"] == [COVERAGE]
    assert f"timings not compared: {COVERAGE}" in covered["notes"]
    assert covered["families"][0]["current_total_us"] > 0  # still reported
    # pytest-cov's no_cover pauses the tracer for that test: its timings are gated as usual.
    assert uncovered["differences"] == []
    summary = next(
        x for x in result.outlines if x.startswith("INCONCLUSIVE test_model.py::test_step ")
    )
    assert summary.endswith(f"timings not compared: {COVERAGE}")  # no drift: nothing compared
    assert covered["uniform_shift"] is None

    monkeypatch.setenv("PLANT", "wider")
    result = run(model, *cov)
    result.assert_outcomes(failed=2)
    covered = verdicts_of(model)["test_step"]
    assert covered["verdict"] == "regressed"
    assert covered["work"]["verdict"] == "regressed"
    assert covered["work"]["reasons"][0].startswith("total FLOPs +100.0%")
    assert covered["differences"] == [COVERAGE]


@pytest.mark.slow
def test_a_save_under_coverage_run_records_nothing_and_fails_the_run(
    model: pytest.Pytester,
) -> None:
    report = f"--tprof-json={model.path / 'report.json'}"
    result = model.run(
        sys.executable, "-m", "coverage", "run", "-m", "pytest", *FAST, report, "--tprof-save"
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert (
        "tprof: coverage is active: --tprof-save records no baseline under it; "
        "save without coverage"
    ) in result.outlines
    tests = verdicts_of(model)
    assert tests["test_step"]["verdict"] == "not-saved"
    assert tests["test_step"]["reason"] == "the save failed (see below)"
    assert not list(model.path.glob("baselines/**/*.json"))
    text = result.stdout.str()
    assert (
        f"its timings are the tracer's ({COVERAGE}); record baselines without coverage "
        "(drop --cov or add --no-cov; not under `coverage run`)"
    ) in text
