"""Distributed tests: unchanged re-runs and communication plants, quiet and on a busy machine.

Writes a suite of its own into a temporary folder: each test profiles a 2-rank training step
over gloo with ``tprof.distributed`` (the plugin spawns the ranks), records a baseline of
``--sessions`` sessions with ``--tprof-save``, then runs ``pytest --tprof`` on it:

1. unchanged, ``--runs`` times, quiet: a verdict ``regressed`` or ``error`` is a false failure;
2. unchanged, ``--busy-runs`` times, with a busy loop on every core (``harness.loads.load``):
   false failures again, and how many test-runs timing left out (inconclusive, machine busy);
3. each plant, ``--plant-runs`` times, on its test alone.  A communication plant is caught
   when the verdict is ``regressed`` and a failing ``communication`` cause names the
   collective and phase planted, with its counts; the timing plant when a timing family
   regressed (after the fresh-process confirmation).

The tests (``dist_steps.py`` in the folder; ``DIST_PLANT`` switches a plant on):

- ``test_ddp_mlp``: DDP of a 3-layer MLP, two micro-batches per step, the first under
  ``no_sync``, SGD.  Plants: ``bucket`` (``bucket_cap_mb=0.01``: one all-reduce per
  parameter or two instead of one bucket), ``extra`` (an all-reduce of the loss every step),
  ``unused`` (``find_unused_parameters=True`` and a branch the forward never uses: DDP
  all-reduces its used-parameter map), ``sync`` (both micro-batches synchronise: no
  ``no_sync``).
  Timing plant ``straggler``: rank 1 sleeps 2 ms a step (caught when a timing family
  regressed; rank 0 waits for it in its all-reduce).
- ``test_fsdp2_mlp``: ``fully_shard`` on each linear layer and the root, AdamW; all-gathers in
  forward and backward, reduce-scatters in backward.
- ``test_ddp_resnet``: torchvision's ResNet-18 (random init, 10 classes, 64×64 input) under
  DDP with ``broadcast_buffers=False``; plant ``buffers``: ``broadcast_buffers=True`` (a
  broadcast of the BatchNorm buffers before every forward).  Needs torchvision.
- ``test_ddp_gpt2``: Hugging Face ``GPT2LMHeadModel`` from a small config (2 layers, 128 wide,
  4 heads, vocabulary 1,000), AdamW.  Needs transformers.

Prints every run's verdicts, a table and the targets, and exits 1 on a false failure quiet or a
missed plant.  ``--keep DIR`` keeps the folder (baselines, traces, reports, logs).

    python benchmarks/distributed_reruns.py [--runs 8] [--busy-runs 3] [--plant-runs 3]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from harness.loads import load
from harness.runs import run_pytest, short
from harness.workspace import prepare, workspace

STEPS = '''
"""2-rank training steps for tprof.distributed; DIST_PLANT changes their communication."""

import contextlib
import os
import time

import torch
import torch.distributed as dist
from torch import nn


def plant():
    return os.environ.get("DIST_PLANT", "")


class Branchy(nn.Module):
    def __init__(self, unused):
        super().__init__()
        self.fc1, self.fc2, self.fc3 = nn.Linear(64, 256), nn.Linear(256, 256), nn.Linear(256, 10)
        self.unused = nn.Linear(256, 10) if unused else None

    def forward(self, x):
        return self.fc3(torch.relu(self.fc2(torch.relu(self.fc1(x)))))


def make_ddp_mlp(rank):
    torch.manual_seed(0)
    ddp = nn.parallel.DistributedDataParallel(
        Branchy(unused=plant() == "unused"),
        bucket_cap_mb=0.01 if plant() == "bucket" else 25.0,
        find_unused_parameters=plant() == "unused",
    )
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(rank)
    xs = [torch.randn(32, 64, generator=g) for _ in range(2)]
    y = torch.randint(0, 10, (32,), generator=g)

    def step():
        opt.zero_grad()
        for i, x in enumerate(xs):
            quiet = i == 0 and plant() != "sync"
            with ddp.no_sync() if quiet else contextlib.nullcontext():
                loss = nn.functional.cross_entropy(ddp(x), y)
                loss.backward()
        if plant() == "extra":
            dist.all_reduce(loss.detach().clone())
        if plant() == "straggler" and rank == 1:
            time.sleep(0.002)
        opt.step()

    return step


def make_fsdp2_mlp(rank):
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(),
                          nn.Linear(256, 10))
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer)
    fully_shard(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(rank)
    x, y = torch.randn(32, 64, generator=g), torch.randint(0, 10, (32,), generator=g)

    def step():
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()

    return step


def make_ddp_resnet(rank):
    import torchvision

    torch.manual_seed(0)
    model = torchvision.models.resnet18(num_classes=10)
    ddp = nn.parallel.DistributedDataParallel(model, broadcast_buffers=plant() == "buffers")
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01, momentum=0.9)
    g = torch.Generator().manual_seed(rank)
    x, y = torch.randn(4, 3, 64, 64, generator=g), torch.randint(0, 10, (4,), generator=g)

    def step():
        opt.zero_grad()
        nn.functional.cross_entropy(ddp(x), y).backward()
        opt.step()

    return step


def make_ddp_gpt2(rank):
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(n_layer=2, n_embd=128, n_head=4, vocab_size=1000, n_positions=64)
    ddp = nn.parallel.DistributedDataParallel(GPT2LMHeadModel(config))
    opt = torch.optim.AdamW(ddp.parameters(), lr=1e-4)
    g = torch.Generator().manual_seed(rank)
    ids = torch.randint(0, 1000, (2, 32), generator=g)

    def step():
        opt.zero_grad()
        ddp(input_ids=ids, labels=ids).loss.backward()
        opt.step()

    return step
'''

SUITE = """
import pytest

