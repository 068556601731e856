"""The exact work verdict: a census against its baseline's, row by row (docs/design.md §8)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Final

from tprof_engine.decide.gates.communication import without_collectives
from tprof_engine.decide.gates.finding import NOTHING, Finding, Gate
from tprof_engine.decide.gates.replacements import Replacements, subtree_work
from tprof_engine.decide.timing.rule import Rule
from tprof_engine.model.errors import ConfigError
from tprof_engine.model.ranks import bare, said_once, split
from tprof_engine.model.verdicts import UNCHANGED, WORK
from tprof_engine.model.work import (
    DEFAULT_WORK_FLOOR,
    EMPTY,
    QUIET,
    RowKey,
    RowStatus,
    WorkRow,
    WorkTable,
    WorkWord,
    copies_text,
    flops_unknown,
    flops_unknown_text,
    key_order,
    row_label,
    step_part,
    syncs_text,
    value_text,
)
from tprof_engine.model.work_verdict import WorkDelta, WorkVerdict


def judge_work(
    baseline: WorkTable, current: WorkTable, *, floor: float = DEFAULT_WORK_FLOOR
) -> WorkVerdict:
    """Compare a test's census with its baseline's, exactly: no statistics, no noise.

    Regressed when the test's total FLOPs or bytes grow by more than ``floor`` of the baseline
    total, or one row's FLOPs or bytes grow (or a new row adds) more than ``floor`` × the
    baseline total of that measure; improved when work shrinks that much and nothing grew;
    changed when anything else differs (signatures, dtypes, calls, copies, syncs, small rows).
    """
    if not floor >= 0:
        raise ConfigError(f"'floor' must be >= 0 (got {floor})")
    if baseline.iterations != current.iterations:
        raise ConfigError(
            f"the work censuses ran different iterations per round (baseline "
            f"{baseline.iterations}, current {current.iterations}); take both with the same"
        )
    sides = _Sides.of(baseline, current)
    rows = _net_replacements(tuple(_delta(key, sides, floor) for key in sides.keys()), sides, floor)
    grew, shrank = _gate_lines(rows, sides, floor)
    changes = _change_lines(rows, sides)
    verdict: WorkWord
    totals: tuple[str, ...] = ()
    if grew:
        verdict, lines, totals = "regressed", grew, _totals_moved(sides, floor, +1)
    elif shrank:
        verdict, lines, totals = "improved", shrank, _totals_moved(sides, floor, -1)
    elif changes:
        verdict, lines = "changed", changes
    else:
        verdict, lines = "unchanged", []
    return WorkVerdict(
        verdict=verdict,
        rows=rows,
        reasons=(*lines, *_note_lines(rows, sides)),
        base_flops=sides.base_flops,
        cur_flops=sides.cur_flops,
        base_bytes=sides.base_bytes,
        cur_bytes=sides.cur_bytes,
        floor=floor,
        compiled=bool(baseline.compiled or current.compiled),
        totals=totals,
        iterations=current.iterations,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class _Sides:
    """Both tables indexed by row, and their totals over the rows whose work doesn't vary."""

    baseline: WorkTable
    current: WorkTable
    base: Mapping[RowKey, WorkRow]
    cur: Mapping[RowKey, WorkRow]
    varying: frozenset[RowKey]
    base_flops: int
    cur_flops: int
    base_bytes: int
    cur_bytes: int

    @classmethod
    def of(cls, baseline: WorkTable, current: WorkTable) -> _Sides:
        varying = frozenset(r.key for r in (*baseline.rows, *current.rows) if r.varies)
        base = [r for r in baseline.rows if r.key not in varying]
        cur = [r for r in current.rows if r.key not in varying]
        return cls(
            baseline=baseline,
            current=current,
            base=baseline.index(),
            cur=current.index(),
            varying=varying,
            base_flops=sum(r.flops for r in base),
            cur_flops=sum(r.flops for r in cur),
            base_bytes=sum(r.bytes_total for r in base),
            cur_bytes=sum(r.bytes_total for r in cur),
        )

    def keys(self) -> list[RowKey]:
        return sorted(self.base.keys() | self.cur.keys(), key=key_order)


def _delta(key: RowKey, sides: _Sides, floor: float) -> WorkDelta:
    base_row, cur_row = sides.base.get(key), sides.cur.get(key)
    base, cur = base_row or EMPTY, cur_row or EMPTY
    status = _status(base_row, cur_row, key in sides.varying)
    gated = status != "varies" and (
        abs(cur.flops - base.flops) > floor * sides.base_flops
        or abs(cur.bytes_total - base.bytes_total) > floor * sides.base_bytes
    )
    return WorkDelta(
        op=key[0],
        module=key[1],
        phase=(base_row or cur).phase,
        status=status,
        gated=gated,
        base_calls=base.calls,
        cur_calls=cur.calls,
        base_flops=base.flops,
        cur_flops=cur.flops,
        base_bytes=base.bytes_total,
        cur_bytes=cur.bytes_total,
        base_signature=base.signature,
        cur_signature=cur.signature,
        grad_fns=(cur_row or base).grad_fns,
        source=(cur_row or base).source,
        cur_dtypes=cur.dtypes,
    )


