"""Merge baseline folders: one window per test from the sessions of several CI runs.

CI keeps the baseline folder of each main run as an artifact; runs that started from the same
artifact diverge, each adding its own session.  A merge takes every folder's copy of a test's
baseline, drops sessions that are exactly alike (the copies carried from run to run), orders
the rest by when they were recorded, and replays them as saves would have appended them
(``store.baselines.with_session``, under the restart rule the caller hands in: the front's
``tprof_engine.window.restart_reason``).  So the window, and the sessions a change of
environment, protocol, ops or work leaves out, are the saves' one rule, not a second one.
Sessions and the file's other fields are written back as read, fields this version doesn't
know included: packed copies are merged in the open form (each copy's packed rows follow its
own op list) and written packed, as the newest copy's schema version.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tprof_engine.model.errors import BaselineError, ConfigError
from tprof_engine.store import baselines, packing, paths, reading, schema

WRITTEN = "written"
UNCHANGED = "unchanged"
_OLDEST = _dt.datetime.min.replace(tzinfo=_dt.timezone.utc)


@dataclass(frozen=True, slots=True, kw_only=True)
class _Copy:
    """One folder's copy of a test's baseline: the document as read and its validated form."""

    path: Path
    order: int  # the folder's place among the inputs: breaks ties of recording time
    data: dict[str, Any]  # in the open form
    version: int  # the file's schema version
    baseline: schema.Baseline

    @property
    def unread(self) -> int:
        """Sessions older than the newest window of the file, left unread."""
        return len(self.data["sessions"]) - len(self.baseline.sessions)

    def entries(self) -> list[_Entry]:
        raw = self.data["sessions"][self.unread :]
        return [
            _Entry(copy=self, index=i, raw=r, session=s)
            for i, (r, s) in enumerate(zip(raw, self.baseline.sessions, strict=True))
        ]


@dataclass(frozen=True, slots=True, kw_only=True)
class _Entry:
    """One session of one copy: its JSON as read and the store's validated form of it."""

    copy: _Copy
    index: int
    raw: dict[str, Any]
    session: schema.Session

    @property
    def identity(self) -> str:
        return json.dumps(self.raw, sort_keys=True)

    def order_key(self) -> tuple[_dt.datetime, int, int]:
        return _recorded(self.session.recorded_at), self.copy.order, self.index


@dataclass(frozen=True, slots=True, kw_only=True)
class MergedTest:
    """What a merge did with one test's baseline."""

    path: Path  # the merged file
    nodeid: str
    kept: int
    newest: str  # when the newest kept session was recorded
    dropped: Mapping[str, int]  # why → how many sessions
    outcome: str  # WRITTEN or UNCHANGED

    def line(self) -> str:
        """One line for the user: the test, what was kept, what was dropped and why."""
        env = self.path.parent.name
        kept = f"kept {_count(self.kept, 'session')} (newest {self.newest or 'undated'})"
        parts = [f"{self.nodeid} [{env}]: {kept}"]
        if self.dropped:
            parts.append("dropped " + ", ".join(f"{n} {why}" for why, n in self.dropped.items()))
        parts.append(
            f"written to {self.path}" if self.outcome == WRITTEN else f"{self.path} unchanged"
        )
        return "; ".join(parts)


