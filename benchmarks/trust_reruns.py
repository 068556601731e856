"""Unchanged re-runs of ``examples/`` against the committed baselines, the way others meet them.

Copies ``examples/`` and the committed ``baselines/`` into a temporary folder and runs
``pytest examples --tprof`` there repeatedly, unchanged, in each setting:

- ``same-host``: this machine, which may or may not be the host that recorded the baselines;
- ``other-host``: under another hostname (a new UTS namespace, ``unshare -u``, as a container
  or a CI runner with its own name is): the baselines are from one other host, so calls and work
  gate and timings are not compared;
- ``threads-2``: ``--tprof-threads=2``, a hard key of the fingerprint: calls and work only;
- ``xdist``: ``-n 2`` on this machine; a timing regression a worker finds is re-run alone
  once the workers finish.

Prints each run's verdicts and a table: runs, runs with a failed test, failed tests, and the
verdict words seen.  The committed baselines must pass every run.

    python benchmarks/trust_reruns.py [--runs 10] [--xdist-runs 7] [--settings same-host,...]
"""

from __future__ import annotations

import argparse
import shutil
from collections import Counter
from pathlib import Path

from harness.runs import PYTEST, QUIET, run
from harness.workspace import workspace

ROOT = Path(__file__).resolve().parent.parent
SETTINGS = ("same-host", "other-host", "threads-2", "xdist")


def command(setting: str, report: Path) -> list[str]:
    """The pytest command line of one run in ``setting``."""
    cmd = [*PYTEST, "examples", *QUIET, "--tprof", f"--tprof-json={report}"]
    if setting == "threads-2":
        cmd.append("--tprof-threads=2")
    if setting == "xdist":
        cmd += ["-n", "2"]
    if setting == "other-host":
        inner = " ".join(f"'{c}'" for c in cmd)
        return ["unshare", "-u", "sh", "-c", f"hostname tprof-other-host && exec {inner}"]
    return cmd


def one_run(folder: Path, setting: str, i: int) -> dict[str, object]:
    """Run once; the verdict of every test and whether pytest failed."""
    report = folder / f"report-{setting}-{i}.json"
    done = run(command(setting, report), folder, report=report, ok=None, what=f"{setting} run {i}")
    seconds = done.wall_s
    tests = (done.report or {})["tests"]
    verdicts = {t["nodeid"]: (t["verdict"], t["outcome"]) for t in tests}
    failed = sorted(n for n, (_, outcome) in verdicts.items() if outcome == "failed")
    line = ", ".join(f"{n.split('::')[-1]} {v}" for n, (v, _) in sorted(verdicts.items()))
    print(f"{setting:<11} run {i + 1:>2}: exit {done.returncode}  {seconds:5.1f} s  {line}")
    for t in tests:
        if t["outcome"] == "failed":
            print(f"    FAILED {t['nodeid']}: {t['reason'][:200]}")
    return {"exit": done.returncode, "failed": failed, "words": [v for v, _ in verdicts.values()]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=10, help="runs per serial setting")
    parser.add_argument("--xdist-runs", type=int, default=7, help="runs with -n 2")
    parser.add_argument("--settings", default=",".join(SETTINGS), help="comma-separated")
    args = parser.parse_args()
    settings = [s for s in args.settings.split(",") if s]
    if "other-host" in settings and shutil.which("unshare") is None:
        print("other-host: skipped (no unshare on this machine)")
        settings.remove("other-host")
    rows = []
    with workspace("tprof-trust-") as folder:
        shutil.copytree(ROOT / "examples", folder / "examples")
        shutil.copytree(ROOT / "baselines", folder / "baselines")
        (folder / "pyproject.toml").write_text("[tool.pytest.ini_options]\n")
        for setting in settings:
            n = args.xdist_runs if setting == "xdist" else args.runs
            runs = [one_run(folder, setting, i) for i in range(n)]
            words = Counter(w for r in runs for w in r["words"])  # type: ignore[attr-defined]
            rows.append(
                (
                    setting,
                    n,
                    sum(1 for r in runs if r["failed"]),
                    sum(len(r["failed"]) for r in runs),  # type: ignore[arg-type]
                    ", ".join(f"{w} {c}" for w, c in sorted(words.items())),
                )
            )
    print()
    print(f"{'setting':<11} {'runs':>4} {'runs failed':>11} {'tests failed':>12}  verdicts")
    for setting, n, bad_runs, bad_tests, words_seen in rows:
        print(f"{setting:<11} {n:>4} {bad_runs:>11} {bad_tests:>12}  {words_seen}")
    return 1 if any(r[2] for r in rows) else 0


if __name__ == "__main__":
    raise SystemExit(main())
