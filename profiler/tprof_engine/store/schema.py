"""A baseline file's records and its schema: read strictly, every field checked, errors that
name the file and say what to do.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tprof_engine import __version__
from tprof_engine.model import settings
from tprof_engine.model.environment import Fingerprint
from tprof_engine.model.errors import BaselineError
from tprof_engine.model.limits import MAX_ITERATIONS, is_count
from tprof_engine.model.records import OpTable, RoundLoad, host_before_from_dict
from tprof_engine.model.work import WorkTable
from tprof_engine.store.packing import OPEN_VERSION, PACKED_VERSION, unpacked
from tprof_engine.store.reading import FIX, SCHEMA

# 2: each session may hold the work census of its test ('work'); version 1 files still read.
SCHEMA_VERSION = 3  # written packed (store/packing.py); 2 is the open form, still read
OLDEST_SCHEMA_VERSION = 1
RERECORD = "re-record it with --tprof-save"


# Larger values are damage, not measurements: a round of 11.6 days, 10**12 calls.
_MAX_US = 1e12
_MAX_CALLS = 10**12


# Sessions read when the caller gives no window (tprof show, diff): the most --tprof-window keeps.
MAX_SESSIONS = 100


# The drift probe (capture._Probe: twelve ops, four of them 96x96 matmuls) takes tens of µs;
# no profiler records it in less than 1 µs.  A smaller probe time is damage, and it would
# put the current run in units where every op reads far faster than its baseline.
_MIN_PROBE_US = 1.0


# Makes the error of a damaged file: ``fail(message, fix=FIX)``.
_Fail = Callable[..., BaselineError]


def _host(soft: Mapping[str, Any]) -> str | None:
    host = soft.get("host")
    return host if isinstance(host, str) and host else None


@dataclass(frozen=True, slots=True, kw_only=True)
class Session:
    """One recorded run: its op table and what was true when it ran."""

    table: OpTable
    recorded_at: str
    warmup_used: int
    soft: Mapping[str, Any] = field(default_factory=dict)
    work: WorkTable | None = None  # the work census (None: recorded before censuses)
    # The numeric settings its capture ran under (model.settings; empty: recorded before
    # settings were read per capture, or not read).
    settings: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        out = {
            "recorded_at": self.recorded_at,
            "warmup_used": self.warmup_used,
            "soft": dict(self.soft),
            **self.table.to_dict(),
        }
        if self.work is not None:
            out["work"] = self.work.to_dict()
        if self.settings:
            out["settings"] = dict(self.settings)
        return out


@dataclass(frozen=True, slots=True, kw_only=True)
class Baseline:
    """A test's stored baseline: fingerprint, protocol, and a window of sessions."""

    nodeid: str
    fingerprint: Fingerprint
    protocol: Mapping[str, Any]
    sessions: tuple[Session, ...]
    tool_version: str = __version__
    path: Path | None = None
    # The op each op the newest census doesn't name ran inside, from the newest session's
    # profile (``OpTable.meta["parents"]``): places an op the current run no longer calls.
    holders: Mapping[str, str] = field(default_factory=dict)

    @property
    def tables(self) -> list[OpTable]:
        return [s.table for s in self.sessions]

    @property
    def hosts(self) -> tuple[str | None, ...]:
        """The host each session was recorded on (None: recorded before hosts were kept)."""
        return tuple(_host(s.soft) for s in self.sessions)

    @property
    def work(self) -> WorkTable | None:
        """The work census the test is judged against: the newest session's."""
        return self.sessions[-1].work

    @property
    def settings(self) -> Mapping[str, Any]:
        """The settings the test is judged against: the newest session's."""
        return self.sessions[-1].settings

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "schema_version": OPEN_VERSION,  # the open form; a save writes it packed
            "tool_version": self.tool_version,
            "nodeid": self.nodeid,
            "environment": self.fingerprint.to_dict(),
            "protocol": dict(self.protocol),
            "sessions": [s.to_dict() for s in self.sessions],
            **({"holders": dict(sorted(self.holders.items()))} if self.holders else {}),
        }


