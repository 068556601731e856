"""A fresh process confirming a regression runs the test on exactly the parent's inputs: its
environment, its settings, its iterations and rounds, and the random state its test started
from."""

from __future__ import annotations

import json

import pytest
from tprof_testing import with_quiet_readings

pytestmark = [pytest.mark.slow, pytest.mark.serial]

FAST = (
    "-p",
    "no:cacheprovider",
    "--tprof-rounds=12",
    "--tprof-warmup=1",
    "--tprof-floor=1.0",
    "--tprof-min-round-us=2000",
    "--no-tprof-census",
)
PLANT = "TPROF_TEST_PLANT"

# The plant is read from the environment: only a child that inherits the parent's sees it.
# Each process writes down what its test saw: the plant, its first random draws, whether it
# is the fresh process, and how often the body was called (warm-up, rounds x iterations, the
# re-measurement).
SUITE = f"""
import json
import os
import random
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).parent


def test_planted(tprof):
    seen = {{
        "plant": os.environ.get("{PLANT}"),
        "fresh": bool(os.environ.get("TPROF_FRESH_PROCESS")),
        "draws": [random.random(), float(np.random.rand()), torch.rand(1).item()],
    }}
    k = 8 * 128 if seen["plant"] else 128
    a = torch.randn(128, k)
    b = torch.randn(k, 128)
    calls = []

    def body():
        calls.append(1)
        return a @ b

    tprof(body)
    seen["calls"] = len(calls)
    with (HERE / "seen.jsonl").open("a") as out:
        out.write(json.dumps(seen) + "\\n")
"""


def _planted_in_the_parent(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """The suite's baseline saved without the plant, then the plant set in this (the parent's)
    environment only: a child must inherit it to see it."""
    with_quiet_readings(pytester).makepyfile(test_plant=SUITE)
    monkeypatch.delenv(PLANT, raising=False)
    pytester.runpytest(*FAST, "--tprof-save").assert_outcomes(passed=1)
    (pytester.path / "seen.jsonl").unlink()
    monkeypatch.setenv(PLANT, "1")


def _seen(pytester: pytest.Pytester) -> list[dict[str, object]]:
    """What each process's test wrote down, in the order they ran."""
    lines = (pytester.path / "seen.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def test_the_fresh_process_gets_the_parents_environment_inputs_and_random_state(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    _planted_in_the_parent(pytester, monkeypatch)
    result = pytester.runpytest(*FAST, "--tprof", "--tprof-json=report.json")
    result.assert_outcomes(failed=1)
    (test,) = json.loads((pytester.path / "report.json").read_text())["tests"]
    assert test["verdict"] == "regressed"
    assert "confirmed in a fresh process" in test["notes"]
    # the child writes first: the parent's test waits for it inside its tprof() call
    child, parent = _seen(pytester)
    assert (parent["fresh"], child["fresh"]) == (False, True)
    assert parent["plant"] == child["plant"] == "1"
    assert parent["draws"] == child["draws"]  # the same random state as its test started
    assert parent["calls"] == child["calls"]  # the same warm-up, rounds and iterations


def test_under_xdist_the_serial_re_run_starts_from_the_workers_random_state(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    _planted_in_the_parent(pytester, monkeypatch)
    # xdist's controller imports modules of its own: a process of its own (as in test_fresh)
    result = pytester.runpytest_subprocess(*FAST, "--tprof", "-n", "2")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["tprof: confirming 1 timing regression(s) found under xdist*"])
    worker, child = _seen(pytester)  # the child runs once workers finish
    assert (worker["fresh"], child["fresh"]) == (False, True)
    assert worker["plant"] == child["plant"] == "1"
    assert worker["draws"] == child["draws"]
