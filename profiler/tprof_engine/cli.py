"""The ``tprof`` command: show, diff, render and merge stored baselines, traces and reports.

``tprof diff`` judges with the same engine as the pytest plugin (:mod:`tprof_engine.judge`),
so a comparison made in CI can be repeated from the shell on the files it left behind.
Exit status: 0 nothing regressed, 1 something regressed, 2 a usage error or unreadable input.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from tprof_engine import ab, bisection, window
from tprof_engine.decide import judge as judging
from tprof_engine.decide.outcome import outcome_of
from tprof_engine.decide.timing import busy
from tprof_engine.decide.timing.rule import Rule
from tprof_engine.diff_sides import Unjudged, diff_report, diff_steps, diff_summary, pair_folders
from tprof_engine.model.errors import ConfigError, TprofError
from tprof_engine.model.limits import FLOOR_LIMIT
from tprof_engine.model.results import ProfiledTest, Source
from tprof_engine.model.verdicts import CHANGED, REGRESSED, TestVerdict
from tprof_engine.render.report import failure_text, summary_line
from tprof_engine.render.show import DEFAULT_LIMIT, SORT_KEYS, show_lines
from tprof_engine.sources import (
    Pairing,
    load_folder,
    load_report,
    load_source,
    recorded_in,
)
from tprof_engine.store import baselines, files, merge, paths, reading, schema

EXIT_OK = 0
EXIT_REGRESSED = 1
EXIT_ERROR = 2


def judge(baseline: Source, current: Source, rule: Rule) -> TestVerdict:
    """The verdict on ``current``'s last table against all of ``baseline``'s tables.

    The plugin's judging path (:func:`tprof_engine.judge.judge`), on what the files hold.
    """
    notes = []
    if len(current.tables) > 1:
        notes.append(f"current: the last of the {len(current.tables)} sessions in {current.path}")
    return judging.judge(recorded_in(baseline), recorded_in(current), rule, notes=notes)


def _cmd_show(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    path = Path(args.path)
    limit = None if args.limit == 0 else args.limit
    if path.is_dir():
        sources, damaged = load_folder(path)
        errors = [d.error for d in damaged]
        if not sources and not errors:
            raise TprofError(
                f"{path}: no baseline files (*.json) or traces (*.json.gz) in this folder; "
                "pass a folder written by pytest --tprof-save, a baseline file or a Chrome trace"
            )
    elif path.exists():
        reading.check_kind(path, "give a baseline file, a baselines folder or a trace")
        sources, errors = [load_source(path)], []
    else:
        raise TprofError(f"{path}: no such file or folder; check the path")
    for i, source in enumerate(sources):
        if i:
            print(file=out)
        disturbed = busy.disturbed_counts(source.tables, Rule())
        for line in show_lines(source, sort=args.sort, limit=limit, disturbed=disturbed):
            print(line, file=out)
    for message in errors:
        print(f"tprof: error: {message}", file=err)
    return EXIT_ERROR if errors else EXIT_OK


def _cmd_diff(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    a, b = Path(args.baseline), Path(args.current)
    for p in (a, b):
        if not p.exists():
            raise TprofError(f"{p}: no such file or folder; check the path")
    rule = Rule(rel_floor=args.floor, strict_calls=args.strict)
    pairing, errors, unjudged = _paired_sources(a, b)
    tests = _judge_pairs(pairing, rule, out, verbose=args.verbose)
    for s in pairing.only_baseline:
        print(f"only in {a}: {s.label} ({s.path})", file=out)
    for s in pairing.only_current:
        print(f"only in {b}: {s.label} ({s.path})", file=out)
    for u in unjudged:
        print(u.line(), file=out)
    for message in errors:
        print(f"tprof: error: {message}", file=err)
    print(diff_summary(tests, pairing, a, b, unjudged=len(unjudged)), file=out)
    if args.json is not None:
        _write_diff_report(Path(args.json), tests, pairing, a, b, unjudged)
        print(f"JSON report: {args.json}", file=out)
    if errors:
        return EXIT_ERROR
    if not tests:
        raise TprofError(
            f"no test is in both {a} and {b}, so nothing was compared; "
            "pass folders recorded from the same test suite"
        )
    return EXIT_REGRESSED if any(outcome_of(t).fails for t in tests) else EXIT_OK


def _paired_sources(a: Path, b: Path) -> tuple[Pairing, list[str], list[Unjudged]]:
    """The tests of two folders paired (a message per unreadable file, and the tests that one
    of them left uncompared), or two files."""
    if a.is_dir() and b.is_dir():
        return pair_folders(a, b)
    give = "pass two baseline folders, or two files (baselines or traces)"
    if a.is_dir() or b.is_dir():
        folder, file = (a, b) if a.is_dir() else (b, a)
        raise ConfigError(f"{folder} is a folder but {file} is a file; {give}")
    for path in (a, b):
        reading.check_kind(path, give)
    base, cur = load_source(a), load_source(b)
    if base.nodeid is not None and cur.nodeid is not None and base.nodeid != cur.nodeid:
        raise ConfigError(
            f"{a} holds {base.nodeid!r} but {b} holds {cur.nodeid!r}, so they can't be judged "
            "as one test; pass two files of the same test"
        )
    return Pairing(pairs=[(base, cur)], only_baseline=[], only_current=[]), [], []


def _judge_pairs(pairing: Pairing, rule: Rule, out: TextIO, *, verbose: bool) -> list[ProfiledTest]:
    """Judge each pair, printing its result as soon as it is known."""
    tests: list[ProfiledTest] = []
    for base, cur in pairing.pairs:
        verdict = judge(base, cur, rule)
        test = ProfiledTest(
            nodeid=cur.label if base.nodeid is None else base.label,
            verdict=verdict,
            table=cur.tables[-1],
            trace=str(cur.path) if cur.kind == "trace" else None,
            baseline=str(base.path),
            rounds=cur.tables[-1].rounds,
        )
        tests.append(test)
        for line in _pair_lines(test, base, cur, verbose=verbose):
            print(line, file=out)
    return tests


def _pair_lines(
    test: ProfiledTest, baseline: Source, current: Source, *, verbose: bool
) -> list[str]:
    """A judged pair's summary line, and its per-op details when it failed or when verbose.

    The details end with a diff's own next steps: the plugin's (re-record with pytest, re-run
    with --tprof-collect) are about a test run, not about two files compared.
    """
    lines = [summary_line(test)]
    if verbose or test.verdict.verdict in (REGRESSED, CHANGED):
        steps = diff_steps(test, baseline, current)
        lines.append(_indent(failure_text(test, verbose=verbose, steps=steps)))
        if current.kind == "baseline":
            lines.append(f"      current: {current.path}")
    return lines


def _write_diff_report(
    path: Path,
    tests: Sequence[ProfiledTest],
    pairing: Pairing,
    a: Path,
    b: Path,
    unjudged: Sequence[Unjudged],
) -> None:
    doc = diff_report(tests, pairing, (a, b), unjudged)
    _write(path, json.dumps(doc, indent=2, sort_keys=True) + "\n", "JSON report")


def _indent(text: str) -> str:
    return "\n".join(("    " + line) if line else "" for line in text.splitlines())


def _cmd_report(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    if args.html is None and args.markdown is None:
        raise ConfigError("nothing to write: give --html OUT.html and/or --markdown OUT.md")
    path = Path(args.report)
    doc = load_report(path)
    if args.html is not None:
        from tprof_engine.render.html import html_report

        target = Path(args.html)
        text = html_report(doc, link_base=target.resolve().parent)
        _write(target, text, "HTML report")
        print(f"HTML report: {target}", file=out)
    if args.markdown is not None:
        from tprof_engine.render.markdown import markdown_from_report

        target = Path(args.markdown)
        _write(target, markdown_from_report(doc), "Markdown summary")
        print(f"Markdown summary: {target}", file=out)
    return EXIT_OK


def _write(path: Path, text: str, what: str) -> None:
    reading.check_not_baseline(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        files.write_atomic(path, text)
    except OSError as exc:
        raise TprofError(
            f"{path}: can't write the {what} ({exc.strerror}); pick a writable path"
        ) from None


def _floor(text: str) -> float:
    """``0.1`` or ``10%`` → 0.1."""
    raw = text.strip()
    try:
        value = float(raw[:-1]) / 100.0 if raw.endswith("%") else float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or not 0 <= value < FLOOR_LIMIT:
        raise argparse.ArgumentTypeError(
            f"must be a fraction >= 0 and below {FLOOR_LIMIT:g} such as 0.1, or a percentage "
            f"such as 10% (got {text!r})"
        )
    return value


def _cmd_merge(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    folders = [Path(f) for f in args.folders]
    merged = merge.merge_folders(
        folders, Path(args.into), window=args.window, restart=window.restart_reason
    )
    for test in merged:
        print(test.line(), file=out)
    written = sum(t.outcome == merge.WRITTEN for t in merged)
    print(
        f"merged {len(folders)} folder{'' if len(folders) == 1 else 's'} into {args.into}: "
        f"{len(merged)} tests, "
        f"{written} written, {len(merged) - written} unchanged",
        file=out,
    )
    return EXIT_OK


def _window(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if not 1 <= value <= schema.MAX_SESSIONS:
        raise argparse.ArgumentTypeError(
            f"must be an integer from 1 to {schema.MAX_SESSIONS} (got {text!r})"
        )
    return value


def _limit(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be an integer >= 0, 0 for all (got {text!r})")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tprof",
        description="Show and compare pytest-tprof baselines and torch.profiler Chrome traces.",
        epilog="Exit status: 0 nothing regressed, 1 a test regressed, "
        "2 a usage error or unreadable input.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_show(sub)
    _add_diff(sub)
    _add_report(sub)
    _add_accept(sub)
    _add_merge(sub)
    ab.add_parser(sub)
    bisection.add_parser(sub)
    return parser


def _add_show(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    show = sub.add_parser(
        "show",
        help="per-op table of a baseline file, a folder of baselines or a Chrome trace",
        description="Per op: calls per round, median and IQR of self CPU (and CUDA) µs per round.",
    )
    show.add_argument("path", metavar="PATH", help="baseline file, folder of baselines, or trace")
    show.add_argument(
        "--sort", choices=SORT_KEYS, default="self_cpu", help="row order (default: self_cpu)"
    )
    show.add_argument(
        "--limit",
        type=_limit,
        default=DEFAULT_LIMIT,
        metavar="N",
        help=f"rows per table, 0 for all (default: {DEFAULT_LIMIT})",
    )
    show.set_defaults(func=_cmd_show)


def _add_diff(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    diff = sub.add_parser(
        "diff",
        help="compare B (current) with A (baseline) using the plugin's decision rule",
        description=(
            "Compare B (current) with A (baseline): two folders of baselines or traces (tests "
            "paired by the node id inside the files), two baseline files, or two Chrome traces. "
            "A's sessions are the baseline; B's last session is the current run."
        ),
    )
    diff.add_argument("baseline", metavar="A", help="the reference: baseline folder, file or trace")
    diff.add_argument(
        "current", metavar="B", help="the run to judge: baseline folder, file or trace"
    )
    diff.add_argument(
        "--floor",
        type=_floor,
        default=None,
        metavar="F",
        help="fixed relative floor, e.g. 0.1 or 10%% (default: learned from A's sessions)",
    )
    diff.add_argument(
        "--strict", action="store_true", help="fail on any change of calls (default: off)"
    )
    diff.add_argument(
        "--json", metavar="PATH", default=None, help="also write a JSON report (default: none)"
    )
    diff.add_argument(
        "-v", "--verbose", action="store_true", help="show every op of every test (default: off)"
    )
    diff.set_defaults(func=_cmd_diff)


def _add_report(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    report = sub.add_parser(
        "report",
        help="render a --tprof-json report as HTML and/or Markdown",
        description="Render a JSON report (pytest --tprof-json, tprof diff --json) for CI.",
    )
    report.add_argument("report", metavar="REPORT.json", help="the JSON report to render")
    report.add_argument(
        "--html",
        metavar="OUT.html",
        default=None,
        help="write one self-contained HTML file (needs the 'html' extra; default: none)",
    )
    report.add_argument(
        "--markdown",
        metavar="OUT.md",
        default=None,
        help="write a Markdown summary (default: none)",
    )
    report.set_defaults(func=_cmd_report)


def _add_accept(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    accept = sub.add_parser(
        "accept",
        help="accept an intended change: keep only the newest session of each test's baseline",
        description=(
            "After `pytest --tprof --tprof-save` recorded an intended change, keep only that "
            "newest session of each named test's baseline, so the floor learns nothing from "
            "sessions of the code before it. When that session is the same code as the others "
            "(nothing changed was saved since), nothing is dropped and the command exits 2. "
            "Name tests by node id or baseline file."
        ),
    )
    accept.add_argument("tests", metavar="TEST", nargs="+", help="node id or baseline file")
    accept.add_argument(
        "--baseline-dir",
        metavar="DIR",
        default="baselines",
        help="where node ids are looked up (default: baselines)",
    )
    accept.set_defaults(func=_cmd_accept)


def _cmd_accept(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    codes = [_accept(test, args, out, err) for test in args.tests]
    return max(codes, default=EXIT_OK)


def _accept(test: str, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """Accept the newest session of one named test's baselines; an error is printed, not raised."""
    given, code = Path(test), EXIT_OK
    try:
        if given.is_file():
            reading.check_kind(
                given, "name the test by its node id or give its baseline file", traces=False
            )
        found = [given] if given.is_file() else paths.baselines_of(Path(args.baseline_dir), test)
        if not found:
            raise TprofError(
                f"{test}: no baseline under {args.baseline_dir}; record one with "
                "pytest --tprof-save (or pass --baseline-dir)"
            )
    except TprofError as exc:
        print(f"tprof: error: {exc}", file=err)
        return EXIT_ERROR
    for path in found:
        try:
            done = window.accept_newest(path, record_args=_record_args(args, given, path))
            print(f"accepted {test}: {done}", file=out)
        except TprofError as exc:
            print(f"tprof: error: {exc}", file=err)
            code = EXIT_ERROR
    return code


