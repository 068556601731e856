"""The two sides of a judgement: what each recorded (:class:`Recorded`), and what every gate
reads of them once compared (:class:`Sides`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tprof_engine.decide.timing.rule import Rule
from tprof_engine.model.environment import Fingerprint
from tprof_engine.model.records import OpTable
from tprof_engine.model.work import WorkTable

__all__ = ["Recorded", "Sides"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Recorded:
    """One side of a judgement: its op tables and what is known of where they ran.

    A baseline gives its sessions, fingerprint and protocol; a Chrome trace gives one table,
    no fingerprint, and the names of its devices.
    """

    tables: tuple[OpTable, ...]
    fingerprint: Fingerprint | None = None
    protocol: Mapping[str, Any] = field(default_factory=dict)
    device_names: tuple[str, ...] | None = None  # set for traces
    work: WorkTable | None = None  # the work census (a baseline's: its last session's)
    hosts: tuple[str | None, ...] = ()  # the host each table was recorded on (None: unknown)
    holders: Mapping[str, str] = field(default_factory=dict)  # a baseline's (schema.Baseline)
    # The numeric settings of its newest capture (a baseline's: its last session's; empty:
    # not read, so not compared).
    settings: Mapping[str, Any] = field(default_factory=dict)
    # What traced every Python line while this side was profiled (environment.line_tracer):
    # its timings are the tracer's as much as the code's, so they are reported, not gated.
    tracer: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Sides:
    """What the gates read: both sides as recorded, and the tables the timing compared
    (per iteration when the sides ran different iterations per round: ``per_call`` is then
    1, else the iterations per round)."""

    baseline: Recorded
    current: Recorded
    base_tables: tuple[OpTable, ...]
    current_table: OpTable
    per_call: int
    rule: Rule
    busy: str | None = None  # why the machine kept the timing from being judged (timing.busy)
