"""Real reruns: false alarms over unchanged runs and catches of planted regressions.

Copies a suite into a temporary folder, records baselines with several ``--tprof-save``
sessions, then runs ``pytest --tprof`` on it repeatedly: unchanged, and with regressions
planted through environment variables.  Two suites:

- ``examples`` (default): the project's own ``examples/`` (MLP training step, conv block,
  attention), planted with ``TPROF_SLOW_MATMUL``: the MLP's hidden layer 10 / 25 / 50 % wider,
  so the same matmul ops (``aten::addmm``, ``aten::mm``; same calls) do that much more work.
- ``six``: six realistic CPU workloads written by this script, planted through ``TPROF_PLANT``:
  ``matmul25`` (the encoder layer's feed-forward 60 % wider: its matmuls ≈ 25 % slower),
  ``copy`` (an extra copy of the embedding table), ``layernorm`` (a hand-written layer norm: six
  small new ops), ``mlp10`` / ``mlp25`` / ``mlp50`` (the MLP's hidden matmul wider).

Prints the verdicts of every run and a table of false failures and catches.  With
``--settle N`` it first grows the baseline one session at a time up to N, running unchanged
re-runs after each save, and prints the floors that applied: how many sessions the learned
floor needs to settle.

    python benchmarks/real_reruns.py [--suite examples] [--sessions 3] [--unchanged 10]
                                     [--plant-runs 2] [--settle 5]
"""

from __future__ import annotations

import argparse
import os
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from harness.runs import PYTEST, QUIET
from harness.runs import run as run_command
from harness.workspace import workspace

SUITE = """
import os
import pytest
import torch
from torch import nn

PLANT = os.environ.get("TPROF_PLANT", "")


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def test_mlp(tprof):
    widen = {"mlp10": 1.10, "mlp25": 1.25, "mlp50": 1.50}.get(PLANT, 1.0)
    hidden = int(512 * widen)
    model = nn.Sequential(nn.Linear(256, hidden), nn.ReLU(), nn.Linear(hidden, 256), nn.ReLU(),
                          nn.Linear(256, 10))
    x = torch.randn(64, 256)

    def step():
        model.zero_grad()
        model(x).sum().backward()

    tprof(step)


def test_encoder_step(tprof):
    ff = 820 if PLANT == "matmul25" else 512
    layer = nn.TransformerEncoderLayer(128, 4, ff, dropout=0.0, batch_first=True)
    opt = torch.optim.SGD(layer.parameters(), lr=0.01)
    x = torch.randn(8, 32, 128)

    def step():
        opt.zero_grad()
        layer(x).sum().backward()
        opt.step()

    tprof(step)


def test_conv_block(tprof):
    block = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
                          nn.MaxPool2d(2)).eval()
    x = torch.randn(8, 3, 32, 32)
    with torch.no_grad():
        tprof(block, x)


def hand_layer_norm(x, w, b, eps=1e-5):
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + eps) * w + b


def test_layer_norm(tprof):
    norm = nn.LayerNorm(256)
    x = torch.randn(32, 64, 256)

    def body():
        with torch.no_grad():
            if PLANT == "layernorm":
                return hand_layer_norm(x, norm.weight, norm.bias)
            return norm(x)

    tprof(body)


def test_embedding_bag_topk(tprof):
    emb = nn.EmbeddingBag(20000, 64, mode="sum")
    idx = torch.randint(0, 20000, (4096,))
    offsets = torch.arange(0, 4096, 16)

    def body():
        with torch.no_grad():
            table = emb.weight.clone() if PLANT == "copy" else emb.weight
            out = nn.functional.embedding_bag(idx, table, offsets, mode="sum")
            return out.sum(-1).topk(10)

    tprof(body)


def test_attention(tprof):
    attn = nn.MultiheadAttention(64, 4, batch_first=True).eval()
    x = torch.randn(4, 32, 64)
    with torch.no_grad():
        tprof(attn, x, x, x)
"""

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"

