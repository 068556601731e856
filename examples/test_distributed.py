"""A distributed training step: DDP over gloo, two ranks on the CPU.

``tprof.distributed`` starts the ranks itself; ``make_step`` runs in each of them, so it lives
at the module's top level (each rank imports it by name).
"""

from __future__ import annotations

import torch
from conftest import slow_factor
from torch import nn


def make_ddp_step(rank: int):
    """Rank ``rank``'s model, wrapped in DDP, and its training step: two micro-batches of
    gradient accumulation, the first under ``no_sync`` so gradients are all-reduced once."""
    torch.manual_seed(0)  # the same initial weights in every rank
    hidden = int(256 * (1 + slow_factor()))
    model = nn.Sequential(nn.Linear(128, hidden), nn.ReLU(), nn.Linear(hidden, 10))
    ddp = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(rank)  # each rank its own data
    batches = [torch.randn(32, 128, generator=g) for _ in range(2)]
    target = torch.randint(0, 10, (32,), generator=g)

    def step() -> None:
        opt.zero_grad()
        with ddp.no_sync():
            nn.functional.cross_entropy(ddp(batches[0]), target).backward()
        nn.functional.cross_entropy(ddp(batches[1]), target).backward()
        opt.step()

    return step


def test_ddp_training_step(tprof):
    ranks = tprof.distributed(make_ddp_step, world_size=2, backend="gloo")
    if tprof.enabled:  # under --tprof: each rank's op table and census
        assert [r.rank for r in ranks] == [0, 1]
