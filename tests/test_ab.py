"""``tprof ab`` end to end: a git repository whose working tree differs from its commit, both
measured in one job (tprof_engine.ab, pytest_tprof.ab_side)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tprof_engine import cli

TPROF = [sys.executable, "-c", "import sys; from tprof_engine.cli import main; sys.exit(main())"]
PACKAGE = """
import torch


def step(x, w):
    return torch.relu(x @ w).sum()
"""
# A pure-Python loop in the body: host time several times the round's, no op slower.
PLANTED = PACKAGE.replace("def step(x, w):\n", "def step(x, w):\n    sum(range(60_000))\n")
TESTS = """
import torch
from mypkg import step


def test_step(tprof):
    torch.manual_seed(0)
    tprof(step, torch.randn(32, 64), torch.randn(64, 64))


def test_other(tprof):
    a = torch.ones(32, 32)
    tprof(torch.mm, a, a)
"""
NEW_TEST = """
import torch


def test_new(tprof):
    tprof(torch.relu, torch.ones(64, 64))
"""
FAST = ["-q", "-p", "no:cacheprovider", "--tprof-rounds=12", "--tprof-warmup=1"]


def git(root: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(root), *args], capture_output=True, text=True, check=True
    )
    return done.stdout


def project(root: Path, package_folder: str = "src") -> Path:
    """A project with its package under ``package_folder``, committed."""
    pkg = root / package_folder / "mypkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(PACKAGE)
    (root / "tests").mkdir()
    (root / "tests" / "test_m.py").write_text(TESTS)
    (root / "pytest.ini").write_text("[pytest]\n")
    (root / ".gitignore").write_text(".tprof/\nbaselines/\n")
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "-c", "user.email=t@example.com", "-c", "user.name=t", "commit", "-qm", "base")
    return pkg / "__init__.py"


def tprof_ab(
    root: Path, *args: str, env: dict[str, str] | None = None
) -> tuple[int, str, dict[str, Any]]:
    report = root / "ab.json"
    done = subprocess.run(
        [*TPROF, "ab", f"--json={report}", *args], cwd=root, capture_output=True, text=True,
        env={**os.environ, **(env or {})}, check=False, timeout=600,
    )  # fmt: skip
    doc = json.loads(report.read_text()) if report.exists() else {}
    return done.returncode, done.stdout + done.stderr, doc


def verdicts(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {t["nodeid"].split("::")[-1]: t for t in doc.get("tests", [])}


@pytest.mark.slow
def test_the_same_commit_passes_and_a_slower_working_tree_fails_confirmed(tmp_path: Path) -> None:
    source = project(tmp_path)
    code, out, doc = tprof_ab(tmp_path, "HEAD", "--", *FAST)
    assert code == 0, out
    assert "head (working tree) against base HEAD at" in out
    for t in verdicts(doc).values():
        assert t["verdict"] != "regressed", t["reason"]
        assert any(n.startswith("paired: 12 head rounds") for n in t["notes"]), t["notes"]

    source.write_text(PLANTED)  # the change under review, not committed
    (tmp_path / "tests" / "test_new.py").write_text(NEW_TEST)  # a test the base doesn't have
    code, out, doc = tprof_ab(tmp_path, "HEAD", "--", *FAST)
    assert code == 1, out
    new = verdicts(doc)["test_new"]
    assert "tprof ab: not paired (the base side has no such test)" in new["notes"]
    assert "timing was not judged for 1 test(s): tests/test_new.py::test_new" in out
    step = verdicts(doc)["test_step"]
    assert step["verdict"] == "regressed", step["reason"]
    assert "paired with the base's rounds" in step["reason"]
    assert "confirmed in a fresh process" in step["notes"]  # by a fresh pair of sides
    assert verdicts(doc)["test_other"]["verdict"] != "regressed"
    assert git(tmp_path, "worktree", "list").count("\n") == 1  # the base's worktree is gone
    assert list((tmp_path / ".tprof" / "ab-base-traces").glob("*step*.json.gz"))


@pytest.mark.slow
def test_a_side_that_loads_the_other_trees_package_is_refused(tmp_path: Path) -> None:
    project(tmp_path, package_folder="lib")  # importable only through PYTHONPATH
    code, out, _ = tprof_ab(
        tmp_path, "HEAD", "--", *FAST, env={"PYTHONPATH": str(tmp_path / "lib")}
    )
    assert code == 2, out
    assert "the base side loaded modules from the other side's tree: mypkg" in out


def test_outside_a_git_repository_it_says_where_it_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))
    assert cli.main(["ab", "HEAD"]) == cli.EXIT_ERROR
    assert "tprof ab runs inside a git repository" in capsys.readouterr().err


def test_an_unknown_base_and_xdist_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    project(tmp_path)
    monkeypatch.chdir(tmp_path)
    assert cli.main(["ab", "no-such-branch"]) == cli.EXIT_ERROR
    assert "no commit 'no-such-branch'" in capsys.readouterr().err
    assert cli.main(["ab", "HEAD", "--", "-n", "2"]) == cli.EXIT_ERROR
    assert "runs each side serially" in capsys.readouterr().err
    assert cli.main(["ab", "HEAD", "--", "--tprof-save"]) == cli.EXIT_ERROR
    assert "stores nothing" in capsys.readouterr().err
    assert git(tmp_path, "worktree", "list").count("\n") == 1


def test_the_action_runs_the_command_with_options_it_has() -> None:
    """action.yml's tprof ab line parses with the command's own parser."""
    action = (Path(__file__).resolve().parents[1] / "action.yml").read_text()
    assert '-m tprof_engine ab --json="$REPORT"' in action
    args = cli.build_parser().parse_args(
        ["ab", "--json=r.json", "--if-unjudged=warn", "abc123", "--", "tests/perf"]
    )
    assert (args.ref, args.if_unjudged, args.pytest_args) == (
        "abc123",
        "warn",
        ["tests/perf"],
    )


@pytest.mark.slow
def test_a_test_whose_timing_was_not_judged_is_retried_once_then_warned(tmp_path: Path) -> None:
    project(tmp_path)
    tests = tmp_path / "tests" / "test_m.py"
    # rounds far under the smallest slowdown it may fail on: inconclusive every time
    marked = "import pytest\n" + TESTS.replace(
        "def test_other(tprof):", "@pytest.mark.tprof(abs_floor_us=1e6)\ndef test_other(tprof):"
    )
    tests.write_text(marked)
    git(tmp_path, "-c", "user.email=t@example.com", "-c", "user.name=t", "commit", "-qam", "marked")
    code, out, doc = tprof_ab(tmp_path, "--if-unjudged=retry", "HEAD", "--", *FAST)
    assert code == 0, out
    assert "timing not judged for 1 test(s); running them once more" in out
    assert "warning: timing was not judged for 1 test(s): tests/test_m.py::test_other" in out
    found = verdicts(doc)
    assert set(found) == {"test_step", "test_other"}  # the retry's verdict merged, not alone
    # inconclusive either way: its rounds are too short, or (a loaded machine) too noisy first
    reason = found["test_other"]["reason"]
    assert found["test_other"]["verdict"] == "inconclusive", reason
    assert "rounds too short to judge" in reason or "too noisy" in reason
