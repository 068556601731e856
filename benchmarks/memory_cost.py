"""What ``profile_memory=True`` costs a profiled round, on CPU.

Run from the repository root::

    .venv/bin/python benchmarks/memory_cost.py [--rounds 60] [--repeat 5]

Workloads: an MLP training step (Linear 256→1024→256, batch 64, SGD) and a
TransformerEncoderLayer (d_model 128, 4 heads, batch 16 × 32 tokens) training step.  Each
repetition profiles ``--rounds`` rounds in one ``torch.profiler`` session as ``capture()`` does
(each a ``ProfilerStep#N`` annotation), once without and once with ``profile_memory``, in
alternating order; the table gives the median wall time per round, the events per round and
the reduction's time (``events_from_kineto`` + ``reduce_events``).  Wall-clock on a possibly
shared machine: compare the medians and read the per-repetition ratio column.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile, record_function

from tprof_engine.capture.kineto import events_from_kineto
from tprof_engine.reduce.ops import ROUND_PREFIX, reduce_events


def mlp_step() -> Callable[[], None]:
    model = nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 256))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(64, 256)

    def step() -> None:
        opt.zero_grad()
        model(x).square().mean().backward()
        opt.step()

    return step


def encoder_step() -> Callable[[], None]:
    model = nn.TransformerEncoderLayer(128, 4, 256, batch_first=True)
    opt = torch.optim.AdamW(model.parameters())
    x = torch.randn(16, 32, 128)

    def step() -> None:
        opt.zero_grad()
        model(x).square().mean().backward()
        opt.step()

    return step


def run(step: Callable[[], None], rounds: int, memory: bool) -> tuple[float, float, float]:
    """Median µs per round, events per round, reduction seconds."""
    walls = []
    with profile(activities=[ProfilerActivity.CPU], profile_memory=memory) as prof:
        for r in range(rounds):
            with record_function(f"{ROUND_PREFIX}{r}"):
                t0 = time.perf_counter_ns()
                step()
                walls.append((time.perf_counter_ns() - t0) / 1000.0)
    t0 = time.perf_counter()
    ev = events_from_kineto(prof)
    reduce_events(ev)
    reduce_s = time.perf_counter() - t0
    return statistics.median(walls), len(ev) / rounds, reduce_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(
        f"{'workload':<9} {'rep':>3} {'plain µs':>9} {'memory µs':>10} {'ratio':>6} "
        f"{'events':>7} {'+memory':>8} {'reduce s':>9} {'+memory':>8}"
    )
    for name, make in (("mlp", mlp_step), ("encoder", encoder_step)):
        step = make()
        for _ in range(5):
            step()
        ratios = []
        for rep in range(args.repeat):
            order = (False, True) if rep % 2 == 0 else (True, False)
            got = {m: run(step, args.rounds, m) for m in order}
            plain, mem = got[False], got[True]
            ratios.append(mem[0] / plain[0])
            print(
                f"{name:<9} {rep + 1:>3} {plain[0]:>9.1f} {mem[0]:>10.1f} {ratios[-1]:>5.2f}x "
                f"{plain[1]:>7.0f} {mem[1]:>8.0f} {plain[2]:>9.3f} {mem[2]:>8.3f}"
            )
        print(f"{name:<9} med {'':>9} {'':>10} {statistics.median(ratios):>5.2f}x")


if __name__ == "__main__":
    main()
