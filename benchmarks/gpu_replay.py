"""Replay the judge on sessions and traces recorded on a real GPU, without one.

The folder (default ``../shared/data/h100-torch2.11`` beside the repository: three tests of an
H100 with torch 2.11, four saved sessions each, per-round samples, and the traces of a planted
compare run) holds baselines under ``baselines/<environment>/`` and the compare runs' traces
under ``run-traces/``.  Two tables:

1. **Unchanged, leave one out**: each session judged against the other sessions of its test,
   as a compare run of unchanged code would be.  Every verdict should read ``unchanged`` with
   the device's timing judged; the table names the families each verdict was judged on.
2. **Planted**: each trace of the run stamped ``--stamp`` (default ``051758``, the run with
   ``TPROF_PLANT=cudnn_tf32_off,noncontig,hostloop``) judged against all of its test's sessions,
   as ``tprof diff BASELINES TRACES`` would: the verdict, the families that failed it, and the
   leading kernel rows of a CUDA failure.

    python benchmarks/gpu_replay.py [--data DIR] [--stamp STAMP]

Exits 1 when an unchanged session fails or reads anything but unchanged.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tprof_engine.decide import judge
from tprof_engine.decide.timing.rule import Rule
from tprof_engine.model.verdicts import UNCHANGED, TestVerdict
from tprof_engine.sources import load_source, recorded_in
from tprof_engine.store import baselines

REPO = Path(__file__).resolve().parent.parent
DEFAULT_DATA = REPO.parent / "shared" / "data" / "h100-torch2.11"


def families_line(v: TestVerdict) -> str:
    """Which families judged the verdict, which only reported, which were too noisy."""
    judged = [f.family for f in v.families if f.gates and not f.too_noisy]
    noisy = [f.family for f in v.families if f.gates and f.too_noisy]
    reported = [f.family for f in v.families if not f.gates]
    parts = [f"judged {','.join(judged) or '-'}"]
    if noisy:
        parts.append(f"too noisy {','.join(noisy)}")
    if reported:
        parts.append(f"reported {','.join(reported)}")
    return "; ".join(parts)


def cuda_line(v: TestVerdict) -> str:
    cuda = next((f for f in v.families if f.family == "cuda"), None)
    if cuda is None:
        return "-"
    return f"{cuda.delta_pct:+.2f}% (floor {cuda.floor_pct:.0f}%)"


def leave_one_out(path: Path, rule: Rule) -> list[tuple[str, int, TestVerdict]]:
    base = baselines.load_baseline(path)
    out = []
    for i, session in enumerate(base.sessions):
        rest = tuple(s for j, s in enumerate(base.sessions) if j != i)
        others = judge.Recorded(
            tables=tuple(s.table for s in rest),
            fingerprint=base.fingerprint,
            protocol=base.protocol,
            work=rest[-1].work,
        )
        left_out = judge.Recorded(
            tables=(session.table,),
            fingerprint=base.fingerprint,
            protocol=base.protocol,
            work=session.work,
        )
        out.append((base.nodeid, i, judge.judge(others, left_out, rule)))
    return out


def planted(path: Path, traces: list[Path], rule: Rule) -> list[tuple[str, Path, TestVerdict]]:
    base = baselines.load_baseline(path)
    window = judge.Recorded(
        tables=tuple(base.tables),
        fingerprint=base.fingerprint,
        protocol=base.protocol,
        work=base.work,
    )
    return [
        (base.nodeid, t, judge.judge(window, recorded_in(load_source(t)), rule)) for t in traces
    ]


def kernel_lines(v: TestVerdict, limit: int = 2) -> list[str]:
    rows = sorted(v.device_rows, key=lambda r: -abs(r.current_us - r.baseline_us))[:limit]
    return [
        f"      {r.op} → {r.name[:60]}: {r.baseline_us:,.1f} → {r.current_us:,.1f} µs" for r in rows
    ]


def print_unchanged(files: list[Path], rule: Rule) -> int:
    """Table 1; returns how many unchanged sessions read anything but unchanged."""
    print("1. unchanged: each session against the others of its test")
    print(f"   {'test':<28} {'left out':>8}  {'verdict':<12} {'CUDA Δ':<20} families")
    bad = judged = total = 0
    for path in files:
        for nodeid, i, v in leave_one_out(path, rule):
            total += 1
            bad += v.verdict != UNCHANGED
            judged += any(f.family == "cuda" and f.gates and not f.too_noisy for f in v.families)
            name = nodeid.split("::")[-1]
            print(f"   {name:<28} {i:>8}  {v.verdict:<12} {cuda_line(v):<20} {families_line(v)}")
            if v.verdict != UNCHANGED:
                print(f"      {v.reason[:160]}")
    print(f"   unchanged {total - bad} of {total}; device timing judged in {judged} of {total}")
    return bad


def print_planted(files: list[Path], data: Path, stamp: str, rule: Rule) -> None:
    """Table 2: each planted trace's verdict, the families failing it, its leading kernels."""
    print(f"\n2. planted (run {stamp}): each trace against all of its test's sessions")
    for path in files:
        stem = path.name.rsplit("-", 1)[0]
        found = sorted(data.glob(f"run-traces/{stem}-*{stamp}*.pt.trace.json.gz"))
        traces = [t for t in found if "vs-baseline" not in t.name]
        for nodeid, _, v in planted(path, traces, rule):
            failing = ",".join(f.family for f in v.families if f.gates and f.fails) or "-"
            print(f"   {nodeid.split('::')[-1]:<28} {v.verdict:<12} failing: {failing}")
            print(f"      {v.reason[:200]}")
            if "cuda" in failing.split(","):
                print("\n".join(kernel_lines(v)))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--stamp", default="051758")
    args = parser.parse_args()
    files = sorted(args.data.glob("baselines/*/*.json"))
    if not files:
        print(f"{args.data}: no baselines under baselines/*/ (pass --data)", file=sys.stderr)
        return 2
    rule = Rule()
    bad = print_unchanged(files, rule)
    print_planted(files, args.data, args.stamp, rule)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
