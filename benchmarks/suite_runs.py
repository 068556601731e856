"""What the re-run benchmarks share: one ``pytest --tprof`` run of a written suite, logged.

``work_plants.py`` and ``compile_reruns.py`` write a suite into a folder and run pytest on it
many times; each run goes through :func:`run_pytest`, which keeps its log and JSON report and
stops the benchmark on a run that gave no report.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any


def prepare(folder: Path, suite_file: str, suite: str, ini: str, subfolders: Iterable[str]) -> None:
    """The suite, an empty conftest and its ini in ``folder``, with the folders runs write."""
    for sub in ("reports", "logs", *subfolders):
        (folder / sub).mkdir(parents=True, exist_ok=True)
    (folder / suite_file).write_text(suite)
    (folder / "conftest.py").write_text("")
    (folder / "pytest.ini").write_text(ini)


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
    """One pytest run over ``folder`` in a fresh process: its JSON report's tests.

    The log (``head``, the command, stdout and stderr) goes to ``logs/``; a run that crashed,
    or gave no verdict for one of ``tests``, stops the benchmark.
    """
    report = folder / "reports" / f"{tag}.json"
    cmd = [
        sys.executable, "-m", "pytest", str(folder), "-q", "-p", "no:cacheprovider",
        f"--tprof-baseline-dir={folder / baselines}", f"--tprof-trace-dir={folder / 'traces'}",
        f"--tprof-json={report}", *args,
    ]  # fmt: skip
    done = subprocess.run(
        cmd, cwd=folder, env=dict(env), capture_output=True, text=True, check=False
    )
    log = f"{head} {' '.join(cmd)}\nexit {done.returncode}\n\n{done.stdout}{done.stderr}"
    (folder / "logs" / f"{tag}.txt").write_text(log)
    if done.returncode not in (0, 1) or not report.exists():
        sys.exit(
            f"pytest failed ({done.returncode}) in {tag}:\n"
            f"{done.stdout[-3000:]}\n{done.stderr[-2000:]}"
        )
    found: list[dict[str, Any]] = json.loads(report.read_text())["tests"]
    missing = sorted(set(tests) - {t["nodeid"].split("::")[-1] for t in found})
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
