"""Whether the machine let a round run: reading it around each round, and what follows.

On a shared machine other processes take the CPU.  A round whose thread waited for a CPU
holds that wait inside whichever op was running: its times are the neighbours' as much as
the code's.  :class:`LoadMeter` reads, around each measured round, the thread's CPU time, its
run-queue wait and context switches, and the other runnable tasks (Linux procfs and
``getrusage``; CPU time alone elsewhere).  The pure functions below say which rounds were
disturbed (waited for a CPU, or ran beside busy processes) and how busy a run was; the timing
rule judges only the others (``docs/design.md`` §16, "A busy machine").  No torch here.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from tprof_engine.records import BoolArray, FloatArray, OpTable, RoundLoad

try:
    import resource
except ImportError:  # Windows: the thread's CPU time alone is read
    resource = None  # type: ignore[assignment]

_SCHEDSTAT = "/proc/thread-self/schedstat"
_LOADAVG = "/proc/loadavg"
_RUSAGE_THREAD = getattr(resource, "RUSAGE_THREAD", None)


def _open(path: str) -> int | None:
    try:
        return os.open(path, os.O_RDONLY)
    except OSError:
        return None


class LoadMeter:
    """Per-round readings of what the machine let the calling thread run.

    Create it in the thread that runs the rounds (``/proc/thread-self`` is bound to the
    thread that opens it) and call :meth:`before` and :meth:`after` around each round; each
    reading costs a few µs, outside the round's timed interval.  The CPU clock is read last
    before and first after, so it brackets the round's wall time closely.
    """

    def __init__(self) -> None:
        self._sched = _open(_SCHEDSTAT)
        self._loadavg = _open(_LOADAVG)
        self._start: tuple[int, int, int, int, int] = (0, 0, 0, 0, 0)
        self.starts_ns: list[int] = []  # each round's start on the wall clock the trace uses
        self._cpu: list[int] = []
        self._queued: list[int] = []
        self._switches: list[int] = []
        self._blocks: list[int] = []
        self._neighbours: list[int] = []

    def _queued_ns(self) -> int:
        if self._sched is None:
            return 0
        try:
            return int(os.pread(self._sched, 64, 0).split()[1])
        except (OSError, IndexError, ValueError):
            return 0

    def _switch_counts(self) -> tuple[int, int]:
        if _RUSAGE_THREAD is None:
            return 0, 0
        usage = resource.getrusage(_RUSAGE_THREAD)
        return usage.ru_nivcsw, usage.ru_nvcsw

    def _runnable_others(self) -> int:
        """Runnable tasks on the machine besides this thread, from /proc/loadavg's 4th field."""
        if self._loadavg is None:
            return 0
        try:
            running = int(os.pread(self._loadavg, 128, 0).split()[3].split(b"/")[0])
        except (OSError, IndexError, ValueError):
            return 0
        return max(0, running - 1)

    def before(self) -> None:
        others = self._runnable_others()
        queued = self._queued_ns()
        inv, vol = self._switch_counts()
        self.starts_ns.append(time.time_ns())
        self._start = (queued, inv, vol, others, time.thread_time_ns())

    def after(self) -> None:
        cpu = time.thread_time_ns()
        queued = self._queued_ns()
        inv, vol = self._switch_counts()
        q0, i0, v0, n0, c0 = self._start
        self._cpu.append(cpu - c0)
        self._queued.append(queued - q0)
        self._switches.append(inv - i0)
        self._blocks.append(vol - v0)
        self._neighbours.append(max(n0, self._runnable_others()))

    def result(self) -> RoundLoad:
        """The readings so far, one value per round."""
        linux, counted = self._sched is not None, _RUSAGE_THREAD is not None
        return RoundLoad(
            cpu_us=np.asarray(self._cpu, dtype=np.float64) / 1000.0,
            queued_us=np.asarray(self._queued, dtype=np.float64) / 1000.0 if linux else None,
            switches=np.asarray(self._switches, dtype=np.int64) if counted else None,
            blocks=np.asarray(self._blocks, dtype=np.int64) if counted else None,
            neighbours=np.asarray(self._neighbours, dtype=np.int64)
            if self._loadavg is not None
            else None,
            cpus=os.cpu_count() or 1,
        )

    def close(self) -> None:
        for fd in (self._sched, self._loadavg):
            if fd is not None:
                os.close(fd)
        self._sched = self._loadavg = None

    def __enter__(self) -> LoadMeter:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


