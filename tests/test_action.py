"""action.yml run on each event a repository has (tests/action_harness.py runs its steps): a
shallow clone of a small repository whose project lives in a subfolder, the base found and
fetched, ``tprof ab`` run, the exit status the Action ends with, and the uploaded files."""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from action_harness import Job, Result, Workflow, doc_workflows, load_text, run_action

EVENTS = Path(__file__).resolve().parent / "data" / "events"
ZEROS = "0" * 40
LABEL = "perf-change-accepted"
TESTS = """
import torch

WIDTH = 32


def test_lin(tprof):
    torch.manual_seed(0)
    lin = torch.nn.Linear(32, WIDTH)
    tprof(lin, torch.randn(8, 32))


def test_plain():
    assert True
"""
# One argument per line or several on one, quoted as a shell quotes them.
PYTEST_ARGS = """tests/test_m.py
-k 'test_lin or test_plain'
--tprof-rounds=10 --tprof-warmup=1
"""


@dataclass(frozen=True)
class Origin:
    """The repository a job clones: main's two commits, and branches off main's tip."""

    url: str
    main: str
    feature_before: str  # the feature branch's first commit
    feature: str  # its second: README edits only
    wide: str  # main with a wider Linear: a work regression
    broken: str  # the wider Linear and an ordinary failing test


def git(root: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(root), "-c", "user.email=t@example.com", "-c", "user.name=t", *args],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return done.stdout.strip()


def commit(root: Path, files: dict[str, str], message: str) -> str:
    for name, content in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(content)
    git(root, "add", "-A")
    git(root, "commit", "-qm", message)
    return git(root, "rev-parse", "HEAD")


@pytest.fixture(scope="module")
def origin(tmp_path_factory: pytest.TempPathFactory) -> Origin:
    root = tmp_path_factory.mktemp("origin")
    git(root, "init", "-q", "-b", "main")
    first = {"proj/tests/test_m.py": TESTS, "proj/pytest.ini": "[pytest]\n"}
    commit(root, {**first, ".gitignore": ".tprof/\n", "README": "a\n"}, "base")
    main = commit(root, {"README": "b\n"}, "readme")
    git(root, "checkout", "-qb", "feature")
    before = commit(root, {"README": "c\n"}, "readme again")
    feature = commit(root, {"README": "d\n"}, "and again")
    git(root, "tag", "v1")
    wider = TESTS.replace("WIDTH = 32", "WIDTH = 64")
    git(root, "checkout", "-qb", "wide", main)
    wide = commit(root, {"proj/tests/test_m.py": wider}, "wider")
    git(root, "checkout", "-qb", "broken", main)
    failing = wider.replace("assert True", "assert 1 == 2")
    broken = commit(root, {"proj/tests/test_m.py": failing}, "wider, and a failing test")
    git(root, "checkout", "-q", "main")
    return Origin(f"file://{root}", main, before, feature, wide, broken)


def payload(name: str, **values: str) -> dict[str, Any]:
    raw = (EVENTS / f"{name}.json").read_text()
    for key, value in values.items():
        raw = raw.replace(f"${key}", value)
    found: dict[str, Any] = json.loads(raw)
    return found


def job(
    tmp_path: Path, origin: Origin, branch: str, event_name: str, event: dict[str, Any], **kw: Any
) -> Job:
    """A shallow checkout of ``branch`` (depth 1, as actions/checkout makes) and its job."""
    workspace = tmp_path / "workspace"
    subprocess.run(
        ["git", "clone", "-q", "--depth=1", "--branch", branch, origin.url, str(workspace)],
        check=True,
    )  # fmt: skip
    inputs = {
        "python": sys.executable,
        "install": "false",
        "working-directory": "proj",
        "pytest-args": PYTEST_ARGS,
        **kw.pop("inputs", {}),
    }
    return Job(workspace, tmp_path / "temp", event_name, event, inputs, **kw)


def base_of(result: Result) -> str:
    return str(result.steps["base"]["outputs"].get("base", ""))


def check_uploaded(result: Result) -> None:
    """The run's artifact: the report, the JUnit file and both sides' traces, files that exist."""
    name = result.outputs["artifact-name"]
    files = result.uploads[name]
    kinds = {f.relative_to(Path(result.outputs["report"]).parent).parts[0] for f in files}
    assert {"report.json", "junit.xml", "traces", "base-traces"} <= kinds, files
    assert any(f.name.endswith(".pt.trace.json.gz") for f in files if "base-traces" in f.parts)
    assert f"Traces and reports: [{name}](https://" in result.summary


@pytest.mark.slow
def test_a_work_regression_without_the_label_fails(tmp_path: Path, origin: Origin) -> None:
    event = payload("pull_request", MAIN=origin.main, BRANCH="wide", HEAD=origin.wide)
    result = run_action(job(tmp_path, origin, "wide", "pull_request", event))
    assert result.status == 1, result.log
    assert (result.outputs["regressed"], result.outputs["accepted"]) == ("1", "false")
    assert "Accepted" not in result.summary
    check_uploaded(result)


