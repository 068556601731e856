"""--tprof-collect=memory through pytest: stored with the baseline, failing a test that allocates
more."""

from __future__ import annotations

import json
from xml.etree import ElementTree

import pytest

pytestmark = pytest.mark.slow

# The work census and timing hardly gate here (no census, floor 900 %): memory does.
FAST = (
    "-p", "no:cacheprovider", "--tprof-rounds=6", "--tprof-warmup=1", "--tprof-floor=9",
    "--tprof-min-round-us=0", "--no-tprof-census",
)  # fmt: skip

MODEL = """
import os

import torch
from torch import nn


def test_step(tprof):
    hidden = 128 if os.environ.get("PLANT") == "wider" else 64
    torch.manual_seed(0)
    layer = nn.Linear(32, hidden)
    x = torch.randn(16, 32)
    with torch.no_grad():
        tprof(lambda: layer(x).relu())
"""


def test_a_layer_allocating_twice_as_much_fails_naming_the_op(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(test_model=MODEL)
    report = pytester.path / "report.json"
    saving = pytester.runpytest_subprocess(*FAST, "--tprof-save", "--tprof-collect=memory")
    saving.assert_outcomes(passed=1)
    (path,) = (pytester.path / "baselines").rglob("*.json")
    saved = json.loads(path.read_text())
    assert saved["protocol"]["profile_memory"] is True
    assert saved["sessions"][0]["memory"]["ops"]["aten::addmm"]["alloc_bytes"] == [16 * 64 * 4] * 6

    monkeypatch.setenv("PLANT", "wider")
    result = pytester.runpytest_subprocess(
        *FAST, "--tprof", "--tprof-collect=memory", f"--tprof-json={report}"
    )
    result.assert_outcomes(failed=1)
    (test,) = json.loads(report.read_text())["tests"]
    assert test["verdict"] == "regressed"
    assert "MEMORY: aten::addmm allocates 4,096 → 8,192 B per round (+4,096 B)" in test["reason"]


def test_a_memory_regression_beside_a_work_one_is_named_in_the_summary_and_junit(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    # With the census on, the wider layer fails on its work too: the memory cause must still
    # be named wherever a failure's causes are listed, not only in the reason text.
    with_census = tuple(a for a in FAST if a != "--no-tprof-census")
    pytester.makepyfile(test_model=MODEL)
    saved = pytester.runpytest_subprocess(*with_census, "--tprof-save", "--tprof-collect=memory")
    saved.assert_outcomes(passed=1)

    monkeypatch.setenv("PLANT", "wider")
    junit = pytester.path / "junit.xml"
    result = pytester.runpytest_subprocess(
        *with_census, "--tprof", "--tprof-collect=memory", f"--junitxml={junit}"
    )
    result.assert_outcomes(failed=1)
    memory = "MEMORY: aten::addmm allocates 4,096 → 8,192 B per round (+4,096 B)"
    (line,) = [s for s in result.stdout.lines if s.startswith("REGRESSED    test_model.py::")]
    assert "work regressed" in line and memory in line
    props = {
        p.get("name"): p.get("value") for p in ElementTree.parse(junit).getroot().iter("property")
    }
    assert memory in str(props["tprof_why"])
    assert props["tprof_verdict"] == "regressed"
