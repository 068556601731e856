"""The packed baseline file (``schema_version`` 3): small enough to commit, readable where a
reviewer reads it.

The open form (``schema_version`` 2, :meth:`Baseline.to_dict`) keeps every per-round number
as JSON text: 0.5–0.9 MB per test at five sessions on transformer-sized tests.  The packed
form keeps what a reviewer reads as JSON — the environment, the protocol, the op names, each
work census (one row per line) and each session's wall, probe and load readings — and each
session's per-op rounds in one ``rounds`` string:

- the rows, each one value per round: every op's calls (in ``ops`` order), every op's self
  CPU time, with device times every op's self device time, then the time outside any op
  before each of ``host_ops`` (times in integer ns, µs × 1000, as the open form's 3 decimals);
- as little-endian unsigned 64-bit integers, byte-shuffled (every value's first byte, then
  every second byte, …), zlib-compressed and base85-encoded (``base64.b85encode``).

A census equal to another session's is stored once: the top-level ``work`` lists each
distinct census and a session names its own by index.  Total (self + children) times are not
kept: neither the rule nor a report reads them, and a table read from a packed file has its
totals equal to its self times.  :func:`unpacked` turns a packed document back into the open
form, which is then validated as strictly as an open file.
"""

from __future__ import annotations

import base64
import binascii
import json
import zlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from tprof_engine.model.errors import BaselineError

PACKED_VERSION = 3
OPEN_VERSION = 2
_Fail = Callable[..., BaselineError]
_WORK_LISTS = ("rows", "copies", "syncs")  # a census's lists of records, packed as columns


def packed(doc: Mapping[str, Any], *, version: int = PACKED_VERSION) -> dict[str, Any]:
    """The packed form of an open baseline document, as a file of ``version`` (a packed one:
    :mod:`.versions`)."""
    sessions = doc["sessions"]
    ops = sorted({name for s in sessions for name in s["ops"]})
    host_ops = sorted({name for s in sessions for name in s.get("host_before_us") or {}})
    censuses: list[dict[str, Any]] = []
    seen: dict[str, int] = {}
    out_sessions = []
    for s in sessions:
        out = {k: v for k, v in s.items() if k not in ("ops", "host_before_us", "work")}
        out["rounds"] = _packed_rounds(s, ops, host_ops)
        if "work" in s:
            key = json.dumps(s["work"], sort_keys=True)
            if key not in seen:
                seen[key] = len(censuses)
                censuses.append(_columns(s["work"]))
            out["work"] = seen[key]
        out_sessions.append(out)
    head = {k: v for k, v in doc.items() if k != "sessions"}
    return {
        **head,
        "schema_version": version,
        "ops": ops,
        "host_ops": host_ops,
        "work": censuses,
        "sessions": out_sessions,
    }


def unpacked(doc: Mapping[str, Any], fail: _Fail) -> dict[str, Any]:
    """The open form of a packed document; a malformed part is ``fail``'s error naming it."""
    ops = _names(doc, "ops", fail)
    host_ops = _names(doc, "host_ops", fail)
    censuses = doc.get("work", [])
    if not isinstance(censuses, list):
        raise fail("'work' must be a list of work censuses")
    sessions = doc.get("sessions")
    if not isinstance(sessions, list):
        raise fail("'sessions' must be a non-empty list")
    opened = [_open_session(s, i, ops, host_ops, censuses, fail) for i, s in enumerate(sessions)]
    head = {k: v for k, v in doc.items() if k not in ("ops", "host_ops", "work", "sessions")}
    return {**head, "schema_version": OPEN_VERSION, "sessions": opened}


def _packed_rounds(s: Mapping[str, Any], ops: Sequence[str], host_ops: Sequence[str]) -> str:
    n = len(s["wall_us"])
    zeros = [0] * n
    entries = s["ops"]
    rows = [entries[op]["calls"] if op in entries else zeros for op in ops]
    metrics = ("self_cpu_us", "self_device_us") if s.get("has_device") else ("self_cpu_us",)
    times = [entries[op][m] if op in entries else zeros for m in metrics for op in ops]
    host = s.get("host_before_us") or {}
    times += [host.get(op, zeros) for op in host_ops]
    values = np.concatenate(
        [
            np.asarray(rows, dtype=np.int64).reshape(-1, n),
            np.rint(np.asarray(times, dtype=float).reshape(-1, n) * 1000.0).astype(np.int64),
        ]
    )
    shuffled = values.astype("<u8").view(np.uint8).reshape(-1, 8).T.tobytes()
    return base64.b85encode(zlib.compress(shuffled, 9)).decode("ascii")