def _record_args(args: argparse.Namespace, given: Path, path: Path) -> tuple[str, ...]:
    """What a save of the test must be given to record into ``path``'s baseline folder."""
    root = path.parent.parent if given.is_file() else Path(args.baseline_dir)
    return () if root == Path("baselines") else (f"--tprof-baseline-dir={root}",)


def _add_merge(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    merge_cmd = sub.add_parser(
        "merge",
        help="combine the baseline folders of several runs into one window per test",
        description=(
            "Combine the sessions of the same tests from several baseline folders (the CI "
            "artifacts of several runs) into one window per test in --into, newest kept. "
            "Identical sessions count once; sessions a save would have dropped (another "
            "environment, protocol, ops or work than the newer ones; past the window) are "
            "dropped, and each test's line says why. --into may be one of the folders; "
            "baselines already in it are merged too."
        ),
    )
    merge_cmd.add_argument(
        "folders", nargs="+", metavar="DIR", help="baseline folders (each a --tprof-baseline-dir)"
    )
    merge_cmd.add_argument(
        "--into", required=True, metavar="DIR", help="the baseline folder to write (required)"
    )
    merge_cmd.add_argument(
        "--window",
        type=_window,
        default=baselines.DEFAULT_WINDOW,
        metavar="N",
        help=f"sessions kept per test, as --tprof-window (default: {baselines.DEFAULT_WINDOW})",
    )
    merge_cmd.set_defaults(func=_cmd_merge)


def _unknown(args: argparse.Namespace, unknown: Sequence[str]) -> str:
    """Options the command doesn't take; for ``tprof ab``, where pytest's go."""
    said = f"unrecognized arguments: {' '.join(unknown)}"
    if args.command == "bisect":
        return f"{said} (before BAD): pytest's options go after BAD: tprof bisect GOOD BAD -- …"
    if args.command != "ab":
        return said
    where = f"{said} (before REF, on the command line)"
    if ab.is_xdist(unknown):
        return f"{where}: tprof ab runs each side serially: drop -n/--numprocesses/--dist"
    return f"{where}: pytest's options go after REF: tprof ab REF -- {' '.join(unknown)}"


def main(argv: list[str] | None = None) -> int:
    """Run the ``tprof`` command; returns the exit status instead of exiting."""
    parser = build_parser()
    try:
        args, unknown = parser.parse_known_args(argv)
        if unknown:  # said by the command's own parser, which knows where they belong
            getattr(args, "parser", parser).error(_unknown(args, unknown))
    except SystemExit as exc:  # --help (0) or a usage error (2), already printed
        return exc.code if isinstance(exc.code, int) else EXIT_ERROR
    out, err = sys.stdout, sys.stderr
    try:
        code: int = args.func(args, out, err)
    except TprofError as exc:
        print(f"tprof: error: {exc}", file=err)
        return EXIT_ERROR
    except BrokenPipeError:  # `tprof show ... | head`: stop quietly, as other tools do
        with contextlib.suppress(OSError, ValueError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
    return code