import dist_steps


def test_ddp_mlp(tprof):
    tprof.distributed(dist_steps.make_ddp_mlp, world_size=2)


def test_fsdp2_mlp(tprof):
    tprof.distributed(dist_steps.make_fsdp2_mlp, world_size=2)


def test_ddp_resnet(tprof):
    pytest.importorskip("torchvision")
    tprof.distributed(dist_steps.make_ddp_resnet, world_size=2)


def test_ddp_gpt2(tprof):
    pytest.importorskip("transformers")
    tprof.distributed(dist_steps.make_ddp_gpt2, world_size=2)
"""

# plant → (test, what its communication cause must say)
PLANTS = {
    "bucket": ("test_ddp_mlp", ("c10d::allreduce_ in backward", "calls per step")),
    "extra": ("test_ddp_mlp", ("c10d::allreduce_ at top level", "new, 1 call per step")),
    "unused": ("test_ddp_mlp", ("c10d::allreduce_ in backward", "int32")),
    "sync": ("test_ddp_mlp", ("c10d::allreduce_ in backward", "1 → 2 calls per step")),
    "buffers": ("test_ddp_resnet", ("c10d::broadcast_ at top level", "new")),
    # timing, not communication: rank 1 sleeps 2 ms a step, and rank 0 waits for it
    "straggler": ("test_ddp_mlp", ()),
}
FAILING = ("regressed", "error")
ARGS = ("--tprof", "--tprof-rounds=12", "--tprof-warmup=2")


def available(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def tests_here() -> list[str]:
    found = ["test_ddp_mlp", "test_fsdp2_mlp"]
    found += ["test_ddp_resnet"] if available("torchvision") else []
    found += ["test_ddp_gpt2"] if available("transformers") else []
    return found


def comm_text(t: dict[str, Any]) -> str:
    return " ".join(c["text"] for c in t.get("causes", []) if c.get("kind") == "communication")


def timing_text(t: dict[str, Any]) -> str:
    """The timing families that regressed, with their reasons."""
    return " ".join(
        "; ".join(f.get("reasons", []))
        for f in t.get("families", [])
        if f.get("timing_regressed") or f.get("op_gate")
    )


def word(t: dict[str, Any]) -> str:
    """``regressed (communication)``, ``inconclusive (busy)``: the verdict and what set it."""
    v = t["verdict"]
    if v == "regressed":
        kinds = sorted({c["kind"] for c in t.get("causes", []) if c.get("failing")})
        work = t.get("work") or {}
        kinds += ["work"] if work.get("verdict") == "regressed" else []
        return f"{v} ({', '.join(kinds) or 'timing'})"
    if v == "inconclusive" and "machine busy" in t.get("reason", ""):
        return "inconclusive (busy)"
    return v


def unchanged_runs(
    folder: Path, label: str, runs: int, env: dict[str, str], tests: list[str], busy: bool
) -> Counter[str]:
    seen: Counter[str] = Counter()
    for i in range(runs):
        with load("busy" if busy else "none", lifetime=900):
            found = run_pytest(folder, f"{label}{i}", ARGS, env=env, head=label, tests=tests)
        words = {t["nodeid"].split("::")[-1]: word(t) for t in found}
        print(f"  {label} {i + 1}: " + ", ".join(f"{k}={v}" for k, v in words.items()))
        for t in found:
            seen[word(t)] += 1
            if t["verdict"] in FAILING:
                print(f"    FALSE FAILURE {t['nodeid']}: {short(t['reason'])}")
    return seen


def plant_runs(folder: Path, runs: int, env: dict[str, str], tests: list[str]) -> dict[str, int]:
    caught: dict[str, int] = {}
    for plant, (test, says) in PLANTS.items():
        if test not in tests:
            continue
        caught[plant] = 0
        for i in range(runs):
            planted = {**env, "DIST_PLANT": plant}
            args = (*ARGS, "-k", test)
            found = run_pytest(
                folder, f"plant-{plant}{i}", args, env=planted, head=plant, tests=[test]
            )
            (t,) = found
            text = comm_text(t) if says else timing_text(t)
            hit = t["verdict"] == "regressed" and all(s in text for s in says)
            hit = hit and bool(text)
            caught[plant] += hit
            print(f"  {plant} {i + 1}: {'caught' if hit else 'MISSED'} — {short(text, 300)}")
    return caught


def check(folder: Path, a: argparse.Namespace) -> int:
    prepare(folder, "test_dist.py", SUITE, "[pytest]\naddopts = --strict-markers\n", ["traces"])
    (folder / "dist_steps.py").write_text(STEPS)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "DIST_PLANT"))}
    tests = tests_here()
    started = time.monotonic()
    print(f"folder {folder}; tests: {', '.join(tests)}; {os.cpu_count()} CPUs")
    for s in range(a.sessions):
        run_pytest(folder, f"save{s}", (*ARGS, "--tprof-save"), env=env, head="save", tests=tests)
    quiet = unchanged_runs(folder, "quiet", a.runs, env, tests, busy=False)
    busy = unchanged_runs(folder, "busy", a.busy_runs, env, tests, busy=True)
    caught = plant_runs(folder, a.plant_runs, env, tests)
    false_quiet = sum(n for w, n in quiet.items() if w.startswith(FAILING))
    false_busy = sum(n for w, n in busy.items() if w.startswith(FAILING))
    print(f"\n{'condition':<28} {'test-runs':>9}  verdicts")
    for name, seen in (("unchanged, quiet", quiet), ("unchanged, busy loop per core", busy)):
        shown = ", ".join(f"{w} {n}" for w, n in seen.most_common())
        print(f"{name:<28} {sum(seen.values()):>9}  {shown}")
    for plant, n in caught.items():
        print(f"{'plant ' + plant:<28} {a.plant_runs:>9}  caught {n}")
    met_quiet = false_quiet == 0 and sum(quiet.values()) >= 30
    met_plants = all(n == a.plant_runs for n in caught.values())
    print(
        f"\ntarget: 0 false failures over >= 30 quiet test-runs: {false_quiet} of "
        f"{sum(quiet.values())} — {'met' if met_quiet else 'NOT met'}"
    )
    print(f"busy loop per core: {false_busy} false failures of {sum(busy.values())}")
    print(f"target: every plant caught in every run — {'met' if met_plants else 'NOT met'}")
    print(f"{time.monotonic() - started:.0f} s")
    return 0 if met_quiet and met_plants else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sessions", type=int, default=3)
    ap.add_argument("--runs", type=int, default=8)
    ap.add_argument("--busy-runs", type=int, default=3)
    ap.add_argument("--plant-runs", type=int, default=3)
    ap.add_argument("--keep", type=Path)
    a = ap.parse_args()
    with workspace("tprof-dist-", a.keep) as folder:
        return check(folder, a)


if __name__ == "__main__":
    sys.exit(main())
