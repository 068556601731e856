"""Steps for distributed tests: each rank imports this module by name (it is on the path
of the tests that use it, and so of the ranks they spawn)."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable

import torch
import torch.distributed as dist
from torch import nn

PARAMETERS = 64 * 128 + 128 + 128 * 10 + 10  # of the model below


def make_ddp_step(rank: int, plant: str = "") -> Callable[[], None]:
    """A DDP training step of two micro-batches, the first under ``no_sync``; ``plant``
    changes its communication: "bucket" (tiny buckets), "extra" (an all-reduce of the loss),
    "sync" (accumulation without no_sync)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
    ddp = nn.parallel.DistributedDataParallel(
        model, bucket_cap_mb=0.01 if plant == "bucket" else 25.0
    )
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(rank)
    xs = [torch.randn(8, 64, generator=g) for _ in range(2)]
    y = torch.randint(0, 10, (8,), generator=g)

    def step() -> None:
        opt.zero_grad()
        for i, x in enumerate(xs):
            quiet = i == 0 and plant != "sync"
            with ddp.no_sync() if quiet else contextlib.nullcontext():
                loss = nn.functional.cross_entropy(ddp(x), y)
                loss.backward()
        if plant == "extra":
            dist.all_reduce(loss.detach().clone())
        opt.step()

    return step


def make_failing_step(rank: int, how: str = "raise") -> Callable[[], None]:
    """Rank 1 fails as ``how`` says: raises, hangs or is killed; rank 0 runs a DDP step."""
    if rank == 1:
        if how == "raise":
            raise ValueError("rank 1 can't build its model")
        if how == "hang":
            time.sleep(3600)
        if how == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
    return make_ddp_step(rank)


def make_nothing(rank: int) -> int:
    """Not a step: make_step must return one."""
    return rank


def make_step_from_environment(rank: int) -> Callable[[], None]:
    """make_ddp_step with the plant the test's environment names (TPROF_RANK_PLANT)."""
    return make_ddp_step(rank, plant=os.environ.get("TPROF_RANK_PLANT", ""))