# --------------------------------------------------------------------------- the rounds


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


def disturbed_rounds(table: OpTable, rule: Disturbance) -> BoolArray | None:
    """Rounds that waited for a CPU or shared the machine; None without readings."""
    found = _masks(table, rule)
    return None if found is None else found[0] | found[1]


def _masks(table: OpTable, rule: Disturbance) -> tuple[BoolArray, BoolArray] | None:
    """The rounds that waited and the rounds that were crowded (none without neighbours)."""
    waited = waited_rounds(table, share=rule.wait_share, minimum_us=rule.wait_min_us)
    if waited is None:
        return None
    crowded = crowded_rounds(table, crowd=rule.crowd_share, siblings=rule.siblings)
    return waited, np.zeros_like(waited) if crowded is None else crowded


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


@dataclass(frozen=True, slots=True, kw_only=True)
class Busy:
    """How busy the machine was over one table's rounds."""

    rounds: int
    waited: int  # rounds that waited for a CPU
    waited_share: float  # of those rounds' wall time, the share spent waiting
    crowded: int  # rounds that shared the machine with other runnable tasks
    disturbed: int  # rounds that did either
    cpus: int

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
            )
        return "; ".join(parts) or f"0 of {self.rounds} rounds disturbed"


def busy_of(table: OpTable, rule: Disturbance) -> Busy | None:
    """The table's rounds as :class:`Busy`; None without readings."""
    found = _masks(table, rule)
    waited = waited_us(table)
    if found is None or waited is None or table.load is None:
        return None
    waited_mask, crowded = found
    wall = float(table.wall_us[waited_mask].sum())
    return Busy(
        rounds=table.rounds,
        waited=int(waited_mask.sum()),
        waited_share=float(waited[waited_mask].sum()) / wall if wall > 0 else 0.0,
        crowded=int(crowded.sum()),
        disturbed=int((waited_mask | crowded).sum()),
        cpus=table.load.cpus,
    )


def quiet_table(table: OpTable, rule: Disturbance) -> OpTable:
    """The table without its disturbed rounds (as it is without readings)."""
    mask = disturbed_rounds(table, rule)
    if mask is None or not mask.any():
        return table
    return table.with_rounds(np.flatnonzero(~mask))


def run_summary(
    tables: Sequence[tuple[str, OpTable]], rule: Disturbance, *, worst: int = 3
) -> str | None:
    """One line on how busy the machine was over a run: the share of measured rounds
    disturbed (waited for a CPU, or ran beside busy processes) and the tests most disturbed.
    None when no table has readings."""
    found = [(name, b) for name, t in tables if (b := busy_of(t, rule)) is not None]
    if not found:
        return None
    rounds = sum(b.rounds for _, b in found)
    disturbed = sum(b.disturbed for _, b in found)
    waited = sum(b.waited for _, b in found)
    line = (
        f"machine: {disturbed} of {rounds} measured rounds ({disturbed / rounds:.0%}) disturbed "
        f"({waited} waited for a CPU); timing is judged on the others"
    )
    hit = sorted(
        (nb for nb in found if nb[1].disturbed), key=lambda nb: -nb[1].disturbed / nb[1].rounds
    )
    if hit:
        line += "; most: " + ", ".join(
            f"{name} ({b.disturbed} of {b.rounds})" for name, b in hit[:worst]
        )
    return line


def machine_now() -> str | None:
    """The header's line: tasks runnable on the machine now besides this process, from
    /proc/loadavg; None where it can't be read."""
    try:
        with open(_LOADAVG, "rb") as f:
            fields = f.read().split()
        running = int(fields[3].split(b"/")[0]) - 1
        load1 = float(fields[0])
    except (OSError, IndexError, ValueError):
        return None
    return (
        f"machine: {os.cpu_count()} CPUs, {max(running, 0)} other task(s) runnable now, "
        f"load average {load1:.1f}; rounds that wait for a CPU or run beside busy processes "
        "are left out of the timing"
    )
