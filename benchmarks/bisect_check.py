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
runs' and census runs' share).  ``--busy`` runs a spin loop beside it (one pure-Python
process, ``harness.loads``' ``busy1``).

    python benchmarks/bisect_check.py --seeds 10
    python benchmarks/bisect_check.py --seeds 10 --busy
"""

from __future__ import annotations

import argparse
import json
import math
import random
from pathlib import Path
from typing import Any

from harness.loads import load
from harness.runs import TPROF, run
from harness.workspace import commit, git, workspace, write_files

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
    ignore = "baselines/\n.tprof/\n__pycache__/\n"
    write_files(folder, {"pytest.ini": "[pytest]\n", ".gitignore": ignore})
    what = {timing: "spin more", work: "add a matmul", broken: "break the import"}
    shas: dict[str, str] = {}
    for n in range(1, commits + 1):
        spin = SPIN_BAD if n >= timing else SPIN_GOOD
        bad_import = "import no_such_module  # broken" if n == broken else ""
        files = {
            "model.py": MODEL.format(spin=spin, broken=bad_import),
            "test_perf.py": TESTS.format(extra=n >= work),
            "notes.txt": f"commit {n}\n",
        }
        write_files(folder, files)
        sha = commit(folder, what.get(n, f"commit {n}"))
        for name, at in (("timing", timing), ("work", work), ("broken", broken)):
            if n == at:
                shas[name] = sha
    return shas


def run_seed(seed: int) -> dict[str, Any]:
    with workspace("bisect-check-") as folder:
        planted = make_repo(folder, seed)
        report = folder / ".tprof" / "out.json"
        cmd = [TPROF, "bisect", f"--json={report}", f"HEAD~{COMMITS - 1}", "HEAD", "--", TEST]
        done = run(cmd, folder, report=report, ok=None, what=f"seed {seed}: tprof bisect")
    assert done.report is not None  # run() stops the benchmark on a run without its report
    return score(seed, planted, done.report, done.wall_s)


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
        cost = (
            f"{r['seconds']:.0f} ({c['paired_runs']}× {c['paired_seconds']:.0f} / "
            f"{c['census_runs']}× {c['census_seconds']:.0f})"
        )
        lines.append(
            f"| {r['seed']} | {_mark(r['timing'])} | {r['timing']['steps']} | {_mark(r['work'])} "
            f"| {r['work']['steps']} | {_skipped(r)} | {cost} |"
        )
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
    rows = []
    with load("busy1" if args.busy else "none", lifetime=24 * 3600):
        for seed in range(args.first, args.first + args.seeds):
            rows.append(run_seed(seed))
            print(json.dumps(rows[-1]), flush=True)
    print("\n".join(table(rows)))


if __name__ == "__main__":
    main()
