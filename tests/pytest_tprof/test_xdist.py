"""Under pytest-xdist: workers profile, the controller gathers, saves and reports."""

from __future__ import annotations

import json
import re

import pytest
from tprof_testing import SMALL

from tprof_engine.capture.facts import torch_facts
from tprof_engine.model.environment import Fingerprint
from tprof_engine.store import baselines, paths

pytestmark = pytest.mark.slow

pytest.importorskip("xdist")

NODEIDS = [f"test_spread.py::test_op[{op}]" for op in ("relu", "sigmoid", "tanh", "exp")] + [
    "test_spread.py::TestMore::test_matmul"
]
HEADER = (
    "tprof: under xdist, concurrent workers add timing noise: calls gate as usual, "
    "timing verdicts carry a note"
)


@pytest.fixture
def spread(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makepyfile(
        test_spread="""
        import pytest
        import torch

        @pytest.mark.parametrize("op", ["relu", "sigmoid", "tanh", "exp"])
        def test_op(tprof, op):
            tprof(getattr(torch, op), torch.ones(64))

        class TestMore:
            def test_matmul(self, tprof):
                x = torch.ones(32, 32)
                tprof(torch.mm, x, x)
        """
    )
    return pytester


def summary_nodeids(result: pytest.RunResult) -> list[str]:
    return re.findall(r"^[A-Z-]+ +(\S+::\S+) \|", result.stdout.str(), re.M)


def test_the_controller_saves_every_workers_baselines_and_reports_every_test(
    spread: pytest.Pytester,
) -> None:
    saved = spread.runpytest_subprocess("-n", "2", *SMALL, "--tprof-save")
    saved.assert_outcomes(passed=len(NODEIDS))
    saved.stdout.fnmatch_lines(["*2 workers [[]5 items[]]*"])
    assert HEADER in saved.outlines
    folder = spread.path / "baselines" / Fingerprint.collect(torch_facts()).key
    files = sorted(folder.iterdir())
    assert [p.name for p in files] == sorted(f"{paths.slug(n)}.json" for n in NODEIDS)
    assert sorted(baselines.load_baseline(p).nodeid for p in files) == sorted(NODEIDS)
    assert sorted(summary_nodeids(saved)) == sorted(NODEIDS)

    checked = spread.runpytest_subprocess("-n", "2", *SMALL, "--tprof", "--tprof-json=report.json")
    checked.assert_outcomes(passed=len(NODEIDS))
    assert HEADER in checked.outlines
    assert sorted(summary_nodeids(checked)) == sorted(NODEIDS)
    doc = json.loads((spread.path / "report.json").read_text())
    assert sorted(t["nodeid"] for t in doc["tests"]) == sorted(NODEIDS)
    for test in doc["tests"]:
        assert test["verdict"] != "no-baseline", test["nodeid"]
        assert test["baseline"] == str(folder / f"{paths.slug(test['nodeid'])}.json")
        assert any("xdist" in note for note in test["notes"]), test["notes"]