def merge_folders(
    inputs: Sequence[Path],
    into: Path,
    *,
    restart: baselines.Restart,
    window: int = baselines.DEFAULT_WINDOW,
) -> list[MergedTest]:
    """Merge the baselines of ``inputs`` and of ``into`` (when it holds any) into ``into``.

    Every file is read and validated before anything is written: a missing folder, one that
    holds no baselines, or a damaged file is an error, and ``into`` is left as it was.  Each
    test's file is then rewritten (atomically, under the store's lock) only when it changes.
    """
    if not 1 <= window <= schema.MAX_SESSIONS:
        raise ConfigError(f"'window' must be from 1 to {schema.MAX_SESSIONS} (got {window})")
    if not inputs:
        raise ConfigError("no baseline folders to merge; name one or more")
    into = Path(into)
    if into.exists() and not into.is_dir():
        raise ConfigError(f"{into}: is a file, not a folder; name a folder for --into")
    folders = [_checked_input(Path(f)) for f in inputs]
    into_order = _place_of(into, folders)
    if into_order is None and _holds_baselines(into):
        folders.append(into)
        into_order = len(folders) - 1
    copies = _read_copies(folders, window=window, skip=into_order)
    if into_order is not None:
        for rel in _relative_baselines(into):
            _read_copy(into, rel, into_order, window)  # validated now, read again under the lock
            copies.setdefault(rel, [])
    return [
        _merge_test(rel, copies[rel], into, into_order, window=window, restart=restart)
        for rel in sorted(copies)
    ]


def _checked_input(folder: Path) -> Path:
    """``folder`` when it is a baseline folder (the one ``--tprof-baseline-dir`` names)."""
    if not folder.exists():
        raise ConfigError(
            f"{folder}: no such folder; name the baseline folders of the runs to merge"
        )
    if not folder.is_dir():
        raise ConfigError(
            f"{folder}: is a file, not a baseline folder; name the folder --tprof-baseline-dir "
            "wrote (it holds one folder per environment)"
        )
    if not _relative_baselines(folder):
        raise ConfigError(
            f"{folder}: holds no baseline files (<environment>/<test>.json); name the folder "
            "--tprof-baseline-dir wrote"
        )
    return folder


def _holds_baselines(folder: Path) -> bool:
    return folder.is_dir() and bool(_relative_baselines(folder))


def _relative_baselines(folder: Path) -> list[Path]:
    """The baseline files under ``folder``, relative to it: ``<environment>/<test>.json``."""
    found = []
    for path in paths.iter_baselines(folder):
        rel = path.relative_to(folder)
        if len(rel.parts) != 2:
            raise ConfigError(
                f"{path}: not in an environment folder of the baseline folder {folder}; name "
                "the folder --tprof-baseline-dir wrote (it holds one folder per environment), "
                "or move this file out of it"
            )
        found.append(rel)
    return found


def _place_of(into: Path, folders: Sequence[Path]) -> int | None:
    """The index of ``into`` among the input folders, if it is one of them."""
    for i, folder in enumerate(folders):
        if into.exists() and os.path.samefile(into, folder):
            return i
    return None


def _read_copies(
    folders: Sequence[Path], *, window: int, skip: int | None
) -> dict[Path, list[_Copy]]:
    """Every folder's copy of every test, by relative path; ``skip`` is read under the lock."""
    copies: dict[Path, list[_Copy]] = {}
    for order, folder in enumerate(folders):
        if order == skip:
            continue
        for rel in _relative_baselines(folder):
            copies.setdefault(rel, []).append(_read_copy(folder, rel, order, window))
    for rel, found in copies.items():
        _check_same_test(rel, found)
    return copies


def _read_copy(folder: Path, rel: Path, order: int, window: int) -> _Copy:
    path = folder / rel
    data = reading.read_baseline_data(path)
    baseline = schema.baseline_from_dict(data, path=path, keep=window)
    return _Copy(
        path=path,
        order=order,
        data=schema.open_form(data, path=path),
        version=data["schema_version"],
        baseline=baseline,
    )


def _check_same_test(rel: Path, copies: Sequence[_Copy]) -> None:
    """That all copies of ``rel`` hold one test (a file name is a hash of its node id)."""
    nodeids = {c.baseline.nodeid: c.path for c in copies}
    if len(nodeids) > 1:
        (a, a_path), (b, b_path) = list(nodeids.items())[:2]
        raise BaselineError(
            f"{a_path} holds the baseline of {a!r} but {b_path} of {b!r}, under the same file "
            f"name {rel.name}; remove the file that was renamed by hand"
        )


