"""What changed in a round's structure: ops that came or went and calls that changed, sized by
each side's share of its own round.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from tprof_engine.decide.timing import device as gpu
from tprof_engine.decide.timing.rule import Rule
from tprof_engine.decide.timing.samples import OpStats, Total, VsRest
from tprof_engine.model.family_specs import is_device
from tprof_engine.model.records import OpTable
from tprof_engine.model.verdicts import (
    STRUCTURAL_OPS,
    OpVerdict,
)


def _added_us(o: OpStats) -> float:
    """Time per round a structural change adds (negative when it saves time)."""
    cur, base = _added_sides(o)
    return cur + base


def _added_sides(o: OpStats) -> tuple[float, float]:
    """The time a structural change adds, split by the side it was measured on: what new ops
    and extra calls take now (current µs), and what removed ops and fewer calls took (baseline
    µs, negative)."""
    if o.base_calls == 0 and o.cur_calls > 0:
        return o.cur_us, 0.0
    if o.cur_calls == 0 and o.base_calls > 0:
        return 0.0, -o.base_us
    if o.cur_calls > o.base_calls:
        return (o.cur_calls - o.base_calls) * (o.cur_us / o.cur_calls), 0.0
    if o.cur_calls < o.base_calls:
        return 0.0, -(o.base_calls - o.cur_calls) * (o.base_us / o.base_calls)
    return 0.0, 0.0


def _added_share(ops: dict[str, OpStats], base_total: float, cur_total: float) -> float:
    """The structural change's net share of the baseline's round, with each side's part read
    against its own round, so the process's speed cancels: µs against the baseline's round
    read the same change at 3 % in one process and 10 % in the next.

    With ``x`` the added part's share of the current round and ``r`` the removed part's
    share of the baseline's, a change of Δ on a round of B (both in one process's units)
    gives ``x = N / (B + Δ)`` and ``r = R / B`` with Δ = N − R, so Δ / B = (x − r) / (1 − x).
    """
    if base_total <= 0 or cur_total <= 0:
        return 0.0
    cur_part = base_part = 0.0
    for o in ops.values():
        c, b = _added_sides(o)
        cur_part += c
        base_part += b
    x, r = cur_part / cur_total, -base_part / base_total
    return (x - r) / (1.0 - x) if x < 1.0 else math.inf


@dataclass(frozen=True, slots=True, kw_only=True)
class Structure:
    changes: tuple[OpVerdict, ...]
    added_us: float
    regressed: bool
    host_waits: tuple[gpu.HostWait, ...] = ()
    share: float = 0.0  # of the round, each side's part against its own (_added_share)


def structure_of(
    ops: dict[str, OpStats],
    verdicts: Sequence[OpVerdict],
    total: Total,
    rule: Rule,
    host_waits: Sequence[gpu.HostWait] = (),
) -> Structure:
    """New ops and extra calls, net of removed ops and fewer calls, against the round (each
    side's part against its own round: :func:`_added_share`); and on device runs, DtoH copies
    and host syncs: one more per round fails whatever its time."""
    added = 0.0
    for o in ops.values():
        added += _added_us(o)
    share = _added_share(ops, total.base_us, total.cur_us)
    # The ops that moved most first: a flag op that came (aten::_nnpack_available) after the
    # convolution that replaced the kernel.
    changes = tuple(
        sorted(
            (v for v in verdicts if v.verdict in STRUCTURAL_OPS),
            key=lambda v: -abs(v.delta_us) if math.isfinite(v.delta_us) else 0.0,
        )
    )
    regressed = bool(changes) and (
        rule.strict_calls or (share >= rule.structure_share and added >= rule.abs_floor_us)
    )
    regressed |= any(w.more for w in host_waits)
    return Structure(
        changes=changes,
        added_us=added,
        regressed=regressed,
        host_waits=tuple(host_waits),
        share=share,
    )


def host_wait_reasons(
    baseline: Sequence[OpTable], current: OpTable, family: str
) -> list[gpu.HostWait]:
    """The device family's host-wait changes, when every side has a device table."""
    if not is_device(family) or current.device is None:
        return []
    tables = [b.device for b in baseline if b.device is not None]
    if len(tables) < len(baseline):  # a baseline from before device tables: nothing to tell
        return []
    return gpu.host_waits(tables, current.device)


def structure_reasons(
    total: Total, gated: Sequence[OpVerdict], structure: Structure, vs_rest: dict[str, VsRest]
) -> list[str]:
    """One line per thing that regressed or changed, in the failure's words."""
    reasons: list[str] = []
    if total.regressed:
        reasons.append(
            f"total op time {total.delta_pct:+.1%} (p={total.p_greater:.2g}, "
            f"floor {total.floor:.0%} {total.floor_source})"
        )
    for o in gated:
        if o.vs_rest_only:
            reasons.append(
                f"{o.op} {o.vs_rest_pct:+.0f}% against the rest of the test ({o.share:.0%} of "
                f"the round, floor {o.vs_rest_floor_pct:.0f}%, p={vs_rest[o.op].p:.2g}; "
                f"{o.delta_pct:+.0f}% in {'raw µs' if total.raw_us else 'probe units'}, "
                f"floor {o.floor_pct:.0f}%)"
            )
        else:
            reasons.append(
                f"{o.op} {o.delta_pct:+.0f}% ({o.share:.0%} of the round, p={o.p_value:.2g})"
            )
    if structure.changes:
        reasons.append(_structure_reason(structure, total.base_us))
    reasons.extend(w.describe() for w in structure.host_waits)
    return reasons


def _structure_reason(structure: Structure, base_total: float) -> str:
    changes, added = structure.changes, structure.added_us
    what = ", ".join(f"{o.op} {o.calls_baseline}→{o.calls_current}" for o in changes[:6])
    more = f" (+{len(changes) - 6} more)" if len(changes) > 6 else ""
    calls = f"calls changed{replaced_path(changes)}"
    if not structure.regressed:
        return f"{calls}, net {added:+.0f} µs per round: {what}{more}"
    if base_total > 0:
        return (
            f"{calls}, adding {added:+.0f} µs per round "
            f"({_share_text(structure.share)} of the round): {what}{more}"
        )
    return f"{calls}: {what}{more}"


def replaced_path(changes: Sequence[OpVerdict]) -> str:
    """The op that took the most time among those gone and the one that takes the most among
    those new, as `` (aten::mkldnn_convolution → aten::_slow_conv2d_forward)``: the path the
    work now takes (another kernel, a fallback); empty unless ops both went and came."""
    gone = [o for o in changes if o.calls_current == 0]
    came = [o for o in changes if o.calls_baseline == 0]
    if not gone or not came:
        return ""
    old = max(gone, key=lambda o: o.baseline_median_us)
    new = max(came, key=lambda o: o.current_median_us)
    return f" ({old.op} → {new.op})"


def _share_text(share: float) -> str:
    return f"{share:+.0%}" if math.isfinite(share) else "nearly all"
