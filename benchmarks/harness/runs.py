"""One ``pytest`` or ``tprof`` run in a fresh process: its JSON report and its wall time.

Every run that should write a report and did not (a crash, a usage error) stops the benchmark
with the end of its output, so a table is never built from a run that did not happen.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PYTEST = (sys.executable, "-m", "pytest")
TPROF = str(Path(sys.executable).with_name("tprof"))
QUIET = ("-q", "-p", "no:cacheprovider")
PASSED_OR_FAILED = (0, 1)  # pytest's exit codes of a run that ran its tests


@dataclass(frozen=True)
class Done:
    """A finished run: its report (``None`` when it wrote none), output and wall time."""

    cmd: list[str]
    returncode: int
    stdout: str
    stderr: str
    wall_s: float
    report: dict[str, Any] | None

    def tail(self, n: int = 3000) -> str:
        return f"{self.stdout[-n:]}\n{self.stderr[-n:]}"

    @property
    def tests(self) -> dict[str, dict[str, Any]]:
        """The report's tests by name (the last part of their node id)."""
        return by_name((self.report or {}).get("tests", []))


def by_name(tests: Iterable[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {t["nodeid"].split("::")[-1]: t for t in tests}


def run(
    cmd: Sequence[str],
    cwd: Path,
    *,
    report: Path | None = None,
    env: Mapping[str, str] | None = None,
    ok: Iterable[int] | None = PASSED_OR_FAILED,
    what: str = "",
) -> Done:
    """``cmd`` in ``cwd``, timed spawn to exit; the JSON ``report`` it writes, read back.

    A run whose exit code is not in ``ok`` (``None``: any), or that wrote no ``report``, stops
    the benchmark naming ``what`` (the command when empty).  A report left by an earlier run is
    removed first, so the one read back is this run's.
    """
    if report is not None:
        report.unlink(missing_ok=True)
    start = time.perf_counter()  # the whole process, interpreter start included
    done = subprocess.run(
        list(cmd),
        cwd=cwd,
        env=None if env is None else dict(env),
        capture_output=True,
        text=True,
        check=False,
    )
    wall = time.perf_counter() - start
    doc = json.loads(report.read_text()) if report is not None and report.exists() else None
    out = Done(list(cmd), done.returncode, done.stdout, done.stderr, wall, doc)
    bad_code = ok is not None and done.returncode not in tuple(ok)
    if bad_code or (report is not None and doc is None):
        sys.exit(f"{what or ' '.join(cmd)} failed ({done.returncode}):\n{out.tail()}")
    return out


def run_pytest(
    folder: Path,
    tag: str,
    args: Iterable[str],
    *,
    env: Mapping[str, str],
    head: str,
    tests: Iterable[str],
    baselines: str = "baselines",
) -> list[dict[str, Any]]:
    """One ``pytest --tprof`` run over ``folder`` in a fresh process: its JSON report's tests.

    The log (``head``, the command, stdout and stderr) goes to ``logs/``; a run that crashed,
    or gave no verdict for one of ``tests``, stops the benchmark.
    """
    report = folder / "reports" / f"{tag}.json"
    cmd = [*PYTEST, str(folder), *QUIET, f"--tprof-baseline-dir={folder / baselines}"]
    cmd += [f"--tprof-trace-dir={folder / 'traces'}", f"--tprof-json={report}", *args]
    done = run(cmd, folder, env=env, ok=None)
    log = f"{head} {' '.join(cmd)}\nexit {done.returncode}\n\n{done.stdout}{done.stderr}"
    (folder / "logs" / f"{tag}.txt").write_text(log)
    if done.returncode not in PASSED_OR_FAILED or not report.exists():
        sys.exit(
            f"pytest failed ({done.returncode}) in {tag}:\n"
            f"{done.stdout[-3000:]}\n{done.stderr[-2000:]}"
        )
    found: list[dict[str, Any]] = json.loads(report.read_text())["tests"]
    missing = sorted(set(tests) - set(by_name(found)))
    if missing:
        sys.exit(f"{tag}: no verdict for {missing} in {report}:\n{done.stdout[-3000:]}")
    return found


def sessions_held(folder: Path) -> dict[str, int]:
    """Sessions per baseline file under ``folder``, by test name."""
    held = {}
    for path in sorted(folder.rglob("*.json")):
        doc = json.loads(path.read_text())
        held[doc["nodeid"].split("::")[-1]] = len(doc["sessions"])
    return held


def short(text: str, n: int = 400) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


_WHERE = (
    "import importlib, os, pytest_tprof.plugin\n"
    "try:\n"
    "    engine = importlib.import_module('tprof_engine')\n"
    "except ImportError:  # a checkout from before the engine's own name\n"
    "    engine = importlib.import_module('profiler')\n"
    "for m in (pytest_tprof, engine):\n"
    "    root = os.path.dirname(os.path.dirname(os.path.abspath(m.__file__)))\n"
    "    if m is not pytest_tprof and os.path.basename(root) == 'profiler':\n"
    "        root = os.path.dirname(root)  # profiler/tprof_engine/, the engine's own folder\n"
    "    print(root)\n"
)


def checkout(cwd: Path, env: Mapping[str, str]) -> str:
    """Where processes run in ``cwd`` with ``env`` import the plugin from, and its commit."""
    done = run([sys.executable, "-c", _WHERE], cwd, env=env, ok=(0,), what="importing the plugin")
    roots = sorted(set(done.stdout.split()))
    if len(roots) != 1:
        return f"mixed: pytest_tprof and the engine from {roots}"
    root = Path(roots[0])
    head = run(["git", "-C", str(root), "log", "-1", "--format=%h %s"], root, ok=None)
    status = ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"]
    dirty = run(status, root, ok=None).stdout.strip()
    state = f", {len(dirty.splitlines())} files modified" if dirty else ""
    return f"{root} ({head.stdout.strip() or 'not a git checkout'}{state})"
