"""Which rounds the machine disturbed, from the readings :mod:`tprof_engine.capture.load`
stored with them, and what a run's header and summary say of it (docs/design.md §16).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple, Protocol

import numpy as np

from tprof_engine.model.arrays import BoolArray, FloatArray
from tprof_engine.model.gpu_clocks import SLOWING_REASONS, reasons_text
from tprof_engine.model.ranks import ranks_in
from tprof_engine.model.records import OpTable

try:
    import resource
except ImportError:  # Windows: the thread's CPU time alone is read
    resource = None  # type: ignore[assignment]


def waited_us(table: OpTable) -> FloatArray | None:
    """Each round's time waiting for a CPU; None when the table has no readings.

    The run-queue wait where the kernel reports it.  Time off the CPU (wall less CPU time)
    counts too in a round where the thread never blocked itself: that is a hypervisor's
    steal, or a wait the run queue doesn't show.  A round that blocked (a device
    synchronize, I/O) spends its own time off the CPU, so only its run-queue wait counts.
    """
    load = table.load
    if load is None:
        return None
    off_cpu = np.maximum(table.wall_us - load.cpu_us, 0.0)
    if load.queued_us is None:
        # No run-queue reading (not Linux): time off the CPU is all there is; a device run
        # blocks in its synchronize every round, so there it tells nothing.
        return np.zeros(table.rounds) if table.has_device else off_cpu
    # the run-queue reading closes a few µs after the round: a wait that began in between
    # counts, so it is capped at the round's own time
    queued = np.minimum(load.queued_us, table.wall_us)
    if load.blocks is None:
        return queued
    waited: FloatArray = np.where(load.blocks > 0, queued, np.maximum(queued, off_cpu))
    return waited


def waited_rounds(table: OpTable, *, share: float, minimum_us: float) -> BoolArray | None:
    """Which rounds waited for a CPU: longer than ``share`` of the round and ``minimum_us``."""
    waited = waited_us(table)
    if waited is None:
        return None
    return waited > np.maximum(share * table.wall_us, minimum_us)


def crowded_rounds(table: OpTable, *, crowd: float, siblings: int = 0) -> BoolArray | None:
    """Which rounds shared the machine: other runnable tasks, besides ``siblings`` (the run's
    own other workers and threads), on at least ``crowd`` of its CPUs (at least one) when the
    round began or ended.  Neighbours that don't take this thread's CPU still share its caches
    and memory bandwidth: the time between ops read 45-107 % longer beside a memory-bound
    neighbour without a single wait (docs/design.md, "A busy machine")."""
    load = table.load
    if load is None or load.neighbours is None:
        return None
    at_least = max(1, int(np.ceil(crowd * load.cpus)))
    crowded: BoolArray = (load.neighbours - siblings) >= at_least
    return crowded


def slowed_gpu_rounds(table: OpTable) -> BoolArray | None:
    """Which rounds ran while the GPU held its clocks down for the machine's sake (thermal,
    hardware slowdown, power brake: ``capture.gpu_state.SLOWING_REASONS``); None without
    GPU readings."""
    load = table.load
    if load is None or load.gpu_slowed is None:
        return None
    slowed: BoolArray = (load.gpu_slowed & SLOWING_REASONS) != 0
    return slowed


def disturbed_rounds(
    table: OpTable, rule: Disturbance, reference: Reference | None = None
) -> BoolArray | None:
    """Rounds that waited for a CPU, ran beside busy processes and slower for it (the drift
    probe's ``reference``: :func:`slowed_beside_others`), or ran on a slowed GPU; None
    without readings."""
    found = _masks(table, rule, reference)
    return None if found is None else found.waited | found.crowded | found.gpu


# A distributed test's ranks share the machine's cores and wait for one another's threads in
# every round, the baseline's as much as the current run's: on 2 quiet cores, 2 ranks of an
# MLP wait 2-5 % of a round in the run queue and of a ResNet-18 (its gradients all-reduced
# while backward runs) 14-16 %; a spinning process per core made them wait 30-52 %.  Such a
# round waited for a CPU past this share (docs/design.md §17).
RANK_WAIT_SHARE = 0.25


class _Masks(NamedTuple):
    waited: BoolArray  # waited for a CPU
    crowded: BoolArray  # shared the machine and ran slower for it
    gpu: BoolArray  # ran on a GPU slowed by the machine (none without GPU readings)
    beside: BoolArray  # shared the machine, slower or not (reported)


def _masks(table: OpTable, rule: Disturbance, reference: Reference | None = None) -> _Masks | None:
    """The rounds that waited, were crowded and slowed, or ran on a slowed GPU.

    A distributed test's table (one of joined ranks) counts its ranks' own threads, each
    rank's and its backend's worker, as the run's load, not as neighbours."""
    share, siblings = rule.wait_share, rule.siblings
    ranks = len(ranks_in(table.names))
    if ranks:  # a distributed test, one rank or more
        share, siblings = max(share, RANK_WAIT_SHARE), siblings + 2 * ranks - 1
    waited = waited_rounds(table, share=share, minimum_us=rule.wait_min_us)
    if waited is None:
        return None
    crowded = crowded_rounds(table, crowd=rule.crowd_share, siblings=siblings)
    gpu = slowed_gpu_rounds(table)
    none = np.zeros_like(waited)
    beside = none if crowded is None else crowded
    slowed = beside & slowed_beside_others(table, rule, waited | beside, reference)
    return _Masks(waited, slowed, none if gpu is None else gpu, beside)


def slowed_beside_others(
    table: OpTable, rule: Disturbance, shared: BoolArray, reference: Reference | None
) -> BoolArray:
    """Which rounds read slower than ``reference`` beside other processes: their drift probe
    by more than ``rule.probe_slowed``, or their memory read (``RoundLoad.memory_us``) by more
    than ``rule.memory_slowed``: this process slowed by a neighbour that took no CPU from it
    (one sharing its caches or memory bandwidth).  ``reference``: the quiet readings, the
    baseline's (:func:`quiet_reference`); without one, this table's own rounds that didn't
    share the machine.  With neither reading (or no reference at all) every round that shared
    the machine counts as slowed, as before the probe was read."""
    if reference is None and (~shared).any():
        reference = quiet_reference([table.with_rounds(np.flatnonzero(~shared))])
    quiet = reference or Reference(probe=None)
    probe = _slower(table.probe_cpu_us, quiet.probe, rule.probe_slowed, table.rounds)
    memory = table.load.memory_us if table.load is not None else None
    read = _slower(memory, quiet.memory, rule.memory_slowed, table.rounds)
    masks = [m for m in (probe, read) if m is not None]
    if not masks:
        return np.ones(table.rounds, dtype=bool)
    slowed: BoolArray = np.logical_or.reduce(masks)
    return slowed


def _slower(
    readings: FloatArray | None, reference: float | None, share: float, rounds: int
) -> BoolArray | None:
    """Which of the ``rounds`` rounds' ``readings`` exceed ``reference`` by more than
    ``share``; None where either is missing, or the readings are not one per round."""
    if readings is None or readings.size != rounds or not readings.any():
        return None
    if reference is None or reference <= 0:
        return None
    slower: BoolArray = readings > reference * (1.0 + share)
    return slower


@dataclass(frozen=True, slots=True)
class Reference:
    """The quiet readings rounds beside other processes are read against (µs; None: not
    read): the drift probe's and the memory read's."""

    probe: float | None
    memory: float | None = None


def quiet_reference(tables: Sequence[OpTable]) -> Reference | None:
    """The drift probe's time and the memory read's on the quietest rounds of ``tables``
    (their lower quartiles, µs); None when they have neither reading."""
    probes = [t.probe_cpu_us for t in tables if t.probe_cpu_us.size and t.probe_cpu_us.any()]
    reads = [
        t.load.memory_us
        for t in tables
        if t.load is not None and t.load.memory_us is not None and t.load.memory_us.any()
    ]
    if not probes and not reads:
        return None
    return Reference(probe=_lower_quartile(probes), memory=_lower_quartile(reads))


def _lower_quartile(parts: Sequence[FloatArray]) -> float | None:
    return float(np.quantile(np.concatenate(parts), 0.25)) if parts else None


class Disturbance(Protocol):
    """The rule's parameters for disturbed rounds (:class:`tprof_engine.rule.Rule` has them)."""

    @property
    def wait_share(self) -> float: ...
    @property
    def wait_min_us(self) -> float: ...
    @property
    def crowd_share(self) -> float: ...
    @property
    def siblings(self) -> int: ...
    @property
    def probe_slowed(self) -> float: ...
    @property
    def memory_slowed(self) -> float: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class Busy:
    """How busy the machine was over one table's rounds."""

    rounds: int
    waited: int  # rounds that waited for a CPU
    waited_share: float  # of those rounds' wall time, the share spent waiting
    crowded: int  # rounds that shared the machine with other runnable tasks
    disturbed: int  # rounds that did any of these
    cpus: int
    gpu_slowed: int = 0  # rounds on a GPU the machine slowed (thermal, power brake, ...)
    gpu_reasons: int = 0  # the slowing reasons those rounds saw (NVML bits)
    slowed_beside: int = 0  # of the crowded rounds, those whose probe read slower (no wait)
    kept_beside: int = 0  # of the undisturbed rounds, those that still shared the machine

    @property
    def on_gpu(self) -> bool:
        """The slowed GPU, not the CPU, kept most disturbed rounds out."""
        return self.gpu_slowed * 2 > self.disturbed

    @property
    def quiet(self) -> int:
        return self.rounds - self.disturbed

    def describe(self) -> str:
        """``14 of 20 rounds waited for a CPU (31 % of their time)``, and the crowded ones."""
        parts = []
        if self.waited:
            parts.append(
                f"{self.waited} of {self.rounds} rounds waited for a CPU "
                f"({self.waited_share:.0%} of their time)"
            )
        if self.crowded:
            parts.append(
                f"{self.crowded} of {self.rounds} ran beside other processes "
                f"busy on the machine's {self.cpus} CPU(s)"
                + (
                    f" ({self.slowed_beside} of them slower for it, "
                    "by the drift probe or the memory read)"
                    if self.slowed_beside
                    else ""
                )
            )
        if self.gpu_slowed:
            parts.append(
                f"{self.gpu_slowed} of {self.rounds} ran while the GPU held its clocks down "
                f"({reasons_text(self.gpu_reasons & SLOWING_REASONS)})"
            )
        return "; ".join(parts) or f"0 of {self.rounds} rounds disturbed"


def busy_of(table: OpTable, rule: Disturbance, reference: Reference | None = None) -> Busy | None:
    """The table's rounds as :class:`Busy`; None without readings."""
    found = _masks(table, rule, reference)
    waited = waited_us(table)
    if found is None or waited is None or table.load is None:
        return None
    waited_mask, crowded, gpu, beside = found
    wall = float(table.wall_us[waited_mask].sum())
    reasons = table.load.gpu_slowed
    return Busy(
        rounds=table.rounds,
        waited=int(waited_mask.sum()),
        waited_share=float(waited[waited_mask].sum()) / wall if wall > 0 else 0.0,
        crowded=int(beside.sum()),
        disturbed=int((waited_mask | crowded | gpu).sum()),
        kept_beside=int((beside & ~(waited_mask | crowded | gpu)).sum()),
        slowed_beside=int((crowded & ~waited_mask).sum()),
        cpus=table.load.cpus,
        gpu_slowed=int(gpu.sum()),
        gpu_reasons=0 if reasons is None else int(np.bitwise_or.reduce(reasons[gpu], initial=0)),
    )


def quiet_table(table: OpTable, rule: Disturbance, reference: Reference | None = None) -> OpTable:
    """The table without its disturbed rounds (as it is without readings)."""
    mask = disturbed_rounds(table, rule, reference)
    if mask is None or not mask.any():
        return table
    return table.with_rounds(np.flatnonzero(~mask))


def quietest(table: OpTable, rule: Disturbance, rounds: int) -> OpTable:
    """``rounds`` of the table's rounds, undisturbed ones first, in the order they ran: what a
    recording keeps of captures taken again on a busy machine (the protocol's count)."""
    if table.rounds <= rounds:
        return table
    mask = disturbed_rounds(table, rule)
    order = np.arange(table.rounds) if mask is None else np.argsort(mask, kind="stable")
    return table.with_rounds(np.sort(order[:rounds]))


# A baseline session with fewer undisturbed rounds than this is left out of the timing.
SESSION_QUIET_ROUNDS = 2


def disturbed_counts(tables: Sequence[OpTable], rule: Disturbance) -> tuple[int, int, int] | None:
    """Over the tables with readings: rounds disturbed, rounds read and rounds that waited for
    a CPU (None: no table has readings)."""
    found = [b for t in tables if (b := busy_of(t, rule)) is not None]
    if not found:
        return None
    return (
        sum(b.disturbed for b in found),
        sum(b.rounds for b in found),
        sum(b.waited for b in found),
    )


def run_summary(
    tables: Sequence[tuple[str, OpTable]],
    rule: Disturbance,
    *,
    worst: int = 3,
    saving: bool = False,
    paired: bool = False,
    unjudged: Sequence[str] | None = None,
) -> list[str]:
    """How busy the machine was over a run: the share of measured rounds disturbed (waited
    for a CPU, or ran beside busy processes) and the tests most disturbed; saving, which
    tests' sessions keep no timing; ``paired`` (tprof ab), that every round was kept.
    ``unjudged``: in a run that judged, the tests whose timing the machine kept from being
    judged (the judge reads rounds beside other processes against the baseline's probe,
    which the run's tables alone can't).  Nothing when no table has readings."""
    found = [(name, b) for name, t in tables if (b := busy_of(t, rule)) is not None]
    if not found:
        return []
    rounds = sum(b.rounds for _, b in found)
    disturbed = sum(b.disturbed for _, b in found)
    waited = sum(b.waited for _, b in found)
    judged = _judged_words(paired, disturbed == rounds, unjudged)
    line = (
        f"machine: {disturbed} of {rounds} measured rounds ({disturbed / rounds:.0%}) disturbed "
        f"({waited} waited for a CPU); {judged}"
    )
    hit = sorted(
        (nb for nb in found if nb[1].disturbed), key=lambda nb: -nb[1].disturbed / nb[1].rounds
    )
    if hit:
        line += "; most: " + ", ".join(
            f"{name} ({b.disturbed} of {b.rounds})" for name, b in hit[:worst]
        )
    untimed = [name for name, b in found if b.quiet < SESSION_QUIET_ROUNDS]
    shared = _gpu_shared([t for _, t in tables])
    return [
        line,
        *([shared] if shared else []),
        *([_untimed_sessions(untimed, worst)] if saving and untimed else []),
    ]


def _judged_words(paired: bool, all_disturbed: bool, unjudged: Sequence[str] | None) -> str:
    if paired:
        return "each kept: a pair's two rounds share the machine"
    if unjudged is not None:
        if unjudged:
            return f"the timing of {len(unjudged)} test(s) was not judged (machine busy)"
        return "timing is judged on the rounds this process ran undisturbed"
    if all_disturbed:
        return "no round was undisturbed, so no timing could be judged"
    return "timing is judged on the others"


def _gpu_shared(tables: Sequence[OpTable]) -> str | None:
    """The run's rounds on a GPU other processes held a context on, said, not left out: NVML
    can't tell an idle holder (a notebook's) from a busy one, and another context's kernels
    take turns with the test's between kernels, which the device family (kernel time) doesn't
    count; the idle family reports it."""
    counts = [t.load.gpu_others for t in tables if t.load is not None]
    readings = [c for c in counts if c is not None]
    if not readings:
        return None
    shared = sum(int((c > 0).sum()) for c in readings)
    rounds = sum(int(c.size) for c in readings)
    if not shared:
        return None
    most = max(int(c.max()) for c in readings)
    return (
        f"GPU: {shared} of {rounds} measured rounds ran while up to {most} other process(es) "
        "held a context on the GPU (kept: kernel time is judged; device idle time is reported)"
    )


def _untimed_sessions(names: Sequence[str], worst: int) -> str:
    shown = " ".join(f'"{n}"' for n in names[:worst]) + (" …" if len(names) > worst else "")
    return (
        f"machine: {len(names)} session(s) saved on a busy machine keep no timing (calls and "
        f"work still gate; timing is judged on the other sessions): save again when the "
        f"machine is quieter: pytest --tprof-save {shown}"
    )
