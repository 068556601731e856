"""``tprof bisect``'s measurements of one commit, through ``tprof ab``'s machinery
(:mod:`tprof_engine.ab`): the commit checked out in a worktree, and either

- **paired** against GOOD: ``tprof ab``'s two pytest processes, GOOD's tree on the base side
  and the commit's on the head side, their rounds taking turns on the same CPUs; the head's
  JSON report and the trace pair are read back; or
- **its census**: one pytest process saving a baseline of the fewest rounds into a folder of
  its own, whose work census is read back (exact; its timing is not read).

A commit whose pytest could not run (an import or build error, a collection error) or whose
test has no result is *broken*: the search skips it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tprof_engine import ab
from tprof_engine.model.errors import TprofError
from tprof_engine.model.family_specs import is_device
from tprof_engine.model.records import OpTable
from tprof_engine.model.work import WorkTable
from tprof_engine.pairing import BASE, HEAD, SideConfig
from tprof_engine.sources import load_source
from tprof_engine.store import baselines, paths

# Options every measurement adds for pytest: bisect re-measures what it can't class itself,
# and reads no stored baseline (a commit's own baselines folder would be judged beside).
_QUIET = ("-q", "--no-tprof-confirm")
CENSUS_ROUNDS = 3  # a census process's timed rounds, which nothing reads


@dataclass(frozen=True, slots=True, kw_only=True)
class Setup:
    """What every measurement of one bisection shares: the repository, GOOD's worktree, the
    folder pytest starts from (relative to a tree's root), pytest's arguments, the CPUs."""

    top: Path
    good_sha: str
    good_label: str
    good_root: Path
    where: Path
    pytest_args: tuple[str, ...]
    work: Path  # this run's temporary folder
    cpus: tuple[int, ...]
    mode: str
    environ: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class Paired:
    """One paired run of a commit against GOOD: the head's tests by node id (its JSON
    report's entries), each test's trace pair (GOOD's, the commit's) and the seconds taken;
    ``broken`` says why no test could be read."""

    sha: str
    rounds: int
    tests: Mapping[str, Mapping[str, Any]]
    traces: Mapping[str, tuple[Path, Path]]
    seconds: float
    broken: str = ""
    log: Path | None = None

    def tables(self, nodeid: str) -> tuple[OpTable, OpTable] | None:
        """GOOD's and the commit's rounds of ``nodeid``, read from the trace pair."""
        pair = self.traces.get(nodeid)
        if pair is None:
            return None
        try:
            return load_source(pair[0]).tables[0], load_source(pair[1]).tables[0]
        except (TprofError, IndexError, OSError):
            return None


@dataclass(frozen=True, slots=True, kw_only=True)
class Census:
    """One commit's census: each test's work table by node id; ``broken`` says why none."""

    sha: str
    work: Mapping[str, WorkTable]
    seconds: float
    broken: str = ""


def checked_out(setup: Setup, sha: str) -> Path:
    """``sha``'s worktree (GOOD's is kept for the run; others are removed after their step)."""
    if sha == setup.good_sha:
        return setup.good_root
    return ab.add_worktree(setup.top, sha, setup.work / "trees" / sha[:12])


def done_with(setup: Setup, root: Path) -> None:
    if root != setup.good_root:
        ab.remove_worktree(setup.top, root)


def _environ(setup: Setup) -> dict[str, str]:
    env = dict(setup.environ)
    env.pop("GITHUB_STEP_SUMMARY", None)  # bisect writes its own summary
    return env


def paired(setup: Setup, sha: str, rounds: int) -> Paired:
    """``sha`` measured paired against GOOD, ``rounds`` rounds a test."""
    folder = setup.work / "steps" / f"{sha[:12]}-{rounds}"
    folder.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    root = checked_out(setup, sha)
    try:
        trees = ab.Trees(
            base_root=setup.good_root,
            head_root=root,
            sha=setup.good_sha,
            label=setup.good_label,
            where=setup.where,
        )
        args = [*setup.pytest_args, *_QUIET, f"--tprof-rounds={rounds}"]
        args.append(f"--tprof-baseline-dir={folder / 'none'}")
        report = folder / "head.json"
        env = _environ(setup)
        base = ab.side_launch(trees, BASE, args, env, [f"--tprof-trace-dir={folder / 'good'}"])
        head_args = [*args, f"--tprof-json={report}", f"--tprof-trace-dir={folder / 'head'}"]
        head = ab.side_launch(trees, HEAD, head_args, env, [])
        config = SideConfig(
            side=HEAD,
            fd=-1,
            mode=setup.mode,
            base_root=str(setup.good_root),
            head_root=str(root),
            label=setup.good_label,
            ref=setup.good_label,
            cpus=setup.cpus,
        )
        log = folder / "head.log"
        with log.open("w") as head_out:
            codes = ab.run_pair(base, head, config, base_log=folder / "good.log", head_out=head_out)
    finally:
        done_with(setup, root)
    return _read_pair(sha, rounds, codes, report, log, time.perf_counter() - start)


def _read_pair(
    sha: str, rounds: int, codes: tuple[int, int], report: Path, log: Path, seconds: float
) -> Paired:
    base_code, head_code = codes
    tests = {str(t["nodeid"]): t for t in ab._tests(report)}
    traces = {
        nodeid: (Path(t["paired_trace"]), Path(t["trace"]))
        for nodeid, t in tests.items()
        if t.get("trace") and t.get("paired_trace")
    }
    broken = ""
    if base_code not in ab.SIDE_RAN:
        broken = f"GOOD's side exited {base_code}"
    elif head_code not in ab.SIDE_RAN or not tests:
        broken = f"pytest exited {head_code}: {last_line(log)}"
    return Paired(
        sha=sha, rounds=rounds, tests=tests, traces=traces, seconds=seconds, broken=broken, log=log
    )


def last_line(log: Path) -> str:
    """The last telling line of a pytest log (its error, or its closing line)."""
    try:
        lines = [ln.strip() for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return "no output"
    errors = [ln for ln in lines if ln.startswith(("E ", "ERROR", "error:"))]
    return (errors or lines or ["no output"])[-1][:200]


def census(setup: Setup, sha: str) -> Census:
    """``sha``'s work census: one pytest process saving a baseline of the fewest rounds."""
    folder = setup.work / "census" / sha[:12]
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    start = time.perf_counter()
    root = checked_out(setup, sha)
    log = folder / "pytest.log"
    try:
        env = {**_environ(setup), "PYTHONPATH": ab.import_path(root, setup.environ)}
        command = [
            sys.executable,
            "-m",
            "pytest",
            *setup.pytest_args,
            *_QUIET,
            "--tprof",
            "--tprof-save",
            f"--tprof-baseline-dir={folder / 'saved'}",
            f"--tprof-rounds={CENSUS_ROUNDS}",
            "--tprof-warmup=1",
            "--no-tprof-traces",
            "-p",
            "no:cacheprovider",
        ]
        with log.open("w") as out:
            code = subprocess.run(
                command,
                cwd=root / setup.where,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                check=False,
            ).returncode
    finally:
        done_with(setup, root)
    work = _saved_work(folder / "saved")
    seconds = time.perf_counter() - start
    broken = "" if code in ab.SIDE_RAN and work else f"pytest exited {code}: {last_line(log)}"
    return Census(sha=sha, work=work, seconds=seconds, broken=broken)