def baseline_from_dict(
    data: Any, *, path: Path, expected_nodeid: str | None = None, keep: int | None = None
) -> Baseline:
    """Validate the parsed contents of a baseline file (its newest ``keep`` sessions)."""
    where = str(path)

    def fail(msg: str, fix: str = FIX) -> BaselineError:
        return BaselineError(f"{where}: {msg}; {fix}")

    _check_schema(data, fail)
    if data["schema_version"] == PACKED_VERSION:
        data = unpacked(data, fail)
    nodeid = _checked_nodeid(data, expected_nodeid, fail)
    env = _checked_environment(data, fail)
    protocol, rounds = _checked_protocol(data, fail)
    sessions = _checked_sessions(data, rounds, MAX_SESSIONS if keep is None else keep, fail)
    return Baseline(
        nodeid=nodeid,
        fingerprint=Fingerprint.from_dict(env),
        protocol=protocol,
        sessions=sessions,
        tool_version=str(data.get("tool_version", "")),
        path=path,
        holders=_checked_holders(data.get("holders", {}), fail),
    )


def _checked_holders(value: Any, fail: _Fail) -> dict[str, str]:
    """The baseline's op holders: an object of op name → op name (absent in older files)."""
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) and k and v for k, v in value.items()
    ):
        raise fail("'holders' must be an object of op name → the op it ran inside")
    return dict(value)


def _check_schema(data: Any, fail: _Fail) -> None:
    """That ``data`` is a baseline this version reads: our schema, at our schema version."""
    if not isinstance(data, dict):
        raise fail(
            f"not a pytest-tprof baseline (top level is a JSON {_jtype(data)})",
            "move it out of the baseline folder",
        )
    if data.get("schema") != SCHEMA:
        hint = " (it looks like a pytest-benchmark file)" if "benchmarks" in data else ""
        raise fail(
            f"not a pytest-tprof baseline{hint}: 'schema' is {_short(data.get('schema'))}",
            "move it out of the baseline folder",
        )
    version = data.get("schema_version")
    if version is None:
        raise fail("'schema_version' is missing")
    if not is_count(version, minimum=None):
        raise fail(f"'schema_version' must be an integer (got {_short(version)})")
    if version > SCHEMA_VERSION:
        raise fail(
            f"written by a newer pytest-tprof "
            f"(schema_version {_short(version)} > {SCHEMA_VERSION})",
            "upgrade pytest-tprof to read it",
        )
    if version < OLDEST_SCHEMA_VERSION:
        raise fail(
            f"written in an older format (schema_version {_short(version)} < "
            f"{OLDEST_SCHEMA_VERSION}) "
            "that this pytest-tprof can't read",
            "re-record it with --tprof-save",
        )


def _checked_nodeid(data: dict[str, Any], expected: str | None, fail: _Fail) -> str:
    nodeid = data.get("nodeid")
    if not isinstance(nodeid, str) or not nodeid or not _unicode(nodeid):
        raise fail(f"'nodeid' must be a non-empty string (got {_short(nodeid)})")
    if expected is not None and nodeid != expected:
        raise fail(
            f"holds the baseline of {_short(nodeid, 200)}, not of {expected!r}",
            "re-record it with --tprof-save",
        )
    return nodeid


def _checked_environment(data: dict[str, Any], fail: _Fail) -> dict[str, Any]:
    env = data.get("environment")
    if not isinstance(env, dict) or not isinstance(env.get("hard"), dict):
        raise fail("'environment.hard' must be an object")
    if not isinstance(env.get("soft", {}), dict):
        raise fail(f"'environment.soft' must be an object (got a JSON {_jtype(env['soft'])})")
    return env


def _checked_protocol(data: dict[str, Any], fail: _Fail) -> tuple[dict[str, Any], int]:
    """The protocol and its rounds per session."""
    protocol = data.get("protocol")
    if not isinstance(protocol, dict):
        raise fail(f"'protocol' must be an object (got a JSON {_jtype(protocol)})")
    rounds = protocol.get("rounds")
    if not is_count(rounds, minimum=2):
        raise fail(f"'protocol.rounds' must be an integer >= 2 (got {_short(rounds)})")
    iterations = protocol.get("iterations", 1)
    if not is_count(iterations) or iterations > MAX_ITERATIONS:
        raise fail(
            f"'protocol.iterations' must be an integer from 1 to {MAX_ITERATIONS} "
            f"(got {_short(iterations)})"
        )
    return protocol, rounds


