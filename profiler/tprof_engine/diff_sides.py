"""The two sides of ``tprof diff``: folders' tests paired with their damaged files matched to
the test they held, what a diff says to look at next (not the plugin's pytest steps), its
closing line and its JSON report.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from tprof_engine.model.errors import TprofError
from tprof_engine.model.results import ProfiledTest, Source
from tprof_engine.model.verdicts import REGRESSED, verdict_rank
from tprof_engine.render.report import json_report
from tprof_engine.sources import Damaged, Pairing, load_folder, pair_sources
from tprof_engine.store import paths


@dataclass(frozen=True, slots=True, kw_only=True)
class Unjudged:
    """A test read on one side whose file on the other side is damaged: not compared."""

    label: str
    damaged: Path  # the damaged file
    folder: Path  # the side it is in

    def line(self) -> str:
        return (
            f"not compared: {self.label}, because its file in {self.folder} is damaged: "
            f"{self.damaged} (its error says how)"
        )


def pair_folders(a: Path, b: Path) -> tuple[Pairing, list[str], list[Unjudged]]:
    """The tests of folders ``a`` and ``b`` paired, a message per unreadable file, and the
    tests not compared because their file on one side is damaged (not "only in" the other)."""
    sa, da = load_folder(a)
    sb, db = load_folder(b)
    for folder, found, bad in ((a, sa, da), (b, sb, db)):
        if not found and not bad:
            raise TprofError(
                f"{folder}: no baseline files (*.json) or traces (*.json.gz) in this folder; "
                "pass a folder written by pytest --tprof-save or --tprof-trace-dir"
            )
    pairing = pair_sources(sa, sb)
    only_a, damaged_in_b = held_by_damaged(pairing.only_baseline, db)
    only_b, damaged_in_a = held_by_damaged(pairing.only_current, da)
    unjudged = [
        Unjudged(label=s.label, damaged=d.path, folder=folder)
        for folder, found in ((a, damaged_in_a), (b, damaged_in_b))
        for s, d in found
    ]
    errors = [d.error for d in (*da, *db)]
    return replace(pairing, only_baseline=only_a, only_current=only_b), errors, unjudged


def held_by_damaged(
    only: list[Source], damaged: list[Damaged]
) -> tuple[list[Source], list[tuple[Source, Damaged]]]:
    """Split the tests found on one side only: those still only there, and those whose file on
    the other side is damaged (so they were not compared, rather than missing there)."""
    alone: list[Source] = []
    unjudged: list[tuple[Source, Damaged]] = []
    for source in only:
        match = next((d for d in damaged if _holds(d.path, source)), None)
        if match is None:
            alone.append(source)
        else:
            unjudged.append((source, match))
    return alone, unjudged


def _holds(path: Path, source: Source) -> bool:
    """Whether ``path`` is named as a file of ``source``'s test: its baseline (``<slug>.json``),
    one of its traces (``<slug>.<run>.pt.trace.json.gz``) or a rank's trace in its run's
    folder; a trace that names no test, by its file name.

    The slug ends in a hash of the exact node id, so the name tells even when the file can't
    be read.
    """
    if source.nodeid is None:
        return path.name == source.path.name
    stem = paths.slug(source.nodeid)
    return any(name.startswith(f"{stem}.") for name in (path.name, path.parent.name))


def diff_steps(test: ProfiledTest, baseline: Source, current: Source) -> list[str]:
    """What to look at next about a regressed pair: each side's every op, a trace in time."""
    if test.verdict.verdict != REGRESSED:
        return []
    a, b = (shlex.quote(str(s.path)) for s in (baseline, current))
    out = [f"every op of each side: tprof show {a}; tprof show {b}"]
    out += [
        f"see the ops in time: open {s.path} in https://ui.perfetto.dev"
        for s in (baseline, current)
        if s.kind == "trace"
    ]
    return out


def diff_summary(
    tests: Sequence[ProfiledTest], pairing: Pairing, a: Path, b: Path, *, unjudged: int = 0
) -> str:
    """The closing line: tests compared, per verdict, tests found on one side only and tests
    not compared because a side's file is damaged."""
    counts: dict[str, int] = {}
    for t in tests:
        counts[t.verdict.verdict] = counts.get(t.verdict.verdict, 0) + 1
    ordered = sorted(counts.items(), key=lambda item: verdict_rank(item[0]))
    summary = ", ".join(f"{n} {v}" for v, n in ordered)
    line = f"tprof diff: {len(tests)} test{'s' if len(tests) != 1 else ''} compared"
    line += f": {summary}" if summary else ""
    if pairing.only_baseline or pairing.only_current:
        n_a, n_b = len(pairing.only_baseline), len(pairing.only_current)
        line += f"; {n_a} only in {a}, {n_b} only in {b}"
    if unjudged:
        line += f"; {unjudged} not compared (a damaged file)"
    return line


def diff_report(
    tests: Sequence[ProfiledTest],
    pairing: Pairing,
    sides: tuple[Path, Path],
    unjudged: Sequence[Unjudged],
) -> dict[str, Any]:
    """``tprof diff --json``'s document: the verdicts, and what was on one side only or not
    compared; the environment when every current side shares one."""
    prints = [s.fingerprint.to_dict() for _, s in pairing.pairs if s.fingerprint is not None]
    env = prints[0] if prints and all(p == prints[0] for p in prints) else {}
    return json_report(
        tests,
        environment=env,
        extra={
            "source": "tprof diff",
            "baseline": str(sides[0]),
            "current": str(sides[1]),
            "only_in_baseline": [s.label for s in pairing.only_baseline],
            "only_in_current": [s.label for s in pairing.only_current],
            "not_compared": [u.label for u in unjudged],
        },
    )
