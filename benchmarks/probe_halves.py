"""What each half of the drift probe reads beside the neighbours this machine can make.

The drift probe has a compute half (small matrix products, in the round) and an overhead half
(tiny ops, just before the round: what an op costs before any arithmetic).  A round that ran
beside busy processes is left out of the timing when either half read more than 15 % slower
than the quiet reference (``Rule.probe_slowed``).  This script captures an MLP step with
``session.capture()`` quiet and beside each load, alternating, and prints per load and half:

- the median reading against the quiet captures' (the ratio, side by side in one run);
- the share of rounds past the 15 % bar against the quiet captures' lower quartile: beside a
  neighbour that slows nothing, these rounds would be left out for nothing;
- the cost of the overhead half per round (its own reading, µs).

    python benchmarks/probe_halves.py [--loads none,busy1,membw1,torch1,busy,membw,torch]
        [--repeat 2] [--captures 4]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness.loads import LOADS, load

from tprof_engine.capture import in_round, session
from tprof_engine.decide.timing.rule import Rule

HALVES = ("compute", "overhead")


def mlp_step() -> object:
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 256)
    )
    x = torch.randn(64, 256)

    def step() -> object:
        with torch.no_grad():
            return model(x)

    return step


def readings(step: object, captures: int) -> dict[str, np.ndarray]:
    """Each half's per-round readings (µs) over ``captures`` captures of 20 rounds."""
    found: dict[str, list[np.ndarray]] = defaultdict(list)
    for _ in range(captures):
        table = session.capture(step, rounds=20, warmup=3).table  # type: ignore[arg-type]
        assert table.load is not None and table.load.overhead_us is not None
        found["compute"].append(table.probe_cpu_us)
        found["overhead"].append(table.load.overhead_us)
    return {half: np.concatenate(v) for half, v in found.items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--loads", default="none,busy1,membw1,torch1,busy,membw,torch")
    ap.add_argument("--repeat", type=int, default=2, help="passes over the loads, alternating")
    ap.add_argument("--captures", type=int, default=4, help="captures per load and pass")
    a = ap.parse_args()
    loads = [x for x in a.loads.split(",") if x]
    if "none" not in loads or any(x not in LOADS for x in loads):
        ap.error(f"--loads: a list of {', '.join(LOADS)} that includes none")
    torch.set_num_threads(1)
    step = mlp_step()
    seen: dict[str, dict[str, list[np.ndarray]]] = defaultdict(lambda: defaultdict(list))
    for _ in range(a.repeat):
        for kind in loads:
            with load(kind, lifetime=600):
                for half, values in readings(step, a.captures).items():
                    seen[kind][half].append(values)
    bar = 1.0 + Rule().probe_slowed
    quiet = {h: np.concatenate(seen["none"][h]) for h in HALVES}
    reference = {h: float(np.quantile(quiet[h], 0.25)) for h in HALVES}
    print(f"{'load':8s} {'half':9s} {'median µs':>10s} {'vs quiet':>9s} {'past 15 %':>10s}")
    for kind in loads:
        for half in HALVES:
            values = np.concatenate(seen[kind][half])
            ratio = statistics.median(values) / statistics.median(quiet[half])
            past = float((values > reference[half] * bar).mean())
            print(
                f"{kind:8s} {half:9s} {statistics.median(values):10.1f} "
                f"{ratio - 1:+9.1%} {past:10.0%}"
            )
    runs = in_round.OVERHEAD_RUNS
    print(
        f"\nthe overhead half costs about {statistics.median(quiet['overhead']) * runs:.0f} µs "
        f"per round quiet ({runs} runs, the least kept); rounds: {a.repeat * a.captures * 20} "
        "per load"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
