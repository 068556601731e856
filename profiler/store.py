"""Baseline files: one JSON file per test, read strictly, written atomically.

Layout: ``<root>/<environment key>/<slug>-<hash>.json``.  A file holds a rolling window of
sessions (each the raw per-round arrays of one ``--tprof-save`` run) so the decision rule can
learn how much a test drifts between sessions.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import hashlib
import json
import math
import os
import re
import tempfile
import unicodedata
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from profiler import __version__
from profiler.environment import Fingerprint
from profiler.errors import BaselineError
from profiler.records import OpTable

SCHEMA = "pytest-tprof/baseline"
SCHEMA_VERSION = 1
DEFAULT_WINDOW = 5
FIX = "restore it from git or re-record it with --tprof-save"
_SLUG_MAX = 80
_RESERVED = {"con", "prn", "aux", "nul"} | {f"{p}{i}" for p in ("com", "lpt") for i in range(10)}


@dataclass(frozen=True, slots=True, kw_only=True)
class Session:
    """One recorded run: its op table and what was true when it ran."""

    table: OpTable
    recorded_at: str
    warmup_used: int
    soft: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class Baseline:
    """A test's stored baseline: fingerprint, protocol, and a window of sessions."""

    nodeid: str
    fingerprint: Fingerprint
    protocol: Mapping[str, Any]
    sessions: tuple[Session, ...]
    tool_version: str = __version__
    path: Path | None = None

    @property
    def tables(self) -> list[OpTable]:
        return [s.table for s in self.sessions]

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "schema_version": SCHEMA_VERSION,
            "tool_version": self.tool_version,
            "nodeid": self.nodeid,
            "environment": self.fingerprint.to_dict(),
            "protocol": dict(self.protocol),
            "sessions": [
                {
                    "recorded_at": s.recorded_at,
                    "warmup_used": s.warmup_used,
                    "soft": dict(s.soft),
                    **s.table.to_dict(),
                }
                for s in self.sessions
            ],
        }


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat()


# --------------------------------------------------------------------------- file names


def slug(nodeid: str) -> str:
    """A readable, portable file stem for a node id, unique by a hash of the exact id.

    ``tests/test_x.py::TestA::test_b[1-2]`` → ``test_x.TestA.test_b[1-2]-<hash>``-like, with
    characters that are unsafe on any common file system replaced.
    """
    path, _, rest = nodeid.partition("::")
    stem = Path(path).stem if path else ""
    readable = f"{stem}.{rest.replace('::', '.')}" if rest else stem
    readable = unicodedata.normalize("NFKD", readable).encode("ascii", "ignore").decode()
    readable = re.sub(r"[^A-Za-z0-9._=+-]+", "_", readable).strip("._-") or "test"
    readable = readable[:_SLUG_MAX].rstrip("._-")
    if readable.split(".")[0].lower() in _RESERVED:
        readable = f"_{readable}"
    digest = hashlib.sha1(nodeid.encode("utf-8")).hexdigest()[:10]
    return f"{readable}-{digest}"


def baseline_path(root: Path, env_key: str, nodeid: str) -> Path:
    return Path(root) / env_key / f"{slug(nodeid)}.json"


def other_environments(root: Path, env_key: str, nodeid: str) -> list[Path]:
    """Baseline files of the same test recorded in other environments."""
    name = f"{slug(nodeid)}.json"
    root = Path(root)
    if not root.is_dir():
        return []
    return sorted(
        d / name for d in root.iterdir() if d.is_dir() and d.name != env_key and (d / name).is_file()
    )


def iter_baselines(folder: Path) -> Iterator[Path]:
    """Every baseline file under ``folder`` (one environment folder or the root)."""
    yield from sorted(p for p in Path(folder).rglob("*.json") if not p.name.startswith("."))


# --------------------------------------------------------------------------- reading


