"""``tprof ab REF [pytest args…]``: the base commit measured beside the working tree, in the
same job, so both sides see the same machine (docs/design.md §18).

REF is checked out in a temporary git worktree.  Two pytest processes run the selected
tests with ``--tprof``: the base side in REF's tree, the head side in the working tree.  Each
common test's measured rounds take turns between them (:mod:`tprof_engine.pairing`), and the
head side judges its rounds against the base's, pair by pair, and writes the run's verdicts,
reports and traces as a compare run does.  The exit status is the head's pytest's.

Each side imports the project from its own tree: the side's root (and its ``src/``) go first
on ``PYTHONPATH``, ahead of an editable install.  A side that still loads a module from the
other side's tree (a compiled extension built only in the working tree, a package installed
from it) stops with a message naming the module (:func:`foreign_modules`).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TextIO

from tprof_engine.decide import policy
from tprof_engine.model.errors import TprofError
from tprof_engine.pairing import ALTERNATE, BASE, DUET, ENV, HEAD, MODES, SideConfig
from tprof_engine.store.files import write_atomic

UNJUDGED = ("pass", "warn", "fail", "retry")  # when a test's timing was never judged
BASE_TRACES = ".tprof/ab-base-traces"  # the base side's traces, in the working tree
# The run's own files (the head's JSON report without --json, the base side's log and JUnit
# file, a retry's report), in the working tree: every path the run prints is still there once
# it ends (the base's temporary worktree is not).
OWN_FILES = ".tprof/ab"


@dataclass(frozen=True, slots=True, kw_only=True)
class Trees:
    """The two trees: the base checked out at ``sha`` in a worktree, the head the working
    tree; ``where`` is the folder pytest was started from, relative to the head's root."""

    base_root: Path
    head_root: Path
    sha: str
    label: str
    where: Path = Path()


@dataclass(frozen=True, slots=True, kw_only=True)
class Launch:
    """One side's pytest process: its command, folder and environment."""

    command: list[str]
    cwd: Path
    env: Mapping[str, str]


