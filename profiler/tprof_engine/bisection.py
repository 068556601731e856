"""``tprof bisect GOOD BAD [-- PYTEST ARGS]``: the commit that made a test's op slower, or its
work larger, found by measuring commits between GOOD and BAD (docs/bisect.md).

It is another front over ``tprof ab``'s machinery (:mod:`.bisect_measure`): GOOD is checked
out once, each commit measured in a worktree of its own.  First GOOD is measured against BAD:
the census of each (exact) names the tests whose work regressed, a paired run the ops whose
timing did (an op whose work moved is the work bisection's).  Then each is bisected
(:mod:`.bisect_search`): a work regression by the census alone, one process per commit; a
timing regression by paired runs against GOOD, each commit classed by where its effect lies
between GOOD's and BAD's, measured again with twice the rounds when unsure, then skipped.
A commit that fails to import or build, or whose test errors, is skipped and listed.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from tprof_engine import ab, bisect_report
from tprof_engine import bisect_measure as measure
from tprof_engine.bisect_search import (
    BAD,
    GOOD,
    SKIP,
    UNSURE,
    Effect,
    Search,
    Word,
    classify,
    paired_effect,
)
from tprof_engine.decide.gates.work import judge_work
from tprof_engine.model.errors import TprofError
from tprof_engine.pairing import ALTERNATE, MODES

OWN_FILES = ".tprof/bisect"  # the run's report and the culprits' trace pairs, in the top folder
EXIT_FOUND, EXIT_UNPINNED, EXIT_ERROR = 0, 1, 2


@dataclass(frozen=True, slots=True, kw_only=True)
class Target:
    """One regression to hunt: a test's op (or family total) slower, or its work larger."""

    nodeid: str
    kind: str  # "timing" or "work"
    family: str = ""
    op: str | None = None
    bad: Effect | None = None  # timing: GOOD → BAD
    said: str = ""  # work: GOOD → BAD, in a line

    def name(self) -> str:
        if self.kind == "work":
            return f"{self.nodeid}: work ({self.said})"
        what = self.op or f"{self.family} total"
        return f"{self.nodeid}: {what} ({self.family}) {self.bad.text() if self.bad else ''}"


@dataclass(slots=True, kw_only=True)
class Step:
    """One commit classed for one target: its word, effect, rounds, seconds and why."""

    sha: str
    word: Word
    measured: bool = True
    effect: Effect | None = None
    rounds: int = 0
    seconds: float = 0.0
    note: str = ""


@dataclass(slots=True, kw_only=True)
class Hunt:
    target: Target
    search: Search
    steps: list[Step] = field(default_factory=list)


@dataclass(slots=True)
class Run:
    """One bisection run: its setup, the commits, and every measurement taken (a commit
    measured for one target is not measured again for another)."""

    setup: measure.Setup
    commits: list[str]
    rounds: int
    out: TextIO
    pairs: dict[tuple[str, int], measure.Paired] = field(default_factory=dict)
    censuses: dict[str, measure.Census] = field(default_factory=dict)
    broken: dict[str, str] = field(default_factory=dict)

    def pair(self, sha: str, rounds: int) -> measure.Paired:
        if (sha, rounds) not in self.pairs:
            self.pairs[sha, rounds] = measure.paired(self.setup, sha, rounds)
        found = self.pairs[sha, rounds]
        if found.broken:
            self.broken.setdefault(sha, found.broken)
        return found

    def census(self, sha: str) -> measure.Census:
        if sha not in self.censuses:
            self.censuses[sha] = measure.census(self.setup, sha)
        found = self.censuses[sha]
        if found.broken:
            self.broken.setdefault(sha, found.broken)
        return found

    def say(self, text: str) -> None:
        print(text, file=self.out, flush=True)


# ---------------------------------------------------------------------------- what to hunt


def work_targets(run: Run, bad: str) -> tuple[list[Target], dict[str, set[str]]]:
    """The tests whose work regressed from GOOD to BAD, and each test's ops whose work moved."""
    good_c, bad_c = run.census(run.setup.good_sha), run.census(bad)
    for sha, c in ((run.setup.good_sha, good_c), (bad, bad_c)):
        if c.broken:
            end = "GOOD" if sha == run.setup.good_sha else "BAD"
            raise TprofError(f"{end} ({sha[:10]}) could not be measured: {c.broken}")
    targets, moved = [], {}
    for nodeid in sorted(set(good_c.work) & set(bad_c.work)):
        verdict = judge_work(good_c.work[nodeid], bad_c.work[nodeid])
        moved[nodeid] = {r.op for r in verdict.rows if r.status not in ("unchanged", "varies")}
        if verdict.regressed:
            targets.append(Target(nodeid=nodeid, kind="work", said=verdict.headline()))
    return targets, moved


