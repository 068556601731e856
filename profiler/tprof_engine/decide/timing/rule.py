"""Parameters of the decision rule and the learned floors.

Why each default is what it is, with the measurements behind it: ``docs/design.md`` ("The
decision rule") and ``benchmarks/detection/README.md``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from tprof_engine.decide.timing import stats
from tprof_engine.model.arrays import FloatArray
from tprof_engine.model.work import DEFAULT_WORK_FLOOR

# Ops that wait for the device rather than work: reported, never gated (on device runs).
SYNC_OPS = frozenset(
    {
        "cudaDeviceSynchronize",
        "cudaStreamSynchronize",
        "cudaEventSynchronize",
        "cudaStreamWaitEvent",
        "cuStreamSynchronize",
        "aten::item",
        "aten::_local_scalar_dense",
    }
)


# Expected range of n standard normal samples (d2 of control charts).
_RANGE_D = {
    2: 1.128,
    3: 1.693,
    4: 2.059,
    5: 2.326,
    6: 2.534,
    7: 2.704,
    8: 2.847,
    9: 2.970,
    10: 3.078,
}


@dataclass(frozen=True, slots=True, kw_only=True)
class Rule:
    """Parameters of the decision rule (docs/design.md, "The decision rule")."""

    alpha: float = 0.01
    rel_floor: float | None = None  # fixed relative floor; None = learned from sessions
    # Minimum floor in probe units: ops drift between sessions by amounts neither the probe
    # nor the rest of the test tracks; small single-op changes are the vs-rest route's.
    min_rel_floor: float = 0.10
    # The U tests ask for a shift beyond this share of the floor (the floor already bounds
    # session drift); the estimate itself must still exceed the whole floor.
    shift_share: float = 0.5
    single_session_floor: float = 0.15  # conservative floor when one session can't show drift
    op_single_session_floor: float = 0.20
    abs_floor_us: float = 20.0
    material_share: float = 0.05  # an op carrying this share of the round is gated alone
    attribution_share: float = 0.10  # ops carrying this share of a total delta are listed
    structure_share: float = 0.05
    strict_calls: bool = False
    ignore: tuple[str, ...] = ()  # fnmatch patterns of ops to leave out
    probe: bool = True  # compare in drift-probe units
    # Each family in the units its baseline sessions agree on best: raw µs where the probe
    # widens their learned floor (decide.timing.units.probe_narrows); False: probe units
    # wherever a family has a probe.
    choose_units: bool = True

    # Each material op is also judged against the rest of its own test (its time over the
    # other ops' time, round by round): drift that moves the whole test cancels there.
    vs_rest: bool = True
    vs_rest_min_rest: float = 0.2  # the rest must carry this share of the round
    vs_rest_shift_share: float = 0.25  # as ``shift_share``, for the op-over-rest ratio
    vs_rest_min_rel_floor: float = 0.07  # the ratio's minimum floor (the drift cancels there)
    # The op's own change in probe units must carry this share of its ratio's change: a ratio
    # that grew because the rest of the test got faster is the rest's doing, not the op's.
    vs_rest_own_share: float = 0.5

    # The work census gates without statistics: work doesn't drift, so a small share of the
    # test's FLOPs or bytes is a real change.
    work_floor: float = DEFAULT_WORK_FLOOR

    # A test whose floor or minimum detectable effect is above this share can't say
    # "unchanged" about its timing: it says "inconclusive" and what would help.
    useful_floor: float = 0.5
    floor_z: float = 3.0  # how far out a new session's drift may fall before it counts
    # Where a side's time is read: a lower quantile, since contention on a shared machine only
    # ever adds time; the U tests use the rounds below twice that quantile.  0.5 reads the
    # median and tests every round.
    quantile: float = 0.25

    # A busy machine (docs/design.md, "A busy machine"): a round that waited for a CPU longer
    # than this share of its time (and ``wait_min_us``) holds a neighbour's time inside an op,
    # and one that ran while other tasks were runnable on ``crowd_share`` of the CPUs may
    # have shared their caches and memory bandwidth.  Timing is judged on the other rounds;
    # with fewer than ``min_quiet_rounds`` of them in the current run, not at all ("machine
    # busy").
    # ``siblings``: the run's own other xdist workers and intra-op threads, not neighbours.
    wait_share: float = 0.01
    wait_min_us: float = 20.0
    crowd_share: float = 0.5
    # A round beside busy processes counts as disturbed only when this process ran slower for
    # it: its drift probe above the baseline's quiet probe by this share.  A neighbour on
    # another core is reported, not a veto (docs/design.md §16).
    probe_slowed: float = 0.15
    # ... or its memory read (capture.load.MemoryRead) above the baseline's by this share: a
    # memory-bandwidth hog on the other core read +48-57 % (lower quartile, median) where a
    # spin loop or a torch training job read 0-5 %, and quiet rounds vary ±1 %.
    memory_slowed: float = 0.25
    siblings: int = 0
    min_quiet_rounds: int = 10
    # Set by the judge, not by hand: most of the current run's kept rounds ran beside busy
    # processes (the probe didn't read them slower).  A neighbour slows an op's fixed cost
    # (dispatch, Python, memory traffic) where the probe's arithmetic doesn't show it, so the
    # CPU times are read over the ops' common shift (decide.timing.beside), and an op alone
    # fails a test only when it rose on both routes, its own time and against the rest of its
    # test (docs/design.md §16).
    beside_others: bool = False

    # tprof ab (docs/design.md §18): the head's rounds judged against the base's rounds run
    # next to them, pair by pair (a signed-rank test of the log ratios, their Hodges-Lehmann
    # centre as the change).  Drift between the sides cancels in a pair, so the floors are
    # fixed minimums, not learned from sessions; a disturbed round stays in (its pair saw the
    # same machine), and what a process alone brings is left to the fresh pair's confirmation.
    paired: bool = False
    paired_floor: float = 0.05
    paired_op_floor: float = 0.08

    def quiet_rounds_needed(self, rounds: int) -> int:
        """Undisturbed rounds a run of ``rounds`` rounds needs for its timing to be judged."""
        return min(self.min_quiet_rounds, rounds)

    def center(self, values: FloatArray) -> float:
        """The side's representative time (its ``quantile``)."""
        return stats.quantile(values, self.quantile) if values.size else 0.0

    def centers(self, rows: FloatArray) -> FloatArray:
        """:meth:`center` of each row of a 2-D array, in one pass."""
        if rows.size == 0:
            return np.zeros(rows.shape[0])
        return np.quantile(rows, self.quantile, axis=1)

    def lower(self, values: FloatArray) -> FloatArray:
        """The rounds the U tests use: those at or below twice the ``quantile``."""
        if self.quantile >= 0.5 or values.size < 4:
            return values
        return values[values <= stats.quantile(values, 2 * self.quantile)]

    def floor_for(
        self, session_medians: Sequence[float], *, op: bool = False, minimum: float | None = None
    ) -> float:
        """Relative floor: fixed if configured, else learned from how the sessions disagree.

        The range of n sessions understates how far the next session can drift (with three,
        the next one falls outside their range half the time), so the floor is a one-sided
        prediction bound: the between-session spread estimated from the range (σ ≈ range/dₙ,
        the normal range constant), widened by √(1 + 1/n), at ``floor_z`` spreads.
        """
        if self.rel_floor is not None:
            return self.rel_floor
        if self.paired:
            return self.paired_op_floor if op else self.paired_floor
        meds = [m for m in session_medians if m > 0]
        if len(meds) < 2:
            return self.op_single_session_floor if op else self.single_session_floor
        n = len(meds)
        sigma = math.log(max(meds) / min(meds)) / _RANGE_D.get(n, _RANGE_D[10])
        bound = math.expm1(self.floor_z * sigma * math.sqrt(1.0 + 1.0 / n))
        return max(self.min_rel_floor if minimum is None else minimum, bound)

    def round_floor(self) -> float:
        """The least share of a whole round a change must move in stored mode to count: the
        configured floor, else the rule's minimum (what the test's op total is held to)."""
        return self.rel_floor if self.rel_floor is not None else self.min_rel_floor

    def floor_source(self, sessions: int) -> str:
        """How the test-level floor was set, in words for the failure."""
        if self.rel_floor is not None:
            return "configured"
        if self.paired:
            return "paired with the base's rounds"
        if sessions >= 2:
            return f"learned from {sessions} baseline sessions"
        return "single-session default"


# tprof ab's turn passing: the side whose turn ended is still runnable for a few µs after it
# wakes the other (it then blocks on the socket), so the other's first round of a turn begins
# beside it and waits 30-110 µs in the run queue (the 2-core VM, both sides on one CPU).  A
# neighbour's wait on a shared CPU is a scheduler slice, milliseconds.
PAIR_TURN_WAIT_US = 250.0


def paired_rule(rule: Rule) -> Rule:
    """``rule`` for tprof ab's paired rounds: raw µs (both sides of a pair saw the same
    machine, the probe would only add its noise), no op-against-the-rest route (the pairing
    already cancels what moves the whole test); the other side is the pair's own load, not a
    neighbour, and a wait as short as the turn's passing is not a disturbance."""
    return replace(
        rule,
        paired=True,
        probe=False,
        vs_rest=False,
        siblings=rule.siblings + 1,
        wait_min_us=max(rule.wait_min_us, PAIR_TURN_WAIT_US),
    )