# plant → (test, op that must be named, environment that plants it), per suite.
PLANTS: dict[str, dict[str, tuple[str, str, dict[str, str]]]] = {
    "examples": {
        f"slow{p}": ("test_mlp_training_step", "aten::addmm", {"TPROF_SLOW_MATMUL": f"{p / 100}"})
        for p in (10, 25, 50)
    },
    "six": {
        "matmul25": ("test_encoder_step", "aten::addmm", {"TPROF_PLANT": "matmul25"}),
        "copy": ("test_embedding_bag_topk", "aten::clone", {"TPROF_PLANT": "copy"}),
        "layernorm": ("test_layer_norm", "", {"TPROF_PLANT": "layernorm"}),
        "mlp10": ("test_mlp", "aten::addmm", {"TPROF_PLANT": "mlp10"}),
        "mlp25": ("test_mlp", "aten::addmm", {"TPROF_PLANT": "mlp25"}),
        "mlp50": ("test_mlp", "aten::addmm", {"TPROF_PLANT": "mlp50"}),
    },
}


def write_suite(folder: Path, suite: str) -> None:
    """The suite's files in ``folder``, which becomes pytest's rootdir."""
    if suite == "examples":
        for name in ("test_models.py", "conftest.py"):
            (folder / name).write_text((EXAMPLES / name).read_text())
    else:
        (folder / "test_suite.py").write_text(SUITE)
    (folder / "pytest.ini").write_text("[pytest]\n")


def summary(t: dict[str, Any]) -> dict[str, object]:
    """What the benchmark reads of one test: its verdict, flagged ops, CPU floors and reason."""
    flagged = [o["op"] for o in t["ops"] if o["verdict"] in ("regressed", "new", "calls-changed")]
    cpu = next((f for f in t.get("families", []) if f["family"] == "cpu"), None)
    largest = max(
        (o for o in t["ops"] if o["family"] == "cpu" and o.get("floor_pct") is not None),
        key=lambda o: o.get("share") or 0.0,
        default=None,
    )
    op_floor = None
    if largest:
        op_floor = (largest["op"], largest["floor_pct"], largest.get("vs_rest_floor_pct"))
    return {
        "verdict": t["verdict"],
        "ops": flagged,
        "trace": t["trace"],
        "reason": t["reason"],
        "floor": cpu["floor_pct"] if cpu else None,
        "op_floor": op_floor,
    }


def run(
    folder: Path, args: list[str], plant: dict[str, str] | None = None
) -> dict[str, dict[str, object]]:
    report = folder / "report.json"
    env = {**os.environ, "TPROF_PLANT": "", "TPROF_SLOW_MATMUL": "0", **(plant or {})}
    where = [
        f"--tprof-baseline-dir={folder / 'baselines'}",
        f"--tprof-trace-dir={folder / 'traces'}",
    ]
    cmd = [*PYTEST, *QUIET, *where, f"--tprof-json={report}", *args]
    done = run_command(cmd, folder, env=env, report=report, what="pytest")
    return {name: summary(t) for name, t in done.tests.items()}


def settle(folder: Path, upto: int, reruns: int) -> None:
    """Grow the baseline a session at a time; after each save, unchanged re-runs and floors."""
    print(f"floor settling: 1..{upto} sessions, {reruns} unchanged re-runs after each save")
    print(
        f"{'sessions':<9} {'test':<26} {'test floor':>10}  {'largest op: floor, against rest':<44}"
        " false fails"
    )
    for n in range(1, upto + 1):
        run(folder, ["--tprof-save"])
        fails: Counter[str] = Counter()
        floors: dict[str, tuple[object, object]] = {}
        for _ in range(reruns):
            for name, r in run(folder, ["--tprof"]).items():
                fails[name] += r["verdict"] == "regressed"
                floors[name] = (r["floor"], r["op_floor"])
        for name in sorted(floors):
            floor, op = floors[name]
            op_text = "-"
            if isinstance(op, tuple):
                peer = f"{op[2]:.0f}%" if op[2] is not None else "-"
                op_text = f"{op[0]} {op[1]:.0f}%, {peer}"
            floor_text = f"{floor:.0f}%" if isinstance(floor, float | int) else "-"
            print(f"{n:<9} {name:<26} {floor_text:>10}  {op_text:<44} {fails[name]}/{reruns}")
    print()