def timing_targets(
    run: Run, bad: str, moved: dict[str, set[str]], args: argparse.Namespace
) -> list[Target]:
    """The ops (or family totals) whose timing regressed from GOOD to BAD, paired, and whose
    work did not move: each with its effect from the trace pair, its interval above what
    the suspect must show (:func:`_suspects`)."""
    pair = run.pair(bad, run.rounds)
    if pair.broken:
        raise TprofError(f"BAD ({bad[:10]}) could not be measured against GOOD: {pair.broken}")
    targets: list[Target] = []
    for nodeid, test in sorted(pair.tests.items()):
        tables = pair.tables(nodeid)
        if tables is None:
            continue
        for family, op, least in _suspects(test, moved.get(nodeid, set()), args):
            before, after = (measure.rounds_of(t, family, op) for t in tables)
            effect = None if before is None or after is None else paired_effect(before, after)
            if effect is not None and effect.low > least:
                targets.append(
                    Target(nodeid=nodeid, kind="timing", family=family, op=op, bad=effect)
                )
    return targets


MATERIAL = 0.05  # an op of this share of its family's round or more is a suspect of its own


def _suspects(
    test: Any, moved: set[str], args: argparse.Namespace
) -> list[tuple[str, str | None, float]]:
    """(family, op, least) to hunt in one test of BAD's paired report, ``least`` the change
    its interval must lie above: the ops the rule judged regressed (or ``--op`` wherever it
    ran), above no change; the other material ops with the same calls, above their floor;
    none whose work moved.  A regressed family's total when no op is left and no work moved."""
    found: list[tuple[str, str | None, float]] = []
    for o in test.get("ops", []):
        if not _wanted(o["family"], args) or o["op"] in moved:
            continue
        if args.op and o["op"] != args.op:
            continue
        same_calls = o.get("calls_baseline") == o.get("calls_current")
        if args.op or o["verdict"] == "regressed":
            found.append((str(o["family"]), str(o["op"]), 0.0))
        elif same_calls and (o.get("share") or 0.0) >= MATERIAL:
            found.append((str(o["family"]), str(o["op"]), float(o["floor_pct"] or 0) / 100))
    if found or args.op or moved:
        return found
    families = [f for f in test.get("families", []) if _wanted(f["family"], args)]
    return [(f["family"], None, 0.0) for f in families if f.get("timing_regressed")]


def _wanted(family: str, args: argparse.Namespace) -> bool:
    return not args.family or family in args.family


# ---------------------------------------------------------------------------- the searches


def bisect(run: Run, target: Target) -> Hunt:
    """One target's bisection: commits classed until the first bad one is known (or only
    skipped ones stand before it)."""
    hunt = Hunt(target=target, search=Search(run.commits))
    while (index := hunt.search.next()) is not None:
        sha = run.commits[index]
        steps = _class_work(run, target, sha) if target.kind == "work" else []
        if target.kind == "timing":
            steps = _class_timing(run, target, sha)
        hunt.steps += steps
        hunt.search.record(index, steps[-1].word)
        commits = len({s.sha for s in hunt.steps})
        for step in steps:
            run.say(bisect_report.step_line(commits, step))
    return hunt


def _class_work(run: Run, target: Target, sha: str) -> list[Step]:
    if sha in run.broken and sha not in run.censuses:
        return [Step(sha=sha, word=SKIP, measured=False, note=f"known broken: {run.broken[sha]}")]
    c = run.census(sha)
    work = c.work.get(target.nodeid)
    if c.broken or work is None:
        why = c.broken or "the test left no census"
        return [Step(sha=sha, word=SKIP, seconds=c.seconds, note=why)]
    verdict = judge_work(run.census(run.setup.good_sha).work[target.nodeid], work)
    word: Word = BAD if verdict.regressed else GOOD
    return [Step(sha=sha, word=word, seconds=c.seconds, note=f"work {verdict.verdict}")]


def _class_timing(run: Run, target: Target, sha: str) -> list[Step]:
    """Paired against GOOD; unsure → again with twice the rounds → skipped."""
    if sha in run.broken and not any(s == sha for s, _ in run.pairs):
        return [Step(sha=sha, word=SKIP, measured=False, note=f"known broken: {run.broken[sha]}")]
    steps: list[Step] = []
    for rounds in (run.rounds, 2 * run.rounds):
        step = _timed(run, target, sha, rounds)
        steps.append(step)
        if step.word != UNSURE:
            return steps
    steps[-1].note = "unsure twice: skipped"
    steps.append(Step(sha=sha, word=SKIP, measured=False, note="its effect stayed unsure"))
    return steps


def _timed(run: Run, target: Target, sha: str, rounds: int) -> Step:
    pair = run.pair(sha, rounds)
    step = Step(sha=sha, word=SKIP, rounds=rounds, seconds=pair.seconds)
    test = pair.tests.get(target.nodeid)
    if pair.broken or test is None or test.get("verdict") == "error":
        step.note = pair.broken or ("the test errored" if test else "the test did not run")
        return step
    tables = pair.tables(target.nodeid)
    before_after = [measure.rounds_of(t, target.family, target.op) for t in tables or ()]
    if len(before_after) != 2 or before_after[0] is None or before_after[1] is None:
        step.note = "no rounds of it in the trace pair"
        return step
    step.effect = paired_effect(before_after[0], before_after[1])
    if step.effect is not None and target.bad is not None:
        step.word = classify(step.effect, target.bad)
    return step