@pytest.mark.slow
def test_adding_the_label_accepts_a_work_regression_and_says_who(
    tmp_path: Path, origin: Origin
) -> None:
    event = payload("pull_request_labeled", MAIN=origin.main, BRANCH="wide", HEAD=origin.wide)
    result = run_action(job(tmp_path, origin, "wide", "pull_request", event))
    assert result.status == 0, result.log
    assert (result.outputs["regressed"], result.outputs["accepted"]) == ("1", "true")
    assert (
        "**Accepted**: the regression of tests.test_m.test_lin, by the pull request's label "
        f"`{LABEL}`, added by @alice (labels as the event saw them)."
    ) in result.summary
    check_uploaded(result)


@pytest.fixture(scope="module")
def api() -> Iterator[str]:
    """A GitHub API that answers with recorded responses: the label is on pull request 7 now."""
    answers = {
        "/repos/octo/project/issues/7/labels?per_page=100": EVENTS / "api_labels.json",
        "/repos/octo/project/issues/7/events?per_page=100": EVENTS / "api_events.json",
    }

    class Recorded(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = answers.get(self.path)
            ok = path is not None and self.headers["Authorization"] == "Bearer job-token"
            body = path.read_bytes() if ok and path else b'{"message": "Not Found"}'
            self.send_response(200 if ok else 404)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Recorded)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.mark.slow
def test_a_label_added_after_the_event_is_read_live(
    tmp_path: Path, origin: Origin, api: str
) -> None:
    """A re-run replays the old payload (no label in it); the API says what is on it now."""
    event = payload("pull_request", MAIN=origin.main, BRANCH="wide", HEAD=origin.wide)
    live = {"env": {"GITHUB_API_URL": api}, "inputs": {"github-token": "job-token"}}
    result = run_action(job(tmp_path, origin, "wide", "pull_request", event, **live))
    assert result.status == 0, result.log
    assert f"`{LABEL}`, added by @bob (labels read when the job ran)" in result.summary


@pytest.mark.slow
def test_the_label_never_passes_an_ordinary_failing_test(tmp_path: Path, origin: Origin) -> None:
    event = payload("pull_request_labeled", MAIN=origin.main, BRANCH="broken", HEAD=origin.broken)
    result = run_action(job(tmp_path, origin, "broken", "pull_request", event))
    assert result.status == 1, result.log
    assert (result.outputs["failed"], result.outputs["accepted"]) == ("2", "false")
    assert (
        "**Not accepted** (accepted only tprof regressions): 1 test(s) failed for a reason "
        "other than a tprof regression: tests.test_m.test_plain."
    ) in result.summary
    check_uploaded(result)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("event_name", "name", "branch"),
    [
        ("push", "push", "feature"),
        ("push", "push_new_branch", "feature"),
        ("push", "push_tag", "v1"),
        ("merge_group", "merge_group", "feature"),
    ],
)
def test_each_event_finds_its_base_and_runs(
    tmp_path: Path, origin: Origin, event_name: str, name: str, branch: str
) -> None:
    values = {"MAIN": origin.main, "HEAD": origin.feature, "BEFORE": origin.feature_before}
    event = payload(name, BRANCH=branch, **values)
    kind = "tags" if branch == "v1" else "heads"
    env = {"GITHUB_REF": f"refs/{kind}/{branch}"}
    result = run_action(job(tmp_path, origin, branch, event_name, event, env=env))
    assert result.status == 0, result.log
    # the commit before the push; else the merge base with main (main's tip here)
    assert base_of(result) == (origin.feature_before if name == "push" else origin.main)
    check_uploaded(result)


@pytest.mark.slow
def test_a_pull_request_in_two_matrix_cells_uploads_under_two_names(
    tmp_path: Path, origin: Origin
) -> None:
    """Each cell: a shallow checkout (depth 1), measured against the pull request's base."""
    shared = Workflow()
    event = payload("pull_request", MAIN=origin.main, BRANCH="feature", HEAD=origin.feature)
    names = []
    for index, python in enumerate(["3.10", "3.12"]):
        cell = job(
            tmp_path / python, origin, "feature", "pull_request", event,
            matrix={"python": python}, job_index=index, workflow=shared,
        )  # fmt: skip
        result = run_action(cell)
        assert result.status == 0, result.log
        assert base_of(result) == origin.main
        assert "against base " + origin.main[:10] in result.log
        assert (result.outputs["regressed"], result.outputs["failed"]) == ("0", "0")
        check_uploaded(result)
        names.append(result.outputs["artifact-name"])
    assert len(set(names)) == 2
    assert set(shared.artifacts) == set(names)


def documented_pull_request_command() -> str:
    """docs/ci.md's stored-mode job: the command its pull requests run."""
    stored = [t for n, t in doc_workflows().items() if n.startswith("ci-")]
    (workflow,) = [t for t in stored if "tprof" in load_text(t)["jobs"]]
    steps = load_text(workflow)["jobs"]["tprof"]["steps"]
    (step,) = [s for s in steps if s.get("name") == "Judge against main"]
    return str(step["run"]).strip()


