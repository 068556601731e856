"""Numbers, percents, p-values and family labels as every report writes them.

The terminal, Markdown, HTML and the CLI format through here, so one figure reads the same in
each.  Functions take JSON values (None for a missing or non-finite number) or floats.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tprof_engine.model.family_specs import family_total
from tprof_engine.model.verdicts import (
    FAMILY_LABEL,
    FLAGGED_OPS,
    NEW,
    REGRESSED,
    verdict_rank,
)
from tprof_engine.model.work_verdict import WorkVerdict


def family(name: Any) -> str:
    """``cpu`` → ``CPU``; unknown families as they are."""
    return FAMILY_LABEL.get(str(name), str(name))


def num(v: Any) -> float | None:
    """A finite number from a JSON value, else None."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return float(v) if math.isfinite(v) else None


def us(v: Any, *, signed: bool = False) -> str:
    """Microseconds with thousands separators: ``1,234.5``, signed ``+12.0``; ``-`` if none."""
    x = num(v)
    if x is None:
        return "-"
    if signed and abs(x) < 0.05:
        return "±0.0"
    return f"{x:+,.1f}" if signed else f"{x:,.1f}"


def pct(v: Any, verdict: str = "") -> str:
    """A signed whole percentage: ``+31%``, ``±0%``; ``new`` for a new op."""
    if isinstance(v, float) and math.isinf(v) and v > 0:
        return "new"
    x = num(v)
    if x is None:
        return "new" if verdict == NEW else "-"
    return "±0%" if abs(x) < 0.5 else f"{x:+.0f}%"


def share(v: Any) -> str:
    """A percentage without a sign (floors, detectable effects)."""
    x = num(v)
    return "-" if x is None else f"{x:.0f}%"


def p_value_floored(v: Any) -> str:
    """A p-value for tables: below 0.0001 reads ``<0.0001``."""
    x = num(v)
    if x is None:
        return "-"
    return "<0.0001" if x < 0.0001 else f"{x:.2g}"


def work_facts(work: Any, *, limit: int = 6) -> tuple[str, list[str]]:
    """A report's ``work`` section in words: the verdict with its totals, and what moved
    where (its reasons after the totals'); ``("", [])`` without one."""
    if not isinstance(work, Mapping):
        return "", []
    verdict = _work_verdict(work)
    head = (
        f"work {verdict.verdict} (deterministic): "
        f"FLOPs {total_move(verdict.base_flops, verdict.cur_flops)}, "
        f"bytes {total_move(verdict.base_bytes, verdict.cur_bytes)}"
    )
    reasons = list(verdict.row_reasons)
    more = [f"… {len(reasons) - limit} more in the JSON report"] if len(reasons) > limit else []
    return head, [*reasons[:limit], *more]


def work_failed(work: Any) -> bool:
    """Whether a report's ``work`` section failed its test (its exact cause then leads)."""
    return isinstance(work, Mapping) and work.get("verdict") == REGRESSED


def work_cause(work: Any) -> list[str]:
    """A regressed work verdict as one cause (``[]`` for any other)."""
    return [f"work regressed: {_work_verdict(work).headline()}"] if work_failed(work) else []


def _work_verdict(work: Mapping[str, Any]) -> WorkVerdict:
    return WorkVerdict.from_dict(
        {"flops": [0, 0], "bytes": [0, 0], "floor": 0.0, **work, "rows": []}
    )


def local_path(path: str) -> str:
    """A path as the reader's checkout names it: relative to the current directory when it
    lies under it (a CI summary shouldn't show the runner's folders), else as it is."""
    p = Path(path)
    if not p.is_absolute():
        return path
    try:
        return p.relative_to(Path.cwd()).as_posix()
    except ValueError:
        return path


def calls_per(steps: int) -> str:
    """The header of a work table's calls: per call of the body ("step"), or per ``steps``."""
    return "calls/step" if steps == 1 else f"calls/{steps} steps"


def total_move(base: int, cur: int) -> str:
    """A total, baseline → current, with its change: ``2,000 → 4,000 (+100.0%)``."""
    moved = f" ({(cur - base) / base:+.1%})" if base and cur != base else ""
    return f"{base:,} → {cur:,}{moved}"


def module_rows(work: Any, *, limit: int = 10) -> list[tuple[str, str, str, str]]:
    """Per module and phase: path, phase, FLOPs and bytes baseline → current (when the work
    moved; modules that moved most first)."""
    if not isinstance(work, Mapping) or work.get("verdict") == "unchanged":
        return []
    return [
        (
            str(m.get("module") or "(top)"),
            str(m.get("phase", "")),
            f"{m.get('base_flops', 0):,} → {m.get('cur_flops', 0):,}",
            f"{m.get('base_bytes', 0):,} → {m.get('cur_bytes', 0):,}",
        )
        for m in list(work.get("modules", []))[:limit]
        if isinstance(m, Mapping)
    ]


def counts_line(tests: Sequence[Mapping[str, Any]]) -> str:
    """``3 profiled tests: 1 regressed, 2 unchanged``."""
    counts: dict[str, int] = {}
    for t in tests:
        v = str(t.get("verdict", ""))
        counts[v] = counts.get(v, 0) + 1
    parts = [f"{n} {v}" for v, n in sorted(counts.items(), key=lambda kv: verdict_rank(kv[0]))]
    noun = "test" if len(tests) == 1 else "tests"
    return f"{len(tests)} profiled {noun}" + (": " + ", ".join(parts) if parts else "")


def ordered_tests(doc: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The report's tests, most urgent verdict first; stable otherwise."""
    tests = [t for t in doc.get("tests", []) if isinstance(t, Mapping)]
    return sorted(tests, key=lambda t: verdict_rank(str(t.get("verdict", ""))))


def is_flagged(o: Mapping[str, Any]) -> bool:
    """An op row a failure shows: a regression or a structural change."""
    return o.get("verdict") in FLAGGED_OPS


def ops_by_interest(ops: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Flagged ops (regressed, structural) first, then the rest by the size of their delta."""

    def key(o: Mapping[str, Any]) -> tuple[int, float]:
        return (0 if is_flagged(o) else 1, -abs(num(o.get("delta_us")) or 0.0))

    return sorted(ops, key=key)


KERNEL_NAME_CHARS = 80  # a templated kernel name runs to hundreds of characters


def device_row_cells(r: Mapping[str, Any]) -> tuple[str, ...]:
    """A device row of a flagged op (``DeviceRowDelta.to_dict()``) as text cells: op, kind,
    name (cut short), calls, baseline → current µs per round, Δ µs, bytes per round."""
    name = str(r.get("name", ""))
    if len(name) > KERNEL_NAME_CHARS:
        name = name[: KERNEL_NAME_CHARS - 1] + "…"
    calls = f"{_count(r.get('calls_baseline'))} → {_count(r.get('calls_current'))}"
    size_b, size_c = r.get("bytes_baseline") or 0, r.get("bytes_current") or 0
    size = f"{size_b:,} → {size_c:,} B" if size_b or size_c else ""
    return (
        str(r.get("op", "")),
        str(r.get("kind", "")),
        name,
        calls,
        f"{us(r.get('baseline_us'))} → {us(r.get('current_us'))}",
        us(r.get("delta_us"), signed=True),
        size,
    )


def _count(v: Any) -> str:
    n = num(v)
    if n is None:
        return "-"
    return f"{n:.0f}" if n == int(n) else f"{n:.1f}"


def total(family_name: str) -> str:
    """A family's judged total in words: ``CPU total op time``, ``host time outside any op``."""
    return family_total(str(family_name))