# ---------------------------------------------------------------------------- the command


def _check(args: argparse.Namespace) -> tuple[Path, str, str, list[str]]:
    """The repository's top, GOOD's and BAD's commits and the commits between, or an error
    naming what is wrong and what to do."""
    top, good = ab.resolve(args.good, Path.cwd(), command="tprof bisect")
    _, bad = ab.resolve(args.bad, Path.cwd(), command="tprof bisect")
    if good == bad:
        raise TprofError(f"GOOD ({args.good}) and BAD ({args.bad}) are the same commit")
    if not measure.is_ancestor(top, good, bad):
        raise TprofError(
            f"GOOD ({args.good} at {good[:10]}) is not an ancestor of BAD ({args.bad} at "
            f"{bad[:10]}): name an older commit of BAD's history as GOOD (git merge-base "
            f"{args.good} {args.bad} finds one)"
        )
    commits = measure.ancestry(top, good, bad)
    if not commits or commits[-1] != bad:
        raise TprofError(f"no first-parent path from {args.good} to {args.bad}")
    return top, good, bad, commits


def command(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """``tprof bisect``: hunt, bisect each regression, report."""
    pytest_args = tuple(a for a in args.pytest_args if a != "--")
    if ab.is_xdist(pytest_args):
        raise TprofError("tprof bisect runs each commit serially: drop -n/--numprocesses/--dist")
    top, good, bad, commits = _check(args)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="tprof-bisect-") as tmp:
        setup = measure.Setup(
            top=top,
            good_sha=good,
            good_label=f"{args.good} at {good[:10]}",
            good_root=ab.add_worktree(top, good, Path(tmp) / "good"),
            where=Path.cwd().resolve().relative_to(top.resolve()),
            pytest_args=pytest_args,
            work=Path(tmp),
            cpus=args.cpus or ab.default_cpus(args.mode),
            mode=args.mode,
            environ=measure.environ(),
        )
        try:
            run = Run(setup, commits, args.rounds, out)
            return _hunt_and_report(run, args, bad, start)
        finally:
            ab.remove_worktree(top, setup.good_root)


def _hunt_and_report(run: Run, args: argparse.Namespace, bad: str, start: float) -> int:
    run.say(
        f"tprof bisect: {len(run.commits)} commits after {run.setup.good_label} up to "
        f"{args.bad} at {bad[:10]}; first GOOD against BAD"
    )
    work, moved = work_targets(run, bad) if not args.op else ([], {})
    targets = [*work, *timing_targets(run, bad, moved, args)]
    if not targets:
        run.say("tprof bisect: nothing regressed from GOOD to BAD: nothing to bisect")
    for t in targets:
        run.say(f"  hunting {t.name()}")
    hunts = []
    for t in targets:
        run.say(f"tprof bisect: {t.name()}")
        hunts.append(bisect(run, t))
    doc = bisect_report.document(run, hunts, bad, time.perf_counter() - start)
    bisect_report.write_all(doc, run.setup.top / OWN_FILES, args, run.out)
    return EXIT_FOUND if all(h.search.found for h in hunts) else EXIT_UNPINNED


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "bisect",
        help="find the commit between GOOD and BAD that made a test's op slower or its work larger",
        description="Measure GOOD against BAD (paired, and their work census), then bisect "
        "each regression found: work by the census alone, timing by paired runs against "
        "GOOD.  Arguments after BAD (or after --) go to pytest: select one test, or a few.",
        epilog="Exit status: 0 every regression pinned to one commit (or nothing regressed); "
        "1 skipped commits left a range; 2 a usage error or an end that could not run.",
    )
    p.add_argument("good", metavar="GOOD", help="a commit without the regression")
    p.add_argument("bad", metavar="BAD", help="a later commit with it (BAD's history holds GOOD)")
    p.add_argument("pytest_args", nargs=argparse.REMAINDER, metavar="PYTEST_ARGS")
    p.add_argument("--op", metavar="NAME", help="hunt this op's timing alone (e.g. aten::addmm)")
    p.add_argument(
        "--family",
        action="append",
        metavar="NAME",
        help="hunt these families only (cpu, cuda, host)",
    )
    p.add_argument(
        "--rounds",
        type=_rounds,
        default=20,
        metavar="N",
        help="paired rounds a step (default 20; an unsure step runs twice as many)",
    )
    p.add_argument("--mode", choices=MODES, default=ALTERNATE, help="as tprof ab's")
    p.add_argument("--cpus", type=ab.cpu_list, metavar="LIST", help="as tprof ab's")
    p.add_argument("--json", metavar="PATH", help="write the result as JSON here")
    p.add_argument(
        "--markdown",
        metavar="PATH",
        help="write a Markdown summary here (also appended to $GITHUB_STEP_SUMMARY when set)",
    )
    p.set_defaults(func=command, parser=p)


def _rounds(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 6:
        raise argparse.ArgumentTypeError(f"a whole number of rounds, 6 or more (got {text!r})")
    return n
