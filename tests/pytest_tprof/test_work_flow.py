"""The work census through pytest: stored with the baseline, gating on any machine."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from tprof_testing import open_form

from tprof_engine.store import schema as store

pytestmark = pytest.mark.slow

# Timing hardly gates these tests (floor 900 %): what fails them is the work the ops do.
FAST = (
    "-p", "no:cacheprovider", "--tprof-rounds=6", "--tprof-warmup=1", "--tprof-floor=9",
    "--tprof-min-round-us=0",
)  # fmt: skip
NODE = "test_model.py::test_step"

MODEL = """
import os

import torch
from torch import nn


class Net(nn.Module):
    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(32, hidden)
        self.fc2 = nn.Linear(hidden, 8)

    def forward(self, x):
        h = torch.relu(self.fc1(x))
        if "copy" in os.environ.get("PLANT", ""):
            h = h.t().contiguous().t()
        if "f64" in os.environ.get("PLANT", ""):
            h = h.double().float()
        return self.fc2(h)


def test_step(tprof):
    hidden = 80 if os.environ.get("PLANT", "").startswith("wider") else 64
    torch.manual_seed(0)
    net = Net(hidden)
    x = torch.randn(16, 32)

    def step():
        net.zero_grad()
        net(x).sum().backward()

    tprof(step)