def unchanged(folder: Path, runs: int) -> tuple[int, int]:
    """``runs`` unchanged re-runs, their verdicts per test printed; false failures, test-runs."""
    verdicts: dict[str, list[str]] = defaultdict(list)
    false_fail = 0
    total = 0
    for _ in range(runs):
        for name, r in run(folder, ["--tprof"]).items():
            verdicts[name].append(str(r["verdict"]))
            total += 1
            if r["verdict"] == "regressed":
                false_fail += 1
                print(f"  false alarm: {name}: {r['reason']}")
    print(f"\nunchanged re-runs: {runs} runs x {len(verdicts)} tests")
    for name, vs in sorted(verdicts.items()):
        print(f"  {name:<26} {dict(Counter(vs))}")
    print(f"false failures: {false_fail}/{total} test-runs\n")
    return false_fail, total


Row = tuple[str, str, bool, bool, list[str], str]  # plant, test, caught, op named, collateral, why


def planted(folder: Path, plants: dict[str, Any], chosen: list[str], runs: int) -> list[Row]:
    """Each chosen plant ``runs`` times; its rows printed as a table."""
    rows: list[Row] = []
    for plant in chosen:
        target, op, env = plants[plant]
        for _ in range(runs):
            res = run(folder, ["--tprof"], env)
            caught = res[target]["verdict"] == "regressed"
            named = not op or op in res[target]["ops"]
            collateral = [n for n, r in res.items() if n != target and r["verdict"] == "regressed"]
            for n in collateral:
                print(f"  collateral failure with {plant}: {n}: {res[n]['reason']}")
            rows.append((plant, target, caught, named, collateral, str(res[target]["reason"])))
    print(f"{'plant':<10} {'test':<24} {'caught':<7} {'op named':<9} collateral / reason")
    for plant, target, caught, named, coll, reason in rows:
        print(f"{plant:<10} {target:<24} {caught!s:<7} {named!s:<9} {coll or ''} {reason[:110]}")
    return rows


def parse() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    suite_help = "suite (default examples)"
    ap.add_argument("--suite", choices=sorted(PLANTS), default="examples", help=suite_help)
    ap.add_argument("--sessions", type=int, default=3, help="baseline sessions (default 3)")
    ap.add_argument("--unchanged", type=int, default=10, help="unchanged re-runs (default 10)")
    ap.add_argument("--plants", nargs="*", default=None, help="plants to run (default all)")
    ap.add_argument("--plant-runs", type=int, default=2, help="runs per plant (default 2)")
    settle_help = (
        "first grow the baseline from 1 to this many sessions, with unchanged re-runs "
        "after each save, to see the floor settle (default 0: off)"
    )
    ap.add_argument("--settle", type=int, default=0, help=settle_help)
    reruns_help = "re-runs per step of --settle (default 3)"
    ap.add_argument("--settle-reruns", type=int, default=3, help=reruns_help)
    a = ap.parse_args()
    plants = PLANTS[a.suite]
    a.chosen = a.plants if a.plants is not None else list(plants)
    unknown = [p for p in a.chosen if p not in plants]
    if unknown:
        ap.error(f"unknown plant(s) {unknown} for suite {a.suite}; choose from {list(plants)}")
    return a


def main() -> int:
    a = parse()
    with workspace("tprof-reruns-") as folder:
        write_suite(folder, a.suite)
        t0 = time.time()
        if a.settle:
            settle(folder, a.settle, a.settle_reruns)
        for _ in range(max(0, a.sessions - a.settle)):
            run(folder, ["--tprof-save"])
        sessions = max(a.sessions, a.settle)
        print(f"suite {a.suite}: {sessions} baseline sessions ({time.time() - t0:.0f} s so far)\n")
        false_fail, total = unchanged(folder, a.unchanged)
        rows = planted(folder, PLANTS[a.suite], a.chosen, a.plant_runs)
        caught_n = sum(1 for r in rows if r[2])
        collateral_n = sum(len(r[4]) for r in rows)
        print(
            f"\ncaught {caught_n}/{len(rows)} planted regressions; "
            f"collateral failures {collateral_n}"
        )
        print(
            f"false failures {false_fail}/{total} unchanged test-runs "
            f"with {sessions} baseline sessions; {time.time() - t0:.0f} s in all"
        )
    # The target: no false failure, unchanged or beside a planted regression.
    bad = false_fail + collateral_n
    print("target (no false or collateral failure):", "met" if not bad else "MISSED")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
