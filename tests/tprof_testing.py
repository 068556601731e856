"""Helpers the test files share (tests/ is on sys.path through its conftest.py)."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from types import FrameType

import numpy as np
import pytest

from tprof_engine.model.records import (
    KIND_ANNOTATION,
    KIND_DEVICE,
    KIND_OP,
    KIND_SYNC,
    EventArrays,
    OpTable,
)


def summary(result: pytest.RunResult) -> list[str]:
    """The lines of the tprof section of the terminal summary."""
    lines = result.outlines
    start = next(i for i, line in enumerate(lines) if line.strip("= ") == "tprof")
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("===")), len(lines))
    return lines[start + 1 : end]


def line(verdict: str, nodeid: str, rest: str) -> str:
    """A summary line as the terminal writes it."""
    return f"{verdict.upper():<12} {nodeid} | {rest}"


@contextlib.contextmanager
def deadline(seconds: int) -> Iterator[None]:
    """Fail instead of hanging: a blocked open() or read() is interrupted by SIGALRM."""

    def expired(signum: int, frame: FrameType | None) -> None:
        raise TimeoutError(f"still blocked after {seconds} s")

    before = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, before)


# --------------------------------------------------------------------------- events

CPU, STREAM, STREAM2 = 1, 100, 101
# name, start, end, kind, thread, corr (ops), link (device), bytes, launch start
Row = tuple[str, int, int, int, int, int, int, int, int]


def op(name: str, start: int, end: int, corr: int) -> Row:
    return (name, start, end, KIND_OP, CPU, corr, 0, 0, 0)


def step(n: int, start: int, end: int) -> Row:
    return (f"ProfilerStep#{n}", start, end, KIND_ANNOTATION, CPU, 0, 0, 0, 0)


def dev(name: str, start: int, end: int, link: int, *, launch: int = 0, nbytes: int = 0,
        stream: int = STREAM) -> Row:  # fmt: skip
    return (name, start, end, KIND_DEVICE, stream, 0, link, nbytes, launch)


def sync(name: str, start: int, end: int, link: int) -> Row:
    return (name, start, end, KIND_SYNC, STREAM, 0, link, 0, 0)


def event_arrays(rows: list[Row]) -> EventArrays:
    names = tuple(dict.fromkeys(r[0] for r in rows))

    def col(k: int) -> np.ndarray:
        return np.asarray([r[k] for r in rows], dtype=np.int64)

    return EventArrays(
        names=names,
        name_idx=np.asarray([names.index(r[0]) for r in rows], dtype=np.int64),
        start_ns=col(1),
        end_ns=col(2),
        thread=col(4),
        kind=col(3).astype(np.int8),
        corr=col(5),
        link=col(6),
        nbytes=col(7),
        launch_ns=col(8),
    )


# --------------------------------------------------------------------------- op tables

ROUNDS = 20


def table(
    ops: dict[str, tuple[float, int]],
    *,
    seed: int,
    cv: float = 0.03,
    scale: float = 1.0,
    probe: float = 1000.0,
    device: dict[str, float] | None = None,
    rounds: int = ROUNDS,
) -> OpTable:
    """An op table with log-normal per-round noise; ``ops`` maps name → (median µs, calls)."""
    rng = np.random.default_rng(seed)
    names = tuple(sorted(ops))
    k = len(names)

    def noisy(values: np.ndarray) -> np.ndarray:
        return values[:, None] * scale * np.exp(rng.normal(0, cv, (values.size, rounds)))

    cpu = noisy(np.array([ops[n][0] for n in names], dtype=float))
    dev_arr = np.zeros((k, rounds))
    if device is not None:
        dev_arr = noisy(np.array([device.get(n, 0.0) for n in names], dtype=float))
    return OpTable(
        names=names,
        calls=np.array([[ops[n][1]] * rounds for n in names], dtype=np.int64).reshape(k, rounds),
        self_cpu_us=cpu,
        total_cpu_us=cpu,
        self_device_us=dev_arr,
        total_device_us=dev_arr,
        wall_us=cpu.sum(axis=0),
        probe_cpu_us=probe * scale * np.exp(rng.normal(0, cv, rounds)),
        probe_device_us=np.full(rounds, 500.0) if device is not None else np.zeros(rounds),
        has_device=device is not None,
    )
