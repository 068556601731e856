"""``tprof show``: a key-averages-style table of one baseline or trace, per op and round."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np

from tprof_engine.model.arrays import FloatArray
from tprof_engine.model.communication import collectives, row_place
from tprof_engine.model.errors import ConfigError
from tprof_engine.model.records import OpTable
from tprof_engine.model.results import Source
from tprof_engine.model.work import WorkTable, flops_unknown, flops_unknown_text
from tprof_engine.render.report import aligned

SORT_KEYS = ("self_cpu", "self_cuda", "calls", "name")
DEFAULT_LIMIT = 30


def show_lines(
    source: Source,
    *,
    sort: str = "self_cpu",
    limit: int | None = DEFAULT_LIMIT,
    disturbed: tuple[int, int, int] | None = None,
) -> list[str]:
    """A key-averages-style table of one baseline or trace: per op, per round.

    Per op: calls per round (the range when it varies), median and interquartile range of
    self CPU µs per round and, when the table has device times, of self CUDA µs; rounds of
    every session are pooled.  ``disturbed``: the rounds the machine disturbed, of those read,
    and those that waited for a CPU (``decide.timing.busy.disturbed_counts``; None: no readings).
    """
    if sort not in SORT_KEYS:
        raise ConfigError(f"'sort' must be one of {', '.join(SORT_KEYS)} (got {sort!r})")
    tables = source.tables
    total_cpu = _median_round_total(tables, "self_cpu_us")
    total_dev = None
    if all(t.has_device for t in tables):
        total_dev = _median_round_total(tables, "self_device_us")
    lines = _show_heading(source, total_cpu, total_dev, disturbed)
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
        lines += _comm_lines(source.work) + _work_lines(source.work, limit)
    return lines


def _comm_lines(work: WorkTable) -> list[str]:
    """The census's collectives per rank and step, when it has any."""
    rows = collectives(work)
    if not rows:
        return []
    cells = [("rank", "collective", "calls/step", "bytes sent/step", "dtypes", "modules")]
    cells += [
        (
            "-" if r.rank is None else str(r.rank),
            row_place(r),
            f"{r.calls:g}",
            f"{round(r.bytes):,}",
            "/".join(r.dtypes),
            ", ".join(r.modules),
        )
        for r in rows
    ]
    return [
        "",
        "  communication per step:",
        *("  " + line for line in aligned(cells, right=(2, 3))),
    ]


def _work_lines(work: WorkTable, limit: int | None) -> list[str]:
    """The census of the newest session: totals, then rows by FLOPs, then by bytes."""
    rows = sorted(work.rows, key=lambda r: (-r.flops, -r.bytes_total, r.label))
    lines = [
        "",
        f"  work census: {len(work.rows)} op rows, FLOPs {work.total_flops:,}, bytes "
        f"{work.total_bytes:,} per round; {len(work.syncs)} host sync rows, "
        f"{len(work.copies)} device copy rows",
    ]
    unknown = flops_unknown(work.rows)
    if unknown:
        lines.append(f"  {flops_unknown_text(unknown)}")
    cells = [("op", "module", "phase", "calls", "FLOPs", "bytes")]
    for r in rows if not limit else rows[:limit]:
        cells.append(
            (
                r.op,
                r.module or "(top)",
                r.phase,
                f"{r.calls:,}",
                "unknown" if r.op in unknown else f"{r.flops:,}",
                f"{r.bytes_total:,}",
            )
        )
    lines += ["  " + line for line in aligned(cells, right=(3, 4, 5))]
    if limit and len(rows) > limit:
        lines.append(f"  ... {len(rows) - limit} more rows (--limit 0 shows all)")
    return lines


def _median_round_total(tables: Sequence[OpTable], metric: str) -> float:
    """Median over the pooled rounds of one metric's sum over ops (µs per round)."""
    return _median(np.concatenate([getattr(t, metric).sum(axis=0) for t in tables]))


def _show_heading(
    source: Source,
    total_cpu: float,
    total_dev: float | None,
    disturbed: tuple[int, int, int] | None,
) -> list[str]:
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
    lines += _machine_lines(tables, disturbed)
    if source.device_names:
        lines.append(f"  devices: {', '.join(source.device_names)}")
    if source.fingerprint is not None:
        lines.append(f"  environment: {source.fingerprint.key}")
    return lines


def _machine_lines(tables: Sequence[OpTable], disturbed: tuple[int, int, int] | None) -> list[str]:
    """The time outside any op, and how many rounds the machine disturbed (with readings)."""
    host = _median(np.concatenate([t.host_us for t in tables]))
    line = f"  time outside any op {host:,.1f} µs per round" if host > 0 else ""
    if disturbed is not None:
        hit, rounds, waited = disturbed
        line += "; " if line else "  "
        line += f"{hit} of {rounds} rounds disturbed ({waited} waited for a CPU)"
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
