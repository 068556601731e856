"""Whether the machine let a round run, read around each round: thread CPU time, run-queue
wait of every thread of the process, context switches and the runnable tasks of the machine
(Linux ``/proc``, ``getrusage``), and how fast this process read memory just before it.
"""

from __future__ import annotations

import os
import time
from typing import Any

import numpy as np

from tprof_engine.capture.gpu_state import GpuMeter
from tprof_engine.model.records import RoundLoad

try:
    import resource
except ImportError:  # Windows: the thread's CPU time alone is read
    resource = None  # type: ignore[assignment]


_TASKS = "/proc/self/task"  # each thread of this process: <tid>/schedstat
_LOADAVG = "/proc/loadavg"
_RUSAGE_THREAD = getattr(resource, "RUSAGE_THREAD", None)


def _open(path: str) -> int | None:
    try:
        return os.open(path, os.O_RDONLY)
    except OSError:
        return None


class _ThreadWaits:
    """The run-queue wait of every thread of this process, by thread id, each thread's
    ``schedstat`` kept open while it lives.  A round whose body runs on torch's intra-op pool
    (``--tprof-threads 0``) waits in its worker threads: beside one spin loop, with 2 intra-op
    threads, an encoder step's round went from 11 to 31 ms, its threads waited 16 ms a round
    together and the calling thread 4 ms; quiet, every thread waited none in most rounds."""

    def __init__(self) -> None:
        self._fds: dict[str, int] = {}
        self.readable = os.path.isdir(_TASKS)

    def read(self) -> dict[str, int]:
        """Each live thread's run-queue wait so far, in ns (empty where ``/proc`` can't
        say)."""
        try:
            tids = os.listdir(_TASKS)
        except OSError:
            return {}
        out = {}
        for tid in tids:
            fd = self._fds.get(tid)
            if fd is None:
                opened = _open(f"{_TASKS}/{tid}/schedstat")
                fd = self._fds[tid] = -1 if opened is None else opened
            try:
                out[tid] = int(os.pread(fd, 64, 0).split()[1])
            except (OSError, IndexError, ValueError):
                continue
        for gone in set(self._fds) - set(tids):
            self._close(self._fds.pop(gone))
        return out

    def close(self) -> None:
        for fd in self._fds.values():
            self._close(fd)
        self._fds = {}

    @staticmethod
    def _close(fd: int) -> None:
        if fd >= 0:
            os.close(fd)


# The memory read's buffer: twice the last-level cache, within these bounds (bytes), read a
# sixteenth at a time so that each slice has left the cache when its turn comes again.
_MEMORY_MIN, _MEMORY_MAX = 64 << 20, 256 << 20
_SLICES = 16
_LINE = 16  # float32 values in a 64-byte cache line: one read per line
_CACHE_SIZE = "/sys/devices/system/cpu/cpu0/cache/index{}/size"


def _last_level_cache() -> int:
    """The largest CPU cache's size in bytes (0 where sysfs doesn't say)."""
    sizes = [0]
    for index in range(8):
        try:
            with open(_CACHE_SIZE.format(index)) as f:
                text = f.read().strip().upper()
        except OSError:
            break
        scale = {"K": 1 << 10, "M": 1 << 20}.get(text[-1:], 1)
        digits = text.rstrip("KM")
        if digits.isdigit():
            sizes.append(int(digits) * scale)
    return max(sizes)


