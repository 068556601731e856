"""kineto's own lines at profiler start and stop (``USDT:`` markers, a CUDA build's complaint that
it found no GPU) never reach what the user reads."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from tprof_testing import small_args

from tprof_engine.capture import kineto, session


@pytest.mark.slow
def test_torch_prints_usdt_lines_at_start_and_stop() -> None:
    # What is filtered must exist: without the filter, one line at start and one at stop.
    code = (
        "import torch\nfrom torch.profiler import profile\nwith profile():\n    torch.ones(2) + 1\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    usdt = [line for line in done.stderr.splitlines() if line.startswith("USDT:")]
    if not usdt:
        pytest.skip("this torch's kineto prints no USDT lines")
    assert [line.rsplit("] ", 1)[-1] for line in usdt] == ["profiler_start", "profiler_stop"]


def test_only_kineto_lines_are_dropped_and_the_rest_passes_in_order(
    capfd: pytest.CaptureFixture[str],
) -> None:
    no_gpu = b"ERROR:2026-11-28 01:00:47 1:1 DeviceProperties.cpp:47] gpuGetDeviceCount failed"
    with kineto.kineto_lines_dropped():
        os.write(2, b"first\nUSDT:2026 x.cpp:52] profiler_start\n" + no_gpu + b" with code 35\n")
        os.write(2, b"ERROR: the user's own\nsecond (no newline)")
    os.write(2, b"\nafter\n")
    assert capfd.readouterr().err == "first\nERROR: the user's own\nsecond (no newline)\nafter\n"


def test_a_capture_prints_nothing_but_what_the_body_writes(
    capfd: pytest.CaptureFixture[str],
) -> None:
    import torch

    def body() -> None:
        torch.ones(3) + 1
        os.write(2, b"from the body\n")

    session.capture(body, rounds=2, warmup=0, probe=False)
    assert capfd.readouterr().err == "from the body\n" * 2


@pytest.mark.slow
def test_a_failing_tprof_test_shows_no_usdt_line(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import os, sys
        import torch

        def test_fails(tprof):
            tprof(lambda: torch.ones(8) + 1)
            print("user's stderr", file=sys.stderr)
            assert False
        """
    )
    result = pytester.runpytest_subprocess(
        "--tprof", f"--tprof-baseline-dir={pytester.path}", *small_args(rounds=2, warmup=0)
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*Captured stderr call*", "user's stderr"])
    assert not [line for line in result.outlines + result.errlines if "USDT" in line]
