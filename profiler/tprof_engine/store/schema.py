"""A baseline file's records and the one loader of its schema (:mod:`.versions`): read
strictly, every field checked, errors that name the file and say what to do.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tprof_engine import __version__
from tprof_engine.model.environment import Fingerprint
from tprof_engine.model.errors import BaselineError
from tprof_engine.model.limits import is_count
from tprof_engine.model.records import OpTable
from tprof_engine.model.work import WorkTable
from tprof_engine.store import checks, versions
from tprof_engine.store.checks import RERECORD, Reading, jtype, short
from tprof_engine.store.packing import OPEN_VERSION, unpacked
from tprof_engine.store.reading import FIX, SCHEMA
from tprof_engine.store.versions import VERSIONS, Version

SCHEMA_VERSION = VERSIONS[-1].number  # what a save writes (packed)
OLDEST_SCHEMA_VERSION = VERSIONS[0].number

# Sessions read when the caller gives no window (tprof show, diff): the most --tprof-window keeps.
MAX_SESSIONS = 100


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
        """The session's open form: its op table's keys and the newest table's session fields."""
        return {**self.table.to_dict(), **versions.written(self, VERSIONS[-1].session)}


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
        """The open form (``schema_version`` 2); a save writes it packed."""
        return {
            "schema": SCHEMA,
            "schema_version": OPEN_VERSION,
            **versions.written(self, VERSIONS[-1].file),
        }


def baseline_from_dict(
    data: Any,
    *,
    path: Path,
    expected_nodeid: str | None = None,
    keep: int | None = None,
    known: tuple[Version, ...] = VERSIONS,
) -> Baseline:
    """Validate the parsed contents of a baseline file (its newest ``keep`` sessions), read
    with the newest of the ``known`` versions' tables (:mod:`.versions`)."""
    where = str(path)

    def fail(msg: str, fix: str = FIX) -> BaselineError:
        return BaselineError(f"{where}: {msg}; {fix}")

    version = _version(data, known, fail)
    if version.packed:
        data = unpacked(data, fail)
    newest = known[-1]
    r = Reading(fail=fail, expected_nodeid=expected_nodeid)
    got = versions.read(data, newest.file, version, "", r)
    window = MAX_SESSIONS if keep is None else keep
    stored, rounds = got["sessions"], got["protocol"]["rounds"]
    got["sessions"] = _sessions(stored, rounds, window, version, newest.session, r)
    return Baseline(path=path, **versions.record_fields(got, newest.file))


def open_form(data: Mapping[str, Any], *, path: Path) -> dict[str, Any]:
    """A validated file's document in the open form: a packed one unpacked, an open one as it
    is; for callers that keep a file's fields verbatim (``tprof merge``)."""
    if not any(v.packed and v.number == data.get("schema_version") for v in VERSIONS):
        return dict(data)
    return unpacked(data, lambda msg, fix=FIX: BaselineError(f"{path}: {msg}; {fix}"))


def _version(data: Any, known: tuple[Version, ...], fail: checks.Fail) -> Version:
    """The version whose table ``data`` is written in: our schema, at a version we read."""
    if not isinstance(data, dict):
        raise fail(
            f"not a pytest-tprof baseline (top level is a JSON {jtype(data)})",
            "move it out of the baseline folder",
        )
    if data.get("schema") != SCHEMA:
        hint = " (it looks like a pytest-benchmark file)" if "benchmarks" in data else ""
        raise fail(
            f"not a pytest-tprof baseline{hint}: 'schema' is {short(data.get('schema'))}",
            "move it out of the baseline folder",
        )
    number = data.get("schema_version")
    if number is None:
        raise fail("'schema_version' is missing")
    if not is_count(number, minimum=None):
        raise fail(f"'schema_version' must be an integer (got {short(number)})")
    newest, oldest = known[-1].number, known[0].number
    if number > newest:
        raise fail(
            f"written by a newer pytest-tprof (schema_version {short(number)} > {newest})",
            "upgrade pytest-tprof to read it",
        )
    if number < oldest:
        raise fail(
            f"written in an older format (schema_version {short(number)} < {oldest}) "
            "that this pytest-tprof can't read",
            RERECORD,
        )
    return next(v for v in known if v.number == number)


def _sessions(
    stored: list[Any],
    rounds: int,
    keep: int,
    version: Version,
    fields: tuple[versions.Field, ...],
    r: Reading,
) -> tuple[Session, ...]:
    """The newest ``keep`` sessions of a file of ``version``, read with ``fields`` (the newest
    table's) and validated; older ones are left unread, as a save with that window would drop
    them (a file of 10,000 sessions costs what one of ``keep`` does)."""
    start = max(0, len(stored) - max(1, keep))
    parsed = tuple(
        _session(stored[i], f"sessions[{i}]", version, r.within(), fields)
        for i in range(start, len(stored))
    )
    # The protocol is the latest save's, and a save appends its session last.
    last = parsed[-1].table.rounds
    if last != rounds:
        raise r.fail(
            f"'sessions[{len(stored) - 1}]' has {last} rounds but 'protocol.rounds' is {rounds}"
        )
    return parsed


def _session(
    s: Any, at: str, version: Version, r: Reading, fields: tuple[versions.Field, ...]
) -> Session:
    if not isinstance(s, dict):
        raise r.fail(f"'{at}' must be an object (got a JSON {jtype(s)})")
    got = versions.read(s, fields, version, at, r)
    return Session(table=checks.op_table(s, at, r), **versions.record_fields(got, fields))
