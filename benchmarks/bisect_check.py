"""``tprof bisect`` on a synthetic repository of 64 commits, one seed after another.

Each seed builds a git repository whose first commit is GOOD and whose 64th is BAD, with, at
commits the seed draws:

- a **timing-only regression**: a custom op (``torch.library.custom_op``) whose body is a
  fixed amount of pure-Python work does 25 % more of it (that op slower, no work moved);
- a **work regression**: the test's body gains a 128×128 matrix product (FLOPs and bytes);
- a **broken commit**: the model module fails to import (fixed by the next commit).

The other commits change a file the test never reads.  ``tprof bisect HEAD~63 HEAD`` runs on
it, and the table says, per seed, whether it named both culprits, its measured steps for each
(the bound is ⌈log2 64⌉ + 2 = 8), the commits it skipped, and its seconds (with the paired
runs' and census runs' share).  ``--busy`` runs a spin loop beside it
(``python -c 'while True: pass'``).

    python benchmarks/bisect_check.py --seeds 10
    python benchmarks/bisect_check.py --seeds 10 --busy
"""

from __future__ import annotations

import argparse
import json
import math
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

COMMITS = 64
TEST = "test_perf.py::test_step"
MODEL = """\
import torch
from torch import nn

SPIN_N = {spin}
{broken}

@torch.library.custom_op("bisectcheck::spin", mutates_args=())
def spin(x: torch.Tensor) -> torch.Tensor:
    s = 0
    for i in range(SPIN_N):
        s += i
    return x + 1


@spin.register_fake
def _(x):
    return x + 1


def build():
    return nn.Sequential(nn.Linear(128, 256), nn.ReLU(), nn.Linear(256, 128)).eval()
"""
TESTS = """\
import torch

from model import build, spin

EXTRA = {extra}


def test_step(tprof):
    torch.manual_seed(0)
    model = build()
    x = torch.randn(32, 128)
    a = torch.randn(128, 128)

    def body():
        with torch.no_grad():
            y = spin(model(x))
            if EXTRA:
                y = y + torch.mm(a, a).sum()
            return y

    tprof(body)
"""
SPIN_GOOD, SPIN_BAD = 40_000, 50_000  # 25 % more Python in the op's body (about 1 ms)


def git(folder: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(folder), *args], check=True, capture_output=True)
    return done.stdout.decode().strip()


def draw(seed: int) -> tuple[int, int, int]:
    """The commits (1-based, 2..64) of the timing regression, the work regression and the
    broken import: distinct, the broken one not the last (its fix follows it)."""
    rng = random.Random(seed)
    timing, work = rng.sample(range(2, COMMITS + 1), 2)
    broken = rng.choice([c for c in range(2, COMMITS) if c not in (timing, work)])
    return timing, work, broken


def make_repo(folder: Path, seed: int, commits: int = COMMITS) -> dict[str, str]:
    """The repository of ``seed``; the sha of each planted commit by name."""
    timing, work, broken = draw(seed) if commits == COMMITS else (commits - 1, 2, 3)
    git(folder, "init", "-q")
    (folder / "pytest.ini").write_text("[pytest]\n")
    (folder / ".gitignore").write_text("baselines/\n.tprof/\n__pycache__/\n")
    shas: dict[str, str] = {}
    for n in range(1, commits + 1):
        spin = SPIN_BAD if n >= timing else SPIN_GOOD
        bad_import = "import no_such_module  # broken" if n == broken else ""
        (folder / "model.py").write_text(MODEL.format(spin=spin, broken=bad_import))
        (folder / "test_perf.py").write_text(TESTS.format(extra=n >= work))
        (folder / "notes.txt").write_text(f"commit {n}\n")
        git(folder, "add", "-A")
        what = {timing: "spin more", work: "add a matmul", broken: "break the import"}
        subject = what.get(n, f"commit {n}")
        git(folder, "-c", "user.email=b@example.com", "-c", "user.name=bisect",
            "commit", "-qm", subject)  # fmt: skip
        sha = git(folder, "rev-parse", "HEAD")
        for name, at in (("timing", timing), ("work", work), ("broken", broken)):
            if n == at:
                shas[name] = sha
    return shas