def _git(args: Sequence[str], cwd: Path) -> str:
    try:
        done = subprocess.run(
            ["git", *args], cwd=cwd, capture_output=True, text=True, check=False, timeout=300
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise TprofError(f"tprof ab needs git: {exc}") from exc
    if done.returncode != 0:
        said = (done.stderr or done.stdout).strip().splitlines()
        raise TprofError(f"git {' '.join(args)}: {said[-1] if said else 'failed'}")
    return done.stdout.strip()


def resolve(ref: str, cwd: Path, command: str = "tprof ab") -> tuple[Path, str]:
    """The repository's top folder and REF's commit, each a clear error when missing."""
    try:
        top = Path(_git(["rev-parse", "--show-toplevel"], cwd))
    except TprofError as exc:
        raise TprofError(f"{command} runs inside a git repository ({exc})") from exc
    try:
        sha = _git(["rev-parse", "--verify", f"{ref}^{{commit}}"], top)
    except TprofError as exc:
        raise TprofError(
            f"no commit {ref!r} in {top}: name a branch, tag or commit (in CI, fetch it "
            "first: actions/checkout with fetch-depth: 0)"
        ) from exc
    return top, sha


def add_worktree(top: Path, sha: str, folder: Path) -> Path:
    """Commit ``sha`` checked out (detached) in a new worktree at ``folder``."""
    _git(["worktree", "add", "--detach", "--quiet", str(folder), sha], top)
    return folder


def check_out(ref: str, cwd: Path, into: Path) -> Trees:
    """REF checked out (detached) in a new worktree under ``into``."""
    top, sha = resolve(ref, cwd)
    return Trees(
        base_root=add_worktree(top, sha, into / "base"),
        head_root=top,
        sha=sha,
        label=f"{ref} at {sha[:10]}",
        where=cwd.resolve().relative_to(top.resolve()),
    )


def remove_worktree(top: Path, folder: Path) -> None:
    """A worktree removed (its folder too, if git could not)."""
    try:
        _git(["worktree", "remove", "--force", str(folder)], top)
    except TprofError:
        shutil.rmtree(folder, ignore_errors=True)
        _git(["worktree", "prune"], top)


def remove(trees: Trees) -> None:
    """The base's worktree removed (its folder too, if git could not)."""
    remove_worktree(trees.head_root, trees.base_root)


def import_path(root: Path, environ: Mapping[str, str]) -> str:
    """``PYTHONPATH`` for a side: its root and its ``src/`` first, then what was set."""
    first = [str(root / "src")] if (root / "src").is_dir() else []
    rest = [p for p in environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return os.pathsep.join([*first, str(root), *rest])


def foreign_modules(
    modules: Mapping[str, Any], own_root: str, other_root: str
) -> list[tuple[str, str]]:
    """Modules loaded from the other side's tree (and not from this side's): (name, file)."""
    other, own = Path(other_root).resolve(), Path(own_root).resolve()
    found = []
    for name, module in list(modules.items()):
        file = getattr(module, "__file__", None)
        if not file:
            continue
        path = Path(file).resolve()
        if path.is_relative_to(other) and not path.is_relative_to(own):
            found.append((name, str(path)))
    return sorted(found)


def foreign_message(side: str, found: Sequence[tuple[str, str]]) -> str:
    """Why a side stops: it would measure the other side's code."""
    shown = ", ".join(f"{name} ({file})" for name, file in found[:5])
    more = f" and {len(found) - 5} more" if len(found) > 5 else ""
    return (
        f"tprof ab: the {side} side loaded modules from the other side's tree: {shown}{more}. "
        "Each side must import the project from its own tree: a `src/` layout or the "
        "repository root works (both go first on PYTHONPATH); a compiled extension, or a "
        "package installed from one tree (not editable), does not: build it into both trees "
        "or run `pytest --tprof` with saved baselines instead"
    )


def side_launch(
    trees: Trees, side: str, args: Sequence[str], environ: Mapping[str, str], extra: Sequence[str]
) -> Launch:
    """A side's pytest process: the user's arguments and ``extra`` (the base side's own
    trace folder and JUnit file), in its tree, importing from it."""
    root = trees.base_root if side == BASE else trees.head_root
    env = {**environ, "PYTHONPATH": import_path(root, environ)}
    if side == BASE:  # the head writes the step summary
        env.pop("GITHUB_STEP_SUMMARY", None)
    command = [sys.executable, "-m", "pytest", *args, "--tprof", "-p", "no:cacheprovider", *extra]
    return Launch(command=command, cwd=root / trees.where, env=env)


def run_pair(
    base: Launch,
    head: Launch,
    config: SideConfig,
    *,
    base_log: Path,
    head_out: Any = None,
    timeout: float | None = None,
) -> tuple[int, int]:
    """Both sides run, joined by a socket pair; their exit statuses (base, head).  The base
    side's output goes to ``base_log``; the head's to ``head_out`` (None: this process's)."""
    a, b = socket.socketpair()
    sides = (
        (base, replace(config, side=BASE, fd=a.fileno())),
        (head, replace(config, side=HEAD, fd=b.fileno())),
    )
    procs = []
    with base_log.open("w") as log:
        try:
            for (launch, cfg), out in zip(sides, (log, head_out), strict=True):
                env = {**launch.env, ENV: cfg.to_env()}
                procs.append(
                    subprocess.Popen(
                        launch.command,
                        cwd=launch.cwd,
                        env=env,
                        pass_fds=(cfg.fd,),
                        stdout=out,
                        stderr=subprocess.STDOUT if out is not None else None,
                    )
                )
                _pin(procs[-1].pid, config.cpus)
        finally:
            a.close()
            b.close()
        try:
            codes = [p.wait(timeout=timeout) for p in reversed(procs)]
        except subprocess.TimeoutExpired:
            for p in procs:
                p.kill()
            return -1, -1
    return codes[1], codes[0]


def _pin(pid: int, cpus: Sequence[int]) -> None:
    """A side's process on the pair's CPUs as it starts, before it starts a thread (threads
    inherit the CPUs of the thread that starts them); nothing where that can't be done."""
    if cpus and hasattr(os, "sched_setaffinity"):
        with contextlib.suppress(OSError):  # it may have exited already
            os.sched_setaffinity(pid, set(cpus))


def default_cpus(mode: str) -> tuple[int, ...]:
    """The pair's CPUs unless given: the last one this process may use (the last two in duet),
    away from CPU 0, which takes most interrupts."""
    if not hasattr(os, "sched_getaffinity"):
        return ()
    allowed = sorted(os.sched_getaffinity(0))
    return tuple(allowed[-2:] if mode == DUET else allowed[-1:])


def cpu_list(text: str) -> tuple[int, ...]:
    """``--cpus``: "3", "2,3" or "0-3"."""
    found: list[int] = []
    try:
        for part in text.split(","):
            low, _, high = part.partition("-")
            found += range(int(low), int(high or low) + 1)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a CPU list like 3, 2,3 or 0-3 (got {text!r})") from None
    if not found:
        raise argparse.ArgumentTypeError(f"a CPU list like 3, 2,3 or 0-3 (got {text!r})")
    return tuple(found)


def _base_extra(trees: Trees, out: Path) -> list[str]:
    return [
        f"--tprof-trace-dir={trees.head_root / BASE_TRACES}",
        f"--junitxml={out / 'base-junit.xml'}",
    ]


def is_xdist(args: Sequence[str]) -> bool:
    """Whether pytest arguments ask for xdist's workers (``tprof ab`` runs each side serially)."""
    return any(a.startswith(("-n", "--numprocesses", "--dist")) for a in args)


def command(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """``tprof ab``: run both sides, then say what the head's run left unjudged."""
    pytest_args = [a for a in args.pytest_args if a != "--"]
    if is_xdist(pytest_args):
        raise TprofError(
            "tprof ab runs each side serially: drop -n/--numprocesses/--dist "
            "(given after REF, on the command line)"
        )
    if any(a.startswith(("--tprof-save", "--tprof-reset")) for a in pytest_args):
        raise TprofError(
            "tprof ab compares two trees and stores nothing: record baselines "
            "with pytest --tprof-save"
        )
    with tempfile.TemporaryDirectory(prefix="tprof-ab-") as tmp:
        trees = check_out(args.ref, Path.cwd(), Path(tmp))
        work = trees.head_root / OWN_FILES
        try:
            work.mkdir(parents=True, exist_ok=True)
            report = Path(args.json).resolve() if args.json else work / "head.json"
            config = SideConfig(
                side=HEAD,
                fd=-1,
                mode=args.mode,
                base_root=str(trees.base_root),
                head_root=str(trees.head_root),
                label=trees.label,
                ref=args.ref,
                cpus=args.cpus or default_cpus(args.mode),
            )
            head_args = [*pytest_args, f"--tprof-json={report}"]
            base = side_launch(trees, BASE, pytest_args, os.environ, _base_extra(trees, work))
            head = side_launch(trees, HEAD, head_args, os.environ, [])
            cpus = ",".join(map(str, config.cpus)) or "any"
            print(
                f"tprof ab: head (working tree) against base {trees.label}, "
                f"rounds {config.mode}, CPUs {cpus}",
                file=out,
                flush=True,
            )
            base_code, head_code = run_pair(base, head, config, base_log=work / "base.log")
            if args.if_unjudged == "retry" and base_code in SIDE_RAN:
                again = (report, work / "retry.json")
                head_code = _retried(config, (base, head), head_code, work, again, out)
            return _outcome(args, (base_code, head_code), work, report, (out, err))
        finally:
            remove(trees)


def _retried(
    config: SideConfig,
    sides: tuple[Launch, Launch],
    head_code: int,
    work: Path,
    reports: tuple[Path, Path],
    out: TextIO,
) -> int:
    """``--if-unjudged retry``: the tests whose timing was not judged (inconclusive) run once
    more, paired afresh, and their verdicts replace the first ones in the report (the first of
    ``reports``; the second is the retry's own); the head's exit status with theirs."""
    report, retry = reports
    again = [
        t["nodeid"]
        for t in _tests(report)
        if t.get("verdict") == "inconclusive" and not timing_judged(t)
    ]
    if not again:
        return head_code
    print(
        f"tprof ab: timing not judged for {len(again)} test(s); running them once more",
        file=out,
        flush=True,
    )
    base, head = sides
    head = replace(head, command=[*head.command, f"--tprof-json={retry}"])
    _, code = run_pair(base, head, replace(config, only=tuple(again)), base_log=work / "retry.log")
    merged = {t["nodeid"]: t for t in _tests(retry)}
    doc = json.loads(report.read_text())
    doc["tests"] = [merged.get(t["nodeid"], t) for t in doc.get("tests", [])]
    write_atomic(report, json.dumps(doc, indent=2, sort_keys=True) + "\n")
    return head_code if head_code not in (0, 5) else code


def _tests(report: Path) -> list[dict[str, Any]]:
    try:
        found: list[dict[str, Any]] = json.loads(report.read_text()).get("tests", [])
    except (OSError, ValueError, AttributeError):
        return []
    return found


def _outcome(
    args: argparse.Namespace,
    codes: tuple[int, int],
    work: Path,
    report: Path,
    streams: tuple[TextIO, TextIO],
) -> int:
    """The exit status (:func:`exit_status`), a base side that could not run named, and tests
    whose timing was never judged handled as ``--if-unjudged`` says."""
    (base_code, head_code), (out, err) = codes, streams
    if base_code not in SIDE_RAN:
        log = work / "base.log"
        tail = log.read_text(errors="replace").strip().splitlines()[-15:]
        print(f"tprof ab: the base side's pytest exited {base_code} (its log: {log}):", file=err)
        print("\n".join("  " + line for line in tail), file=err)
        return exit_status(base_code, head_code)
    unconfirmed = unconfirmed_tests(report)
    if unconfirmed:
        print(
            f"tprof ab: note: timing judged slower, not confirmed by a fresh pair, for "
            f"{len(unconfirmed)} test(s): " + "; ".join(unconfirmed[:5]),
            file=out,
        )
    unjudged = unjudged_tests(report)
    if unjudged:
        word = {"pass": "note", "fail": "error"}.get(args.if_unjudged, "warning")
        print(
            f"tprof ab: {word}: timing was not judged for {len(unjudged)} test(s): "
            + "; ".join(unjudged[:5]),
            file=out,
        )
        if args.if_unjudged == "fail" and head_code == 0:
            return 1
    return exit_status(base_code, head_code)


SIDE_RAN = (0, 1, 5)  # a side's pytest ran its tests: passed, failed, or collected none


def exit_status(base_code: int, head_code: int) -> int:
    """``tprof ab``'s exit status (docs/ab.md): 1 when a head test regressed or failed; 2 when
    a side could not run (a usage error, an option pytest refused, a collection error, an
    internal error, a timeout); else the head's pytest's (0, or 5: no test collected)."""
    if head_code == 1:
        return 1
    if head_code not in SIDE_RAN or base_code not in SIDE_RAN:
        return 2
    return head_code


def unjudged_tests(report: Path) -> list[str]:
    """Tests of a head report whose timing was not judged: "nodeid (why)"."""
    return [_said(t) for t in _tests(report) if not timing_judged(t)]


def unconfirmed_tests(report: Path) -> list[str]:
    """Tests of a head report whose timing was judged slower and not confirmed by a fresh
    pair (inconclusive, and judged): "nodeid (why)"."""
    return [_said(t) for t in _tests(report) if _unconfirmed(t)]


def _said(test: Mapping[str, Any]) -> str:
    why = (str(test.get("reason", "")).splitlines() or [""])[0]
    return f"{test['nodeid']} ({test.get('verdict')}: {why})"


def _unconfirmed(test: Mapping[str, Any]) -> bool:
    return test.get("verdict") == "inconclusive" and policy.not_confirmed(
        str(test.get("reason", ""))
    )


def timing_judged(test: Mapping[str, Any]) -> bool:
    """Whether a report's test had its timing judged: compared, and a verdict other than
    inconclusive (one judged slower and not confirmed was judged)."""
    if _unconfirmed(test):
        return True
    return bool(test.get("timing_compared", True)) and test.get("verdict") not in (
        "inconclusive",
        "error",
        "no-baseline",
        "incomparable",
    )


def add_parser(sub: Any) -> None:
    ab = sub.add_parser(
        "ab",
        help="measure the tests at a base commit beside the working tree, in one job",
        description="Check REF out in a temporary worktree and run the selected tests with "
        "--tprof from both trees at once, their measured rounds taking turns; the working "
        "tree's rounds are judged against REF's pair by pair.  Arguments after REF (or after "
        "--) go to pytest on both sides.",
        epilog="Exit status: 1 when a test regressed or failed on the head side; 2 when a "
        "side could not run (a usage error, an option pytest refused, a collection error); "
        "else the head's pytest's (0, or 5: no test collected).  tprof ab's options go "
        "before REF, pytest's after it.",
    )
    ab.add_argument("ref", metavar="REF", help="the base: a branch, tag or commit")
    ab.add_argument("pytest_args", nargs=argparse.REMAINDER, metavar="PYTEST_ARGS")
    ab.add_argument(
        "--mode",
        choices=MODES,
        default=ALTERNATE,
        help="the sides' rounds one after the other (default) or at once",
    )
    ab.add_argument(
        "--if-unjudged",
        choices=UNJUDGED,
        default="warn",
        help="a test whose timing was never judged (a starved machine): pass, warn "
        "(default), fail the run, or retry it once (paired afresh), then warn",
    )
    ab.add_argument("--json", metavar="PATH", help="also write the head's JSON report here")
    ab.add_argument(
        "--cpus",
        type=cpu_list,
        metavar="LIST",
        help="the CPUs both sides run on, e.g. 3 or 2-3 (default: the last one; the "
        "last two in duet mode); give as many as --tprof-threads uses",
    )
    ab.set_defaults(func=command, parser=ab)