def _open_session(
    s: Any,
    i: int,
    ops: list[str],
    host_ops: list[str],
    censuses: list[Any],
    fail: _Fail,
) -> dict[str, Any]:
    at = f"sessions[{i}]"
    if not isinstance(s, dict):
        raise fail(f"'{at}' must be an object")
    wall = s.get("wall_us")
    if not isinstance(wall, list) or len(wall) < 2:
        raise fail(f"'{at}.wall_us' must hold one time per round, >= 2 rounds")
    n, has_device = len(wall), s.get("has_device") is True
    metrics = ("self_cpu_us", "self_device_us") if has_device else ("self_cpu_us",)
    values = _rounds(
        s.get("rounds"), f"{at}.rounds", n, len(ops) * (1 + len(metrics)) + len(host_ops), fail
    )
    calls, rest = values[: len(ops)], values[len(ops) :]
    out = {k: v for k, v in s.items() if k not in ("rounds", "work")}
    out["ops"] = {}
    for j, op in enumerate(ops):
        if not calls[j].any():
            continue  # not called in this session
        entry: dict[str, Any] = {"calls": calls[j].tolist()}
        for m, metric in enumerate(metrics):
            times = (rest[m * len(ops) + j] / 1000.0).tolist()
            entry[metric] = times
            entry[metric.replace("self_", "total_")] = times
        out["ops"][op] = entry
    host = rest[len(metrics) * len(ops) :]
    out["host_before_us"] = {
        op: (host[k] / 1000.0).tolist() for k, op in enumerate(host_ops) if host[k].any()
    }
    if "work" in s:
        out["work"] = _census(s["work"], censuses, f"{at}.work", fail)
    return out


def _rounds(text: Any, at: str, n: int, rows: int, fail: _Fail) -> np.ndarray:
    """The ``rows`` × ``n`` integers of a packed ``rounds`` string."""
    fix = "the packed rounds are damaged"
    if not isinstance(text, str):
        raise fail(f"'{at}' must be a string of packed rounds (got a JSON {type(text).__name__})")
    size = rows * n * 8
    try:
        inflate = zlib.decompressobj()
        raw = inflate.decompress(base64.b85decode(text), size + 1)
    except (ValueError, binascii.Error, zlib.error):
        raise fail(f"'{at}' is not packed rounds (base85 of zlib data): {fix}") from None
    if len(raw) != size or inflate.unconsumed_tail or not inflate.eof:
        raise fail(
            f"'{at}' holds {len(raw)}{'+' if inflate.unconsumed_tail else ''} bytes of rounds "
            f"but {rows} rows of {n} rounds need {size}: {fix}"
        )
    values = np.frombuffer(raw, dtype=np.uint8).reshape(8, -1).T.copy().view("<u8").ravel()
    if (values >= 1 << 62).any():
        raise fail(f"'{at}' holds a value out of range: {fix}")
    out: np.ndarray = values.astype(np.int64).reshape(rows, n)
    return out


def _names(doc: Mapping[str, Any], key: str, fail: _Fail) -> list[str]:
    names = doc.get(key)
    if not isinstance(names, list) or not all(isinstance(x, str) for x in names):
        raise fail(f"'{key}' must be a list of op names")
    if len(set(names)) != len(names):
        raise fail(f"'{key}' names an op twice")
    return names


def _census(index: Any, censuses: list[Any], at: str, fail: _Fail) -> dict[str, Any]:
    if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < len(censuses):
        raise fail(f"'{at}' must be the index of one of the {len(censuses)} censuses in 'work'")
    census = censuses[index]
    if not isinstance(census, dict):
        raise fail(f"'work[{index}]' must be an object")
    out = dict(census)
    for key in _WORK_LISTS:
        if key in out:
            out[key] = _records(out[key], f"work[{index}].{key}", fail)
    return out


def _columns(census: Mapping[str, Any]) -> dict[str, Any]:
    """A census with each list of records as column names and one list of values per record."""
    out = dict(census)
    for key in _WORK_LISTS:
        records = census.get(key) or []
        columns = sorted({c for r in records for c in r})
        out[key] = {"columns": columns, "rows": [[r.get(c) for c in columns] for r in records]}
    return out


def _records(table: Any, at: str, fail: _Fail) -> list[dict[str, Any]]:
    if not isinstance(table, dict) or set(table) != {"columns", "rows"}:
        raise fail(f"'{at}' must be an object of 'columns' and 'rows'")
    columns, rows = table["columns"], table["rows"]
    if not isinstance(columns, list) or not all(isinstance(c, str) for c in columns):
        raise fail(f"'{at}.columns' must be a list of names")
    if not isinstance(rows, list):
        raise fail(f"'{at}.rows' must be a list of rows")
    out = []
    for i, row in enumerate(rows):
        if not isinstance(row, list) or len(row) != len(columns):
            raise fail(f"'{at}.rows[{i}]' must be a list of {len(columns)} values")
        out.append({c: v for c, v in zip(columns, row, strict=True) if v is not None})
    return out
