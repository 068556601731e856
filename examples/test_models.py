"""A small realistic suite profiled by `make demo`: an MLP, a conv block, attention."""

from __future__ import annotations

import torch
from conftest import slow_factor
from torch import nn


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        # TPROF_SLOW_MATMUL plants the regression: a wider hidden layer makes the same
        # matmul ops (same calls) do more work.
        hidden = int(512 * (1 + slow_factor()))
        self.fc1 = nn.Linear(256, hidden)
        self.fc2 = nn.Linear(hidden, 256)
        self.fc3 = nn.Linear(256, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.fc1(x))
        h = torch.relu(self.fc2(h))
        return self.fc3(h)


def test_mlp_training_step(tprof):
    model = MLP()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(64, 256)
    y = torch.randint(0, 10, (64,))

    def step() -> float:
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return float(loss.detach())

    loss = tprof(step)
    assert loss > 0


def test_conv_block(tprof):
    block = nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2)
    ).eval()
    x = torch.randn(8, 3, 32, 32)
    with torch.no_grad():
        out = tprof(block, x)
    assert out.shape == (8, 16, 16, 16)


def test_attention(tprof):
    attn = nn.MultiheadAttention(64, 4, batch_first=True).eval()
    x = torch.randn(4, 32, 64)
    with torch.no_grad():
        out, _ = tprof(attn, x, x, x)
    assert out.shape == (4, 32, 64)
