"""Confirm a timing regression in a fresh pytest process.

On a shared machine an op's speed can belong to the process: in real reruns one op read
27-54 % slower in some pytest processes and not in others, and re-measuring in the same
process repeats it.  So a timing regression that survived the in-process re-measurement is
run once more in a new process, and fails the test only if it repeats there too.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tprof_engine.runner import RunConfig

CHILD_ENV = "TPROF_FRESH_PROCESS"


def in_child() -> bool:
    """True inside the process this module started (it confirms nothing further)."""
    return os.environ.get(CHILD_ENV) == "1"


def child_args(config: pytest.Config, run: RunConfig, nodeid: str, out: Path) -> list[str]:
    """The command line that re-runs ``nodeid`` alone, comparing with the same baselines."""
    args = [
        sys.executable, "-m", "pytest", nodeid, "-q", "-p", "no:cacheprovider",
        f"--rootdir={config.rootpath}", "--tprof",
        f"--tprof-baseline-dir={Path(run.baseline_dir).resolve()}",
        f"--tprof-trace-dir={out}", f"--tprof-json={out / 'report.json'}",
        f"--tprof-rounds={run.rounds}", f"--tprof-warmup={run.warmup}",
        f"--tprof-threads={run.threads}", f"--tprof-min-round-us={run.min_round_us}",
    ]  # fmt: skip
    args += plugin_args(config.invocation_params.args)
    if config.inipath is not None:
        args += ["-c", str(config.inipath)]
    if run.rule.rel_floor is not None:
        args.append(f"--tprof-floor={run.rule.rel_floor}")
    if run.rule.strict_calls:
        args.append("--tprof-strict")
    if not run.census:
        args.append("--tprof-no-census")
    if run.stack:
        args.append("--tprof-stack")
    if run.profile_memory:  # part of the protocol: without it the child's timings wouldn't compare
        args.append("--tprof-memory")
    if config.pluginmanager.hasplugin("xdist"):
        args.append("-n0")
    return args


def plugin_args(given: tuple[str, ...] | list[str]) -> list[str]:
    """The ``-p`` options of a command line: a plugin it loaded by name (this one, when it is
    on the path but not installed) must load in the child too."""
    out: list[str] = []
    rest = iter(given)
    for arg in rest:
        if arg == "-p":
            out += ["-p", next(rest, "")]
        elif arg.startswith("-p"):
            out.append(arg)
    return out


def verdict_in_fresh_process(
    config: pytest.Config, run: RunConfig, nodeid: str, *, timeout: float
) -> tuple[str | None, str]:
    """``nodeid``'s verdict in a new pytest process, or None and why none came back."""
    with tempfile.TemporaryDirectory(prefix="tprof-fresh-") as tmp:
        out = Path(tmp)
        env = {**os.environ, CHILD_ENV: "1"}
        try:
            done = subprocess.run(
                child_args(config, run, nodeid, out),
                cwd=config.rootpath,
                env=env,
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return None, f"the fresh process took over {timeout:.0f} s"
        except OSError as exc:
            return None, f"the fresh process did not start ({exc})"
        try:
            doc = json.loads((out / "report.json").read_text())
        except (OSError, ValueError):
            tail = (done.stdout + done.stderr).strip().splitlines()[-1:] or [""]
            return None, f"the fresh process gave no verdict (exit {done.returncode}: {tail[0]})"
        for test in doc.get("tests", []):
            if test.get("nodeid") == nodeid:
                return str(test.get("verdict")), str(test.get("reason") or "")
        return None, "the fresh process did not run the test"