def _net_replacements(
    rows: tuple[WorkDelta, ...], sides: _Sides, floor: float
) -> tuple[WorkDelta, ...]:
    """Gate new and gone ops by their group's net (a replacement is one change,
    :mod:`.replacements`), and a grown row also by its own module's work."""
    reps = Replacements.of(rows)

    def gated(r: WorkDelta) -> bool:
        if r.status in ("added", "deleted"):
            return _group_gated(reps.group_of[r.key], reps.net(r), sides, floor)
        if r.status in ("increased", "changed"):
            grew = (r.flops_delta, r.bytes_delta)
            return r.gated or _module_gated((r.module, r.phase), grew, sides, floor)
        return r.gated

    return tuple(replace(r, gated=gated(r)) if gated(r) != r.gated else r for r in rows)


# Work that grows also fails a test when it adds more than the floor of its own module's work
# in that part of the step (the module and its submodules; forward with its hooks, or
# backward) and this share of the floor of the test's: a copy of one activation in a hook, or
# one BatchNorm run in float64, is a fraction of a percent of a model's bytes but doubles its
# module's; a new ``.item()`` at the top level (whose module is the whole test) is not.
MODULE_MIN_SHARE = 0.01


def _group_gated(group: tuple[str, str], net: tuple[int, int], sides: _Sides, floor: float) -> bool:
    flops, size = net
    if abs(flops) > floor * sides.base_flops or abs(size) > floor * sides.base_bytes:
        return True
    return _module_gated(group, net, sides, floor)


def _module_gated(
    group: tuple[str, str], grew: tuple[int, int], sides: _Sides, floor: float
) -> bool:
    """Whether work grew by more than the floor of its module's (and a sliver of the test's)."""
    own = subtree_work(sides.baseline.rows, *group)
    totals = (sides.base_flops, sides.base_bytes)
    return any(
        more > floor * mine and more > floor * MODULE_MIN_SHARE * total
        for more, mine, total in zip(grew, own, totals, strict=True)
    )


def _status(base: WorkRow | None, cur: WorkRow | None, varies: bool) -> RowStatus:
    if varies:
        return "varies"
    if base is None:
        return "added"
    if cur is None:
        return "deleted"
    moves = {_sign(cur.flops - base.flops), _sign(cur.bytes_total - base.bytes_total)} - {0}
    if moves == {1}:
        return "increased"
    if moves == {-1}:
        return "decreased"
    same_use = (base.calls, base.signature, base.dtypes) == (cur.calls, cur.signature, cur.dtypes)
    return "changed" if moves or not same_use else "unchanged"


def _sign(x: int) -> int:
    return (x > 0) - (x < 0)


def _gate_lines(
    rows: Sequence[WorkDelta], sides: _Sides, floor: float
) -> tuple[list[str], list[str]]:
    """Reasons for growth beyond the floor and for shrinkage beyond it, totals first."""
    grew: list[str] = []
    shrank: list[str] = []
    for measure, base, cur in _totals_past(sides, floor):
        line = f"total {measure} {_change(base, cur)} ({base:,} → {cur:,})"
        (grew if cur > base else shrank).append(line)
    reps = Replacements.of(rows)
    named = False
    for line, direction in _replacement_lines(rows, reps, sides, floor):
        (grew if direction > 0 else shrank).append(line)
        named |= direction > 0
    flagged = sorted(
        (r for r in rows if r.gated and not reps.replaced(r)), key=lambda r: -_weight(r, sides)
    )
    for r in flagged:
        direction = reps.direction(r)
        moved = _moved(r, sides, floor, direction) or _moved_in_module(r, sides, direction)
        if moved:
            (grew if direction > 0 else shrank).append(_row_line(r, moved))
            named |= direction > 0
    if grew and not named:
        grew.extend(_largest_growth(rows, sides))
    return grew, shrank


def _totals_moved(sides: _Sides, floor: float, direction: int) -> tuple[str, ...]:
    """The totals that moved past the floor in ``direction``, short (their reasons' order)."""
    return tuple(
        f"{measure} {_change(base, cur)}"
        for measure, base, cur in _totals_past(sides, floor)
        if (cur - base) * direction > 0
    )


