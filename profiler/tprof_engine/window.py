"""A baseline's window of sessions, as the front decides it: when a session about to be
saved restarts the window (:func:`restart_reason`: the older sessions measured other code),
and whether ``tprof accept`` may drop the older sessions (:func:`accept_newest`: not while the
newest measured the same code).  The store keeps the files and carries these answers out
(``store.baselines.with_session``, ``keep_newest``); it decides neither.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tprof_engine.decide import judge
from tprof_engine.decide.gates.work import judge_work
from tprof_engine.decide.timing.rule import Rule
from tprof_engine.model import settings
from tprof_engine.model.environment import Fingerprint, differences
from tprof_engine.model.records import OpTable
from tprof_engine.model.verdicts import TestVerdict
from tprof_engine.model.work import WorkTable
from tprof_engine.store import baselines
from tprof_engine.store.schema import Baseline, Session

__all__ = ["accept_newest", "restart_reason", "same_code_as_older", "with_session"]


def with_session(existing: Baseline | None, **kwargs: Any) -> tuple[Baseline, str]:
    """``store.baselines.with_session`` under this module's :func:`restart_reason`."""
    return baselines.with_session(existing, restart=restart_reason, **kwargs)


def restart_reason(
    existing: Baseline, fingerprint: Fingerprint, protocol: Mapping[str, Any], session: Session
) -> str:
    """Why ``session`` restarts ``existing``'s window, or "" when it joins it.

    It joins while the environment's hard keys, the settings, the protocol (its rounds aside),
    the op structure (names and calls per round) and the work census match the stored
    sessions; otherwise the older sessions measured other code.  A census counted by other
    rules (an older tprof) is no sign of other code: the session joins, and its census is the
    one judged from then on.
    """
    if moved := differences(existing.fingerprint, fingerprint):
        return _changed("environment", moved)
    if moved := settings.differences(existing.settings, session.settings):
        return _changed("settings", moved)
    before, after = _without_rounds(existing.protocol), _without_rounds(protocol)
    if before != after:
        moved = [
            f"{k} {before.get(k, 'none')} → {after.get(k, 'none')}"
            for k in sorted(before.keys() | after.keys())
            if before.get(k) != after.get(k)
        ]
        return _changed("protocol", moved)
    if _structure(existing.sessions[-1].table) != _structure(session.table):
        return "ops or calls changed"
    return _work_changed(existing.work, session.work)


def accept_newest(path: Path, *, record_args: Sequence[str] = ()) -> str:
    """Keep only the newest session of the baseline at ``path``: an intended change accepted.

    After ``pytest --tprof-save`` recorded the changed code, its session alone is the window,
    so the floor learns nothing from sessions of the code before.  Says what it did.  When the
    newest session measured the same code as the older ones (:func:`same_code_as_older`), the
    change isn't recorded yet: nothing is dropped, and a ``ConfigError`` says to record it
    first (``record_args``: what that save must be given besides the node id).
    """

    def refuse(base: Baseline) -> str | None:
        same = same_code_as_older(base)
        return None if same is None else _not_recorded_yet(path, base, same, record_args)

    return baselines.keep_newest(path, refuse=refuse)


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
    side = judge.Recorded  # both sides: the baseline's environment and protocol
    verdict = judge.judge(
        side(
            tables=tuple(s.table for s in older),
            fingerprint=base.fingerprint,
            protocol=base.protocol,
            work=older[-1].work,
            hosts=base.hosts[:-1],
        ),
        side(
            tables=(newest.table,),
            fingerprint=base.fingerprint,
            protocol=base.protocol,
            work=newest.work,
            hosts=base.hosts[-1:],
        ),
        rule or Rule(),
    )
    return verdict if judge.unlike_window(verdict) is None else None


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


def _structure(table: OpTable) -> dict[str, int]:
    """Op name → median calls per round: what a session's code does, whatever its timing.

    Ops with a median of no calls are left out, as the comparison sees them: a session that
    kept a warm-up-only op's row of zeros did the same work as one that didn't.
    """
    medians = (int(np.median(table.calls[i])) for i in range(len(table.names)))
    return {n: m for n, m in zip(table.names, medians, strict=True) if m > 0}


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