def _merge_test(
    rel: Path,
    copies: Sequence[_Copy],
    into: Path,
    into_order: int | None,
    *,
    window: int,
    restart: baselines.Restart,
) -> MergedTest:
    """Merge one test's copies into ``into / rel`` under the store's lock."""
    out = into / rel
    with paths.locked(out):
        current = None
        if into_order is not None and out.is_file():
            current = _read_copy(into, rel, into_order, window)
        every = [*copies, current] if current is not None else list(copies)
        if not every:
            raise BaselineError(f"{out}: removed while merging; run the merge again")
        _check_same_test(rel, every)
        doc, version, result = _merged(every, out, window=window, restart=restart)
        if current is not None and (current.data, current.version) == (doc, version):
            return result
        packs = version > packing.OPEN_VERSION
        baselines.write_baseline_data(out, packing.packed(doc, version=version) if packs else doc)
    return MergedTest(
        path=result.path,
        nodeid=result.nodeid,
        kept=result.kept,
        newest=result.newest,
        dropped=result.dropped,
        outcome=WRITTEN,
    )


def _merged(
    copies: Sequence[_Copy], out: Path, *, window: int, restart: baselines.Restart
) -> tuple[dict[str, Any], int, MergedTest]:
    """The merged document of one test in the open form, the schema version it is written as
    (the newest of its kept sessions' files'), and what became of its sessions (as unchanged)."""
    dropped: Counter[str] = Counter()
    unique: dict[str, _Entry] = {}
    for entry in (e for c in sorted(copies, key=lambda c: c.order) for e in c.entries()):
        if entry.identity in unique:
            dropped["identical copies"] += 1
        else:
            unique[entry.identity] = entry
    dropped[f"older than the window of {window}"] += sum(c.unread for c in copies)
    entries = sorted(unique.values(), key=_Entry.order_key)
    kept = _replayed(entries, window, dropped, restart)
    newest = kept[-1]
    version = max(e.copy.version for e in kept)
    doc = {
        **newest.copy.data,
        "schema_version": min(version, packing.OPEN_VERSION),
        "sessions": [e.raw for e in kept],
    }
    schema.baseline_from_dict(doc, path=out, keep=window)  # what is written reads back
    result = MergedTest(
        path=out,
        nodeid=newest.copy.baseline.nodeid,
        kept=len(kept),
        newest=newest.session.recorded_at,
        dropped={why: n for why, n in dropped.items() if n},
        outcome=UNCHANGED,
    )
    return doc, version, result


def _replayed(
    entries: Sequence[_Entry], window: int, dropped: Counter[str], restart: baselines.Restart
) -> list[_Entry]:
    """The sessions a save of each entry, oldest first, would have left in the window.

    Counts in ``dropped`` the sessions a restart of the window left out (with ``restart``'s
    reason) and those that fell out of the window.
    """
    by_session = {id(e.session): e for e in entries}
    baseline: schema.Baseline | None = None
    for entry in entries:
        before = len(baseline.sessions) if baseline is not None else 0
        baseline, what = baselines.with_session(
            baseline,
            nodeid=entry.copy.baseline.nodeid,
            fingerprint=entry.copy.baseline.fingerprint,
            protocol=entry.copy.baseline.protocol,
            session=entry.session,
            restart=restart,
            window=window,
        )
        if what.startswith("restarted"):
            dropped[f"older than a restart of the window {what.removeprefix('restarted ')}"] += (
                before
            )
        else:
            dropped[f"older than the window of {window}"] += before + 1 - len(baseline.sessions)
    kept = baseline.sessions if baseline is not None else ()
    return [by_session[id(s)] for s in kept]


def _recorded(text: str) -> _dt.datetime:
    """When a session was recorded; an unreadable time sorts first, a time without zone is UTC."""
    try:
        when = _dt.datetime.fromisoformat(text)
    except ValueError:
        return _OLDEST
    return when if when.tzinfo is not None else when.replace(tzinfo=_dt.timezone.utc)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"