@pytest.mark.slow
@pytest.mark.parametrize("restored", [None, ".tprof-ci/baseline"])
def test_the_stored_mode_job_fails_naming_a_missing_baseline_folder(
    tmp_path: Path, origin: Origin, restored: str | None
) -> None:
    """A cache miss (nothing restored) or a folder restored under another name: the
    documented pull-request command fails, naming the folder it looked in."""
    command = documented_pull_request_command()
    assert "--tprof-require-baseline" in command
    project = tmp_path / "workspace" / "proj"
    subprocess.run(["git", "clone", "-q", "--depth=1", origin.url, str(project.parent)], check=True)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    fast = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--tprof-rounds=10"]
    if restored is not None:
        save = [*fast, "--tprof-save", f"--tprof-baseline-dir={restored}"]
        subprocess.run(save, cwd=project, env=env, capture_output=True, check=True)
    done = subprocess.run(
        ["bash", "-c", f"{command} --tprof-rounds=10 --tprof-warmup=1 -p no:cacheprovider"],
        cwd=project, env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    out = done.stdout + done.stderr
    assert done.returncode == 1, out
    assert f"no profiled test found a baseline in {project / '.tprof-ci' / 'baselines'}" in out
    assert "which does not exist" in out


def resolve(tmp_path: Path, origin: Origin, branch: str, event_name: str, **kw: Any) -> Result:
    """The Action's steps up to the base's, on a shallow clone of ``branch``."""
    values = {"MAIN": origin.main, "HEAD": origin.feature, "BEFORE": kw.pop("before", "")}
    event = payload(kw.pop("name", event_name), BRANCH=branch, **values)
    return run_action(job(tmp_path, origin, branch, event_name, event, **kw), until="base")


@pytest.mark.slow
@pytest.mark.parametrize(
    ("base", "expected"), [("main", "branch main"), ("v1", "tag v1"), ("SHA", "the base input")]
)
def test_a_base_input_names_a_branch_a_tag_or_a_commit(
    tmp_path: Path, origin: Origin, base: str, expected: str
) -> None:
    """Each fetched into a shallow clone, a name to a ref that resolves there."""
    given = origin.main if base == "SHA" else base
    result = resolve(tmp_path, origin, "wide", "pull_request", inputs={"base": given})
    assert result.status == 0, result.log
    assert result.steps["base"]["outputs"]["from"] == expected
    assert base_of(result) == (origin.feature if base == "v1" else origin.main)


@pytest.mark.slow
def test_an_unknown_base_is_an_error_naming_it(tmp_path: Path, origin: Origin) -> None:
    result = resolve(tmp_path, origin, "wide", "pull_request", inputs={"base": "no-such-branch"})
    assert result.status == 2
    assert "::error title=pytest-tprof ab::base: origin has no branch or tag 'no-such-branch'" in (
        result.log
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    ("event_name", "ref"), [("push", "refs/tags/v0"), ("workflow_dispatch", "")]
)
def test_a_run_on_the_default_branch_itself_says_to_set_the_base(
    tmp_path: Path, origin: Origin, event_name: str, ref: str
) -> None:
    """A tag of a main commit, a dispatch run on main: the merge base is HEAD."""
    name = "push_tag" if ref else event_name
    env = {"GITHUB_REF": ref or "refs/heads/main"}
    result = resolve(tmp_path, origin, "main", event_name, name=name, env=env)
    assert result.status == 2, result.log
    assert "HEAD is on main itself: nothing to compare with; set the base input" in result.log


@pytest.mark.slow
def test_a_dispatch_run_on_a_branch_is_measured_against_its_merge_base(
    tmp_path: Path, origin: Origin
) -> None:
    result = resolve(tmp_path, origin, "feature", "workflow_dispatch")
    assert result.status == 0, result.log
    assert base_of(result) == origin.main
    assert result.steps["base"]["outputs"]["from"] == (
        "the merge base of HEAD and main: a workflow_dispatch run"
    )


@pytest.mark.slow
def test_a_force_push_whose_previous_commit_is_gone_falls_back_to_the_merge_base(
    tmp_path: Path, origin: Origin
) -> None:
    gone = "1234567890" * 4
    result = resolve(tmp_path, origin, "feature", "push", name="push", before=gone)
    assert result.status == 0, result.log
    assert f"the commit before the push ({gone}) is gone" in result.log
    assert base_of(result) == origin.main


@pytest.mark.slow
def test_bad_inputs_stop_before_anything_runs(tmp_path: Path, origin: Origin) -> None:
    result = resolve(tmp_path, origin, "feature", "pull_request", inputs={"mode": "both"})
    assert result.status == 2
    assert "mode must be alternate or duet (got 'both')" in result.log
    assert "base" not in result.steps