def load_baseline(path: Path, *, expected_nodeid: str | None = None) -> Baseline:
    """Read and validate a baseline file; any problem is a :class:`BaselineError` naming it."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise BaselineError(f"{path}: no such baseline file; record one with --tprof-save") from None
    except OSError as exc:
        raise BaselineError(f"{path}: can't be read ({exc.strerror}); check its permissions") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BaselineError(f"{path}: not UTF-8 text (byte {exc.start}); {FIX}") from None
    if not text.strip():
        raise BaselineError(f"{path}: empty file; {FIX}")
    for no, line in enumerate(text.splitlines(), 1):
        if line.startswith(("<<<<<<< ", ">>>>>>> ")) or line == "=======" or line == "<<<<<<<":
            raise BaselineError(
                f"{path}: git conflict marker at line {no}; resolve the merge by keeping one "
                "side (or re-record with --tprof-save)"
            )

    def bad_constant(name: str) -> Any:
        raise BaselineError(f"{path}: holds {name}, which is not a time; {FIX}")

    try:
        data = json.loads(text, parse_constant=bad_constant)
    except json.JSONDecodeError as exc:
        what = "truncated JSON" if exc.pos >= len(text.rstrip()) else f"invalid JSON ({exc.msg})"
        raise BaselineError(f"{path}: {what} at line {exc.lineno} col {exc.colno}; {FIX}") from None
    except RecursionError:
        raise BaselineError(f"{path}: JSON nested too deeply; {FIX}") from None
    return baseline_from_dict(data, path=path, expected_nodeid=expected_nodeid)


def baseline_from_dict(
    data: Any, *, path: Path, expected_nodeid: str | None = None
) -> Baseline:
    """Validate the parsed contents of a baseline file."""
    where = str(path)

    def fail(msg: str, fix: str = FIX) -> BaselineError:
        return BaselineError(f"{where}: {msg}; {fix}")

    if not isinstance(data, dict):
        raise fail(f"not a pytest-tprof baseline (top level is a JSON {_jtype(data)})")
    if data.get("schema") != SCHEMA:
        hint = " (it looks like a pytest-benchmark file)" if "benchmarks" in data else ""
        raise fail(
            f"not a pytest-tprof baseline{hint}: 'schema' is {data.get('schema')!r}",
            "move it out of the baseline folder",
        )
    version = data.get("schema_version")
    if version is None:
        raise fail("'schema_version' is missing")
    if not isinstance(version, int) or isinstance(version, bool):
        raise fail(f"'schema_version' must be an integer (got {version!r})")
    if version > SCHEMA_VERSION:
        raise fail(
            f"written by a newer pytest-tprof (schema_version {version} > {SCHEMA_VERSION})",
            "upgrade pytest-tprof to read it",
        )
    if version < 1:
        raise fail(f"'schema_version' {version} is not one pytest-tprof ever wrote")
    nodeid = data.get("nodeid")
    if not isinstance(nodeid, str) or not nodeid:
        raise fail("'nodeid' must be a non-empty string")
    if expected_nodeid is not None and nodeid != expected_nodeid:
        raise fail(
            f"holds the baseline of {nodeid!r}, not of {expected_nodeid!r}",
            "re-record it with --tprof-save",
        )
    env = data.get("environment")
    if not isinstance(env, dict) or not isinstance(env.get("hard"), dict):
        raise fail("'environment.hard' must be an object")
    protocol = data.get("protocol")
    if not isinstance(protocol, dict):
        raise fail("'protocol' must be an object")
    rounds = protocol.get("rounds")
    if not _is_int(rounds) or rounds < 2:
        raise fail(f"'protocol.rounds' must be an integer >= 2 (got {rounds!r})")
    sessions = data.get("sessions")
    if not isinstance(sessions, list) or not sessions:
        raise fail("'sessions' must be a non-empty list")
    parsed = tuple(_session(s, i, fail) for i, s in enumerate(sessions))
    return Baseline(
        nodeid=nodeid,
        fingerprint=Fingerprint.from_dict(env),
        protocol=protocol,
        sessions=parsed,
        tool_version=str(data.get("tool_version", "")),
        path=path,
    )


def _session(s: Any, i: int, fail: Any) -> Session:
    at = f"sessions[{i}]"
    if not isinstance(s, dict):
        raise fail(f"'{at}' must be an object (got a JSON {_jtype(s)})")
    wall = s.get("wall_us")
    n = _check_times(wall, f"{at}.wall_us", None, fail)
    if n < 2:
        raise fail(f"'{at}.wall_us' must hold one time per round, >= 2 rounds (got {n})")
    _check_times(s.get("probe_cpu_us", [0.0] * n), f"{at}.probe_cpu_us", n, fail)
    has_device = s.get("has_device", False)
    if not isinstance(has_device, bool):
        raise fail(f"'{at}.has_device' must be true or false (got {has_device!r})")
    if has_device:
        _check_times(s.get("probe_device_us", [0.0] * n), f"{at}.probe_device_us", n, fail)
    ops = s.get("ops")
    if not isinstance(ops, dict):
        raise fail(f"'{at}.ops' must be an object of op name → arrays")
    for name, entry in ops.items():
        where = f"{at}.ops[{name!r}]"
        if not isinstance(entry, dict):
            raise fail(f"'{where}' must be an object (got a JSON {_jtype(entry)})")
        calls = entry.get("calls")
        if not isinstance(calls, list) or len(calls) != n:
            raise fail(f"'{where}.calls' must be a list of {n} counts (got {_len(calls)})")
        for c in calls:
            if not _is_int(c) or c < 0:
                raise fail(f"'{where}.calls' holds {c!r}; calls must be integers >= 0")
        for metric in ("self_cpu_us", "total_cpu_us") + (
            ("self_device_us", "total_device_us") if has_device else ()
        ):
            if metric not in entry:
                raise fail(f"'{where}.{metric}' is missing")
            _check_times(entry[metric], f"{where}.{metric}", n, fail)
    warm = s.get("warmup_used", 0)
    if not _is_int(warm) or warm < 0:
        raise fail(f"'{at}.warmup_used' must be an integer >= 0 (got {warm!r})")
    soft = s.get("soft", {})
    return Session(
        table=OpTable.from_dict(s),
        recorded_at=str(s.get("recorded_at", "")),
        warmup_used=int(warm),
        soft=soft if isinstance(soft, dict) else {},
    )


def _check_times(values: Any, where: str, n: int | None, fail: Any) -> int:
    if not isinstance(values, list):
        raise fail(f"'{where}' must be a list of times in µs (got a JSON {_jtype(values)})")
    if n is not None and len(values) != n:
        raise fail(f"'{where}' has {len(values)} values but the session has {n} rounds")
    for v in values:
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise fail(f"'{where}' holds {v!r}; times must be numbers")
        if not math.isfinite(v) or v < 0:
            raise fail(f"'{where}' holds {v!r}; times must be finite and >= 0")
    return len(values)


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _len(v: Any) -> str:
    return f"{len(v)} values" if isinstance(v, list) else f"a JSON {_jtype(v)}"


def _jtype(v: Any) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}.get(
        type(v), "number"
    )


# --------------------------------------------------------------------------- writing


def with_session(
    existing: Baseline | None,
    *,
    nodeid: str,
    fingerprint: Fingerprint,
    protocol: Mapping[str, Any],
    session: Session,
    window: int = DEFAULT_WINDOW,
) -> tuple[Baseline, str]:
    """The baseline after recording ``session``, and what happened to the window.

    The new session is appended while the environment's hard keys, the protocol and the
    op structure (names and calls per round) match the stored sessions; otherwise the
    window restarts with the new session alone, since older sessions measured other code.
    """
    if window < 1:
        raise ValueError(f"'window' must be >= 1 (got {window})")
    if existing is None:
        return _new(nodeid, fingerprint, protocol, (session,)), "recorded"
    reason = ""
    if dict(existing.fingerprint.hard) != dict(fingerprint.hard):
        reason = "environment changed"
    elif {k: v for k, v in existing.protocol.items() if k != "rounds"} != {
        k: v for k, v in protocol.items() if k != "rounds"
    }:
        reason = "protocol changed"
    elif _structure(existing.sessions[-1].table) != _structure(session.table):
        reason = "ops or calls changed"
    if reason:
        return _new(nodeid, fingerprint, protocol, (session,)), f"restarted ({reason})"
    kept = (*existing.sessions, session)[-window:]
    return _new(nodeid, fingerprint, protocol, kept), f"appended ({len(kept)} sessions)"


def _new(
    nodeid: str, fp: Fingerprint, protocol: Mapping[str, Any], sessions: Sequence[Session]
) -> Baseline:
    return Baseline(nodeid=nodeid, fingerprint=fp, protocol=dict(protocol), sessions=tuple(sessions))


def _structure(table: OpTable) -> dict[str, list[int]]:
    import numpy as np

    return {
        n: [int(np.median(table.calls[i]))] for i, n in enumerate(table.names)
    }


def dumps(data: Any) -> str:
    """Stable JSON: sorted keys, one key per line, arrays of numbers on one line."""
    return _dump(data, 0) + "\n"


def _dump(v: Any, level: int) -> str:
    pad = "  " * (level + 1)
    if isinstance(v, dict):
        if not v:
            return "{}"
        items = [f"{pad}{json.dumps(str(k))}: {_dump(v[k], level + 1)}" for k in sorted(v)]
        return "{\n" + ",\n".join(items) + "\n" + "  " * level + "}"
    if isinstance(v, list):
        if all(not isinstance(x, (dict, list)) for x in v):
            return "[" + ", ".join(json.dumps(x, allow_nan=False) for x in v) + "]"
        return "[\n" + ",\n".join(pad + _dump(x, level + 1) for x in v) + "\n" + "  " * level + "]"
    return json.dumps(v, allow_nan=False, ensure_ascii=False)


def save_baseline(path: Path, baseline: Baseline) -> Path:
    """Write atomically: a temp file in the same folder, fsync, then ``os.replace``."""
    path = Path(path)
    text = dumps(baseline.to_dict())
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise BaselineError(
            f"{path}: can't write the baseline ({exc.strerror}); make {path.parent} writable"
        ) from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise BaselineError(
            f"{path}: can't write the baseline ({exc.strerror}); the previous file is intact"
        ) from None
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    with contextlib.suppress(OSError):  # make the rename durable where the platform allows
        dfd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    return path
