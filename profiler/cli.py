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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple, TextIO

import numpy as np

from tprof_engine import busy, files, merge, store
from tprof_engine import judge as judging
from tprof_engine.checks import is_count
from tprof_engine.environment import Fingerprint
from tprof_engine.errors import ConfigError, TprofError
from tprof_engine.records import FloatArray, OpTable
from tprof_engine.report import aligned, failure_text, json_report, summary_line
from tprof_engine.results import ProfiledTest
from tprof_engine.rule import Rule
from tprof_engine.verdicts import CHANGED, REGRESSED, TestVerdict, verdict_rank
from tprof_engine.work import WorkTable

EXIT_OK = 0
EXIT_REGRESSED = 1
EXIT_ERROR = 2

SORT_KEYS = ("self_cpu", "self_cuda", "calls", "name")
DEFAULT_LIMIT = 30
# How far into a ``.json`` file to look for the marks of a Chrome trace.
_SNIFF_BYTES = 65536


# --------------------------------------------------------------------------- inputs


@dataclass(frozen=True, slots=True, kw_only=True)
class Source:
    """One side of a comparison: a test's op tables and what is known of where they ran.

    A baseline file gives its sessions, fingerprint and protocol; a Chrome trace gives one
    table and no fingerprint.
    """

    path: Path
    kind: str  # "baseline" or "trace"
    nodeid: str | None
    tables: tuple[OpTable, ...]
    fingerprint: Fingerprint | None = None
    protocol: Mapping[str, Any] = field(default_factory=dict)
    device_names: tuple[str, ...] = ()
    work: WorkTable | None = None  # a baseline's work census (its newest session's)
    hosts: tuple[str | None, ...] = ()  # a baseline's host per session

    @property
    def label(self) -> str:
        return self.nodeid or self.path.name


def is_trace(path: Path) -> bool:
    """Whether ``path`` looks like a Chrome trace rather than a baseline file.

    ``.gz`` files are traces (baselines are plain JSON); a ``.json`` file is a trace when
    its first bytes hold a trace's keys or it is a JSON array (the Chrome "array format").
    """
    name = path.name.lower()
    if name.endswith(".gz") or name.endswith(".pt.trace.json"):
        return True
    if not path.is_file():  # a FIFO would block the read below; the reader names the problem
        return False
    try:
        with path.open("rb") as f:
            head = f.read(_SNIFF_BYTES)
    except OSError:
        return False  # let the baseline reader name the problem
    text = head.decode("utf-8", errors="replace").lstrip()
    return text.startswith("[") or '"traceEvents"' in text or '"schemaVersion"' in text


def load_source(path: Path) -> Source:
    """A baseline file or a Chrome trace, read strictly; errors name the file."""
    path = Path(path)
    if is_trace(path):
        from tprof_engine import traces  # numpy-heavy reader; only needed for traces

        data = traces.read_trace(path)
        table = traces.table_from_trace(data)
        info = data.metadata.get("tprof_test")
        nodeid = info.get("nodeid") if isinstance(info, dict) else None
        recorded = data.metadata.get("tprof")
        iterations = recorded.get("iterations") if isinstance(recorded, dict) else None
        return Source(
            path=path,
            kind="trace",
            nodeid=nodeid if isinstance(nodeid, str) and nodeid else None,
            tables=(table,),
            protocol={"iterations": iterations} if isinstance(iterations, int) else {},
            device_names=data.device_names,
        )
    base = store.load_baseline(path)
    return Source(
        path=path,
        kind="baseline",
        nodeid=base.nodeid,
        tables=tuple(base.tables),
        fingerprint=base.fingerprint,
        protocol=base.protocol,
        work=base.work,
        hosts=base.hosts,
    )


def load_folder(folder: Path) -> tuple[list[Source], list[str]]:
    """Every baseline and gzipped trace under ``folder`` (recursive); a message per bad one."""
    sources: list[Source] = []
    errors: list[str] = []
    gzipped = (p for p in Path(folder).rglob("*.json.gz") if not p.name.startswith("."))
    for path in sorted({*store.iter_baselines(folder), *gzipped}):
        try:
            sources.append(load_source(path))
        except TprofError as exc:
            errors.append(str(exc))
    return sources, errors


