"""Under --tprof, pytest-benchmark keeps its contract: same calls, order, setup and teardown."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from tprof_testing import small_args

pytestmark = pytest.mark.slow

pytest_benchmark = pytest.importorskip("pytest_benchmark")

# Few rounds, iterations calibrated as by default.
SMALL = (*small_args(min_round_us=None), "-p", "no:randomly")
# pytest-benchmark's own test files that exercise the fixture's calls, rounds and storage.
UPSTREAM_FILES = ("test_pedantic.py", "test_normal.py", "test_stats.py", "test_sample.py",
                  "test_storage.py")  # fmt: skip

COUNTING = """
import json
import torch

EVENTS = []
model = torch.nn.Linear(8, 4)

def setup():
    EVENTS.append("setup")
    return [torch.ones(2, 8)], {}

def step(x):
    EVENTS.append("call")
    return model(x)

def teardown(x):
    EVENTS.append("teardown")

def test_pedantic(benchmark):
    benchmark.pedantic(step, setup=setup, teardown=teardown, rounds=6, warmup_rounds=2)
    with open("events.json", "w") as f:
        json.dump(EVENTS, f)

def test_iterations(benchmark):
    calls = []
    x = torch.ones(2, 8)
    benchmark.pedantic(lambda: calls.append(model(x)), rounds=5, iterations=3)
    assert len(calls) == 5 * 3 + 1  # pytest-benchmark's one extra call for the result
"""


def _run(pytester: pytest.Pytester, *args: str) -> tuple[list[str], dict[str, dict[str, object]]]:
    out = pytester.path / "bench.json"
    result = pytester.runpytest_subprocess(f"--benchmark-json={out}", *args)
    result.assert_outcomes(passed=2)
    events = json.loads((pytester.path / "events.json").read_text())
    benches = json.loads(out.read_text())["benchmarks"]
    return events, {b["name"]: b for b in benches}


def test_calls_setup_and_teardown_are_pytest_benchmarks_own(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(COUNTING)
    plain, _ = _run(pytester, "-p", "no:randomly")
    profiled, benches = _run(pytester, "--tprof", f"--tprof-baseline-dir={pytester.path}", *SMALL)
    assert profiled == plain == ["setup", "call", "teardown"] * 8
    pedantic = benches["test_pedantic"]
    assert pedantic["stats"]["rounds"] == 6
    info = pedantic["extra_info"]["tprof"]
    # pytest-benchmark's two warm-up rounds are not kept; of its six, tprof's 1 warm-up + 4.
    assert info["profiled_rounds"] == 5
    assert info["verdict"] == "no-baseline"
    assert {op["op"] for op in info["ops"]} >= {"aten::addmm"}
    assert benches["test_iterations"]["extra_info"]["tprof"]["iterations"] == 3


def test_too_few_rounds_say_so_and_change_nothing(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import torch

        def test_once(benchmark):
            calls = []
            benchmark.pedantic(lambda: calls.append(torch.ones(3) * 2), rounds=1)
            assert len(calls) == 1
        """
    )
    out = pytester.path / "bench.json"
    result = pytester.runpytest_subprocess(
        "--tprof", f"--tprof-baseline-dir={pytester.path}", f"--benchmark-json={out}", *SMALL
    )
    result.assert_outcomes(passed=1)
    info = json.loads(out.read_text())["benchmarks"][0]["extra_info"]["tprof"]
    assert info == {
        "profiled_rounds": 1,
        "iterations": 1,
        "verdict": None,
        "reason": "not profiled: the benchmark kept 1 round(s) while profiled; tprof needs at "
        "least 2 (e.g. pedantic(rounds=2) or more)",
    }


@pytest.fixture(scope="module")
def upstream_tests(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """pytest-benchmark's own tests, from the sdist of the installed version."""
    # Imported by those test files, which run in a subprocess: only looked up here.  Importing
    # pygal would add its import hook to this process, and its ImportWarning would fail every
    # later in-process pytest run whose code imports a module for the first time (scipy).
    for needed in ("freezegun", "pygal", "pygaljs"):
        if importlib.util.find_spec(needed) is None:
            pytest.skip(f"{needed} is not installed; pytest-benchmark's own tests import it")
    version = pytest_benchmark.__version__
    folder = tmp_path_factory.mktemp("pytest-benchmark-sdist")
    done = subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
         f"pytest-benchmark=={version}", "-d", str(folder), "-q"],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    sdists = list(folder.glob("pytest_benchmark-*.tar.gz"))
    if done.returncode != 0 or not sdists:
        pytest.skip(f"can't download pytest-benchmark {version}'s sdist: {done.stderr[-300:]}")
    with tarfile.open(sdists[0]) as tar:
        tar.extractall(folder, filter="data")
    return folder / f"pytest_benchmark-{version}"


def _counts(root: Path, *args: str) -> dict[str, int]:
    """pass/fail/skip counts of pytest-benchmark's five test files, run in a subprocess."""
    files = [f"tests/{name}" for name in UPSTREAM_FILES]
    done = subprocess.run(
        # Its pytest.ini's addopts need plugins (nbmake) that aren't the fixture's business.
        [sys.executable, "-m", "pytest", "-q", "-o", "addopts=", "-p", "no:cacheprovider",
         "-p", "no:randomly", *files, *args],
        cwd=root, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    last = done.stdout.strip().splitlines()[-1]
    counts = {word: int(n) for n, word in re.findall(r"(\d+) (\w+)", last)}
    assert counts.get("passed", 0) > 0, done.stdout[-3000:]
    return counts


def test_pytest_benchmarks_own_tests_pass_under_tprof_as_without(
    upstream_tests: Path, tmp_path: Path
) -> None:
    plain = _counts(upstream_tests)
    profiled = _counts(
        upstream_tests,
        "--tprof",
        f"--tprof-baseline-dir={tmp_path / 'baselines'}",
        f"--tprof-trace-dir={tmp_path / 'traces'}",
    )
    assert profiled == plain
