"""Helpers the test files share (tests/ is on sys.path through its conftest.py)."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from types import FrameType

import pytest


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