# --------------------------------------------------------------------------- judging


def judge(baseline: Source, current: Source, rule: Rule) -> TestVerdict:
    """The verdict on ``current``'s last table against all of ``baseline``'s tables.

    The plugin's judging path (:func:`tprof_engine.judge.judge`), on what the files hold.
    """
    notes = []
    if len(current.tables) > 1:
        notes.append(f"current: the last of the {len(current.tables)} sessions in {current.path}")
    return judging.judge(_recorded(baseline), _recorded(current), rule, notes=notes)


def _recorded(source: Source) -> judging.Recorded:
    return judging.Recorded(
        tables=source.tables,
        fingerprint=source.fingerprint,
        protocol=source.protocol,
        device_names=source.device_names if source.kind == "trace" else None,
        work=source.work,
        hosts=source.hosts,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class Pairing:
    """Tests found on both sides, and those found on one side only."""

    pairs: list[tuple[Source, Source]]
    only_baseline: list[Source]
    only_current: list[Source]


def pair_sources(baseline: Sequence[Source], current: Sequence[Source]) -> Pairing:
    """Pair tests by the node id inside the files.

    When a side holds one test in several environments (several environment folders),
    the files are paired by environment key; a single file per side pairs regardless and
    the comparability check says what differs.
    """
    by_b: dict[str, list[Source]] = {}
    by_c: dict[str, list[Source]] = {}
    for s in baseline:
        by_b.setdefault(s.label, []).append(s)
    for s in current:
        by_c.setdefault(s.label, []).append(s)
    pairs: list[tuple[Source, Source]] = []
    only_b: list[Source] = []
    only_c: list[Source] = []
    for nodeid in sorted(set(by_b) | set(by_c)):
        bs, cs = by_b.get(nodeid, []), by_c.get(nodeid, [])
        if len(bs) == 1 and len(cs) == 1:
            pairs.append((bs[0], cs[0]))
            continue
        left = list(cs)
        for b in bs:
            match = next((c for c in left if _env_key(c) == _env_key(b)), None)
            if match is None:
                only_b.append(b)
            else:
                left.remove(match)
                pairs.append((b, match))
        only_c.extend(left)
    return Pairing(pairs=pairs, only_baseline=only_b, only_current=only_c)


def _env_key(s: Source) -> str:
    return s.fingerprint.key if s.fingerprint is not None else s.path.parent.name


# --------------------------------------------------------------------------- show


def show_lines(
    source: Source, *, sort: str = "self_cpu", limit: int | None = DEFAULT_LIMIT
) -> list[str]:
    """A key-averages-style table of one baseline or trace: per op, per round.

    Per op: calls per round (the range when it varies), median and interquartile range of
    self CPU µs per round and, when the table has device times, of self CUDA µs; rounds of
    every session are pooled.
    """
    if sort not in SORT_KEYS:
        raise ConfigError(f"'sort' must be one of {', '.join(SORT_KEYS)} (got {sort!r})")
    tables = source.tables
    total_cpu = _median_round_total(tables, "self_cpu_us")
    total_dev = None
    if all(t.has_device for t in tables):
        total_dev = _median_round_total(tables, "self_device_us")
    lines = _show_heading(source, total_cpu, total_dev)
    if sort == "self_cuda" and total_dev is None:
        lines.append("  (no CUDA times in this table: sorted by self CPU)")
        sort = "self_cpu"
    rows = sorted(_op_rows(tables), key=_ROW_ORDER[sort])
    shown = rows if not limit else rows[:limit]
    lines += _row_lines(shown, total_cpu, total_dev)
    if not rows:
        lines.append("  (no ops)")
    if len(shown) < len(rows):
        lines.append(f"  ... {len(rows) - len(shown)} more ops (--limit 0 shows all)")
    if source.work is not None:
        lines += _work_lines(source.work, limit)
    return lines


def _work_lines(work: WorkTable, limit: int | None) -> list[str]:
    """The census of the newest session: totals, then rows by FLOPs, then by bytes."""
    rows = sorted(work.rows, key=lambda r: (-r.flops, -r.bytes_total, r.label))
    lines = [
        "",
        f"  work census: {len(work.rows)} op rows, FLOPs {work.total_flops:,}, bytes "
        f"{work.total_bytes:,} per round; {len(work.syncs)} host sync rows, "
        f"{len(work.copies)} device copy rows",
    ]
    cells = [("op", "module", "phase", "calls", "FLOPs", "bytes")]
    for r in rows if not limit else rows[:limit]:
        cells.append(
            (r.op, r.module or "(top)", r.phase, f"{r.calls:,}", f"{r.flops:,}",
             f"{r.bytes_total:,}")
        )  # fmt: skip
    lines += ["  " + line for line in aligned(cells, right=(3, 4, 5))]
    if limit and len(rows) > limit:
        lines.append(f"  ... {len(rows) - limit} more rows (--limit 0 shows all)")
    return lines


def _median_round_total(tables: Sequence[OpTable], metric: str) -> float:
    """Median over the pooled rounds of one metric's sum over ops (µs per round)."""
    return _median(np.concatenate([getattr(t, metric).sum(axis=0) for t in tables]))


def _show_heading(source: Source, total_cpu: float, total_dev: float | None) -> list[str]:
    """The lines above the table: what was read, its rounds and totals, where it ran."""
    tables = source.tables
    lines = [f"{source.label}  ({source.path})"]
    what = "Chrome trace" if source.kind == "trace" else "baseline"
    if source.kind == "baseline" and len(tables) > 1:
        per = "/".join(str(t.rounds) for t in tables)
        span = f"{len(tables)} sessions of {per} rounds, pooled"
    else:
        span = f"{sum(t.rounds for t in tables)} rounds"
    head = f"  {what}, {span}; self CPU {total_cpu:,.1f} µs per round"
    if total_dev is not None:
        head += f", self CUDA {total_dev:,.1f} µs per round"
    lines.append(head)
    lines += _machine_lines(tables)
    if source.device_names:
        lines.append(f"  devices: {', '.join(source.device_names)}")
    if source.fingerprint is not None:
        lines.append(f"  environment: {source.fingerprint.key}")
    return lines


def _machine_lines(tables: Sequence[OpTable]) -> list[str]:
    """The time outside any op, and how many rounds the machine disturbed (with readings)."""
    host = _median(np.concatenate([t.host_us for t in tables]))
    found = [b for t in tables if (b := busy.busy_of(t, Rule())) is not None]
    line = f"  time outside any op {host:,.1f} µs per round" if host > 0 else ""
    if found:
        disturbed, rounds = sum(b.disturbed for b in found), sum(b.rounds for b in found)
        waited = sum(b.waited for b in found)
        line += "; " if line else "  "
        line += f"{disturbed} of {rounds} rounds disturbed ({waited} waited for a CPU)"
    return [line] if line else []


class _Row(NamedTuple):
    name: str
    calls: float
    calls_text: str
    cpu: float
    cpu_iqr: float
    cuda: float
    cuda_iqr: float


_ROW_ORDER: dict[str, Callable[[_Row], Any]] = {
    "self_cpu": lambda r: (-r.cpu, r.name),
    "self_cuda": lambda r: (-r.cuda, -r.cpu, r.name),
    "calls": lambda r: (-r.calls, r.name),
    "name": lambda r: r.name,
}


def _op_rows(tables: Sequence[OpTable]) -> list[_Row]:
    """One row per op, its rounds of every table pooled."""
    return [
        _Row(
            name=name,
            calls=_median(m["calls"]),
            calls_text=_calls(m["calls"]),
            cpu=_median(m["self_cpu_us"]),
            cpu_iqr=_iqr(m["self_cpu_us"]),
            cuda=_median(m["self_device_us"]),
            cuda_iqr=_iqr(m["self_device_us"]),
        )
        for name, m in _pooled(tables).items()
    ]


def _row_lines(rows: Sequence[_Row], total_cpu: float, total_dev: float | None) -> list[str]:
    """The table of ``rows`` with its header, columns aligned; CUDA columns with device times."""
    header = ["op", "calls/round", "self CPU µs", "IQR", "% CPU"]
    if total_dev is not None:
        header += ["self CUDA µs", "IQR", "% CUDA"]
    cells = [header]
    for r in rows:
        row = [r.name, r.calls_text, f"{r.cpu:,.1f}", f"{r.cpu_iqr:,.1f}", _share(r.cpu, total_cpu)]
        if total_dev is not None:
            row += [f"{r.cuda:,.1f}", f"{r.cuda_iqr:,.1f}", _share(r.cuda, total_dev)]
        cells.append(row)
    widths = [max(len(c[i]) for c in cells) for i in range(len(header))]
    lines = []
    for c in cells:
        text = c[0].ljust(widths[0]) + "".join(
            "  " + v.rjust(w) for v, w in zip(c[1:], widths[1:], strict=True)
        )
        lines.append("  " + text.rstrip())
    return lines


def _pooled(tables: Sequence[OpTable]) -> dict[str, dict[str, FloatArray]]:
    """Per op, each metric's rounds of every table, concatenated (0 where an op is absent)."""
    names = sorted({n for t in tables for n in t.names})
    out: dict[str, dict[str, FloatArray]] = {}
    for name in names:
        metrics: dict[str, list[FloatArray]] = {
            "calls": [],
            "self_cpu_us": [],
            "self_device_us": [],
        }
        for t in tables:
            i = t.index().get(name)
            for m, parts in metrics.items():
                values = getattr(t, m)
                parts.append(
                    np.zeros(t.rounds) if i is None else np.asarray(values[i], dtype=np.float64)
                )
        out[name] = {m: np.concatenate(parts) for m, parts in metrics.items()}
    return out


def _median(v: FloatArray) -> float:
    return float(np.median(v)) if v.size else 0.0


def _iqr(v: FloatArray) -> float:
    if not v.size:
        return 0.0
    q1, q3 = np.percentile(v, [25, 75])
    return float(q3 - q1)


def _calls(v: FloatArray) -> str:
    lo, hi = int(v.min()), int(v.max())
    return str(lo) if lo == hi else f"{lo}–{hi}"


def _share(part: float, total: float) -> str:
    return f"{part / total:.1%}" if total > 0 else "-"


# --------------------------------------------------------------------------- commands


def _cmd_show(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    path = Path(args.path)
    limit = None if args.limit == 0 else args.limit
    if path.is_dir():
        sources, errors = load_folder(path)
        if not sources and not errors:
            raise TprofError(
                f"{path}: no baseline files (*.json) or traces (*.json.gz) in this folder; "
                "pass a folder written by pytest --tprof-save, a baseline file or a Chrome trace"
            )
    elif path.exists():
        sources, errors = [load_source(path)], []
    else:
        raise TprofError(f"{path}: no such file or folder; check the path")
    for i, source in enumerate(sources):
        if i:
            print(file=out)
        for line in show_lines(source, sort=args.sort, limit=limit):
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
    pairing, errors = _paired_sources(a, b)
    tests = _judge_pairs(pairing, rule, out, verbose=args.verbose)
    for s in pairing.only_baseline:
        print(f"only in {a}: {s.label} ({s.path})", file=out)
    for s in pairing.only_current:
        print(f"only in {b}: {s.label} ({s.path})", file=out)
    for message in errors:
        print(f"tprof: error: {message}", file=err)
    print(_diff_summary(tests, pairing, a, b), file=out)
    if args.json is not None:
        _write_diff_report(Path(args.json), tests, pairing, a, b)
        print(f"JSON report: {args.json}", file=out)
    if errors:
        return EXIT_ERROR
    if not tests:
        raise TprofError(
            f"no test is in both {a} and {b}, so nothing was compared; "
            "pass folders recorded from the same test suite"
        )
    return EXIT_REGRESSED if any(t.verdict.regressed for t in tests) else EXIT_OK


def _paired_sources(a: Path, b: Path) -> tuple[Pairing, list[str]]:
    """The tests of two folders paired (and a message per unreadable file), or two files."""
    if a.is_dir() and b.is_dir():
        sa, ea = load_folder(a)
        sb, eb = load_folder(b)
        for folder, found, errs in ((a, sa, ea), (b, sb, eb)):
            if not found and not errs:
                raise TprofError(
                    f"{folder}: no baseline files (*.json) or traces (*.json.gz) in this folder; "
                    "pass a folder written by pytest --tprof-save or --tprof-trace-dir"
                )
        return pair_sources(sa, sb), ea + eb
    if a.is_dir() or b.is_dir():
        folder, file = (a, b) if a.is_dir() else (b, a)
        raise ConfigError(
            f"{folder} is a folder but {file} is a file; "
            "pass two baseline folders, or two files (baselines or traces)"
        )
    base, cur = load_source(a), load_source(b)
    if base.nodeid is not None and cur.nodeid is not None and base.nodeid != cur.nodeid:
        raise ConfigError(
            f"{a} holds {base.nodeid!r} but {b} holds {cur.nodeid!r}, so they can't be judged "
            "as one test; pass two files of the same test"
        )
    return Pairing(pairs=[(base, cur)], only_baseline=[], only_current=[]), []


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
        for line in _pair_lines(test, cur, verbose=verbose):
            print(line, file=out)
    return tests


def _pair_lines(test: ProfiledTest, current: Source, *, verbose: bool) -> list[str]:
    """A judged pair's summary line, and its per-op details when it failed or when verbose."""
    lines = [summary_line(test)]
    if verbose or test.verdict.verdict in (REGRESSED, CHANGED):
        lines.append(_indent(failure_text(test, verbose=verbose)))
        if current.kind == "baseline":
            lines.append(f"      current: {current.path}")
    return lines


def _diff_summary(tests: Sequence[ProfiledTest], pairing: Pairing, a: Path, b: Path) -> str:
    """The closing line: tests compared, per verdict, and tests found on one side only."""
    counts: dict[str, int] = {}
    for t in tests:
        counts[t.verdict.verdict] = counts.get(t.verdict.verdict, 0) + 1
    summary = ", ".join(f"{n} {v}" for v, n in sorted(counts.items(), key=_verdict_order))
    line = f"tprof diff: {len(tests)} test{'s' if len(tests) != 1 else ''} compared"
    line += f": {summary}" if summary else ""
    if pairing.only_baseline or pairing.only_current:
        n_a, n_b = len(pairing.only_baseline), len(pairing.only_current)
        line += f"; {n_a} only in {a}, {n_b} only in {b}"
    return line


def _write_diff_report(
    path: Path, tests: Sequence[ProfiledTest], pairing: Pairing, a: Path, b: Path
) -> None:
    env = _common_environment([cur for _, cur in pairing.pairs])
    doc = json_report(
        tests,
        environment=env,
        extra={
            "source": "tprof diff",
            "baseline": str(a),
            "current": str(b),
            "only_in_baseline": [s.label for s in pairing.only_baseline],
            "only_in_current": [s.label for s in pairing.only_current],
        },
    )
    _write(path, json.dumps(doc, indent=2, sort_keys=True) + "\n", "JSON report")


def _verdict_order(item: tuple[str, int]) -> int:
    return verdict_rank(item[0])


def _common_environment(sources: Sequence[Source]) -> dict[str, Any]:
    prints = [s.fingerprint.to_dict() for s in sources if s.fingerprint is not None]
    if prints and all(p == prints[0] for p in prints):
        return prints[0]
    return {}


def _indent(text: str) -> str:
    return "\n".join(("    " + line) if line else "" for line in text.splitlines())


def _cmd_report(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    if args.html is None and args.markdown is None:
        raise ConfigError("nothing to write: give --html OUT.html and/or --markdown OUT.md")
    path = Path(args.report)
    doc = load_report(path)
    if args.html is not None:
        from tprof_engine.html import html_report  # needs the optional matplotlib

        target = Path(args.html)
        text = html_report(doc, link_base=target.resolve().parent)
        _write(target, text, "HTML report")
        print(f"HTML report: {target}", file=out)
    if args.markdown is not None:
        from tprof_engine.markdown import markdown_from_report

        target = Path(args.markdown)
        _write(target, markdown_from_report(doc), "Markdown summary")
        print(f"Markdown summary: {target}", file=out)
    return EXIT_OK


REPORT_FIX = "pass the file written by pytest --tprof-json=PATH or tprof diff --json PATH"


def load_report(path: Path) -> dict[str, Any]:
    """Read and check a ``--tprof-json`` report; problems are errors naming the file."""
    try:  # a regular file only: a FIFO would block
        text = files.read_regular(Path(path), limit=store.MAX_BASELINE_BYTES).decode("utf-8")
    except FileNotFoundError:
        raise TprofError(f"{path}: no such report file; {REPORT_FIX}") from None
    except UnicodeDecodeError as exc:
        raise TprofError(f"{path}: not UTF-8 text (byte {exc.start}); {REPORT_FIX}") from None
    except files.NotRegularFileError as exc:
        raise TprofError(f"{path}: is a {exc.kind}, not a report file; {REPORT_FIX}") from None
    except files.FileTooLargeError as exc:
        raise TprofError(f"{path}: {exc.strerror}, not a report; {REPORT_FIX}") from None
    except OSError as exc:
        raise TprofError(f"{path}: can't be read ({exc.strerror}); check its permissions") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TprofError(
            f"{path}: invalid JSON ({exc.msg}) at line {exc.lineno} col {exc.colno}; {REPORT_FIX}"
        ) from None
    if not isinstance(doc, dict) or not isinstance(doc.get("tests"), list):
        raise TprofError(f"{path}: not a pytest-tprof JSON report (no 'tests' list); {REPORT_FIX}")
    from tprof_engine.report import JSON_SCHEMA_VERSION

    version = doc.get("schema_version")
    if not is_count(version):
        raise TprofError(
            f"{path}: 'schema_version' must be an integer >= 1 (got {version!r}); {REPORT_FIX}"
        )
    if version > JSON_SCHEMA_VERSION:
        raise TprofError(
            f"{path}: written by a newer pytest-tprof (schema_version {version} > "
            f"{JSON_SCHEMA_VERSION}); upgrade pytest-tprof to read it"
        )
    for i, t in enumerate(doc["tests"]):
        where = f"tests[{i}]"
        if not isinstance(t, dict):
            raise TprofError(f"{path}: '{where}' must be an object; {REPORT_FIX}")
        for key in ("nodeid", "verdict"):
            if not isinstance(t.get(key), str):
                raise TprofError(f"{path}: '{where}.{key}' must be a string; {REPORT_FIX}")
        ops = t.get("ops", [])
        if not isinstance(ops, list) or not all(isinstance(o, dict) for o in ops):
            raise TprofError(f"{path}: '{where}.ops' must be a list of objects; {REPORT_FIX}")
    return doc


def _write(path: Path, text: str, what: str) -> None:
    store.check_not_baseline(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        files.write_atomic(path, text)
    except OSError as exc:
        raise TprofError(
            f"{path}: can't write the {what} ({exc.strerror}); pick a writable path"
        ) from None


# --------------------------------------------------------------------------- parser


def _floor(text: str) -> float:
    """``0.1`` or ``10%`` → 0.1."""
    raw = text.strip()
    try:
        value = float(raw[:-1]) / 100.0 if raw.endswith("%") else float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(
            f"must be a fraction >= 0 such as 0.1, or a percentage such as 10% (got {text!r})"
        )
    return value


def _cmd_merge(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    folders = [Path(f) for f in args.folders]
    merged = merge.merge_folders(folders, Path(args.into), window=args.window)
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
    if not 1 <= value <= store.MAX_SESSIONS:
        raise argparse.ArgumentTypeError(
            f"must be an integer from 1 to {store.MAX_SESSIONS} (got {text!r})"
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
            "sessions of the code before it. Name tests by node id or baseline file."
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
    code = EXIT_OK
    for test in args.tests:
        given = Path(test)
        paths = [given] if given.is_file() else store.baselines_of(Path(args.baseline_dir), test)
        if not paths:
            print(
                f"tprof: error: {test}: no baseline under {args.baseline_dir}; record one with "
                "pytest --tprof-save (or pass --baseline-dir)",
                file=err,
            )
            code = EXIT_ERROR
        for path in paths:
            try:
                print(f"accepted {test}: {store.accept_newest(path)}", file=out)
            except TprofError as exc:
                print(f"tprof: error: {exc}", file=err)
                code = EXIT_ERROR
    return code


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
        default=store.DEFAULT_WINDOW,
        metavar="N",
        help=f"sessions kept per test, as --tprof-window (default: {store.DEFAULT_WINDOW})",
    )
    merge_cmd.set_defaults(func=_cmd_merge)


def main(argv: list[str] | None = None) -> int:
    """Run the ``tprof`` command; returns the exit status instead of exiting."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
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
