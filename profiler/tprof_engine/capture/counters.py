"""Hardware counters through Linux ``perf_event_open``: CPU instructions of the calling thread.

No torch here: torch 2.13's profiler takes ``performance_events`` in its experimental config,
but its Python events don't carry the counts, and where ``perf_event_open`` fails it logs a
warning (and an internal assert) for every op.  So tprof opens one counter of its own and reads
it around each call of the body (docs/gpu.md, "--tprof-collect=counters").
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import struct
from collections.abc import Callable
from typing import Any

_SYSCALL = {"x86_64": 298, "aarch64": 241}  # __NR_perf_event_open
_ATTR_SIZE = 64  # PERF_ATTR_SIZE_VER0: every kernel with perf events reads it
_TYPE_HARDWARE = 0
_HW_INSTRUCTIONS = 1
_EXCLUDE_KERNEL_AND_HV = (1 << 5) | (1 << 6)  # user space only: allowed at paranoid level 2


class CounterUnavailable(OSError):
    """The machine or its kernel gives no hardware counter to this process."""


class InstructionCounter:
    """Retired user-space instructions of the thread that opened it."""

    def __init__(self) -> None:
        self._fd = _open_instructions()

    def read(self) -> int:
        return int(struct.unpack("Q", os.read(self._fd, 8))[0])

    def close(self) -> None:
        os.close(self._fd)


def _open_instructions() -> int:
    number = _SYSCALL.get(platform.machine())
    if number is None:
        raise CounterUnavailable(f"no perf_event_open call known for {platform.machine()}")
    attr = ctypes.create_string_buffer(_ATTR_SIZE)
    struct.pack_into(
        "IIQQQQQ",
        attr,
        0,
        _TYPE_HARDWARE,
        _ATTR_SIZE,
        _HW_INSTRUCTIONS,
        0,
        0,
        0,
        _EXCLUDE_KERNEL_AND_HV,
    )
    libc = ctypes.CDLL(None, use_errno=True)
    # pid 0, cpu -1: this thread on any CPU; no group, no flags
    fd = libc.syscall(number, attr, 0, -1, -1, 0)
    if fd < 0:
        code = ctypes.get_errno()
        raise CounterUnavailable(
            f"perf_event_open failed: {errno.errorcode.get(code, code)} ({os.strerror(code)})"
            f"{_HINT.get(code, '')}"
        )
    return int(fd)


_HINT = {
    errno.ENOENT: "; this CPU or VM exposes no instructions counter",
    errno.EOPNOTSUPP: "; this CPU or VM exposes no instructions counter",
    errno.EACCES: "; lower /proc/sys/kernel/perf_event_paranoid to 2 or less",
    errno.EPERM: "; lower /proc/sys/kernel/perf_event_paranoid to 2 or less",
    errno.ENOSYS: "; this kernel has no perf events",
}


def unavailable_reason() -> str | None:
    """Why this process can't count instructions, or None when it can."""
    try:
        InstructionCounter().close()
    except CounterUnavailable as exc:
        return str(exc)
    return None


def counting_calls(
    fn: Callable[..., Any], counter: InstructionCounter, counts: list[int]
) -> Callable[..., Any]:
    """``fn``, appending each call's instruction count to ``counts``."""

    def counted(*args: Any, **kwargs: Any) -> Any:
        before = counter.read()
        try:
            return fn(*args, **kwargs)
        finally:
            counts.append(counter.read() - before)

    return counted


def per_round(counts: list[int], *, rounds: int, iterations: int) -> list[int]:
    """The last ``rounds`` rounds' instruction counts, from per-call counts (a capture that
    extended its warm-up called the body more times before them)."""
    tail = counts[max(0, len(counts) - rounds * iterations) :]
    return [sum(tail[r * iterations : (r + 1) * iterations]) for r in range(rounds)]


def instructions_note(per_round_counts: list[int]) -> str:
    """The note a test carries: its rounds' instruction counts, median and spread."""
    ordered = sorted(per_round_counts)
    median = ordered[len(ordered) // 2]
    spread = (ordered[-1] - ordered[0]) / median * 100 if median else 0.0
    return (
        f"CPU instructions per round: {median:,} (median of {len(ordered)}; "
        f"range {spread:.2f}% of it; not gated)"
    )


def instructions_of(counts: list[int], *, rounds: int, iterations: int) -> tuple[str, ...]:
    """The note on the measured rounds' instruction counts; none when nothing was counted."""
    if not counts:
        return ()
    return (instructions_note(per_round(counts, rounds=rounds, iterations=iterations)),)


def instruction_counter(wanted: bool) -> tuple[InstructionCounter | None, str]:
    """This thread's instruction counter when asked for, and the header's note on it."""
    if not wanted:
        return None, ""
    try:
        return InstructionCounter(), (
            "--tprof-collect=counters: CPU instructions of each measured round are in each "
            "test's notes (not gated)"
        )
    except CounterUnavailable as exc:
        return None, (
            f"--tprof-collect=counters: no hardware counter ({exc}); running without counters"
        )