def _checked_sessions(
    data: dict[str, Any], rounds: int, keep: int, fail: _Fail
) -> tuple[Session, ...]:
    """The newest ``keep`` sessions, validated; older ones are left unread, as a save with
    that window would drop them (a file of 10,000 sessions costs what one of ``keep`` does)."""
    sessions = data.get("sessions")
    if not isinstance(sessions, list) or not sessions:
        raise fail("'sessions' must be a non-empty list")
    start = max(0, len(sessions) - max(1, keep))
    censuses = _Censuses(fail)
    parsed = tuple(_session(sessions[i], i, fail, censuses) for i in range(start, len(sessions)))
    # The protocol is the latest save's, and a save appends its session last.
    last = parsed[-1].table.rounds
    if last != rounds:
        raise fail(
            f"'sessions[{len(sessions) - 1}]' has {last} rounds but 'protocol.rounds' is {rounds}"
        )
    return parsed


class _Censuses:
    """Each distinct work census of a file validated once: a deterministic test's sessions
    hold equal ones (five sessions of a 7-layer encoder's training step: 2,900 rows read as
    580, a 0.10 s load as 0.04 s)."""

    def __init__(self, fail: _Fail) -> None:
        self._fail = fail
        self._read: list[tuple[Any, WorkTable]] = []  # (the file's census, its table)

    def of(self, s: dict[str, Any], at: str) -> WorkTable | None:
        if "work" not in s:
            return None
        raw = s["work"]
        for seen, table in self._read:
            if seen == raw:
                return table
        table = _checked_work(raw, at, self._fail)
        self._read.append((raw, table))
        return table


def _session(s: Any, i: int, fail: _Fail, censuses: _Censuses) -> Session:
    at = f"sessions[{i}]"
    if not isinstance(s, dict):
        raise fail(f"'{at}' must be an object (got a JSON {_jtype(s)})")
    n, has_device = _checked_rounds(s, at, fail)
    ops = s.get("ops")
    if not isinstance(ops, dict):
        raise fail(f"'{at}.ops' must be an object of op name → arrays")
    for name, entry in ops.items():
        _check_op(name, entry, f"{at}.ops[{_short(name, 80)}]", n, has_device, fail)
    warm = s.get("warmup_used", 0)
    if not is_count(warm, minimum=0):
        raise fail(f"'{at}.warmup_used' must be an integer >= 0 (got {_short(warm)})")
    soft = s.get("soft", {})
    _check_round_extras(s, at, tuple(ops), n, fail)
    try:
        table = OpTable.from_dict(s)
    except ValueError as exc:  # only the device part is checked there
        raise fail(f"'{at}.device': {exc}") from None
    _check_comparable(table, at, fail)
    return Session(
        table=table,
        recorded_at=str(s.get("recorded_at", "")),
        warmup_used=int(warm),
        soft=soft if isinstance(soft, dict) else {},
        work=censuses.of(s, at),
        settings=_checked_settings(s.get("settings", {}), at, fail),
    )


def _checked_settings(value: Any, at: str, fail: _Fail) -> dict[str, Any]:
    found = settings.checked(value)
    if found is None:
        raise fail(
            f"'{at}.settings' must be an object of setting name → true/false, number or text"
        )
    return found


def _checked_rounds(s: Mapping[str, Any], at: str, fail: _Fail) -> tuple[int, bool]:
    """A session's round count (from its wall times, at least 2) and whether it has device
    times, once its per-round wall and probe times are checked."""
    n = _check_times(s.get("wall_us"), f"{at}.wall_us", None, fail)
    if n < 2:
        raise fail(f"'{at}.wall_us' must hold one time per round, >= 2 rounds (got {n})")
    _check_times(s.get("probe_cpu_us", [0.0] * n), f"{at}.probe_cpu_us", n, fail)
    has_device = s.get("has_device", False)
    if not isinstance(has_device, bool):
        raise fail(f"'{at}.has_device' must be true or false (got {_short(has_device)})")
    if has_device or "probe_device_us" in s:
        _check_times(s.get("probe_device_us", [0.0] * n), f"{at}.probe_device_us", n, fail)
    return n, has_device


def _check_round_extras(
    s: Mapping[str, Any], at: str, ops: tuple[str, ...], n: int, fail: _Fail
) -> None:
    """The session's per-round load readings and time outside ops, when it has them."""
    if s.get("load") is not None:
        try:
            RoundLoad.from_dict(s["load"], n)
        except ValueError as exc:
            raise fail(f"'{at}.load': {exc}") from None
    try:
        host_before_from_dict(s.get("host_before_us"), ops, n)
    except ValueError as exc:
        raise fail(f"'{at}.host_before_us': {exc}") from None


