"""`make demo`: record baselines for the example suite, then catch a planted wider matmul.

Everything is written under ``.tprof/demo/`` (git-ignored, emptied at the start), so the trace
named in the failure is still there to open afterwards; the demo exits 0 when the planted
slowdown was caught, as it should be.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def pytest(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "pytest", "examples", "-p", "no:cacheprovider", *args]
    print("$", " ".join(cmd[2:]), flush=True)
    return subprocess.run(cmd, cwd=ROOT, env=env, text=True, capture_output=True, check=False)


def _saved(line: str) -> bool:
    """A line of the tprof summary that says what a save recorded."""
    return line.startswith(("SAVED ", "NOT-SAVED "))


def main() -> int:
    scratch = ROOT / ".tprof" / "demo"
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    base = scratch / "baselines"
    traces = scratch / "traces"
    common = [f"--tprof-baseline-dir={base}", f"--tprof-trace-dir={traces}"]
    env = {k: v for k, v in os.environ.items() if k != "TPROF_SLOW_MATMUL"}
    print("1) Recording baselines: three --tprof-save --tprof-save-trace sessions of examples/\n")
    for _ in range(3):
        done = pytest(["-q", "--tprof-save", "--tprof-save-trace", *common], env)
        if done.returncode != 0:
            print(done.stdout[-4000:], done.stderr[-2000:])
            return done.returncode
        print("\n".join(f"   {line}" for line in done.stdout.splitlines() if _saved(line)))
    print(f"\n   baselines under {base}\n")
    # Twice the hidden width: on a shared machine some ops of this small test run at one of
    # two speeds per process, and floors learned from three sessions can reach 30-100 %, so a
    # 50 % plant is caught only most of the time (10 of 11 runs measured); 2x stands out.
    print(
        "2) Planting twice-as-wide hidden layers (the MLP of test_mlp_training_step, and the\n"
        "   DDP model of test_ddp_training_step) and re-running: both should fail\n"
    )
    slow = pytest(["-q", "-rf", "--tprof", *common], {**env, "TPROF_SLOW_MATMUL": "1.0"})
    print(_without_profiler_noise(slow.stdout))
    out = slow.stdout
    caught = slow.returncode == 1 and "REGRESSED" in out and "aten::addmm" in out
    work = "work regressed" in out and "aten::addmm in fc1 (forward)" in out
    if caught and work:
        print(
            "The planted change was caught: both tests failed on their work (the hidden layers'\n"
            "matmuls, aten::addmm forward and aten::mm backward in fc1 and fc2, do exactly twice\n"
            "the FLOPs), each failure leading with its largest work row, the timings beside."
        )
        print("Open the trace above in https://ui.perfetto.dev or chrome://tracing.")
        return 0
    print("The planted change was NOT caught on its work (see the output above).")
    return 1


def _without_profiler_noise(text: str) -> str:
    # Kineto writes USDT / STAGE lines to stderr, which pytest shows as captured output.
    return "\n".join(line for line in text.splitlines() if not line.startswith(("USDT:", "STAGE:")))


if __name__ == "__main__":
    raise SystemExit(main())
