"""The baseline file's schema, one table per ``schema_version``: each key a file of that version
may hold, its check (:mod:`.checks`), what a file without it reads as, and the record attribute
it fills.  :func:`read` is the one reading of a table.

A file is read with the newest table.  A key its own version's table names is read as that
table says: checked when present, its ``default`` when absent, or the check's error naming it
when it has none.  A key added by a later version reads as its ``older`` value when absent
(the migration), and is checked like any other when present, so a file keeps all it holds.

Adding a stored field is one entry: a new version whose table is the newest one plus the
field (:func:`added`), the record's attribute, and a test that a file of the previous version
loads (``tests/profiler/store/test_versions.py`` shows both).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from tprof_engine.store import checks
from tprof_engine.store.checks import Check, Reading


class _Required:
    def __repr__(self) -> str:
        return "REQUIRED"


# A field with no default: a file of a version that names it must hold it.
REQUIRED: Any = _Required()


def _kept(value: Any) -> Any:
    return value


@dataclass(frozen=True, slots=True, kw_only=True)
class Field:
    """One key of a file's top level or of its sessions.

    ``default``: what a file of a version naming the key reads when it lacks it (REQUIRED:
    the check is handed None and says what is missing).  ``older``: what a file of a version
    before the key reads (the migration; REQUIRED: as ``default``).  ``attr``: the record
    attribute it fills (None: it is kept by the session's op table, or read by the loader),
    written back by ``written``; ``omit_empty`` leaves an empty or None value unwritten.
    """

    key: str
    check: Check
    default: Any = REQUIRED
    older: Any = REQUIRED
    attr: str | None = None
    written: Callable[[Any], Any] = _kept
    omit_empty: bool = False

    def migrated(self) -> Any:
        """What a file older than this field reads."""
        return self.default if self.older is REQUIRED else self.older


@dataclass(frozen=True, slots=True, kw_only=True)
class Version:
    """What a file of one ``schema_version`` holds: its top-level fields, each session's, and
    whether it is packed (:mod:`.packing`; read as the open form of its fields)."""

    number: int
    packed: bool
    file: tuple[Field, ...]
    session: tuple[Field, ...]

    def keys(self) -> frozenset[str]:
        return frozenset(f.key for f in (*self.file, *self.session))


def added(
    base: Version,
    number: int,
    *,
    file: tuple[Field, ...] = (),
    session: tuple[Field, ...] = (),
    packed: bool | None = None,
) -> Version:
    """The version after ``base``: its fields and those ``file`` and ``session`` add."""
    return replace(
        base,
        number=number,
        packed=base.packed if packed is None else packed,
        file=(*base.file, *file),
        session=(*base.session, *session),
    )


def _per_round(key: str) -> Field:
    return Field(key=key, check=checks.per_round, default=None)


# The order of a table is the order of the checks, so a file with two faults names the first.
V1 = Version(
    number=1,
    packed=False,
    file=(
        Field(key="nodeid", check=checks.nodeid, attr="nodeid"),
        Field(
            key="environment",
            check=checks.environment,
            attr="fingerprint",
            written=lambda fp: fp.to_dict(),
        ),
        Field(key="protocol", check=checks.protocol, attr="protocol", written=dict),
        Field(
            key="sessions",
            check=checks.sessions,
            attr="sessions",
            written=lambda ss: [s.to_dict() for s in ss],
        ),
        Field(key="tool_version", check=checks.text, default="", attr="tool_version"),
        Field(
            key="holders",
            check=checks.holders,
            default={},
            attr="holders",
            written=lambda h: dict(sorted(h.items())),
            omit_empty=True,
        ),
    ),
    session=(
        Field(key="wall_us", check=checks.wall_us),
        _per_round("probe_cpu_us"),
        Field(key="has_device", check=checks.has_device, default=False),
        _per_round("probe_device_us"),
        Field(key="ops", check=checks.ops),
        Field(key="warmup_used", check=checks.warmup_used, default=0, attr="warmup_used"),
        Field(key="soft", check=checks.soft, default={}, attr="soft", written=dict),
        Field(key="load", check=checks.load, default=None),
        Field(key="host_before_us", check=checks.host_before_us, default=None),
        Field(key="scopes", check=checks.scopes, default=None),
        Field(key="recorded_at", check=checks.text, default="", attr="recorded_at"),
        Field(
            key="settings",
            check=checks.session_settings,
            default={},
            attr="settings",
            written=dict,
            omit_empty=True,
        ),
    ),
)

# 2: each session may hold the work census of its test.
V2 = added(
    V1,
    2,
    session=(
        Field(
            key="work",
            check=checks.work,
            default=None,
            attr="work",
            written=lambda w: w.to_dict(),
            omit_empty=True,
        ),
    ),
)

# 3: the same fields, packed (store/packing.py).
V3 = added(V2, 3, packed=True)

VERSIONS: tuple[Version, ...] = (V1, V2, V3)


def read(
    obj: Mapping[str, Any], fields: tuple[Field, ...], version: Version, at: str, r: Reading
) -> dict[str, Any]:
    """Each of ``fields`` read from ``obj`` (the newest table's, for a file of ``version``),
    by key: ``at`` is the object's path in the file (``""`` at the top)."""
    own = version.keys()
    for f in fields:
        where = f"{at}.{f.key}" if at else f.key
        if f.key in obj:
            r.got[f.key] = f.check(obj[f.key], where, r)
        elif f.key not in own:
            r.got[f.key] = _fresh(f.migrated())
        elif f.default is REQUIRED:
            r.got[f.key] = f.check(None, where, r)
        else:
            r.got[f.key] = _fresh(f.default)
    return r.got


def _fresh(value: Any) -> Any:
    """A default of its own for each record (an empty object is not shared between them)."""
    return dict(value) if isinstance(value, dict) else value


def record_fields(got: Mapping[str, Any], fields: tuple[Field, ...]) -> dict[str, Any]:
    """The record attributes ``fields`` fill, from what :func:`read` read."""
    return {f.attr: got[f.key] for f in fields if f.attr is not None}


def written(record: Any, fields: tuple[Field, ...]) -> dict[str, Any]:
    """The keys ``fields`` write of ``record``'s attributes."""
    out = {}
    for f in fields:
        if f.attr is None:
            continue
        value = getattr(record, f.attr)
        if f.omit_empty and not value:
            continue
        out[f.key] = f.written(value)
    return out