def _check_comparable(table: OpTable, at: str, fail: _Fail) -> None:
    """That the session's times can carry a comparison: a real probe, time where ops ran.

    Either would otherwise pass every later run: a probe of a few ns puts the current run in
    units where every op reads far faster, and a round of calls but no time makes any current
    time read as no change (a session of no calls at all is no threat: every current op is new).
    """
    probes = {"probe_cpu_us": table.probe_cpu_us}
    if table.has_device:
        probes["probe_device_us"] = table.probe_device_us
    for key, probe in probes.items():  # all 0: no probe ran, the times stay in µs
        median = float(np.median(probe))
        if probe.any() and median < _MIN_PROBE_US:
            raise fail(
                f"'{at}.{key}' has a median of {median:g} µs, but the drift probe takes "
                f">= {_MIN_PROBE_US:g} µs, so these times can't support a comparison",
                RERECORD,
            )
    timeless = np.flatnonzero(table.calls.any(axis=0) & ~(table.self_cpu_us > 0).any(axis=0))
    if timeless.size:
        raise fail(
            f"'{at}' has op calls but no self CPU time in round {int(timeless[0])}, so these "
            "times can't support a comparison",
            RERECORD,
        )


def _checked_work(work: Any, at: str, fail: _Fail) -> WorkTable:
    try:
        return WorkTable.from_dict(work, where=f"{at}.work")
    except (BaselineError, ValueError) as exc:
        raise fail(str(exc)) from None


def _check_op(name: Any, entry: Any, where: str, n: int, has_device: bool, fail: _Fail) -> None:
    """One op's arrays: ``n`` call counts and ``n`` times per metric."""
    if not _unicode(name):
        raise fail(f"'{where}' is not a valid op name")
    if not isinstance(entry, dict):
        raise fail(f"'{where}' must be an object (got a JSON {_jtype(entry)})")
    calls = entry.get("calls")
    if not isinstance(calls, list) or len(calls) != n:
        raise fail(f"'{where}.calls' must be a list of {n} counts (got {_len(calls)})")
    for c in calls:
        if not is_count(c, minimum=0):
            raise fail(f"'{where}.calls' holds {_short(c)}; calls must be integers >= 0")
        if c > _MAX_CALLS:
            raise fail(f"'{where}.calls' holds {_short(c)}; calls must be <= 10**12")
    device = ("self_device_us", "total_device_us")
    for metric in ("self_cpu_us", "total_cpu_us", *device):
        if metric not in entry:
            if metric in device and not has_device:
                continue
            raise fail(f"'{where}.{metric}' is missing")
        _check_times(entry[metric], f"{where}.{metric}", n, fail)


def _check_times(values: Any, where: str, n: int | None, fail: _Fail) -> int:
    if not isinstance(values, list):
        raise fail(f"'{where}' must be a list of times in µs (got a JSON {_jtype(values)})")
    if n is not None and len(values) != n:
        raise fail(f"'{where}' has {len(values)} values but the session has {n} rounds")
    for v in values:
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise fail(f"'{where}' holds {_short(v)}; times must be numbers")
        if isinstance(v, float) and not math.isfinite(v):
            raise fail(f"'{where}' holds {v!r}; times must be finite")
        if v < 0:
            raise fail(f"'{where}' holds {_short(v)}; times must be >= 0")
        if v >= _MAX_US:  # exact for huge ints too, which math.isfinite can't take
            raise fail(f"'{where}' holds {_short(v)}; times must be below 1e12 µs")
    return len(values)


def _unicode(s: str) -> bool:
    """Whether ``s`` can be written back as UTF-8 (JSON escapes can hold lone surrogates)."""
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _short(v: Any, limit: int = 40) -> str:
    """``repr`` of a value from a file, cut so a damaged file can't flood the message."""
    try:
        text = repr(v)
    except ValueError:  # an int too long for str()
        text = "a huge number"
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _len(v: Any) -> str:
    return f"{len(v)} values" if isinstance(v, list) else f"a JSON {_jtype(v)}"


def _jtype(v: Any) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}.get(
        type(v), "number"
    )