class MemoryRead:
    """How long this process takes to read one slice of a buffer twice the size of the
    last-level cache, a cache line at a time: a reading of the memory bandwidth it gets.

    A neighbour copying arrays back and forth (a memory-bandwidth hog on the other core of
    this 2-core VM) doubled it (1.67 → 3.2-3.4 ms for 64 MiB) while the drift probe's
    arithmetic, in cache, read +8 %, and a T5 encoder's CPU time +6 % in one process and +63 %
    in the next (``busy_reruns.py --suite hf``).  The buffer is the process's, made once."""

    _buffer: np.ndarray | None = None

    def __init__(self) -> None:
        if MemoryRead._buffer is None:
            size = min(max(2 * _last_level_cache(), _MEMORY_MIN), _MEMORY_MAX)
            MemoryRead._buffer = np.ones(size // 4, dtype=np.float32)
        self._buf = MemoryRead._buffer
        self._at = 0

    def twice(self) -> float:
        """Two slices read, the faster one's time (µs): one read that met a passing blip is
        not the memory's speed."""
        return min(self(), self())

    def __call__(self) -> float:
        """One slice read, in µs; the next call reads the next slice."""
        n = self._buf.size // _SLICES
        start = self._at * n
        self._at = (self._at + 1) % _SLICES
        t0 = time.perf_counter_ns()
        self._buf[start : start + n : _LINE].sum()
        return (time.perf_counter_ns() - t0) / 1000.0


def _waited_ns(before: dict[str, int], after: dict[str, int]) -> int:
    """The run-queue wait between two :meth:`_ThreadWaits.read` readings: of each thread
    read both times (one that started or ended between them is left out)."""
    return sum(max(0, after[t] - w) for t, w in before.items() if t in after)


class LoadMeter:
    """Per-round readings of what the machine let the calling thread run.

    Create it in the thread that runs the rounds (its CPU time and context switches are that
    thread's; the run-queue wait is every thread's of the process) and call :meth:`before`
    and :meth:`after` around each round; each reading costs a few µs a thread, outside the
    round's timed interval.  The CPU clock is read last before and first after, so it brackets
    the round's wall time closely.  The memory is read (:class:`MemoryRead`, about 0.2 ms)
    when the meter is made, before the profiled warm-up, and when its result is taken: not
    between rounds, where streaming megabytes through the caches would change what the next
    round's body finds there.
    """

    def __init__(self, gpu: GpuMeter | None = None) -> None:
        self._gpu = gpu  # the GPU's own readings (capture.gpu_state), when profiled
        self._waits = _ThreadWaits()
        self._loadavg = _open(_LOADAVG)
        self._start: tuple[dict[str, int], int, int, int, int] = ({}, 0, 0, 0, 0)
        self.starts_ns: list[int] = []  # each round's start on the wall clock the trace uses
        self._cpu: list[int] = []
        self._queued: list[int] = []
        self._switches: list[int] = []
        self._blocks: list[int] = []
        self._neighbours: list[int] = []
        self._read_memory = MemoryRead()
        self._memory = [self._read_memory.twice()]

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
        if self._gpu is not None:
            self._gpu.before()
        others = self._runnable_others()
        queued = self._waits.read()
        inv, vol = self._switch_counts()
        self.starts_ns.append(time.time_ns())
        self._start = (queued, inv, vol, others, time.thread_time_ns())

    def after(self) -> None:
        cpu = time.thread_time_ns()
        queued = self._waits.read()
        inv, vol = self._switch_counts()
        q0, i0, v0, n0, c0 = self._start
        self._cpu.append(cpu - c0)
        self._queued.append(_waited_ns(q0, queued))
        self._switches.append(inv - i0)
        self._blocks.append(vol - v0)
        self._neighbours.append(max(n0, self._runnable_others()))
        if self._gpu is not None:
            self._gpu.after()

    def result(self) -> RoundLoad:
        """The readings so far, one value per round; the memory read's is the slower of the
        meter's two, before the rounds and now."""
        if len(self._memory) == 1:
            self._memory.append(self._read_memory.twice())
        linux, counted = self._waits.readable, _RUSAGE_THREAD is not None
        gpu = None if self._gpu is None else self._gpu.result()
        slowed, sm_mhz, gpu_others = (None, None, None) if gpu is None else gpu
        return RoundLoad(
            cpu_us=np.asarray(self._cpu, dtype=np.float64) / 1000.0,
            queued_us=np.asarray(self._queued, dtype=np.float64) / 1000.0 if linux else None,
            switches=np.asarray(self._switches, dtype=np.int64) if counted else None,
            blocks=np.asarray(self._blocks, dtype=np.int64) if counted else None,
            neighbours=np.asarray(self._neighbours, dtype=np.int64)
            if self._loadavg is not None
            else None,
            cpus=os.cpu_count() or 1,
            memory_us=np.full(len(self._cpu), max(self._memory)),
            gpu_slowed=slowed,
            gpu_sm_mhz=sm_mhz,
            gpu_others=gpu_others,
        )

    def close(self) -> None:
        self._waits.close()
        if self._loadavg is not None:
            os.close(self._loadavg)
        self._loadavg = None
        if self._gpu is not None:
            self._gpu.close()

    def __enter__(self) -> LoadMeter:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


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
        "are left out of the timing (and captured again, up to twice, so a busy test counts "
        "more rounds)"
    )


def round_counters(
    starts_ns: list[int], wall_us: Any, load: RoundLoad | None
) -> list[tuple[int, dict[str, Any]]]:
    """Each round's readings as a counter sample at its start, for the trace's counter track."""
    if load is None:
        return []
    rows = round_readings(wall_us, load)
    keys = ("wall_us", "cpu_us", "queued_us", "neighbours", "gpu_sm_mhz", "gpu_others")
    return [
        (start, {k: row[k] for k in keys if k in row})
        for start, row in zip(starts_ns, rows, strict=False)
    ]


def round_readings(wall_us: Any, load: RoundLoad) -> list[dict[str, Any]]:
    """Each round's readings as the trace's ``tprof_rounds`` metadata (warm-up rounds first)."""
    parts = load.to_dict()
    out = []
    for r in range(len(wall_us)):
        row = {"round": r, "wall_us": round(float(wall_us[r]), 3)}
        row.update({key: values[r] for key, values in parts.items() if isinstance(values, list)})
        out.append(row)
    return out
