"""The checks of a baseline file's values: each takes the value a key holds (None when the file
lacks it), where it is and the reading under way, and returns what the record keeps, or raises
the reading's error naming the key, what it held and what to do.

:mod:`.versions` names which check reads which key, one table per schema version.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tprof_engine.model import settings
from tprof_engine.model.environment import Fingerprint
from tprof_engine.model.errors import BaselineError
from tprof_engine.model.limits import MAX_ITERATIONS, is_count
from tprof_engine.model.records import OpTable, RoundLoad, host_before_from_dict
from tprof_engine.model.work import WorkTable

RERECORD = "re-record it with --tprof-save"

# Larger values are damage, not measurements: a round of 11.6 days, 10**12 calls.
_MAX_US = 1e12
_MAX_CALLS = 10**12

# The drift probe (capture._Probe: twelve ops, four of them 96x96 matmuls) takes tens of µs;
# no profiler records it in less than 1 µs.  A smaller probe time is damage, and it would
# put the current run in units where every op reads far faster than its baseline.
_MIN_PROBE_US = 1.0

# Makes the error of a damaged file: ``fail(message, fix=FIX)``.
Fail = Callable[..., BaselineError]


@dataclass(slots=True, kw_only=True)
class Reading:
    """One object of a file being read: its error maker, the keys read so far, and what the
    whole file's reading shares: the node id it must hold (None: any), each census read."""

    fail: Fail
    expected_nodeid: str | None = None
    got: dict[str, Any] = field(default_factory=dict)
    censuses: list[tuple[Any, WorkTable]] = field(default_factory=list)

    def within(self) -> Reading:
        """A reading of an object inside this one: its own keys, the same file."""
        return Reading(fail=self.fail, expected_nodeid=self.expected_nodeid, censuses=self.censuses)


# A check: (the value, its key's path in the file, the reading) → what the record keeps.
Check = Callable[[Any, str, Reading], Any]


def nodeid(value: Any, at: str, r: Reading) -> str:
    if not isinstance(value, str) or not value or not _unicode(value):
        raise r.fail(f"'{at}' must be a non-empty string (got {short(value)})")
    expected = r.expected_nodeid
    if expected is not None and value != expected:
        raise r.fail(f"holds the baseline of {short(value, 200)}, not of {expected!r}", RERECORD)
    return value


def environment(value: Any, at: str, r: Reading) -> Fingerprint:
    if not isinstance(value, dict) or not isinstance(value.get("hard"), dict):
        raise r.fail(f"'{at}.hard' must be an object")
    if not isinstance(value.get("soft", {}), dict):
        raise r.fail(f"'{at}.soft' must be an object (got a JSON {jtype(value['soft'])})")
    return Fingerprint.from_dict(value)


def protocol(value: Any, at: str, r: Reading) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise r.fail(f"'{at}' must be an object (got a JSON {jtype(value)})")
    rounds = value.get("rounds")
    if not is_count(rounds, minimum=2):
        raise r.fail(f"'{at}.rounds' must be an integer >= 2 (got {short(rounds)})")
    iterations = value.get("iterations", 1)
    if not is_count(iterations) or iterations > MAX_ITERATIONS:
        raise r.fail(
            f"'{at}.iterations' must be an integer from 1 to {MAX_ITERATIONS} "
            f"(got {short(iterations)})"
        )
    return value


def text(value: Any, at: str, r: Reading) -> str:
    """Any value, kept as text (a file's free-form notes: when recorded, by which version)."""
    return str(value)


def holders(value: Any, at: str, r: Reading) -> dict[str, str]:
    """The op each op the newest census doesn't name ran inside: op name → op name."""
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) and k and v for k, v in value.items()
    ):
        raise r.fail(f"'{at}' must be an object of op name → the op it ran inside")
    return dict(value)


def sessions(value: Any, at: str, r: Reading) -> list[Any]:
    """The sessions as stored, oldest first (the loader reads each with its table)."""
    if not isinstance(value, list) or not value:
        raise r.fail(f"'{at}' must be a non-empty list")
    return value


def wall_us(value: Any, at: str, r: Reading) -> int:
    """A session's wall time per round: its round count, at least 2."""
    n = times(value, at, r, rounds=None)
    if n < 2:
        raise r.fail(f"'{at}' must hold one time per round, >= 2 rounds (got {n})")
    r.got["rounds"] = n
    return n


def per_round(value: Any, at: str, r: Reading) -> Any:
    """Times in µs, one per round of the session."""
    times(value, at, r, rounds=r.got["rounds"])
    return value


def has_device(value: Any, at: str, r: Reading) -> bool:
    if not isinstance(value, bool):
        raise r.fail(f"'{at}' must be true or false (got {short(value)})")
    return value


def ops(value: Any, at: str, r: Reading) -> dict[str, Any]:
    """Each op's arrays: a call count and a time per metric for each round."""
    if not isinstance(value, dict):
        raise r.fail(f"'{at}' must be an object of op name → arrays")
    for name, entry in value.items():
        _op(name, entry, f"{at}[{short(name, 80)}]", r)
    return value


