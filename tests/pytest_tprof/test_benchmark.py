"""pytest-benchmark's tests also get an op-level profile under --tprof."""

from __future__ import annotations

import json

import pytest
from tprof_testing import SMALL

pytestmark = pytest.mark.slow

pytest.importorskip("pytest_benchmark")


def test_a_benchmark_test_gets_a_profile_in_its_benchmark_json(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import torch

        def test_mm(benchmark):
            a = torch.ones(32, 32)
            out = benchmark.pedantic(torch.mm, args=(a, a), rounds=3)
            assert out.shape == (32, 32)
        """
    )
    out = pytester.path / "bench.json"
    result = pytester.runpytest_subprocess(
        "--tprof",
        "--tprof-collect=traces",  # a test with no baseline keeps no trace unless asked
        f"--tprof-baseline-dir={pytester.path / 'b'}",
        f"--benchmark-json={out}",
        *SMALL,
    )
    result.assert_outcomes(passed=1)
    bench = json.loads(out.read_text())["benchmarks"][0]
    info = bench["extra_info"]["tprof"]
    assert info["verdict"] == "no-baseline"
    assert info["ops"][0]["op"] == "aten::mm"
    assert info["ops"][0]["calls"] == 1
    assert info["trace"].endswith(".pt.trace.json.gz")
    # pytest-benchmark's own rounds are untouched by tprof's.
    assert bench["stats"]["rounds"] == 3


def test_a_benchmark_test_is_recorded_and_compared(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import torch

        def test_relu(benchmark):
            a = torch.ones(64, 64)
            benchmark.pedantic(torch.relu, args=(a,), rounds=2)
        """
    )
    base = f"--tprof-baseline-dir={pytester.path / 'b'}"
    pytester.runpytest_subprocess("--tprof-save", base, *SMALL).assert_outcomes(passed=1)
    files = list((pytester.path / "b").rglob("*.json"))
    assert len(files) == 1
    assert (
        json.loads(files[0].read_text())["nodeid"]
        == "test_a_benchmark_test_is_recorded_and_compared.py::test_relu"
    )
    result = pytester.runpytest_subprocess("--tprof", base, "-rA", *SMALL)
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*tprof*", "*test_relu*"])


def test_a_disabled_benchmark_says_it_was_not_profiled(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import torch

        def test_relu(benchmark):
            benchmark(torch.relu, torch.ones(8))
        """
    )
    base = f"--tprof-baseline-dir={pytester.path / 'b'}"
    for mode, word in (("--tprof-save", "NOT-SAVED"), ("--tprof", "INCONCLUSIVE")):
        result = pytester.runpytest_subprocess(mode, base, "--benchmark-disable", *SMALL)
        result.assert_outcomes(passed=1)
        result.stdout.fnmatch_lines(
            [f"{word}*test_relu | not profiled: pytest-benchmark is disabled for this test*"]
        )
    assert not (pytester.path / "b").exists()