def _totals_past(sides: _Sides, floor: float) -> list[tuple[str, int, int]]:
    """The test's totals (measure, baseline, current) that moved by more than the floor."""
    return [
        (measure, base, cur)
        for measure, base, cur in (
            ("FLOPs", sides.base_flops, sides.cur_flops),
            ("bytes", sides.base_bytes, sides.cur_bytes),
        )
        if abs(cur - base) > floor * base
    ]


def _replacement_lines(
    rows: Sequence[WorkDelta], reps: Replacements, sides: _Sides, floor: float
) -> list[tuple[str, int]]:
    """One line per replacement whose new ops, net of its gone ones, moved the work."""
    out = []
    for module, phase in sorted(reps.both):
        flops, size = reps.nets[(module, phase)]
        if not _group_gated((module, phase), (flops, size), sides, floor):
            continue
        moved = [
            f"{measure} {delta:+,} net ({delta / total * 100:+.1f}% of the test's)"
            for measure, delta, total in (
                ("FLOPs", flops, sides.base_flops),
                ("bytes", size, sides.base_bytes),
            )
            if total and delta
        ]
        # Views (no FLOPs, no bytes) went and came with the ops they fed: not named.
        group = [r for r in reps.members(rows, (module, phase)) if r.does_work]
        gone = [_op_in(r, module) for r in group if r.status == "deleted"]
        new = sorted((r for r in group if r.status == "added"), key=lambda r: -_weight(r, sides))
        where = row_label(("", module, phase)).lstrip()  # "in m (phase)" / "at top level (…)"
        what = (
            f"{', '.join(gone[:3])} gone, {len(new)} new op{'s' if len(new) > 1 else ''} "
            f"({', '.join(_op_in(r, module) for r in new[:3])}{', …' if len(new) > 3 else ''})"
        )
        out.append((f"{where}: {what}, {', '.join(moved)}", 1 if max(flops, size) > 0 else -1))
    return out


def _op_in(r: WorkDelta, module: str) -> str:
    """The op, and its module when that is a submodule of the group's."""
    return r.op if r.module == module else f"{r.op} in {r.module}"


def _moved_in_module(r: WorkDelta, sides: _Sides, direction: int) -> list[str]:
    """A row gated by its module's floor: its growth as a share of the test and of the
    module (below the test's floor, or it would have been named already)."""
    if direction < 0:
        return []
    own = subtree_work(sides.baseline.rows, r.module, r.phase)
    whose = f"{r.module}'s" if r.module else "the top level's"
    whose += f" {step_part(r.phase)}"
    out = []
    for measure, base, cur, total, mine in (
        ("FLOPs", r.base_flops, r.cur_flops, sides.base_flops, own[0]),
        ("bytes", r.base_bytes, r.cur_bytes, sides.base_bytes, own[1]),
    ):
        if cur <= base:
            continue
        test_share = f"{(cur - base) / max(total, 1):.2%} of the test's"
        if base:  # a row that grew: its own change says the module's
            out.append(f"{measure} {_change(base, cur)} ({test_share})")
            continue
        module_share = f"{(cur - base) / mine:.1%} of {whose}" if mine else f"{whose} had none"
        out.append(f"{measure} {cur - base:+,} ({test_share}, {module_share})")
    return out


def _largest_growth(rows: Sequence[WorkDelta], sides: _Sides, limit: int = 3) -> list[str]:
    """When only the totals moved past the floor: the rows that grew most, by share of it."""
    growing = [r for r in rows if r.status != "varies" and (r.flops_delta > 0 or r.bytes_delta > 0)]
    ranked = sorted(growing, key=lambda r: -_weight(r, sides))[:limit]
    return [
        "largest growth: "
        + _row_line(r, _moved(r, sides, 0.0, +1) or ["work " + _change(0, r.bytes_delta)])
        for r in ranked
    ]


def _weight(r: WorkDelta, sides: _Sides) -> float:
    """The row's largest move as a share of the test's total of that measure."""
    flops = abs(r.flops_delta) / max(sides.base_flops, 1)
    return max(flops, abs(r.bytes_delta) / max(sides.base_bytes, 1))


def _moved(r: WorkDelta, sides: _Sides, floor: float, direction: int) -> list[str]:
    """The measures of a row that moved beyond the floor in ``direction`` (+1 grew, -1 shrank)."""
    out = []
    for measure, base, cur, total in (
        ("FLOPs", r.base_flops, r.cur_flops, sides.base_flops),
        ("bytes", r.base_bytes, r.cur_bytes, sides.base_bytes),
    ):
        if (cur - base) * direction > floor * total:
            out.append(_measure_text(measure, base, cur, total))
    return out


def _measure_text(measure: str, base: int, cur: int, total: int) -> str:
    """``FLOPs +9.9%``; for a row that had none: its amount and its share of the test."""
    if base and cur:
        return f"{measure} {_change(base, cur)}"
    share = f"{(cur - base) / total * 100:+.1f}% of the test's" if total else "the test had none"
    return f"{measure} {cur - base:+,} ({share})"


