"""End to end through pytest: record baselines, pass unchanged code, fail planted regressions."""

from __future__ import annotations

import gzip
import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from tprof_testing import with_quiet_readings

from tprof_engine.capture.facts import torch_facts
from tprof_engine.model.environment import Fingerprint
from tprof_engine.store import baselines, paths

# The machine is shared (load averages of 6 on 2 cores were seen), so the planted slowdown is
# 8x the matmul work, rounds last >= 2 ms (an op preempted for a time slice can't pass for the
# slowdown) and the floor is 100%: unchanged code passes even when the machine's speed swings
# between runs.  12 rounds, since the U tests use the faster half of them: with 6 rounds (3
# against 3) no p-value can get below 0.05.
FAST = (
    "-p", "no:cacheprovider", "--tprof-rounds=12", "--tprof-warmup=1", "--tprof-floor=1.0",
    "--tprof-min-round-us=2000",
)  # fmt: skip
FLAGGED = {"regressed", "new", "removed", "calls-changed"}
MATMUL = "test_suite.py::test_matmul"
STEADY = "test_suite.py::test_steady"

SUITE = """
from pathlib import Path

import torch


def plant() -> str:
    # What the outer test planted: "slow" (8x the matmul work, same calls) or "extra" (an
    # added clone of a 1 MB tensor).
    path = Path(__file__).with_name("plant.txt")
    return path.read_text().strip() if path.exists() else ""


def test_matmul(tprof):
    planted = plant()
    k = 8 * 128 if planted == "slow" else 128
    a = torch.randn(128, k)
    b = torch.randn(k, 128)
    big = torch.randn(512, 512)
    extra = planted == "extra"

    def step():
        out = a @ b
        if extra:
            big.clone()
        return out

    assert tprof(step).shape == (128, 128)


def test_steady(tprof):
    x = torch.randn(96, 96)
    assert tprof(lambda: torch.relu(x @ x)).shape == (96, 96)
"""


@pytest.fixture
def suite(pytester: pytest.Pytester) -> pytest.Pytester:
    with_quiet_readings(pytester).makepyfile(test_suite=SUITE)
    return pytester


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest(*FAST, *args)


def plant(pytester: pytest.Pytester, what: str) -> None:
    (pytester.path / "plant.txt").write_text(what)


def env_dir(pytester: pytest.Pytester) -> Path:
    return pytester.path / "baselines" / Fingerprint.collect(torch_facts()).key


def verdicts(path: Path) -> dict[str, str]:
    doc = json.loads(path.read_text())
    return {t["nodeid"]: t["verdict"] for t in doc["tests"]}


def json_ops(path: Path, nodeid: str) -> list[dict[str, Any]]:
    doc = json.loads(path.read_text())
    ops: list[dict[str, Any]] = next(t for t in doc["tests"] if t["nodeid"] == nodeid)["ops"]
    return ops


def tprof_section(result: pytest.RunResult) -> list[str]:
    """The lines of the terminal summary's ``tprof`` section."""
    lines = result.outlines
    start = next(i for i, line in enumerate(lines) if re.fullmatch(r"=+ tprof =+", line))
    end = next(i for i in range(start + 1, len(lines)) if lines[i].startswith("=" * 10))
    return lines[start + 1 : end]


def failure_section(result: pytest.RunResult, name: str) -> str:
    text = result.stdout.str()
    start = text.index(f"_ {name} _")
    end = min(
        i for i in (text.find("\n____", start + 1), text.find("\n====", start + 1)) if i != -1
    )
    return text[start:end]


def table_ops(failure: str) -> set[str]:
    """Op names in the per-op table of a failure message."""
    lines = failure.splitlines()
    start = next(i for i, line in enumerate(lines) if re.match(r"\s+op\s+family\s", line))
    ops = set()
    for line in lines[start + 1 :]:
        if not line.strip() or line.lstrip().startswith(("...", "a round is")):
            break
        ops.add(line.split()[0])
    return ops


def regressed_run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    """Record baselines of the suite, plant the 8x matmul slowdown and run with ``args``."""
    run(pytester, "--tprof-save").assert_outcomes(passed=2)
    plant(pytester, "slow")
    return run(pytester, "--tprof", *args)


