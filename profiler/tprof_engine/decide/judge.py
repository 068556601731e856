"""One judging path: comparability → compare → exact gates, for the plugin and the CLI alike.

:func:`judge` turns two recorded sides into a verdict; :mod:`.policy` says whether it needs
confirming and merges each confirmation into it.  The pytest glue and ``tprof diff`` both call
these and only render what comes back.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from tprof_engine.decide.gates import finding, registry
from tprof_engine.decide.timing import busy
from tprof_engine.decide.timing.compare import compare_across, says_nothing
from tprof_engine.decide.timing.rule import Rule, paired_rule
from tprof_engine.decide.timing.sides import Recorded as Recorded  # the judge's input: its face too
from tprof_engine.decide.timing.sides import Sides
from tprof_engine.model import family_specs
from tprof_engine.model.environment import comparability
from tprof_engine.model.family_specs import family_total
from tprof_engine.model.limits import is_count
from tprof_engine.model.records import OpTable
from tprof_engine.model.verdicts import (
    IMPROVED,
    INCOMPARABLE,
    INCONCLUSIVE,
    REGRESSED,
    UNCHANGED,
    FamilyResult,
    TestVerdict,
)
from tprof_engine.model.work import WorkTable


def judge(
    baseline: Recorded,
    current: Recorded,
    rule: Rule,
    *,
    notes: Sequence[str] = (),
    paired: bool = False,
) -> TestVerdict:
    """The verdict on ``current``'s last table against all of ``baseline``'s tables
    (``paired``, tprof ab: one table whose rounds ran beside the current's, judged pair by pair
    under ``rule.paired_rule``, every round kept).

    Different structure keys (torch, device) make the pair incomparable; other differing hard
    keys or protocol keys leave only calls compared.  Sides recorded with different iterations
    per round (folders recorded apart calibrate their own) are compared per iteration.
    ``notes`` from the caller go after the judgement's own.  The timing's verdict, then each
    gate's finding (:data:`~tprof_engine.decide.gates.registry.GATES`) joined to it.
    """
    verdict, sides = _timed(baseline, current, rule, notes=notes, paired=paired)
    if verdict.verdict == INCOMPARABLE:
        return verdict
    found_by_gates = registry.findings(sides)
    verdict = with_noise_check(verdict, sides.rule, work_moved=finding.work_moved(found_by_gates))
    for found_by_gate in found_by_gates:
        verdict = finding.applied(verdict, found_by_gate)
    holders = {**baseline.holders, **sides.current_table.meta.get("parents", {})}  # newer first
    return with_enclosing_ops(verdict, holders, current.work or baseline.work)


def _timed(
    baseline: Recorded, current: Recorded, rule: Rule, *, notes: Sequence[str], paired: bool
) -> tuple[TestVerdict, Sides]:
    """The timing's verdict on the rounds it may judge, and the sides the gates read (the
    machine that kept the timing from being judged among them)."""
    found: list[str] = []
    structure, diffs = _differences(baseline, current, found)
    base_tables, current_table, per_call = _comparable_rounds(baseline, current, diffs, found)
    if paired:
        rule, machine_busy = paired_rule(rule), None
        found.extend(_paired_notes(base_tables[-1], current_table, rule))
    else:
        rule = _beside_others(base_tables, current_table, rule, found)
        base_tables, current_table, machine_busy = _undisturbed(
            base_tables, current_table, rule, found
        )
    if machine_busy is not None and not diffs:
        diffs.append(machine_busy)
    verdict = compare_across(
        base_tables,
        current_table,
        rule,
        structure_diffs=structure,
        timing_diffs=diffs,
        notes=[*found, *notes],
    )
    sides = Sides(
        baseline=baseline,
        current=current,
        base_tables=tuple(base_tables),
        current_table=current_table,
        per_call=per_call,
        rule=rule,
        busy=machine_busy,
    )
    return verdict, sides


def _comparable_rounds(
    baseline: Recorded, current: Recorded, diffs: list[str], found: list[str]
) -> tuple[list[OpTable], OpTable, int]:
    """Both sides' tables as compared, and the calls of the body each round holds: sides
    recorded with different iterations per round (folders recorded apart calibrate their
    own) are compared per iteration (one call a round; their iterations dropped from
    ``diffs``, a note in ``found``)."""
    base_tables, current_table = list(baseline.tables), current.tables[-1]
    ib, ic = iterations_of(baseline.protocol), iterations_of(current.protocol)
    if ib is None or ic is None or ib == ic:
        return base_tables, current_table, ib if ib == ic and ib else 1
    diffs[:] = [d for d in diffs if not d.startswith("iterations ")]
    found.append(f"rounds of {ib} and {ic} iterations: compared per iteration")
    return [per_iteration(t, ib) for t in base_tables], per_iteration(current_table, ic), 1


def _beside_others(
    baseline: Sequence[OpTable], current: OpTable, rule: Rule, found: list[str]
) -> Rule:
    """``rule``, told when most of the rounds judging keeps ran beside busy processes (with
    a note in ``found``): there the CPU times are read over the ops' common shift and an op
    alone must rise on both routes to fail the test (:mod:`.timing.beside`)."""
    kept = busy.busy_of(current, rule, busy.quiet_reference(baseline))
    if (
        kept is None
        or kept.quiet < rule.quiet_rounds_needed(current.rounds)
        or 2 * kept.kept_beside <= kept.quiet
    ):
        return rule
    found.append(
        f"{kept.kept_beside} of the {kept.quiet} rounds judged ran beside other busy "
        "processes: the CPU times are read over the shift every op shared, and an op alone "
        "fails the test only when it slowed both in its own time and against the rest of the "
        "test"
    )
    return replace(rule, beside_others=True)


def _undisturbed(
    baseline: Sequence[OpTable], current: OpTable, rule: Rule, found: list[str]
) -> tuple[list[OpTable], OpTable, str | None]:
    """:func:`quiet_rounds`, with a note in ``found`` on the baseline sessions it left out."""
    base_tables, current_table, machine_busy = quiet_rounds(baseline, current, rule)
    if machine_busy is None and len(base_tables) < len(baseline):
        found.append(
            f"{len(baseline) - len(base_tables)} of {len(baseline)} baseline sessions left out "
            f"of the timing: saved on a busy machine (fewer than {busy.SESSION_QUIET_ROUNDS} "
            "undisturbed rounds)"
        )
    return base_tables, current_table, machine_busy


def _paired_notes(base: OpTable, current: OpTable, rule: Rule) -> list[str]:
    """What a paired judgement says of its rounds: how many pairs, and the disturbed rounds
    it kept (a neighbour's load fell on both sides of their pairs)."""
    found = [f"paired: {min(base.rounds, current.rounds)} head rounds, each beside a base round"]
    disturbed = [b for t in (base, current) if (b := busy.busy_of(t, rule)) is not None]
    total = sum(b.rounds - b.quiet for b in disturbed)
    if total:
        found.append(f"{total} disturbed round(s) kept: a pair's two rounds share the machine")
    return found


MACHINE_BUSY = "machine busy"
GPU_BUSY = "GPU busy"  # the GPU held its clocks down in too many rounds
# What an inconclusive test still vouches for: its calls, and its work when the work gate
# found it unchanged.
EXACT_UNCHANGED = "calls and work unchanged"
CALLS_UNCHANGED = "calls unchanged"


def quiet_rounds(
    baseline: Sequence[OpTable], current: OpTable, rule: Rule
) -> tuple[list[OpTable], OpTable, str | None]:
    """Both sides without their disturbed rounds (waited for a CPU, or ran beside busy
    processes and slower for it: the drift probe read slower than the baseline's), and why
    timing can't be judged on them (None when it can).

    The current run needs ``rule.quiet_rounds_needed`` undisturbed rounds; a baseline session
    with fewer than two is left out of the timing (its floor would learn a neighbour's load).
    When either is short, both sides keep every round: timing is not compared, and calls
    are read from the same rounds as ever.
    """
    reference = busy.quiet_reference(baseline)
    now = busy.busy_of(current, rule, reference)
    quiet_now = busy.quiet_table(current, rule, reference)
    kept = [busy.quiet_table(t, rule, reference) for t in baseline]
    usable = [t for t in kept if t.rounds >= busy.SESSION_QUIET_ROUNDS]
    if now is not None and now.quiet < rule.quiet_rounds_needed(current.rounds):
        label = GPU_BUSY if now.on_gpu else MACHINE_BUSY
        return list(baseline), current, f"{label}: {now.describe()}"
    if not usable:
        why = "every baseline session's rounds were disturbed (re-record on a quieter machine)"
        return list(baseline), current, f"{MACHINE_BUSY}: {why}"
    return usable, quiet_now, None


def _noise(f: FamilyResult, rule: Rule) -> tuple[str | None, str | None]:
    """Why family ``f`` can't vouch for an unchanged test: too noisy, or rounds too short
    (None each when it can)."""
    limit = rule.useful_floor * 100.0
    learned = rule.rel_floor is None and f.floor_pct > limit
    if learned or f.mde_pct > limit:
        return (
            f"{f.family.upper()} floor {f.floor_pct:.0f}% ({f.floor_source}), "
            f"min detectable effect {f.mde_pct:.0f}%"
        ), None
    if rule.abs_floor_us > limit / 100 * f.baseline_total_us:
        return None, (
            f"{f.family.upper()} rounds of {f.baseline_total_us:,.1f} µs, so a slowdown under "
            f"the {rule.abs_floor_us:g} µs minimum (abs_floor_us) is "
            f"{rule.abs_floor_us / f.baseline_total_us:.0%} of the round"
        )
    return None, None


def _vouches(f: FamilyResult) -> bool:
    """Whether a family's floor says if the test's timing could see a slowdown: a gating op
    family's does (:mod:`tprof_engine.model.family_specs`; the time between ops may be too
    noisy, the ops vouch)."""
    return f.gates and family_specs.spec(f.family).vouches


def too_noisy(verdict: TestVerdict, rule: Rule, *, work_moved: bool = False) -> str | None:
    """Why the timing layer can't vouch for an unchanged test, or None when it can.

    Timings not compared (another host, other hardware, a line tracer) saw nothing; a floor
    or a minimum detectable effect above ``rule.useful_floor`` passes any slowdown short of
    it; rounds shorter than twice the absolute floor hide any slowdown under it.  Such a test
    is inconclusive, not unchanged, when none of its vouching families can vouch: calls and
    work still gate.  A fixed floor is the user's choice and isn't second-guessed; the
    detectable effect still is.
    """
    if not verdict.timing_compared:
        shown = ", ".join(verdict.differences) or "no comparable timings"
        vouched = CALLS_UNCHANGED if work_moved else EXACT_UNCHANGED
        return f"{vouched}; timings not compared: {shown}"
    found = [_noise(f, rule) for f in verdict.families if _vouches(f)]
    if not found or any(n is None and s is None for n, s in found):
        return None
    noisy = [n for n, _ in found if n is not None]
    short = [s for _, s in found if s is not None]
    if noisy:
        return (
            "timing too noisy to judge: " + "; ".join(noisy) + ". Record more sessions "
            "(--tprof-save; a larger --tprof-window), longer rounds (--tprof-min-round-us), "
            "or a fixed floor (--tprof-floor / rel_floor=)"
        )
    return (
        "rounds too short to judge: " + "; ".join(short) + ". Run more calls per round "
        "(--tprof-min-round-us; for pytest-benchmark, more iterations) or lower "
        "abs_floor_us in @pytest.mark.tprof"
    )


def with_noisy_families(verdict: TestVerdict, rule: Rule) -> TestVerdict:
    """Each vouching family too noisy to judge marked so (its verdict left to the others)."""
    marked = [
        replace(f, too_noisy=True) if _vouches(f) and _noise(f, rule)[0] is not None else f
        for f in verdict.families
    ]
    return replace(verdict, families=tuple(marked))


def with_noise_check(verdict: TestVerdict, rule: Rule, *, work_moved: bool = False) -> TestVerdict:
    """An unchanged verdict whose timing couldn't have seen a slowdown says so (what it still
    vouches for: its calls, and its work unless ``work_moved``)."""
    verdict = with_noisy_families(verdict, rule)
    if verdict.verdict != UNCHANGED:
        return verdict
    why = too_noisy(verdict, rule, work_moved=work_moved)
    if why is None:
        return verdict
    reason = why if says_nothing(verdict) else f"{why} | {verdict.reason}"
    return replace(verdict, verdict=INCONCLUSIVE, reason=reason)


# How many enclosing ops are climbed to find the census's op (aten::mkldnn_convolution in
# aten::_convolution in aten::convolution: two).
ENCLOSING_DEPTH = 6


def with_enclosing_ops(
    verdict: TestVerdict, parents: Mapping[str, str], work: WorkTable | None
) -> TestVerdict:
    """Each timed op the work census doesn't name, with the census op it runs inside: the
    op ``parents`` (the reduction's most frequent direct holder of each op) lead up to."""
    if work is None or not parents:
        return verdict
    census = {r.op for r in work.rows}
    ops = tuple(
        o if o.op in census else replace(o, inside=_enclosing(o.op, parents, census))
        for o in verdict.ops
    )
    return replace(verdict, ops=ops)


def census_holders(parents: Mapping[str, str], work: WorkTable | None) -> dict[str, str]:
    """What a baseline keeps of a run's holders: those of the ops its census doesn't name,
    enough to place an op a later run no longer calls (its chain up to a census op)."""
    if work is None:
        return {}
    census = {r.op for r in work.rows}
    return {op: held for op, held in parents.items() if op not in census}


def _enclosing(op: str, parents: Mapping[str, str], census: set[str]) -> str | None:
    for _ in range(ENCLOSING_DEPTH):
        held_by = parents.get(op)
        if held_by is None or held_by in census:
            return held_by
        op = held_by
    return None


def _differences(
    baseline: Recorded, current: Recorded, notes: list[str]
) -> tuple[list[str], list[str]]:
    """Structure and timing differences between the sides (notes say what couldn't be told)."""
    traced = list(dict.fromkeys(t for t in (baseline.tracer, current.tracer) if t))
    if baseline.fingerprint is not None and current.fingerprint is not None:
        structure, timing = comparability(
            baseline.fingerprint, current.fingerprint, baseline.protocol, current.protocol
        )
        host = host_difference(baseline.hosts, current.hosts[-1] if current.hosts else None)
        return structure, timing + ([host] if host and not timing else []) + traced
    diffs: list[str] = traced
    b_dev, c_dev = baseline.device_names, current.device_names
    if b_dev is not None and c_dev is not None and b_dev != c_dev:
        diffs.append(f"gpus {_names(b_dev)} → {_names(c_dev)}")
    notes.append("a trace carries no environment fingerprint: comparability was not checked")
    return [], diffs


def host_difference(baseline_hosts: Sequence[str | None], here: str | None) -> str | None:
    """Why timings can't be judged across hosts, or None when they can.

    A floor learned on one host knows nothing of the spread between hosts: timing is judged
    against a baseline that holds sessions of this host, or of two hosts or more (its floor
    then spans hosts).  Calls and work gate either way.  A baseline whose sessions record no
    host (saved before hosts were kept) could come from anywhere: re-recording fixes it.  A
    side with no host at all (a trace, a table built in code) isn't judged by this rule.
    """
    if here is None or not baseline_hosts:
        return None
    known = sorted({h for h in baseline_hosts if h})
    if here in known or len(known) >= 2:
        return None
    if not known:
        return "host: the baseline's sessions record no host (re-record with --tprof-save)"
    return (
        f"host: baseline from one other host ({known[0]}, this is {here}); timings are judged "
        "against sessions of this host or of 2+ hosts"
    )


def _names(names: Sequence[str]) -> str:
    return "[" + ", ".join(names) + "]" if names else "none"


def iterations_of(protocol: Mapping[str, Any]) -> int | None:
    """The protocol's calls of the body per round, if it records a valid count."""
    n = protocol.get("iterations")
    return n if is_count(n) else None


def per_iteration(table: OpTable, iterations: int) -> OpTable:
    """``table`` with per-round calls and op times divided by the iterations per round.

    The probe runs once per round and keeps its time.  Calls are rounded, and an op called
    at all keeps at least one call (a once-per-round synchronize stays visible).
    """
    if iterations == 1:
        return table
    calls = np.rint(table.calls / iterations).astype(np.int64)
    calls = np.where(table.calls > 0, np.maximum(calls, 1), 0)
    return replace(
        table,
        calls=calls,
        self_cpu_us=table.self_cpu_us / iterations,
        total_cpu_us=table.total_cpu_us / iterations,
        self_device_us=table.self_device_us / iterations,
        total_device_us=table.total_device_us / iterations,
        wall_us=table.wall_us / iterations,
        host_before_us=None if table.host_before_us is None else table.host_before_us / iterations,
        device=None if table.device is None else table.device.per_iteration(iterations),
        memory=None if table.memory is None else table.memory.per_iteration(iterations),
        load=None if table.load is None else table.load.per_iteration(iterations),
    )


def unlike_window(verdict: TestVerdict) -> str | None:
    """Why a session about to join a baseline's window measured other code, or None.

    A save whose work or structure changed restarts the window on its own; one whose timing
    alone failed the test's gate against the window (an op or a family's total beyond its
    floor), or whose total op time improved beyond it, is kept with this warning: sessions of
    other code would teach the floor their difference.  A single op reading faster is left
    alone: with few sessions that is noise more often than a change.
    """
    if verdict.structure_regressed or verdict.work_regressed:
        return None
    if verdict.timing_regressed:
        gated = {(f.family, op) for f in verdict.families for op in f.op_gate}
        ops = [o for o in verdict.ops if (o.family, o.op) in gated]
        if ops:
            top = max(ops, key=lambda o: o.delta_pct)
            return _unlike(f"{top.op} {top.family.upper()} {top.delta_pct:+.0f}%")
    moved = [f for f in verdict.families if f.verdict in (REGRESSED, IMPROVED)]
    if moved:
        return _unlike(f"{family_total(moved[0].family)} {moved[0].delta_pct:+.0f}%")
    return None


def _unlike(what: str) -> str:
    return f"unlike the window: {what} (kept: the floor learns that spread)"
