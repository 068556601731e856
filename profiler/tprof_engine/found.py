"""What a test is judged against (:class:`Found`): its stored baseline, or the error that
stands for it, or on tprof ab's head side the base's rounds with what is stored beside them;
and the verdict that follows when nothing comparable is stored."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tprof_engine import paired_run
from tprof_engine.config import RunConfig
from tprof_engine.decide import judge, outcome
from tprof_engine.decide.timing.rule import Rule
from tprof_engine.model.environment import STRUCTURE_KEYS, differences
from tprof_engine.model.errors import BaselineError
from tprof_engine.model.verdicts import TestVerdict
from tprof_engine.store import baselines, paths, schema


@dataclass(frozen=True, slots=True, kw_only=True)
class Found:
    """What is on disk for a test: its baseline, or the error that stands for it."""

    baseline: schema.Baseline | None
    error: str | None
    paired: judge.Recorded | None = None  # tprof ab: the base side's rounds of this test
    stored: Found | None = None  # and, beside them, what is on disk
    paired_trace: str | None = None  # and the base side's trace of its rounds

    @property
    def read_stored(self) -> bool:
        """Whether the verdict read a stored baseline (or failed to): a paired one reads the
        one beside it only when there is one."""
        here = self if self.paired is None else self.stored
        return here is not None and (here.baseline is not None or here.error is not None)


def verdict_on(
    found: Found, current: judge.Recorded, rule: Rule, missing: Callable[[], TestVerdict]
) -> TestVerdict:
    """The verdict on ``current`` given what was found (``missing``: the verdict when no
    baseline is stored)."""
    if found.paired is not None:
        verdict = judge.judge(found.paired, current, rule, paired=True)
        stored = found.stored
        if stored is None or (stored.baseline is None and stored.error is None):
            return verdict
        beside = verdict_on(stored, current, rule, missing)
        return verdict.with_notes(paired_run.stored_note(beside))
    if found.error is not None:
        return outcome.unreadable(found.error)
    if found.baseline is None:
        return missing()
    return judge.judge(_recorded(found.baseline), current, rule)


def _recorded(base: schema.Baseline) -> judge.Recorded:
    return judge.Recorded(
        tables=tuple(base.tables),
        fingerprint=base.fingerprint,
        protocol=base.protocol,
        work=base.work,
        hosts=base.hosts,
        holders=base.holders,
        settings=base.settings,
    )


def without_baseline(
    config: RunConfig, env_key: str, current: judge.Recorded, nodeid: str, rule: Rule
) -> TestVerdict:
    """No baseline in this environment's folder.  One recorded with another torch or Python
    on the same kind of device is judged on calls and work, its timings not compared (the
    verdict says what differs; the newest such baseline is taken); one for another device is
    incomparable; else there is none at all."""
    here, same_device, elsewhere = current.fingerprint, [], []
    for other in paths.other_environments(config.baseline_dir, env_key, nodeid):
        try:
            found = baselines.load_baseline(other, expected_nodeid=nodeid)
        except BaselineError:
            continue
        if here is None or differences(found.fingerprint, here, STRUCTURE_KEYS):
            elsewhere.append(found)
        else:
            same_device.append(found)
    if same_device:
        newest = max(same_device, key=lambda b: b.sessions[-1].recorded_at)
        verdict = judge.judge(_recorded(newest), current, rule)
        return verdict.with_notes(outcome.judged_elsewhere(_folder_name(newest)))
    if elsewhere:
        found = elsewhere[0]
        return outcome.only_elsewhere(
            _folder_name(found), differences(found.fingerprint, here) if here else []
        )
    folder = (Path(config.baseline_dir) / env_key).resolve()
    return outcome.no_baseline(required=config.require_baseline, folder=folder)


def _folder_name(found: schema.Baseline) -> str:
    return "" if found.path is None else found.path.parent.name
