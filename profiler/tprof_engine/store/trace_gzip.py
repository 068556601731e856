"""A capture's Chrome trace written to disk: the profiler's plain export (handed in by the
capture stage, which alone holds the session) gzipped, with the per-round load readings as a
counter track, atomically; or the reason it couldn't be.
"""

from __future__ import annotations

import errno
import gzip
import json
import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tprof_engine.store import files

__all__ = ["TRACE_GZIP_LEVEL", "write_gzipped"]

TRACE_GZIP_LEVEL = 3


def write_gzipped(
    path: Path,
    *,
    export: Callable[[Path], None],
    counters: list[tuple[int, dict[str, Any]]] | None = None,
) -> tuple[Path | None, str]:
    """Write a session's Chrome trace to ``path``, gzipped, atomically; or say why not
    (``export`` writes the profiler's plain JSON to the path it is given; ``counters``: each
    round's start and readings, a counter track).

    A trace that can't be written (no permission, a file where its folder should be, a full
    disk) doesn't fail the test: no path, the reason, and no temp file left behind.
    """
    try:
        _export_gzipped(export, path, counters or [])
    except OSError as exc:
        blocking = files.file_in_the_way(path.parent)
        if blocking is not None:
            return None, (
                f"{path}: trace not written: {blocking} is a file, not a folder; move it away "
                "or pass another --tprof-trace-dir"
            )
        return None, (
            f"{path}: trace not written ({exc.strerror or exc}); free space on or fix the "
            f"permissions of {path.parent}, or pass another --tprof-trace-dir"
        )
    return path, ""


def _export_gzipped(
    export: Callable[[Path], None], path: Path, counters: list[tuple[int, dict[str, Any]]]
) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    # torch gzips its export line by line in Python (3.2 s for 105k events); the native
    # export plus one gzip pass costs a tenth of that. Level 3 halves level 6's gzip time
    # (0.19 s against 0.38 s for a 45 MB export of 164k events) for 18 % more bytes.
    with (
        files.scratch_dir(path) as scratch,
        files.atomic_path(path, mode_like_existing=False) as tmp,
    ):
        plain = scratch / "trace.json"
        export(plain)
        if not _whole_json(plain):  # kineto logs a failed write and returns as if it had written
            raise OSError(errno.EIO, "the profiler's export failed; is the disk full?")
        with open(plain, "rb") as src, gzip.open(tmp, "wb", compresslevel=TRACE_GZIP_LEVEL) as dst:
            at, extra = _counter_events(src, counters)
            src.seek(0)
            if at is None:
                shutil.copyfileobj(src, dst, 1 << 20)
                return
            _copy_bytes(src, dst, at)
            dst.write(extra)
            shutil.copyfileobj(src, dst, 1 << 20)


# The exporter's top-level keys: the time base of every "ts", and where traceEvents opens.
# The counters go first in the array: what follows it differs by release (torch 2.13 writes
# `],"traceName"`, 2.11 a newline between, and kineto adds "ERROR"/"WARNING" lists of its log
# lines where it had any), while `"traceEvents": [` reads alike in each.  The time base comes
# before the array from torch 2.8 on, after it (with "traceName" and "displayTimeUnit", the
# file's last keys) in 2.6 and 2.7: where the head lacks it, the tail has it.
_BASE_TIME = re.compile(rb'"baseTimeNanoseconds":\s*(\d+)')
_EVENTS_OPEN = re.compile(rb'"traceEvents"\s*:\s*\[(\s*\])?')


def _counter_events(
    src: Any, counters: list[tuple[int, dict[str, Any]]]
) -> tuple[int | None, bytes]:
    """Where in the exported trace to add the rounds' counter events (the start of its
    ``traceEvents``) and their JSON; no place when the export doesn't read as expected."""
    if not counters:
        return None, b""
    head = _head_through_events_open(src)
    opened = _EVENTS_OPEN.search(head)
    base = _BASE_TIME.search(head) or _BASE_TIME.search(_tail(src))
    if base is None or opened is None:
        return None, b""
    t0, pid = int(base.group(1)), os.getpid()
    events = [
        {
            "ph": "C",
            "name": "tprof round",
            "pid": pid,
            "tid": 0,
            "ts": round((start - t0) / 1000.0, 3),
            "args": args,
        }
        for start, args in counters
    ]
    text = "".join("\n  " + json.dumps(e, sort_keys=True) + "," for e in events)
    if opened.group(1) is not None:  # an empty array: no comma after the last counter
        text = text[:-1]
    return opened.end(0) - len(opened.group(1) or b""), text.encode()


def _head_through_events_open(src: Any, limit: int = 1 << 26) -> bytes:
    """The exported trace through the opening of its ``traceEvents`` array: the top-level
    keys kineto writes first (the metadata, ``tprof_rounds`` among them, then the time base)."""
    head = bytearray()
    while len(head) < limit:
        chunk = src.read(1 << 16)
        if not chunk:
            break
        seen = len(head)
        head += chunk
        opened = _EVENTS_OPEN.search(head, max(0, seen - 64))
        if opened is not None and opened.end(0) < len(head):  # the array's first byte is read
            break
    return bytes(head)


def _tail(src: Any, size: int = 1 << 12) -> bytes:
    """The exported trace's last bytes: its closing top-level keys."""
    end = src.seek(0, os.SEEK_END)
    src.seek(max(0, end - size))
    return bytes(src.read())


def _copy_bytes(src: Any, dst: Any, count: int) -> None:
    while count > 0:
        chunk = src.read(min(count, 1 << 20))
        if not chunk:
            return
        dst.write(chunk)
        count -= len(chunk)


def _whole_json(path: Path) -> bool:
    """Whether an exported trace ends as a whole JSON object or array does."""
    try:
        with open(path, "rb") as f:
            size = f.seek(0, os.SEEK_END)
            f.seek(max(0, size - 64))
            tail = f.read().rstrip()
    except OSError:
        return False
    return tail.endswith((b"}", b"]"))
