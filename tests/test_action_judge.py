"""action/judge.py's rule on a failed ``tprof ab`` run: accepted only when every failed test
failed on a tprof regression, and never with an unjudged test under ``if-unjudged: fail``."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

JUDGE = Path(__file__).resolve().parents[1] / "action" / "judge.py"
REGRESSED = {"nodeid": "tests/test_m.py::test_lin", "verdict": "regressed", "outcome": "failed"}
UNJUDGED = {"nodeid": "tests/test_m.py::test_mm", "verdict": "inconclusive", "outcome": "passed"}
JUNIT = """<testsuites><testsuite>
<testcase classname="tests.test_m" name="test_lin"><failure message="{message}"/></testcase>
<testcase classname="tests.test_m" name="test_mm"/>
</testsuite></testsuites>"""


@pytest.fixture(scope="module")
def judge() -> ModuleType:
    spec = importlib.util.spec_from_file_location("action_judge", JUDGE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def run(tmp_path: Path, judge: ModuleType, message: str, **env: str) -> Any:
    (tmp_path / "report.json").write_text(json.dumps({"tests": [REGRESSED, UNJUDGED]}))
    (tmp_path / "junit.xml").write_text(JUNIT.format(message=message))
    given = {
        "STATUS": "1",
        "REPORT": str(tmp_path / "report.json"),
        "JUNIT": str(tmp_path / "junit.xml"),
        "FAIL_ON_REGRESSION": "false",
        "IF_UNJUDGED": "warn",
        **env,
    }
    return judge.judge(given, {})


def test_a_regression_alone_is_accepted_and_counted(tmp_path: Path, judge: ModuleType) -> None:
    done = run(tmp_path, judge, "tprof: regressed — work: FLOPs +100.0%")
    assert done.outputs["accepted"] == "true"
    assert done.outputs["exit-code"] == "0"
    assert (done.outputs["regressed"], done.outputs["inconclusive"]) == ("1", "1")
    assert (done.outputs["failed"], done.outputs["unjudged"]) == ("1", "1")
    assert done.lines[-1] == (
        "**Accepted**: the regression of tests.test_m.test_lin, by the input "
        "fail-on-regression: false."
    )


def test_an_unjudged_test_under_if_unjudged_fail_is_never_accepted(
    tmp_path: Path, judge: ModuleType
) -> None:
    done = run(tmp_path, judge, "tprof: regressed — work", IF_UNJUDGED="fail")
    assert (done.outputs["accepted"], done.outputs["exit-code"]) == ("false", "1")
    assert done.lines[-1] == (
        "**Not accepted** (accepted only tprof regressions): timing was not judged for 1 "
        "test(s) (if-unjudged: fail)."
    )


def test_a_failure_of_the_test_itself_is_never_accepted(tmp_path: Path, judge: ModuleType) -> None:
    done = run(tmp_path, judge, "AssertionError: tprof: regressed")
    assert (done.outputs["accepted"], done.outputs["exit-code"]) == ("false", "1")
    assert (
        "failed for a reason other than a tprof regression: tests.test_m.test_lin"
        in (done.lines[-1])
    )


def test_without_a_label_or_the_input_nothing_is_accepted(
    tmp_path: Path, judge: ModuleType
) -> None:
    done = run(tmp_path, judge, "tprof: regressed — work", FAIL_ON_REGRESSION="true")
    assert (done.outputs["accepted"], done.outputs["exit-code"]) == ("false", "1")
    assert not any("ccepted" in line for line in done.lines)