def _op(name: Any, entry: Any, where: str, r: Reading) -> None:
    n, device = r.got["rounds"], r.got.get("has_device", False)
    if not _unicode(name):
        raise r.fail(f"'{where}' is not a valid op name")
    if not isinstance(entry, dict):
        raise r.fail(f"'{where}' must be an object (got a JSON {jtype(entry)})")
    calls = entry.get("calls")
    if not isinstance(calls, list) or len(calls) != n:
        raise r.fail(f"'{where}.calls' must be a list of {n} counts (got {_len(calls)})")
    for c in calls:
        if not is_count(c, minimum=0):
            raise r.fail(f"'{where}.calls' holds {short(c)}; calls must be integers >= 0")
        if c > _MAX_CALLS:
            raise r.fail(f"'{where}.calls' holds {short(c)}; calls must be <= 10**12")
    device_metrics = ("self_device_us", "total_device_us")
    for metric in ("self_cpu_us", "total_cpu_us", *device_metrics):
        if metric not in entry:
            if metric in device_metrics and not device:
                continue
            raise r.fail(f"'{where}.{metric}' is missing")
        times(entry[metric], f"{where}.{metric}", r, rounds=n)


def warmup_used(value: Any, at: str, r: Reading) -> int:
    if not is_count(value, minimum=0):
        raise r.fail(f"'{at}' must be an integer >= 0 (got {short(value)})")
    return int(value)


def soft(value: Any, at: str, r: Reading) -> dict[str, Any]:
    """A session's machine facts: informative only, so a malformed one reads as none."""
    return value if isinstance(value, dict) else {}


def load(value: Any, at: str, r: Reading) -> Any:
    """The per-round load readings (checked here, kept by the op table)."""
    if value is not None:
        try:
            RoundLoad.from_dict(value, r.got["rounds"])
        except ValueError as exc:
            raise r.fail(f"'{at}': {exc}") from None
    return value


def host_before_us(value: Any, at: str, r: Reading) -> Any:
    """The time outside any op before each op, per round (kept by the op table)."""
    try:
        host_before_from_dict(value, tuple(r.got["ops"]), r.got["rounds"])
    except ValueError as exc:
        raise r.fail(f"'{at}': {exc}") from None
    return value


def scopes(value: Any, at: str, r: Reading) -> Any:
    """The ops that are user annotations (``record_function`` scopes), by name."""
    if value is not None and (
        not isinstance(value, list) or not all(isinstance(n, str) and n for n in value)
    ):
        raise r.fail(f"'{at}' must be a list of op names (got {short(value)})")
    return value


def work(value: Any, at: str, r: Reading) -> WorkTable:
    """A work census; each distinct one of a file is read once (a deterministic test's
    sessions hold equal ones: five sessions of a 7-layer encoder's training step, 2,900 rows
    read as 580, a 0.10 s load as 0.04 s)."""
    for seen, table in r.censuses:
        if seen == value:
            return table
    try:
        table = WorkTable.from_dict(value, where=at)
    except (BaselineError, ValueError) as exc:
        raise r.fail(str(exc)) from None
    r.censuses.append((value, table))
    return table


def session_settings(value: Any, at: str, r: Reading) -> dict[str, Any]:
    found = settings.checked(value)
    if found is None:
        raise r.fail(f"'{at}' must be an object of setting name → true/false, number or text")
    return found


def op_table(s: Mapping[str, Any], at: str, r: Reading) -> OpTable:
    """A checked session's op table, once its times are known to carry a comparison."""
    try:
        table = OpTable.from_dict(s)
    except ValueError as exc:  # only the device part is checked there
        raise r.fail(f"'{at}.device': {exc}") from None
    _check_comparable(table, at, r.fail)
    return table


def _check_comparable(table: OpTable, at: str, fail: Fail) -> None:
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


def times(values: Any, where: str, r: Reading, *, rounds: int | None) -> int:
    """How many times ``values`` holds, once each is a finite number of µs in range (and there
    is one per round where ``rounds`` is given)."""
    if not isinstance(values, list):
        raise r.fail(f"'{where}' must be a list of times in µs (got a JSON {jtype(values)})")
    if rounds is not None and len(values) != rounds:
        raise r.fail(f"'{where}' has {len(values)} values but the session has {rounds} rounds")
    for v in values:
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise r.fail(f"'{where}' holds {short(v)}; times must be numbers")
        if isinstance(v, float) and not math.isfinite(v):
            raise r.fail(f"'{where}' holds {v!r}; times must be finite")
        if v < 0:
            raise r.fail(f"'{where}' holds {short(v)}; times must be >= 0")
        if v >= _MAX_US:  # exact for huge ints too, which math.isfinite can't take
            raise r.fail(f"'{where}' holds {short(v)}; times must be below 1e12 µs")
    return len(values)


def _unicode(s: str) -> bool:
    """Whether ``s`` can be written back as UTF-8 (JSON escapes can hold lone surrogates)."""
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def short(v: Any, limit: int = 40) -> str:
    """``repr`` of a value from a file, cut so a damaged file can't flood the message."""
    try:
        shown = repr(v)
    except ValueError:  # an int too long for str()
        shown = "a huge number"
    return shown if len(shown) <= limit else shown[: limit - 1] + "…"


def _len(v: Any) -> str:
    return f"{len(v)} values" if isinstance(v, list) else f"a JSON {jtype(v)}"


def jtype(v: Any) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}.get(
        type(v), "number"
    )
