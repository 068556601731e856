"""A profiler session started by tprof leaves torch._inductor unloaded (it costs ~1 s)."""

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
