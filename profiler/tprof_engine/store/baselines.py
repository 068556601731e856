"""Baselines: one JSON file per test, holding a rolling window of sessions (each the raw
per-round arrays of one ``--tprof-save`` run) so the rule can learn how a test drifts.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from tprof_engine.model.environment import Fingerprint
from tprof_engine.model.errors import BaselineError, ConfigError
from tprof_engine.store.packing import packed
from tprof_engine.store.paths import is_folder, locked, temp_file_for
from tprof_engine.store.reading import encoded, read_baseline_data
from tprof_engine.store.schema import SCHEMA_VERSION, Baseline, Session, baseline_from_dict

DEFAULT_WINDOW = 5
# Sessions a baseline wants before it gates timing well (the README's "save three times"):
# fewer learn floors too narrow to read a save as unlike its window, and a save says so.
SESSIONS_ADVISED = 3


def sessions_advice(sessions: int) -> str:
    """What a save of a window of ``sessions`` should add, or "" once it has enough."""
    if sessions >= SESSIONS_ADVISED:
        return ""
    more = SESSIONS_ADVISED - sessions
    return (
        f"{sessions} session{'s' if sessions > 1 else ''} so far: save {more} more before "
        "timing gates well (calls and work gate already)"
    )


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat()


def keep_newest(path: Path, *, refuse: Callable[[Baseline], str | None]) -> str:
    """Keep only the newest session of the baseline at ``path`` (``tprof accept``: an intended
    change accepted), under the file's lock; says what it did.  ``refuse`` reads the baseline
    first and says why nothing may be dropped (a :class:`ConfigError` then says it), or None."""
    with locked(path):
        base = load_baseline(path)
        newest = base.sessions[-1]
        dropped = len(base.sessions) - 1
        why = refuse(base) if dropped else None
        if why is not None:
            raise ConfigError(why)
        if dropped:
            save_baseline(path, replace(base, sessions=(newest,)))
    if not dropped:
        return f"one session already (recorded {newest.recorded_at}): {path}"
    return (
        f"kept the newest session (recorded {newest.recorded_at}), dropped {dropped} older: {path}"
    )


def load_baseline(
    path: Path, *, expected_nodeid: str | None = None, keep: int | None = None
) -> Baseline:
    """Read and validate a baseline file; any problem is a :class:`BaselineError` naming it.

    Only the newest ``keep`` sessions are validated and kept (the run's window: a save keeps
    no more, and the rule judges against those); without ``keep``, the newest
    :data:`MAX_SESSIONS`.  The file is only read: a damaged baseline is never rewritten here.
    """
    path = Path(path)
    data = read_baseline_data(path)
    return baseline_from_dict(data, path=path, expected_nodeid=expected_nodeid, keep=keep)


def save_note(
    what: str,
    existing: Baseline | None,
    sessions: int,
    *,
    damaged: bool,
    reset: bool,
    unlike: str | None,
    nodeid: str,
) -> str:
    """What a save says it did to the window, and how many sessions more it wants."""
    if damaged:
        what = "replaced a damaged file"
    elif reset and existing is not None:
        what = f"restarted (--tprof-reset; {len(existing.sessions)} older session(s) dropped)"
    elif unlike and what.startswith("appended"):
        what = f"{what}; {unlike}; if the code changed on purpose: tprof accept '{nodeid}'"
    return "; ".join(filter(None, (what, sessions_advice(sessions))))


# Why a session about to be saved restarts the window (the empty string: it joins it), given
# the stored baseline, the run's fingerprint and protocol, and the session: the front's rule
# (tprof_engine.window.restart_reason), handed to the store.
Restart = Callable[[Baseline, Fingerprint, Mapping[str, Any], Session], str]


def with_session(
    existing: Baseline | None,
    *,
    nodeid: str,
    fingerprint: Fingerprint,
    protocol: Mapping[str, Any],
    session: Session,
    restart: Restart,
    window: int = DEFAULT_WINDOW,
) -> tuple[Baseline, str]:
    """The baseline after recording ``session``, and what happened to the window: appended
    (the oldest falling out of a full window), or restarted with the new session alone when
    ``restart`` says why (the older sessions measured other code)."""
    if window < 1:
        raise ValueError(f"'window' must be >= 1 (got {window})")
    if existing is None:
        return _new(nodeid, fingerprint, protocol, (session,)), "recorded"
    reason = restart(existing, fingerprint, protocol, session)
    if reason:
        return _new(nodeid, fingerprint, protocol, (session,)), f"restarted ({reason})"
    kept = (*existing.sessions, session)[-window:]
    what = f"appended ({len(kept)} sessions)"
    if existing.work is not None and session.work is not None:
        if existing.work.census != session.work.census:
            what += "; the work census is now counted by this tprof's rules"
    return _new(nodeid, fingerprint, protocol, kept), what


def _new(
    nodeid: str, fp: Fingerprint, protocol: Mapping[str, Any], sessions: Sequence[Session]
) -> Baseline:
    return Baseline(
        nodeid=nodeid, fingerprint=fp, protocol=dict(protocol), sessions=tuple(sessions)
    )


def save_baseline(path: Path, baseline: Baseline) -> Path:
    """Write atomically: a temp file in the same folder, fsync, then ``os.replace``.

    Readers see the old file or the new one, never a part: a save killed at any point leaves
    at most a temp file ``.<name>.<pid>-<random>.tmp`` beside it, which no reader takes for a
    baseline and which the next save into that folder removes once its process is gone.
    Any failure is a :class:`BaselineError` naming the path; the previous file stays intact.
    """
    return write_baseline_data(path, packed(baseline.to_dict(), version=SCHEMA_VERSION))


def write_baseline_data(path: Path, data: Mapping[str, Any]) -> Path:
    """Write a baseline's JSON document atomically, as :func:`save_baseline` does.

    For callers that keep the document's fields verbatim, those this version doesn't know too.
    """
    path = Path(path)
    if path.is_dir():
        raise is_folder(path)
    data_bytes = encoded(path, data)
    temp = temp_file_for(path)
    try:
        temp.write(data_bytes)
    except IsADirectoryError:  # made a folder since the check
        raise is_folder(path) from None
    except OSError as exc:
        raise BaselineError(
            f"{path}: can't write the baseline ({exc.strerror}); the previous baseline is "
            f"unchanged; free space on or fix the permissions of {path.parent} and re-run with "
            "--tprof-save"
        ) from None
    return path
