"""docs/ci/tprof-ci.sh end to end: baselines travel between CI runs through an artifact store.

A folder stands in for the store, a tiny torch suite for the project.  Main runs restore the
newest artifact, save and upload; two of them start from the same artifact and diverge, and
``tprof merge`` joins them; pull-request runs judge against the merged artifact.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tprof_engine.store import baselines, paths

SCRIPT = Path(__file__).resolve().parents[1] / "docs" / "ci" / "tprof-ci.sh"
# Timing hardly gates (floor 900 %): the work census is what fails the planted change.
FAST = (
    "-q", "-p", "no:cacheprovider", "--tprof-rounds=4", "--tprof-warmup=1", "--tprof-floor=9",
    "--tprof-min-round-us=0", "--no-tprof-confirm",
)  # fmt: skip
SUITE = """
import os

import torch
from torch import nn


def test_step(tprof):
    torch.manual_seed(0)
    hidden = 32 if os.environ.get("PLANT") == "wider" else 16
    model = nn.Sequential(nn.Linear(8, hidden), nn.ReLU(), nn.Linear(hidden, 4))
    x = torch.randn(4, 8)
    with torch.no_grad():
        tprof(model, x)


def test_other(tprof):
    a = torch.ones(8, 8)
    tprof(torch.mm, a, a)
"""
NODES = ("test_suite.py::test_step", "test_suite.py::test_other")


class Flow:
    """The project folder, the artifact store, and the script run like a CI job."""

    def __init__(self, root: Path) -> None:
        self.project = root / "project"
        self.store = root / "store"
        self.project.mkdir()
        (self.project / "test_suite.py").write_text(SUITE, encoding="utf-8")
        (self.project / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")

    def run(
        self, mode: str, run_id: str, *args: str, plant: str = ""
    ) -> subprocess.CompletedProcess[str]:
        env = {
            **os.environ,
            "TPROF_STORE": str(self.store),
            "TPROF_RUN_ID": run_id,
            "PYTEST": f"{sys.executable} -m pytest",
            "TPROF": f"{sys.executable} -m tprof_engine",
            "PYTHON": sys.executable,
            "PLANT": plant,
        }
        env.pop("GITHUB_STEP_SUMMARY", None)
        return subprocess.run(
            ["bash", str(SCRIPT), mode, *args],
            cwd=self.project,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )

    def sessions(self, run_id: str) -> dict[str, list[str]]:
        """Node id → when each stored session of the main artifact ``run_id`` was recorded."""
        out = {}
        for path in paths.iter_baselines(self.store / "main" / run_id / "baselines"):
            base = baselines.load_baseline(path)
            out[base.nodeid] = [s.recorded_at for s in base.sessions]
        return out

    def report(self, run_id: str) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(
            (self.store / "pr" / run_id / "tprof.json").read_text(encoding="utf-8")
        )
        return data


def ok(result: subprocess.CompletedProcess[str], code: int = 0) -> str:
    assert result.returncode == code, result.stdout + result.stderr
    return result.stdout


@pytest.mark.slow
def test_baselines_travel_between_ci_runs_as_artifacts(tmp_path: Path) -> None:
    flow = Flow(tmp_path)
    assert "no main artifact yet" in ok(flow.run("main", "m1", *FAST))
    assert "restored the baselines of main run m1" in ok(flow.run("main", "m2", *FAST))
    first, second = flow.sessions("m1"), flow.sessions("m2")
    assert sorted(first) == sorted(NODES)
    assert {len(v) for v in first.values()} == {1}
    assert all(second[n][:1] == first[n] and len(second[n]) == 2 for n in NODES)

    # m3 started before m2 uploaded: both grew m1's window, each by its own session.
    (flow.store / "main" / "LATEST").write_text("m1\n", encoding="utf-8")
    ok(flow.run("main", "m3", *FAST))
    third = flow.sessions("m3")
    assert all(third[n][:1] == first[n] and third[n][1] != second[n][1] for n in NODES)

    merged = ok(flow.run("merge", "mm", "m2", "m3"))
    assert merged.count("dropped 1 identical copies") == 2
    assert "merged 2 folders into " in merged
    assert (flow.store / "main" / "LATEST").read_text(encoding="utf-8").strip() == "mm"
    assert flow.sessions("mm") == {n: sorted({*second[n], *third[n]}) for n in NODES}
    assert flow.sessions("m2") == second  # an uploaded artifact is never changed

    unchanged = flow.run("pr", "p1", *FAST)
    assert "restored the baselines of main run mm" in ok(unchanged)
    verdicts = {t["nodeid"]: t["verdict"] for t in flow.report("p1")["tests"]}
    assert set(verdicts) == set(NODES)
    assert "regressed" not in verdicts.values()
    assert (flow.store / "pr" / "p1" / "tprof.md").is_file()
    # the job uploads the traces of failed tests only (each test wrote one in its work folder)
    assert list((flow.store / "pr" / "p1" / "traces").iterdir()) == []

    planted = flow.run("pr", "p2", *FAST, plant="wider")
    ok(planted, code=1)
    tests = {t["nodeid"]: t for t in flow.report("p2")["tests"]}
    assert tests[NODES[0]]["verdict"] == "regressed"
    assert tests[NODES[0]]["work"]["verdict"] == "regressed"
    assert tests[NODES[1]]["verdict"] != "regressed"
    assert "1 failed, 1 passed" in planted.stdout
    uploaded = [p.name for p in (flow.store / "pr" / "p2" / "traces").iterdir()]
    assert uploaded == [Path(tests[NODES[0]]["trace"]).name]
    assert flow.sessions("mm") == {n: sorted({*second[n], *third[n]}) for n in NODES}


def test_the_script_refuses_to_run_without_a_store(tmp_path: Path) -> None:
    result = subprocess.run(
        ["bash", str(SCRIPT), "pr"],
        cwd=tmp_path,
        env={k: v for k, v in os.environ.items() if k != "TPROF_STORE"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == (
        "tprof-ci: set TPROF_STORE to the folder that holds the CI artifacts\n"
    )


@pytest.mark.parametrize("runs", [(), ("nope",)])
def test_merging_without_known_main_runs_is_a_usage_error(
    tmp_path: Path, runs: tuple[str, ...]
) -> None:
    flow = Flow(tmp_path)
    result = flow.run("merge", "mm", *runs)
    assert result.returncode == 2
    assert result.stderr.startswith("tprof-ci: ")
    assert not (flow.store / "main").exists()


def test_the_ci_page_shows_the_script_as_committed() -> None:
    page = (SCRIPT.parents[1] / "ci.md").read_text(encoding="utf-8")
    shown = page.split("```bash\n", 1)[1].split("```\n", 1)[0]
    assert shown == SCRIPT.read_text(encoding="utf-8")