def _change(base: int, cur: int) -> str:
    return f"{(cur - base) / base * 100:+.1f}%" if base else f"{cur - base:+,}"


def _row_line(r: WorkDelta, measures: Sequence[str]) -> str:
    word = {"added": "new, ", "deleted": "gone, "}.get(r.status, "")
    tail = r.difference()
    text = f"{row_label(r.key, r.grad_fns)}: {word}{', '.join(measures)}"
    return text + (f" — {tail}" if tail else "") + (f" [{r.source}]" if r.source else "")


def _change_lines(rows: Sequence[WorkDelta], sides: _Sides) -> list[str]:
    """Differences below the floor: rows, dtypes, copies, syncs."""
    small = [
        (
            _small_change(r, sides, label=row_label((bare(r.op), r.module, r.phase), r.grad_fns)),
            split(r.op)[0],
        )
        for r in rows
        if not r.gated and r.status not in QUIET
    ]
    out = list(said_once(small))  # a distributed test's ranks that read the same, once
    base, cur = sides.baseline, sides.current
    if base.compiled != cur.compiled:
        out.append(f"calls into compiled code {base.compiled:,} → {cur.compiled:,}")
    if base.copies != cur.copies:
        out.append(f"device copies {copies_text(base.copies)} → {copies_text(cur.copies)}")
    if base.syncs != cur.syncs:
        out.append(f"host syncs {syncs_text(base.syncs)} → {syncs_text(cur.syncs)}")
    return out


def _small_change(r: WorkDelta, sides: _Sides, *, label: str) -> str:
    parts = []
    if r.status in ("added", "deleted"):
        parts.append(f"{'new' if r.status == 'added' else 'gone'}, below the floor")
    parts += [
        f"{what} {delta:+,}"
        for what, delta in (("FLOPs", r.flops_delta), ("bytes", r.bytes_delta))
        if delta
    ]
    base_types = sides.base.get(r.key, EMPTY).dtypes
    cur_types = sides.cur.get(r.key, EMPTY).dtypes
    if r.status not in ("added", "deleted") and base_types != cur_types:
        parts.append(f"dtypes {value_text(base_types)} → {value_text(cur_types)}")
    tail = r.difference()
    if not parts:
        return f"{label}: {tail}"
    return f"{label}: {', '.join(parts)}" + (f" — {tail}" if tail else "")


def _calls(n: int) -> str:
    return f"{n:,} call" + ("" if n == 1 else "s")


def _note_lines(rows: Sequence[WorkDelta], sides: _Sides) -> list[str]:
    """What the verdict can't judge: rows whose work varies, ops without a FLOP formula, and
    compiled code."""
    notes = [
        f"{row_label(r.key, r.grad_fns)}: work varies between census rounds "
        f"(FLOPs {r.base_flops:,} → {r.cur_flops:,}, "
        f"bytes {r.base_bytes:,} → {r.cur_bytes:,}); not gated"
        for r in rows
        if r.status == "varies"
    ]
    unknown = flops_unknown_text(flops_unknown(sides.current.rows))
    if unknown:
        notes.append(unknown)
    base, cur = sides.baseline.compiled, sides.current.compiled
    if base or cur:
        notes.append(
            f"compiled code: {_calls(cur)} into torch.compile'd code in this census "
            f"({_calls(base)} in the baseline's) ran eagerly for it; the census counts their "
            "eager ops and can't see inside compiled regions (fused kernels, generated code)"
        )
    return notes


def work_finding(baseline: WorkTable | None, current: WorkTable | None, rule: Rule) -> Finding:
    """The work census against the baseline's (FLOPs, bytes and calls per op, module and
    phase, exactly; collectives are the communication gate's).  Work needs only what calls
    need (the same torch and device type): it gates even when timings were not compared."""
    if current is None:
        return NOTHING
    if baseline is None:
        return Finding(notes=("no work baseline: re-record with --tprof-save",))
    if baseline.census != current.census:
        return Finding(
            notes=(
                f"work not compared: the baseline's census counted by older rules (census "
                f"{baseline.census}, now {current.census}: attention and RNN FLOPs, hook and "
                "optimizer phases); record a session with --tprof-save to gate work again",
            )
        )
    work = judge_work(
        without_collectives(baseline), without_collectives(current), floor=rule.work_floor
    )
    text = "" if work.verdict == UNCHANGED else f"work: {work.headline()}"
    return Finding(word=work.verdict, text=text, work=work)


# The work verdict is the verdict's ``work`` record; the model names its cause from it.
GATE: Final = Gate(
    kind=WORK,
    exact=True,
    find=lambda s: work_finding(s.baseline.work, s.current.work, s.rule),
)