def _saved_work(folder: Path) -> dict[str, WorkTable]:
    found: dict[str, WorkTable] = {}
    if not folder.is_dir():
        return found
    for path in paths.iter_baselines(folder):
        try:
            saved = baselines.load_baseline(path)
        except TprofError:
            continue
        if saved.work is not None:
            found[saved.nodeid] = saved.work
    return found


def rounds_of(table: OpTable, family: str, op: str | None) -> np.ndarray | None:
    """Per-round µs of ``op`` in ``family`` (``cpu``: self CPU time, ``cuda``: self device
    time), or of the family's total without one (``host``: the time outside any op)."""
    values = table.self_device_us if is_device(family) else table.self_cpu_us
    if op is not None:
        index = table.index().get(op)
        return None if index is None else np.asarray(values[index], dtype=float)
    if family == "host":
        return np.asarray(table.host_us, dtype=float)
    mine = [i for i, name in enumerate(table.names) if not name.startswith(_NOT_OPS)]
    return np.asarray(values[mine].sum(axis=0), dtype=float)


_NOT_OPS = ("ProfilerStep#", "tprof::")


def commit_facts(top: Path, sha: str) -> dict[str, Any]:
    """A commit's subject, author, author date and ``git show --stat`` summary."""
    text = git(top, ["show", "-s", "--format=%s%n%an%n%aI", sha])
    subject, author, date = ([*text.splitlines(), "", "", ""])[:3]
    stat = git(top, ["show", "--stat", "--format=", sha]).splitlines()
    return {
        "sha": sha,
        "subject": subject,
        "author": author,
        "date": date,
        "stat": [line.strip() for line in stat if line.strip()][-12:],
    }


def git(top: Path, args: Sequence[str]) -> str:
    return ab._git(list(args), top)


def ancestry(top: Path, good: str, bad: str) -> list[str]:
    """The commits after GOOD up to BAD, oldest first, along BAD's first parents."""
    listed = git(
        top, ["rev-list", "--reverse", "--first-parent", "--ancestry-path", f"{good}..{bad}"]
    )
    return listed.split()


def is_ancestor(top: Path, good: str, bad: str) -> bool:
    done = subprocess.run(
        ["git", "merge-base", "--is-ancestor", good, bad], cwd=top, capture_output=True, check=False
    )
    return done.returncode == 0


def keep_traces(pair: Paired, nodeid: str, into: Path) -> tuple[str, str] | None:
    """The trace pair of ``nodeid`` copied where it outlives the run; their new paths."""
    found = pair.traces.get(nodeid)
    if found is None:
        return None
    into.mkdir(parents=True, exist_ok=True)
    kept = []
    for side, path in zip(("good", pair.sha[:10]), found, strict=True):
        target = into / f"{side}-{path.name}"
        try:
            shutil.copyfile(path, target)
        except OSError:
            return None
        kept.append(str(target))
    return kept[0], kept[1]


def environ() -> dict[str, str]:
    return dict(os.environ)