def run_seed(seed: int, tprof: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bisect-check-") as tmp:
        folder = Path(tmp)
        planted = make_repo(folder, seed)
        report = folder / ".tprof" / "out.json"
        start = time.perf_counter()
        done = subprocess.run(
            [tprof, "bisect", f"--json={report}", f"HEAD~{COMMITS - 1}", "HEAD", "--", TEST],
            cwd=folder, capture_output=True, text=True, check=False,
        )  # fmt: skip
        seconds = time.perf_counter() - start
        if not report.exists():
            sys.exit(f"seed {seed}: tprof bisect exited {done.returncode}:\n{done.stdout[-3000:]}"
                     f"{done.stderr[-3000:]}")  # fmt: skip
        doc = json.loads(report.read_text())
    return score(seed, planted, doc, seconds)


def score(
    seed: int, planted: dict[str, str], doc: dict[str, Any], seconds: float
) -> dict[str, Any]:
    found: dict[str, dict[str, Any]] = {}
    for r in doc["regressions"]:
        found.setdefault(r["kind"], r)
    row: dict[str, Any] = {"seed": seed, "seconds": seconds, "cost": doc["cost"]}
    for kind in ("timing", "work"):
        r = found.get(kind)
        culprit = (r or {}).get("culprit") or {}
        row[kind] = {
            "right": culprit.get("sha") == planted[kind],
            # the broken commit just before the culprit: no bisection can tell the two apart
            "range": bool(r) and r["candidates"] == [planted["broken"], planted[kind]],
            "steps": r["measured_steps"] if r else None,
            "hunted": r is not None,
        }
    row["skipped"] = [s["sha"] for s in doc["skipped"]]
    row["broken_skipped"] = planted["broken"] in row["skipped"]
    row["extra"] = len(doc["regressions"]) - len(found)
    return row


def table(rows: list[dict[str, Any]]) -> list[str]:
    bound = math.ceil(math.log2(COMMITS)) + 2
    lines = [
        "| seed | timing culprit | its steps | work culprit | its steps | skipped | seconds "
        "(paired / census) |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        c = r["cost"]
        lines.append(
            f"| {r['seed']} | {_mark(r['timing'])} | {r['timing']['steps']} | {_mark(r['work'])} "
            f"| {r['work']['steps']} | {_skipped(r)} "
            f"| {r['seconds']:.0f} ({c['paired_runs']}× {c['paired_seconds']:.0f} / "
            f"{c['census_runs']}× {c['census_seconds']:.0f}) |"
        )  # fmt: skip
    right = sum(all(r[k]["right"] or r[k]["range"] for k in ("timing", "work")) for r in rows)
    within = sum(
        (r["timing"]["steps"] or 99) <= bound and (r["work"]["steps"] or 99) <= bound for r in rows
    )
    lines.append(
        f"\nboth culprits right (or the broken commit beside them): {right} of {len(rows)}; "
        f"within {bound} steps: {within}"
    )
    return lines


def _skipped(r: dict[str, Any]) -> str:
    return f"{len(r['skipped'])}" + (" (the broken one)" if r["broken_skipped"] else "")


def _mark(r: dict[str, Any]) -> str:
    if not r["hunted"]:
        return "not hunted"
    if r["range"]:
        return "one of (broken, right)"
    return "right" if r["right"] else "WRONG"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--first", type=int, default=1)
    parser.add_argument("--busy", action="store_true", help="a spin loop beside it")
    args = parser.parse_args()
    tprof = str(Path(sys.executable).with_name("tprof"))
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if args.busy else None
    rows = []
    try:
        for seed in range(args.first, args.first + args.seeds):
            rows.append(run_seed(seed, tprof))
            print(json.dumps(rows[-1]), flush=True)
    finally:
        if busy is not None:
            busy.kill()
    print("\n".join(table(rows)))


if __name__ == "__main__":
    main()