@pytest.mark.serial
def test_record_pass_catch_slowdown_and_extra_op_then_re_record(suite: pytest.Pytester) -> None:
    folder = suite.path / "perf" / "baselines" / env_dir(suite).name

    def run_in(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
        return run(pytester, "--tprof-baseline-dir=perf/baselines", *args)

    # 1. --tprof-save writes one baseline per test under the baseline folder's environment
    # folder, the node id inside; a second save appends a session.
    for sessions in (1, 2):
        saved = run_in(suite, "--tprof-save")
        saved.assert_outcomes(passed=2)
        files = sorted(folder.iterdir())
        assert [p.name for p in files] == sorted(f"{paths.slug(n)}.json" for n in (MATMUL, STEADY))
        loaded = {baselines.load_baseline(p).nodeid: baselines.load_baseline(p) for p in files}
        assert sorted(loaded) == [MATMUL, STEADY]
        assert {len(b.sessions) for b in loaded.values()} == {sessions}
    saved.stdout.fnmatch_lines(
        ["SAVED * test_suite.py::test_matmul | appended (2 sessions); 2 sessions so far: save 1 *"]
    )
    assert not (suite.path / "baselines").exists()

    # 2. Unchanged code passes.
    unchanged = run_in(suite, "--tprof", "--tprof-json=unchanged.json")
    unchanged.assert_outcomes(passed=2)
    assert unchanged.ret == pytest.ExitCode.OK
    for nodeid, verdict in verdicts(suite.path / "unchanged.json").items():
        assert verdict in ("unchanged", "inconclusive"), nodeid

    # 3. 8x the matmul work, same calls: exactly that test fails, naming the op and its trace.
    plant(suite, "slow")
    slow = run_in(suite, "--tprof", "--tprof-json=slow.json")
    slow.assert_outcomes(failed=1, passed=1)
    assert slow.ret == pytest.ExitCode.TESTS_FAILED
    slow.stdout.fnmatch_lines(["*short test summary info*", f"REGRESSED {MATMUL} - tprof: *"])
    failure = failure_section(slow, "test_matmul")
    assert re.search(r"^\s+aten::(add)?mm\s+CPU\s.*\sregressed", failure, re.M), failure
    ops = json_ops(suite.path / "slow.json", MATMUL)
    assert table_ops(failure) == {o["op"] for o in ops if o["verdict"] in FLAGGED}
    trace = Path(re.findall(r"^\s+trace: (.+)$", failure, re.M)[0])
    assert trace.parent == suite.path / ".tprof" / "traces"
    assert run_trace(trace, MATMUL)
    with gzip.open(trace, "rt") as f:
        assert json.load(f)["traceEvents"]

    # 4. An added clone of a 1 MB tensor: the test fails on calls, naming the new op.
    plant(suite, "extra")
    extra = run_in(suite, "--tprof")
    extra.assert_outcomes(failed=1, passed=1)
    # What the work census fails comes first; the calls follow in the same reason.
    extra.stdout.fnmatch_lines([f"REGRESSED {MATMUL} - tprof: regressed — work: bytes +*"])
    failure = failure_section(extra, "test_matmul")
    assert "calls changed, adding " in failure
    assert re.search(r"^\s+aten::clone\s+CPU\s+0 → \d+\s.*\snew$", failure, re.M), failure

    # 5. Re-recording restarts the window, since the calls changed; then the test passes.
    resaved = run_in(suite, "--tprof-save")
    resaved.assert_outcomes(passed=2)
    resaved.stdout.fnmatch_lines(
        ["SAVED * test_suite.py::test_matmul | restarted (ops or calls changed); 1 session so *"]
    )
    baseline = baselines.load_baseline(folder / f"{paths.slug(MATMUL)}.json")
    assert len(baseline.sessions) == 1
    assert "aten::clone" in baseline.sessions[0].table.names
    run_in(suite, "--tprof").assert_outcomes(passed=2)


@pytest.mark.serial
def test_the_json_report_and_the_summary_list_every_profiled_test(
    suite: pytest.Pytester,
) -> None:
    pytest.importorskip("matplotlib")
    result = regressed_run(suite, "--tprof-json=out/report.json", "--tprof-html=out/report.html")
    result.assert_outcomes(failed=1, passed=1)

    section = tprof_section(result)
    assert section[0].startswith(f"REGRESSED    {MATMUL} | work regressed: ")
    assert re.match(rf"(UNCHANGED|INCONCLUSIVE) +{re.escape(STEADY)} \| ", section[1])
    traces = suite.path / ".tprof" / "traces"
    assert section[2:4] == [f"baselines: {env_dir(suite)}", f"traces: {traces}"]
    # how busy the machine was over the run's measured rounds (12 per test, or more where a
    # busy moment had the rounds captured again)
    assert re.fullmatch(
        r"machine: \d+ of \d+ measured rounds \(\d+%\) disturbed \(\d+ waited for a CPU\); "
        r"(timing is judged on the rounds this process ran undisturbed|the timing of \d+ "
        r"test\(s\) was not judged \(machine busy\))(; most: .*)?",
        section[4],
    ), section[4]
    assert section[5:] == [
        f"JSON report: {suite.path / 'out' / 'report.json'}",
        f"HTML report: {suite.path / 'out' / 'report.html'}",
    ]

    doc = json.loads((suite.path / "out" / "report.json").read_text())
    assert doc["schema_version"] == 2
    tests = {t["nodeid"]: t for t in doc["tests"]}
    assert sorted(tests) == [MATMUL, STEADY]
    slow = tests[MATMUL]
    assert slow["verdict"] == "regressed"
    assert Path(slow["trace"]).parent == traces and run_trace(slow["trace"], MATMUL)
    page = (suite.path / "out" / "report.html").read_text()
    assert f"<a href='../.tprof/traces/{Path(slow['trace']).name}'>" in page
    assert slow["baseline"] == str(env_dir(suite) / f"{paths.slug(MATMUL)}.json")
    assert isinstance(slow["uniform_shift"], float)
    keys = {
        "op", "family", "verdict", "baseline_median_us", "current_median_us", "delta_us",
        "delta_pct", "p_value", "calls_baseline", "calls_current", "share", "mde_pct", "floor_pct",
        "gated", "vs_rest_pct", "vs_rest_floor_pct", "vs_rest_mde_pct", "vs_rest_only", "note",
        "inside",
    }  # fmt: skip
    for t in tests.values():
        assert t["ops"]
        assert all(set(op) == keys for op in t["ops"])
    mm = [op for op in slow["ops"] if op["op"] in ("aten::mm", "aten::addmm")]
    assert [op["verdict"] for op in mm] == ["regressed"]


@pytest.mark.serial
def test_with_v_a_failure_lists_every_op(suite: pytest.Pytester) -> None:
    result = regressed_run(suite, "-v", "--tprof-json=report.json")
    result.assert_outcomes(failed=1, passed=1)
    ops = json_ops(suite.path / "report.json", MATMUL)
    assert {o["verdict"] for o in ops} - FLAGGED  # not only the flagged ones
    assert table_ops(failure_section(result, "test_matmul")) == {o["op"] for o in ops}


@pytest.mark.serial
def test_junit_xml_carries_the_verdict_top_op_and_trace(suite: pytest.Pytester) -> None:
    result = regressed_run(suite, "--junitxml=junit.xml")
    result.assert_outcomes(failed=1, passed=1)
    root = ET.parse(suite.path / "junit.xml").getroot()
    props = {
        case.get("name"): {p.get("name"): p.get("value", "") for p in case.iter("property")}
        for case in root.iter("testcase")
    }
    traces = suite.path / ".tprof" / "traces"
    matmul = props["test_matmul"]
    assert matmul["tprof_verdict"] == "regressed"
    assert re.fullmatch(r"aten::(add)?mm \+\d+%", matmul["tprof_top_op"]), matmul
    trace = Path(matmul["tprof_trace"])
    assert trace.parent == traces and run_trace(trace, MATMUL) and trace.is_file()
    steady = props["test_steady"]
    assert steady["tprof_verdict"] in ("unchanged", "inconclusive")
    if steady["tprof_verdict"] == "unchanged":  # its largest move is inside its floor
        assert "tprof_top_op" not in steady
    assert run_trace(steady["tprof_trace"], STEADY)  # every profiled test leaves its trace


def run_trace(path: str | Path, nodeid: str) -> bool:
    """Whether ``path`` is named as one run's trace of ``nodeid``."""
    stamp = r"\.\d{8}T\d{6}\.\d{6}"
    return bool(
        re.fullmatch(
            re.escape(paths.slug(nodeid)) + stamp + r"\.pt\.trace\.json\.gz", Path(path).name
        )
    )


PEDANTIC = """
import torch


def test_pedantic(tprof):
    calls = {"setup": 0, "fn": 0}

    def setup():
        calls["setup"] += 1
        return (torch.ones(64, 64),), {"scale": 2.0}

    def fn(x, scale):
        calls["fn"] += 1
        return (x * scale).sum()

    out = tprof.pedantic(fn, setup=setup, rounds=4, warmup=2)
    assert float(out) == 2.0 * 64 * 64
    assert calls == {"setup": EXPECTED, "fn": EXPECTED}
"""


@pytest.mark.parametrize(
    ("args", "expected"),
    [(("--tprof",), 8), ((), 1)],
    ids=[
        "profiled: once per round, warm-up and the two census rounds included",
        "not profiled: once",
    ],
)
def test_pedantic_runs_setup_before_every_round(
    pytester: pytest.Pytester, args: tuple[str, ...], expected: int
) -> None:
    pytester.makepyfile(PEDANTIC.replace("EXPECTED", str(expected)))
    result = run(pytester, *args, "--tprof-json=report.json")
    result.assert_outcomes(passed=1)
    if args:
        (test,) = json.loads((pytester.path / "report.json").read_text())["tests"]
        assert (test["rounds"], test["warmup_used"], test["iterations"]) == (4, 2, 1)


def test_without_tprof_the_fixture_calls_fn_once_and_writes_nothing(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(
        """
        import torch

        def test_once(tprof):
            seen = []
            assert tprof(lambda x: seen.append(x) or x + 1, torch.ones(2)).tolist() == [2, 2]
            assert len(seen) == 1
            assert not tprof.enabled
        """
    )
    result = run(pytester, "--tprof-json=report.json")
    result.assert_outcomes(passed=1)
    assert not (pytester.path / "baselines").exists()
    assert not (pytester.path / ".tprof").exists()
    assert not (pytester.path / "report.json").exists()
    assert not any(re.fullmatch(r"=+ tprof =+", line) for line in result.outlines)
