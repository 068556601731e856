"""Real reruns: false alarms over unchanged runs and catches of planted regressions.

Writes a suite of six realistic CPU workloads (not the project's examples) into a temporary
folder, records baselines with several ``--tprof-save`` sessions, then runs ``pytest --tprof``
repeatedly: unchanged, and with regressions planted through ``TPROF_PLANT``:

- ``matmul25``: the encoder layer's feed-forward 60 % wider: same ops, its matmuls (``aten::mm``
  and ``aten::addmm``, attention projections included) ≈ 25 % slower in all
- ``copy``: an extra copy of the embedding table in the embedding-bag test
- ``layernorm``: a hand-written layer norm (six small new ops) in the layer-norm test
- ``mlp10`` / ``mlp25`` / ``mlp50``: the MLP's hidden matmul 10 / 25 / 50 % wider

Prints, per test, the verdicts of every run and a table of false failures and catches.

    python benchmarks/real_reruns.py [--sessions 3] [--unchanged 10] [--plants ...]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

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

EXPECTED = {
    "matmul25": ("test_encoder_step", "aten::addmm"),
    "copy": ("test_embedding_bag_topk", "aten::clone"),
    "layernorm": ("test_layer_norm", ""),
    "mlp10": ("test_mlp", "aten::addmm"),
    "mlp25": ("test_mlp", "aten::addmm"),
    "mlp50": ("test_mlp", "aten::addmm"),
}


def run(folder: Path, args: list[str], plant: str = "") -> dict[str, dict[str, object]]:
    report = folder / "report.json"
    env = {**os.environ, "TPROF_PLANT": plant}
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "test_suite.py",
        f"--tprof-baseline-dir={folder / 'baselines'}",
        f"--tprof-trace-dir={folder / 'traces'}",
        f"--tprof-json={report}",
        *args,
    ]
    done = subprocess.run(cmd, cwd=folder, env=env, capture_output=True, text=True, check=False)
    if done.returncode not in (0, 1):
        sys.exit(
            f"pytest failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-2000:]}"
        )
    doc = json.loads(report.read_text())
    out = {}
    for t in doc["tests"]:
        name = t["nodeid"].split("::")[-1]
        flagged = [
            o["op"] for o in t["ops"] if o["verdict"] in ("regressed", "new", "calls-changed")
        ]
        out[name] = {
            "verdict": t["verdict"],
            "ops": flagged,
            "trace": t["trace"],
            "reason": t["reason"],
        }
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sessions", type=int, default=3, help="baseline sessions (default 3)")
    ap.add_argument("--unchanged", type=int, default=10, help="unchanged re-runs (default 10)")
    ap.add_argument("--plants", nargs="*", default=list(EXPECTED), help="plants to run")
    ap.add_argument("--plant-runs", type=int, default=1, help="runs per plant (default 1)")
    ap.add_argument(
        "--floor-check",
        type=int,
        default=0,
        help="also re-run unchanged after "
        "each extra save up to this many sessions, to see the floor settle",
    )
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="tprof-reruns-") as tmp:
        folder = Path(tmp)
        (folder / "test_suite.py").write_text(SUITE)
        (folder / "pytest.ini").write_text("[pytest]\n")
        t0 = time.time()
        for _ in range(a.sessions):
            run(folder, ["--tprof-save"])
        print(f"recorded {a.sessions} baseline sessions in {time.time() - t0:.0f} s\n")
        verdicts: dict[str, list[str]] = defaultdict(list)
        false_fail = 0
        total = 0
        for _ in range(a.unchanged):
            res = run(folder, ["--tprof"])
            for name, r in res.items():
                verdicts[name].append(str(r["verdict"]))
                total += 1
                if r["verdict"] == "regressed":
                    false_fail += 1
                    print(f"  false alarm: {name}: {r['reason']}")
        print(f"\nunchanged re-runs: {a.unchanged} runs x {len(verdicts)} tests")
        for name, vs in sorted(verdicts.items()):
            print(f"  {name:<26} {dict(Counter(vs))}")
        print(f"false failures: {false_fail}/{total} test-runs\n")
        rows = []
        for plant in a.plants:
            target, op = EXPECTED[plant]
            for _ in range(a.plant_runs):
                res = run(folder, ["--tprof"], plant)
                caught = res[target]["verdict"] == "regressed"
                named = not op or op in res[target]["ops"]
                collateral = [
                    n for n, r in res.items() if n != target and r["verdict"] == "regressed"
                ]
                for n in collateral:
                    print(f"  collateral failure with {plant}: {n}: {res[n]['reason']}")
                rows.append((plant, target, caught, named, collateral, res[target]["reason"]))
        print(f"{'plant':<10} {'test':<24} {'caught':<7} {'op named':<9} collateral / reason")
        for plant, target, caught, named, coll, reason in rows:
            print(
                f"{plant:<10} {target:<24} {caught!s:<7} {named!s:<9} {coll or ''} {reason[:110]}"
            )
        caught_n = sum(1 for r in rows if r[2])
        print(
            f"\ncaught {caught_n}/{len(rows)} planted regressions; "
            f"collateral failures {sum(len(r[4]) for r in rows)}"
        )
        print(
            f"false failures {false_fail}/{total} unchanged test-runs "
            f"with {a.sessions} baseline sessions"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
