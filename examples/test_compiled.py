"""A compiled model under tprof: compile-time stays out, the compiled graph gets a stable key."""

from __future__ import annotations

import pytest
import torch
from torch import nn


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(128, 256)
        self.fc2 = nn.Linear(256, 128)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(nn.functional.gelu(self.fc1(x)))


# torch 2.13's Inductor touches a deprecated torch.jit API while compiling; this project's
# pytest settings turn warnings into errors.
@pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated:DeprecationWarning")
def test_compiled_block(tprof):
    torch.manual_seed(0)
    block = torch.compile(Block().eval())
    x = torch.randn(64, 128)
    with torch.no_grad():
        out = tprof(block, x)
    assert out.shape == (64, 128)