"""


@pytest.fixture
def model(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makepyfile(test_model=MODEL)
    return pytester


def run(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, *args: str, plant: str = ""
) -> tuple[pytest.RunResult, dict[str, object]]:
    monkeypatch.setenv("PLANT", plant)
    report = pytester.path / "report.json"
    result = pytester.runpytest_subprocess(*FAST, f"--tprof-json={report}", *args)
    doc = json.loads(report.read_text())
    (test,) = doc["tests"]
    return result, test


def baseline_file(pytester: pytest.Pytester) -> Path:
    (path,) = (pytester.path / "baselines").rglob("*.json")
    return path


def test_a_wider_layer_fails_on_its_work_naming_op_module_and_phase(
    model: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    run(model, monkeypatch, "--tprof-save")
    result, test = run(model, monkeypatch, "--tprof", plant="wider")
    result.assert_outcomes(failed=1)
    assert test["verdict"] == "regressed"
    work = test["work"]
    assert work["verdict"] == "regressed"
    # 16×32×64 → 16×32×80 multiply-adds in fc1, forward and backward: exactly +25 %.
    assert work["reasons"][:4] == [
        "total FLOPs +25.0% (180,224 → 225,280)",
        "total bytes +23.2% (73,300 → 90,324)",
        "aten::mm in fc1 (backward of AddmmBackward0): FLOPs +25.0%, bytes +21.4% "
        "— self f32[64, 16]ᵀ → f32[80, 16]ᵀ",
        "aten::addmm in fc1 (forward): FLOPs +25.0%, bytes +21.5% — "
        "self f32[64] → f32[80], mat2 f32[32, 64]ᵀ → f32[32, 80]ᵀ",
    ]
    assert any(
        r.startswith("aten::mm in fc2 (backward of AddmmBackward0): FLOPs +25.0%")
        for r in work["reasons"]
    )
    text = result.stdout.str()
    assert "work regressed (deterministic; floor 1% of the test's FLOPs or bytes)" in text
    # Work doesn't drift: no second measurement, no fresh process.
    assert "fresh process" not in text
    assert "second measurement" not in text


def test_an_extra_contiguous_copy_is_a_new_clone_in_its_module(
    model: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    run(model, monkeypatch, "--tprof-save")
    result, test = run(model, monkeypatch, "--tprof", plant="copy")
    result.assert_outcomes(failed=1)
    rows = {(r["op"], r["module"], r["phase"]): r for r in test["work"]["rows"]}
    clone = rows[("aten::clone", "", "forward")]
    assert clone["status"] == "added"
    # A (16, 64) float32 activation read once and written once.
    assert (clone["base_bytes"], clone["cur_bytes"]) == (0, 2 * 16 * 64 * 4)


def test_unchanged_code_has_unchanged_work_and_the_census_is_stored(
    model: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    run(model, monkeypatch, "--tprof-save")
    run(model, monkeypatch, "--tprof-save")
    packed = json.loads(baseline_file(model).read_text())
    assert packed["schema_version"] == store.SCHEMA_VERSION == 3
    assert len(packed["work"]) == 1  # the same census in both sessions, stored once
    stored = open_form(baseline_file(model))
    first, second = stored["sessions"]
    assert first["work"] == second["work"]
    assert {"op": "aten::addmm", "module": "fc1", "phase": "forward"}.items() <= next(
        r for r in first["work"]["rows"] if r["op"] == "aten::addmm" and r["module"] == "fc1"
    ).items()
    result, test = run(model, monkeypatch, "--tprof")
    result.assert_outcomes(passed=1)
    assert test["work"]["verdict"] == "unchanged"


def test_a_save_of_other_work_restarts_the_window_and_says_what_changed(
    model: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    run(model, monkeypatch, "--tprof-save")
    run(model, monkeypatch, "--tprof-save")
    result, _ = run(model, monkeypatch, "--tprof-save", plant="wider")
    line = next(x for x in result.outlines if x.startswith("SAVED"))
    assert "restarted (work changed: total FLOPs +25.0% (180,224 → 225,280) (+" in line
    assert len(open_form(baseline_file(model))["sessions"]) == 1


def test_work_gates_against_a_baseline_from_other_hardware(
    model: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    run(model, monkeypatch, "--tprof-save")
    path = baseline_file(model)
    data = open_form(path)
    data["environment"]["hard"]["cpu_model"] = "Some Other CPU"
    path.write_text(json.dumps(data))
    result, test = run(model, monkeypatch, "--tprof", plant="wider")
    result.assert_outcomes(failed=1)
    assert test["verdict"] == "regressed"
    assert any(n.startswith("timings not compared: cpu_model") for n in test["notes"])
    assert test["work"]["verdict"] == "regressed"


def test_a_baseline_without_a_census_gates_timing_and_says_to_re_record(
    model: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    run(model, monkeypatch, "--tprof-save")
    path = baseline_file(model)
    data = open_form(path)
    data["schema_version"] = 1
    for session in data["sessions"]:
        del session["work"]
    path.write_text(json.dumps(data))
    result, test = run(model, monkeypatch, "--tprof", plant="wider")
    result.assert_outcomes(passed=1)
    assert test["work"] is None
    assert "no work baseline: re-record with --tprof-save" in test["notes"]


def test_a_damaged_census_is_an_error_naming_the_file_and_the_key(
    model: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    run(model, monkeypatch, "--tprof-save")
    path = baseline_file(model)
    data = open_form(path)
    data["sessions"][0]["work"]["rows"][0]["flops"] = -1
    path.write_text(json.dumps(data))
    result, test = run(model, monkeypatch, "--tprof")
    result.assert_outcomes(failed=1)
    assert test["verdict"] == "error"
    assert test["reason"] == (
        f"{path}: 'sessions[0].work.rows[0].flops' must be an integer >= 0 (got -1); "
        "restore it from git or re-record it with --tprof-save"
    )


def test_no_census_turns_the_work_layer_off(
    model: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    run(model, monkeypatch, "--tprof-save", "--no-tprof-census")
    assert "work" not in open_form(baseline_file(model))["sessions"][0]
    result, test = run(model, monkeypatch, "--tprof", "--no-tprof-census", plant="wider")
    result.assert_outcomes(passed=1)
    assert test["work"] is None


def test_a_marker_work_floor_lets_a_small_change_pass(
    model: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    run(model, monkeypatch, "--tprof-save")
    marked = MODEL.replace(
        "def test_step(tprof):",
        "import pytest\n\n\n@pytest.mark.tprof(work_floor=0.5)\ndef test_step(tprof):",
    )
    model.makepyfile(test_model=marked)
    result, test = run(model, monkeypatch, "--tprof", plant="wider")
    result.assert_outcomes(passed=1)
    assert test["work"]["verdict"] == "changed"
    assert test["work"]["floor"] == 0.5


def test_with_stack_the_work_reasons_name_the_users_source_line(
    model: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    run(model, monkeypatch, "--tprof-save")
    result, test = run(model, monkeypatch, "--tprof", "--tprof-collect=stack", plant="wider")
    result.assert_outcomes(failed=1)
    source = (model.path / "test_model.py").read_text().splitlines()
    forward = source.index("        h = torch.relu(self.fc1(x))") + 1
    line = next(r for r in test["work"]["reasons"] if r.startswith("aten::addmm in fc1 (forward)"))
    assert line.endswith(f" [test_model.py:{forward} in forward]")
    assert f"[test_model.py:{forward} in forward]" in result.stdout.str()


def test_an_accepted_change_gates_again_right_after_its_save(
    model: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    for _ in range(2):
        run(model, monkeypatch, "--tprof-save")
    run(model, monkeypatch, "--tprof-save", plant="wider")  # the intended change, accepted
    assert len(open_form(baseline_file(model))["sessions"]) == 1
    result, _ = run(model, monkeypatch, "--tprof", plant="wider")
    result.assert_outcomes(passed=1)
    result, test = run(model, monkeypatch, "--tprof", plant="wider copy")  # then a regression
    result.assert_outcomes(failed=1)
    assert test["work"]["verdict"] == "regressed"


def test_reset_starts_the_window_afresh_and_needs_a_save(
    model: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    for _ in range(2):
        run(model, monkeypatch, "--tprof-save")
    result, _ = run(model, monkeypatch, "--tprof-save", "--tprof-reset")
    line = next(x for x in result.outlines if x.startswith("SAVED"))
    assert "restarted (--tprof-reset; 2 older session(s) dropped)" in line
    assert len(open_form(baseline_file(model))["sessions"]) == 1
    bare = model.runpytest_subprocess(*FAST, "--tprof", "--tprof-reset")
    assert bare.ret == pytest.ExitCode.USAGE_ERROR
    bare.stderr.fnmatch_lines(["*'--tprof-reset' restarts the windows a save appends to*"])


def test_a_baseline_from_another_host_gates_calls_and_work_not_timing(
    model: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    for _ in range(2):
        run(model, monkeypatch, "--tprof-save")
    path = baseline_file(model)
    doc = open_form(path)
    assert {s["soft"]["host"] for s in doc["sessions"]} == {doc["environment"]["soft"]["host"]}
    for s in doc["sessions"]:
        s["soft"]["host"] = "elsewhere·00000000"
    path.write_text(json.dumps(doc))
    result, test = run(model, monkeypatch, "--tprof")
    result.assert_outcomes(passed=1)
    assert test["differences"][0].startswith("host: baseline from one other host (elsewhere·")
    result, test = run(model, monkeypatch, "--tprof", plant="wider")
    result.assert_outcomes(failed=1)
    assert test["work"]["verdict"] == "regressed"


def test_a_round_trip_through_float64_names_the_dtype_it_writes(
    model: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    run(model, monkeypatch, "--tprof-save")
    result, test = run(model, monkeypatch, "--tprof", plant="f64")
    result.assert_outcomes(failed=1)
    # The copy's input is float32: what names float64 is the dtype the new copy writes.
    assert any(
        r.startswith("aten::_to_copy at top level (forward): new, bytes ")
        and r.endswith("— input f32[16, 64], writes f64")
        for r in test["work"]["reasons"]
    ), test["work"]["reasons"]


def test_the_next_step_records_into_the_folder_and_protocol_the_run_was_given(
    model: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    where = ("--tprof-baseline-dir=ci/base", "--tprof-rounds=5")
    for _ in range(2):
        run(model, monkeypatch, *where, "--tprof-save", plant="")
    result, test = run(model, monkeypatch, *where, "--tprof", plant="wider")
    assert test["verdict"] == "regressed"
    command = (  # with FAST's warm-up and round length, given on the command line too
        "pytest --tprof-save --tprof-reset --tprof-rounds=5 --tprof-warmup=1 "
        f'--tprof-min-round-us=0.0 --tprof-baseline-dir=ci/base "{NODE}"'
    )
    assert f"meant it? record it as the new baseline: {command}" in result.stdout.str()
    # The command, run as printed (the run's own -p and reports aside), accepts the change.
    args = [a.strip('"') for a in command.split()[1:]]
    run(model, monkeypatch, *args, plant="wider")
    _, accepted = run(model, monkeypatch, *where, "--tprof", plant="wider")
    assert accepted["verdict"] != "regressed"
    (path,) = (model.path / "ci" / "base").rglob("*.json")
    assert open_form(path)["protocol"]["rounds"] == 5


def test_git_bisect_run_finds_the_commit_that_changed_the_work(
    model: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    # docs/usage.md's recipe: the work census is deterministic, so each commit is judged the same
    # way every time against the committed baseline (a fixed 900 % floor keeps timing out).
    for key, value in {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                       "GIT_COMMITTER_EMAIL": "t@t"}.items():  # fmt: skip
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("PLANT", "")
    source = model.path / "test_model.py"

    def git(*args: str) -> str:
        done = model.run("git", *args)
        assert done.ret == 0, done.stderr.str()
        return done.stdout.str().strip()

    git("init", "-q")
    for _ in range(2):
        run(model, monkeypatch, "--tprof-save")
    (model.path / ".gitignore").write_text(".tprof/\nreport.json\n")
    git("add", "-A")
    git("commit", "-qm", "good")
    good = git("rev-parse", "HEAD")
    for n, text in enumerate(["# a comment\n", "WIDER = True\n", "# another\n"]):
        body = source.read_text() + text
        if text.startswith("WIDER"):
            body = body.replace("hidden = 80 if", "hidden = 80 if WIDER or")
        source.write_text(body)
        git("commit", "-qam", f"change {n}")
    git("bisect", "start", "HEAD", good)
    done = model.run("git", "bisect", "run", sys.executable, "-m", "pytest", *FAST, "--tprof", NODE)
    assert "change 1" in done.stdout.str() and "is the first bad commit" in done.stdout.str()


def traces_in(pytester: pytest.Pytester) -> set[str]:
    folder = pytester.path / ".tprof" / "traces"
    return {p.name for p in folder.glob("*")} if folder.is_dir() else set()


def test_a_failures_trace_stays_until_the_test_passes_again(
    model: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    run(model, monkeypatch, "--tprof-save", "--tprof-save-trace")
    _, unchanged = run(model, monkeypatch, "--tprof")
    assert unchanged["trace"] is not None  # every profiled test leaves its trace
    earlier = traces_in(model)
    assert Path(str(unchanged["trace"])).name in earlier and len(earlier) == 2  # and the save's

    keep_one = "--tprof-trace-keep=1"
    _, first = run(model, monkeypatch, "--tprof", keep_one, plant="wider")
    _, second = run(model, monkeypatch, "--tprof", keep_one, plant="wider")
    assert first["verdict"] == second["verdict"] == "regressed"
    named = {Path(str(t[key])).name for t in (first, second) for key in ("trace", "side_by_side")}
    assert len(named) == 4  # each run's trace and side-by-side one, under names of its own
    assert traces_in(model) == named | earlier  # a failing run removes none

    _, passed = run(model, monkeypatch, "--tprof", keep_one)
    assert passed["verdict"] in ("unchanged", "inconclusive")
    assert traces_in(model) == {Path(str(passed["trace"])).name}  # it passed: its last run's

    _, fewer = run(model, monkeypatch, "--tprof", "--no-tprof-traces")
    assert fewer["trace"] is None  # its ops didn't move: no trace of this run
