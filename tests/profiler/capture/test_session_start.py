"""Starting a capture: no torch._inductor import (it costs ~1 s), and calibrated iterations
that two machines agree on."""

from __future__ import annotations

import subprocess
import sys

import pytest

CHECK = """
import sys, torch
from torch.profiler import ProfilerActivity, profile
from tprof_engine.capture.kineto import started_quietly
with started_quietly(profile(activities=[ProfilerActivity.CPU])):
    torch.ones(3).sum()
print("loaded" if "torch._inductor" in sys.modules else "unloaded")
print(hasattr(torch, "_inductor"), "torch._inductor" in sys.modules)
"""


@pytest.mark.slow
def test_starting_a_session_imports_no_inductor_and_torch_still_offers_it() -> None:
    out = subprocess.run(
        [sys.executable, "-c", CHECK], capture_output=True, text=True, check=True
    ).stdout.split("\n")
    assert out[0] == "unloaded"
    assert out[1] == "True True"  # asked for afterwards, torch imports it as usual


def test_calibrated_iterations_are_on_the_1_2_5_series() -> None:
    from tprof_engine.capture.session import on_grid

    assert [on_grid(n) for n in (1, 2, 3, 5, 6, 11, 21, 51, 101, 499)] == [
        1, 2, 5, 5, 10, 20, 50, 100, 200, 500,
    ]  # fmt: skip
    # Two machines that need 3 and 5 calls for a 1 ms round agree on 5.
    assert on_grid(3) == on_grid(5)
