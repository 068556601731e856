"""Baselines: one JSON file per test, holding a rolling window of sessions (each the raw
per-round arrays of one ``--tprof-save`` run) so the rule can learn how a test drifts.
"""

from __future__ import annotations

import datetime as _dt
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from tprof_engine.decide import judge as judging
from tprof_engine.decide.rule import Rule
from tprof_engine.decide.work_gate import judge_work
from tprof_engine.model import settings
from tprof_engine.model.environment import Fingerprint, differences
from tprof_engine.model.errors import BaselineError, ConfigError
from tprof_engine.model.records import OpTable
from tprof_engine.model.verdicts import TestVerdict
from tprof_engine.model.work import WorkTable
from tprof_engine.store.packing import packed
from tprof_engine.store.paths import is_folder, locked, temp_file_for
from tprof_engine.store.reading import encoded, read_baseline_data
from tprof_engine.store.schema import Baseline, Session, baseline_from_dict

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


def accept_newest(path: Path, *, record_args: Sequence[str] = ()) -> str:
    """Keep only the newest session of the baseline at ``path``: an intended change accepted.

    After ``pytest --tprof-save`` recorded the changed code, its session alone is the window,
    so the floor learns nothing from sessions of the code before.  Says what it did.  When the
    newest session measured the same code as the older ones (:func:`same_code_as_older`), the
    change isn't recorded yet: nothing is dropped, and a :class:`ConfigError` says to record
    it first (``record_args``: what that save must be given besides the node id).
    """
    with locked(path):
        base = load_baseline(path)
        newest = base.sessions[-1]
        dropped = len(base.sessions) - 1
        same = same_code_as_older(base) if dropped else None
        if same is not None:
            raise ConfigError(_not_recorded_yet(path, base, same, record_args))
        if dropped:
            save_baseline(path, replace(base, sessions=(newest,)))
    if not dropped:
        return f"one session already (recorded {newest.recorded_at}): {path}"
    return (
        f"kept the newest session (recorded {newest.recorded_at}), dropped {dropped} older: {path}"
    )


def same_code_as_older(base: Baseline, rule: Rule | None = None) -> TestVerdict | None:
    """The judgement showing that the newest session measured the same code as the older ones,
    or None when it measured other code (a change to accept).

    The same code: a save would append it to them (the same ops, calls per round and work
    census) and its timing isn't unlike theirs (:func:`judge.unlike_window`, the judgement a
    save warns with).  Dropping the older sessions would keep one of the code before and lose
    the rest.
    """
    newest, older = base.sessions[-1], base.sessions[:-1]
    ops = _structure(newest.table)
    if any(_structure(s.table) != ops or _work_changed(s.work, newest.work) for s in older):
        return None
    side = judging.Recorded  # both sides: the baseline's environment and protocol
    verdict = judging.judge(
        side(tables=tuple(s.table for s in older), fingerprint=base.fingerprint,
             protocol=base.protocol, work=older[-1].work, hosts=base.hosts[:-1]),
        side(tables=(newest.table,), fingerprint=base.fingerprint, protocol=base.protocol,
             work=newest.work, hosts=base.hosts[-1:]),
        rule or Rule(),
    )  # fmt: skip
    return verdict if judging.unlike_window(verdict) is None else None


