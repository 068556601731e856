"""The Chrome trace of a capture: tprof's metadata for it, and kineto's plain export bound to
the session, for the store's writer (``store.trace_gzip.write_gzipped``: gzipped, with the
per-round load readings as a counter track, atomically), which the caller hands in.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
from torch.profiler import profile

from tprof_engine.capture import torch_api


def metadata_for_trace(
    warmup: int, rounds: int, iterations: int, test: Mapping[str, Any] | None
) -> dict[str, Any]:
    """The trace's top-level keys that say how it was recorded (and of which test).

    Holistic Trace Analysis reads each trace's rank from ``distributedInfo``: torch writes it
    for a rank of a process group (backend, rank, world size, groups); a single process's
    trace says rank 0 of 1 here."""
    meta: dict[str, Any] = {
        "tprof": {"warmup": warmup, "rounds": rounds, "iterations": iterations},
    }
    distributed = torch.distributed.is_available() and torch.distributed.is_initialized()
    if not distributed:
        meta["distributedInfo"] = {"rank": 0, "world_size": 1}
    if test:
        meta["tprof_test"] = dict(test)
    return meta


# The store's trace writer: (path, *, export, counters) → (the path written or None, why not).
TraceWrite = Callable[..., tuple[Path | None, str]]


def export_plain(prof: profile, plain: Path) -> None:
    """The session's Chrome trace as kineto exports it, to ``plain``."""
    with torch_api.own_warnings_quiet():
        prof.export_chrome_trace(str(plain))


def trace_writer(
    prof: profile, counters: list[tuple[int, dict[str, Any]]], write: TraceWrite | None
) -> Callable[[Path], tuple[Path | None, str]] | None:
    """The session's trace, ready for ``write`` to put at a path (None: no writer given, no
    trace)."""
    if write is None:
        return None
    return functools.partial(write, export=functools.partial(export_plain, prof), counters=counters)
