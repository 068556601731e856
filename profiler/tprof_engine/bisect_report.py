"""``tprof bisect``'s answer: each culprit (subject, author date, ``git show --stat``), its op
rows or work rows before and after, the trace pair, the steps; as terminal text, a JSON
document (``--json``) and Markdown (``--markdown``, ``$GITHUB_STEP_SUMMARY``)."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from tprof_engine import bisect_measure as measure
from tprof_engine.decide.gates.work import judge_work
from tprof_engine.store.files import write_atomic

if TYPE_CHECKING:
    from tprof_engine.bisection import Hunt, Run, Step


def step_line(n: int, step: Step) -> str:
    """One run of a step: the commit, its class, its effect, why, and what it cost."""
    effect = f" {step.effect.text()}" if step.effect else ""
    rounds = f", {step.rounds} rounds" if step.rounds else ""
    cost = f" ({step.seconds:.1f} s{rounds})" if step.measured else ""
    note = f": {step.note}" if step.note else ""
    return f"  step {n}: {step.sha[:10]} {step.word}{effect}{note}{cost}"


def _step_doc(step: Step) -> dict[str, Any]:
    e = step.effect
    return {
        "sha": step.sha,
        "word": step.word,
        "measured": step.measured,
        "effect": None if e is None else {"centre": e.centre, "low": e.low, "high": e.high},
        "rounds": step.rounds,
        "seconds": round(step.seconds, 2),
        "note": step.note,
    }


def document(run: Run, hunts: Sequence[Hunt], bad: str, seconds: float) -> dict[str, Any]:
    """The run as one JSON-ready document."""
    top = run.setup.top
    skipped = sorted({s.sha for h in hunts for s in h.steps if s.word == "skip"})
    pairs = [p.seconds for p in run.pairs.values()]
    censuses = [c.seconds for c in run.censuses.values()]
    return {
        "good": measure.commit_facts(top, run.setup.good_sha),
        "bad": measure.commit_facts(top, bad),
        "commits": len(run.commits),
        "pytest_args": list(run.setup.pytest_args),
        "regressions": [_hunt_doc(run, h) for h in hunts],
        "skipped": [
            {**_short(top, sha), "why": run.broken.get(sha, "its effect stayed unsure")}
            for sha in skipped
        ],
        "cost": {
            "seconds": round(seconds, 1),
            "paired_runs": len(pairs),
            "paired_seconds": round(sum(pairs), 1),
            "census_runs": len(censuses),
            "census_seconds": round(sum(censuses), 1),
        },
    }


def _short(top: Path, sha: str) -> dict[str, str]:
    facts = measure.commit_facts(top, sha)
    return {"sha": sha, "subject": facts["subject"], "date": facts["date"]}


def _hunt_doc(run: Run, hunt: Hunt) -> dict[str, Any]:
    t, search = hunt.target, hunt.search
    culprits = search.culprits()
    doc: dict[str, Any] = {
        "test": t.nodeid,
        "kind": t.kind,
        "family": t.family or None,
        "op": t.op,
        "good_to_bad": t.said if t.kind == "work" else (t.bad.text() if t.bad else None),
        "found": search.found,
        "culprit": measure.commit_facts(run.setup.top, culprits[-1]) if search.found else None,
        "candidates": culprits,
        "last_good": search.last_good or run.setup.good_sha,
        "steps": [_step_doc(s) for s in hunt.steps],
        # a step is one commit classed; an unsure one is measured again (runs counts both)
        "measured_steps": len({s.sha for s in hunt.steps if s.measured}),
        "runs": sum(s.measured for s in hunt.steps),
        "rows": [],
        "traces": None,
    }
    if search.found:
        doc["rows"], doc["traces"] = _rows(run, hunt, culprits[-1])
        doc["census_against_good"] = _census_said(run, hunt, culprits[-1])
    return doc


def _census_said(run: Run, hunt: Hunt, culprit: str) -> str | None:
    """A timing culprit's census against GOOD's, from its paired run (the head's work
    verdict): whether the kernel path or the work moved there too."""
    if hunt.target.kind != "timing":
        return None
    for (sha, _), pair in run.pairs.items():
        work = pair.tests.get(hunt.target.nodeid, {}).get("work") if sha == culprit else None
        if isinstance(work, dict):
            reasons = work.get("reasons") or []
            return str(work.get("verdict")) + (f": {reasons[0]}" if reasons else "")
    return None


def _rows(run: Run, hunt: Hunt, culprit: str) -> tuple[list[dict[str, Any]], Any]:
    """The culprit's rows before and after: a work regression's rows that moved from the last
    good commit's census; a timing one's op from its pair with GOOD, and its trace pair."""
    t = hunt.target
    if t.kind == "work":
        before = run.censuses[hunt.search.last_good or run.setup.good_sha].work[t.nodeid]
        verdict = judge_work(before, run.censuses[culprit].work[t.nodeid])
        moved = [r for r in verdict.rows if r.status not in ("unchanged", "varies")]
        return [r.to_dict() for r in moved], None  # the JSON report's work rows
    pair = max((p for (s, _), p in run.pairs.items() if s == culprit), key=lambda p: p.rounds)
    effect = next((s.effect for s in reversed(hunt.steps) if s.sha == culprit and s.effect), None)
    effect = effect or t.bad
    row = {
        "op": t.op or f"{t.family} total",
        "family": t.family,
        "good_us": effect.base_us if effect else None,
        "culprit_us": effect.cur_us if effect else None,
        "change": effect.text() if effect else None,
    }
    extra = [
        {
            "op": o["op"],
            "family": o["family"],
            "good_us": o["baseline_median_us"],
            "culprit_us": o["current_median_us"],
            "change": f"{o['delta_pct']:+.1f}%",
        }
        for o in pair.tests.get(t.nodeid, {}).get("ops", [])
        if o.get("verdict") == "regressed" and o["op"] != t.op
    ]
    kept = measure.keep_traces(pair, t.nodeid, run.setup.top / ".tprof" / "bisect" / "traces")
    return [row, *extra], kept


def text(doc: Mapping[str, Any]) -> list[str]:
    """The answer in the terminal."""
    lines = []
    for r in doc["regressions"]:
        lines.append(f"{r['test']}: {_what(r)}: GOOD → BAD {r['good_to_bad']}")
        if r["found"]:
            c = r["culprit"]
            lines.append(
                f"  first bad commit: {c['sha'][:10]} {c['subject']} ({c['date']}, {c['author']})"
            )
            lines += [f"    {s}" for s in c["stat"]]
            lines += ["  " + _row_text(row) for row in r["rows"]]
            if r.get("census_against_good"):
                lines.append(f"  its census against GOOD's: {r['census_against_good']}")
            if r["traces"]:
                lines.append(f"  trace pair: {r['traces'][0]} (GOOD) and {r['traces'][1]} (it)")
        else:
            shas = ", ".join(s[:10] for s in r["candidates"])
            lines.append(f"  not pinned: the first bad commit is one of {shas} (skipped between)")
        lines.append(f"  {r['measured_steps']} measured steps ({r['runs']} runs)")
    for s in doc["skipped"]:
        lines.append(f"skipped: {s['sha'][:10]} {s['subject']}: {s['why']}")
    cost = doc["cost"]
    lines.append(
        f"cost: {cost['seconds']:.0f} s: {cost['paired_runs']} paired runs "
        f"({cost['paired_seconds']:.0f} s), {cost['census_runs']} census runs "
        f"({cost['census_seconds']:.0f} s), checkouts and the rest "
        f"{cost['seconds'] - cost['paired_seconds'] - cost['census_seconds']:.0f} s"
    )
    return lines


def _what(r: Mapping[str, Any]) -> str:
    return "work" if r["kind"] == "work" else f"{r['op'] or 'total'} ({r['family']})"


def _row_text(row: Mapping[str, Any]) -> str:
    if "status" in row:
        return (
            f"{row['op']} in {row['module'] or 'the body'} ({row['phase']}): {row['status']}, "
            f"calls {row['base_calls']} → {row['cur_calls']}, FLOPs {row['base_flops']} → "
            f"{row['cur_flops']}, bytes {row['base_bytes']} → {row['cur_bytes']}"
        )
    good, cur = row["good_us"], row["culprit_us"]
    us = f"{good:.1f} µs → {cur:.1f} µs " if good is not None and cur is not None else ""
    return f"{row['op']} ({row['family']}): {us}{row['change']}"


def markdown(doc: Mapping[str, Any]) -> str:
    """A summary for ``$GITHUB_STEP_SUMMARY``."""
    good, bad = doc["good"], doc["bad"]
    out = [
        "## tprof bisect",
        "",
        f"{doc['commits']} commits after `{good['sha'][:10]}` up to `{bad['sha'][:10]}`.",
        "",
    ]
    if not doc["regressions"]:
        out.append("Nothing regressed from GOOD to BAD.")
    out += ["| test | regression | first bad commit | steps |", "|---|---|---|---|"]
    for r in doc["regressions"]:
        found = r["culprit"]
        where = (
            f"`{found['sha'][:10]}` {found['subject']} ({found['date'][:10]})"
            if found
            else "one of " + ", ".join(f"`{s[:10]}`" for s in r["candidates"])
        )
        out.append(
            f"| `{r['test']}` | {_what(r)} {r['good_to_bad']} | {where} | {r['measured_steps']} |"
        )
    if doc["skipped"]:
        out += [
            "",
            "Skipped: " + "; ".join(f"`{s['sha'][:10]}` ({s['why']})" for s in doc["skipped"]),
        ]
    return "\n".join(out) + "\n"


def write_all(doc: Mapping[str, Any], own: Path, args: Any, out: TextIO) -> None:
    """The answer printed, and written as JSON and Markdown where asked (the JSON always to
    ``.tprof/bisect/bisect.json``)."""
    for line in text(doc):
        print(line, file=out)
    body = json.dumps(doc, indent=2, sort_keys=True) + "\n"
    own.mkdir(parents=True, exist_ok=True)
    write_atomic(own / "bisect.json", body)
    if args.json:
        write_atomic(Path(args.json), body)
        print(f"JSON: {args.json}", file=out)
    md = markdown(doc)
    if args.markdown:
        write_atomic(Path(args.markdown), md)
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        with open(summary, "a", encoding="utf-8") as f:
            f.write(md)