def _not_recorded_yet(
    path: Path, base: Baseline, same: TestVerdict, record_args: Sequence[str]
) -> str:
    """Why ``tprof accept`` dropped nothing, and the save that records the change first."""
    test = shlex.quote(base.nodeid)
    given = "".join(f" {shlex.quote(a)}" for a in record_args)
    older = len(base.sessions) - 1
    timing = "timings within their floor"
    if not same.timing_compared:
        timing = f"timings not compared: {', '.join(same.differences) or 'none comparable'}"
    text = (
        f"{path}: nothing dropped: its newest session (recorded {base.sessions[-1].recorded_at}) "
        f"is the same code as the {older} older one{'s' if older != 1 else ''} (the same ops, "
        f"calls and work census; {timing}), so the change to accept is not recorded yet; first "
        f"record the changed code with pytest --tprof-save{given} {test}, then run "
        f"tprof accept {test} again"
    )
    if not same.timing_compared:  # a change of timing alone could hide there
        text += (
            "; if you did and only its timing moved, start the window from a new session "
            f"instead: pytest --tprof-save --tprof-reset{given} {test}"
        )
    return text


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

    The new session is appended while the environment's hard keys, the protocol, the op
    structure (names and calls per round) and the work census match the stored sessions;
    otherwise the window restarts with the new session alone, since older sessions measured
    other code.  A census counted by other rules (an older tprof) is no sign of other code:
    the session is appended, and its census is the one judged from then on.
    """
    if window < 1:
        raise ValueError(f"'window' must be >= 1 (got {window})")
    if existing is None:
        return _new(nodeid, fingerprint, protocol, (session,)), "recorded"
    reason = ""
    moved_settings = settings.differences(existing.settings, session.settings)
    if moved := differences(existing.fingerprint, fingerprint):
        reason = _changed("environment", moved)
    elif moved_settings:
        reason = _changed("settings", moved_settings)
    elif _without_rounds(existing.protocol) != _without_rounds(protocol):
        before, after = _without_rounds(existing.protocol), _without_rounds(protocol)
        moved = [
            f"{k} {before.get(k, 'none')} → {after.get(k, 'none')}"
            for k in sorted(before.keys() | after.keys())
            if before.get(k) != after.get(k)
        ]
        reason = _changed("protocol", moved)
    elif _structure(existing.sessions[-1].table) != _structure(session.table):
        reason = "ops or calls changed"
    else:
        reason = _work_changed(existing.work, session.work)
    if reason:
        return _new(nodeid, fingerprint, protocol, (session,)), f"restarted ({reason})"
    kept = (*existing.sessions, session)[-window:]
    what = f"appended ({len(kept)} sessions)"
    if existing.work is not None and session.work is not None:
        if existing.work.census != session.work.census:
            what += "; the work census is now counted by this tprof's rules"
    return _new(nodeid, fingerprint, protocol, kept), what


def _without_rounds(protocol: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in protocol.items() if k != "rounds"}


def _changed(what: str, moved: Sequence[str]) -> str:
    """``protocol changed: iterations 3 → 5`` (the first two differences)."""
    more = f" (+{len(moved) - 2} more)" if len(moved) > 2 else ""
    return f"{what} changed: {', '.join(moved[:2])}{more}" if moved else f"{what} changed"


def _work_changed(before: WorkTable | None, now: WorkTable | None) -> str:
    """Why the window restarts when the work changed: its first difference, in words."""
    if before is None or now is None or before.census != now.census:
        return ""  # counted by other rules: the same code reads differently, and is kept
    diffs = before.differences(now)
    if not diffs:
        return ""
    if before.iterations == now.iterations:
        # The biggest change first: the work verdict orders its reasons by size.
        diffs = judge_work(before, now).reasons or diffs
    more = f" (+{len(diffs) - 1} more)" if len(diffs) > 1 else ""
    return f"work changed: {diffs[0]}{more}"


def _new(
    nodeid: str, fp: Fingerprint, protocol: Mapping[str, Any], sessions: Sequence[Session]
) -> Baseline:
    return Baseline(
        nodeid=nodeid, fingerprint=fp, protocol=dict(protocol), sessions=tuple(sessions)
    )


def _structure(table: OpTable) -> dict[str, int]:
    """Op name → median calls per round: what a session's code does, whatever its timing.

    Ops with a median of no calls are left out, as the comparison sees them: a session that
    kept a warm-up-only op's row of zeros did the same work as one that didn't.
    """
    medians = (int(np.median(table.calls[i])) for i in range(len(table.names)))
    return {n: m for n, m in zip(table.names, medians, strict=True) if m > 0}


def save_baseline(path: Path, baseline: Baseline) -> Path:
    """Write atomically: a temp file in the same folder, fsync, then ``os.replace``.

    Readers see the old file or the new one, never a part: a save killed at any point leaves
    at most a temp file ``.<name>.<pid>-<random>.tmp`` beside it, which no reader takes for a
    baseline and which the next save into that folder removes once its process is gone.
    Any failure is a :class:`BaselineError` naming the path; the previous file stays intact.
    """
    return write_baseline_data(path, packed(baseline.to_dict()))


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
