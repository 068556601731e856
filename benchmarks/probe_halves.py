"""What each half of the drift probe reads beside the neighbours this machine can make, and
what the rule makes of the rounds with and without the overhead half.

The drift probe has a compute half (small matrix products, in the round) and an overhead half
(tiny ops, just before the round: what an op costs before any arithmetic).  A round that ran
beside busy processes is left out of the timing when either half read more than 15 % slower
than the baseline's (``Rule.probe_slowed``).  This script captures two bodies (an MLP's
forward, an encoder layer's training step with AdamW) with ``session.capture()``: three quiet
captures of each first, as baseline sessions, then captures quiet and beside each load,
alternating.  Per load it prints:

- each half's median reading against the quiet captures' (side by side in one run), and the
  share of rounds past the 15 % bar against the baseline's lower quartile;
- each capture judged against the baseline sessions (``decide.judge``) twice, on the same
  tables: with both halves, and with the overhead half's readings taken out (the rule before
  it): how many were judged (not "machine busy") and how many failed.

    python benchmarks/probe_halves.py [--loads none,busy1,membw1,torch1,busy,membw,torch]
        [--repeat 2] [--captures 4]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections import defaultdict
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness.loads import LOADS, load

from tprof_engine.capture import in_round, session
from tprof_engine.decide.judge import Recorded, judge
from tprof_engine.decide.timing.rule import Rule
from tprof_engine.model.records import OpTable
from tprof_engine.model.verdicts import REGRESSED

HALVES = ("compute", "overhead")
ROUNDS = 20


def mlp_step() -> Callable[[], object]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 256)
    )
    x = torch.randn(64, 256)

    def step() -> object:
        with torch.no_grad():
            return model(x)

    return step


def encoder_step() -> Callable[[], object]:
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(64, 4, 256, dropout=0.0, batch_first=True)
    opt = torch.optim.AdamW(layer.parameters(), lr=1e-3)
    x = torch.randn(8, 32, 64)

    def step() -> object:
        opt.zero_grad()
        loss = layer(x).pow(2).mean()
        loss.backward()
        opt.step()
        return loss

    return step


BODIES = {"mlp": mlp_step, "encoder": encoder_step}


def captured(step: Callable[[], object]) -> OpTable:
    table = session.capture(step, rounds=ROUNDS, warmup=3).table
    assert table.load is not None and table.load.overhead_us is not None
    return table


def without_overhead(table: OpTable) -> OpTable:
    """The table as the rule before the overhead half read it."""
    assert table.load is not None
    return replace(table, load=replace(table.load, overhead_us=None))


def judged(base: tuple[OpTable, ...], table: OpTable) -> tuple[bool, bool]:
    """Whether the capture's timing was judged against ``base``, and whether it failed."""
    v = judge(Recorded(tables=base), Recorded(tables=(table,)), Rule())
    return v.timing_compared, v.verdict == REGRESSED


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--loads", default="none,busy1,membw1,torch1,busy,membw,torch")
    ap.add_argument("--repeat", type=int, default=2, help="passes over the loads, alternating")
    ap.add_argument("--captures", type=int, default=4, help="captures per body, load and pass")
    a = ap.parse_args()
    loads = [x for x in a.loads.split(",") if x]
    if any(x not in LOADS for x in loads):
        ap.error(f"--loads: a list of {', '.join(LOADS)}")
    torch.set_num_threads(1)
    steps = {name: make() for name, make in BODIES.items()}
    base = {name: tuple(captured(step) for _ in range(3)) for name, step in steps.items()}
    seen: dict[str, list[tuple[str, OpTable]]] = defaultdict(list)
    for _ in range(a.repeat):
        for kind in loads:
            with load(kind, lifetime=600):
                for name, step in steps.items():
                    seen[kind] += [(name, captured(step)) for _ in range(a.captures)]
    print_readings(base, seen)
    print_verdicts(base, seen)
    runs = in_round.OVERHEAD_RUNS
    quiet = np.concatenate([overhead(t) for tables in base.values() for t in tables])
    print(
        f"\nthe overhead half costs about {statistics.median(quiet) * runs:.0f} µs per round "
        f"({runs} runs, the least kept); {a.repeat * a.captures} captures of {ROUNDS} rounds "
        f"per body and load"
    )
    return 0


def overhead(table: OpTable) -> np.ndarray:
    assert table.load is not None and table.load.overhead_us is not None
    return table.load.overhead_us


def halves(table: OpTable) -> dict[str, np.ndarray]:
    return {"compute": table.probe_cpu_us, "overhead": overhead(table)}


def print_readings(
    base: dict[str, tuple[OpTable, ...]], seen: dict[str, list[tuple[str, OpTable]]]
) -> None:
    bar = 1.0 + Rule().probe_slowed
    print(f"{'load':8s} {'half':9s} {'median µs':>10s} {'vs quiet':>9s} {'past 15 %':>10s}")
    for kind, tables in seen.items():
        for half in HALVES:
            ratios, past = [], []
            for name, t in tables:
                ref = [halves(b)[half] for b in base[name]]
                quiet = np.concatenate(ref)
                values = halves(t)[half]
                ratios.append(np.median(values) / np.median(quiet))
                past.append(values > np.quantile(quiet, 0.25) * bar)
            median = np.median(np.concatenate([halves(t)[half] for _, t in tables]))
            share = float(np.concatenate(past).mean())
            print(f"{kind:8s} {half:9s} {median:10.1f} {np.median(ratios) - 1:+9.1%} {share:10.0%}")


def print_verdicts(
    base: dict[str, tuple[OpTable, ...]], seen: dict[str, list[tuple[str, OpTable]]]
) -> None:
    print(f"\n{'load':8s} {'captures':>8s}  judged both / before   failed both / before")
    for kind, tables in seen.items():
        both = [judged(base[name], t) for name, t in tables]
        before = [
            judged(tuple(without_overhead(b) for b in base[name]), without_overhead(t))
            for name, t in tables
        ]
        judged_now, judged_before = sum(j for j, _ in both), sum(j for j, _ in before)
        failed_now, failed_before = sum(f for _, f in both), sum(f for _, f in before)
        print(
            f"{kind:8s} {len(tables):8d}  {judged_now:11d} / {judged_before:<6d}"
            f" {failed_now:11d} / {failed_before}"
        )


if __name__ == "__main__":
    sys.exit(main())
