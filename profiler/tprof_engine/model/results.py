"""The outcome of profiling one test, as plain data that crosses processes (xdist), and a
file's tables as the CLI reads them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from tprof_engine.model.costs import Costs
from tprof_engine.model.environment import Fingerprint
from tprof_engine.model.records import OpTable
from tprof_engine.model.verdicts import TestVerdict
from tprof_engine.model.work import WorkTable


@dataclass(frozen=True, slots=True, kw_only=True)
class ProfiledTest:
    """One profiled test: its verdict, table, trace and what the run did with the baseline."""

    nodeid: str
    verdict: TestVerdict
    table: OpTable | None = None
    trace: str | None = None
    trace_problem: str = ""  # why the trace wasn't written, when it wasn't
    baseline: str | None = None
    warmup_used: int = 0
    iterations: int = 1
    rounds: int = 0
    reduction: str = ""
    outcome: str = "passed"  # the pytest outcome of the call phase
    confirmed: bool = False
    environment: Mapping[str, Any] = field(default_factory=dict)
    protocol: Mapping[str, Any] = field(default_factory=dict)
    save_note: str = ""
    benchmark: bool = False
    side_by_side: str | None = None
    work: WorkTable | None = None  # this run's work census
    # Under xdist: the timing regression that awaits its serial confirmation (the verdict
    # meanwhile says so and passes), confirmed by the controller once the workers finish.
    pending: TestVerdict | None = None
    tracer: str | None = None  # what traced every line while it was profiled (coverage)
    # The numeric settings in force for its capture (model.settings; empty: not read).
    settings: Mapping[str, Any] = field(default_factory=dict)
    costs: Costs = field(default_factory=Costs)  # where the profiling time went, per stage
    # tprof ab: the base (as the user named it) whose rounds this test's were paired with.
    paired_base: str | None = None
    paired_trace: str | None = None  # and the base side's trace of those rounds

    def with_outcome(self, outcome: str) -> ProfiledTest:
        return replace(self, outcome=outcome)

    def to_dict(self) -> dict[str, Any]:
        return {
            "nodeid": self.nodeid,
            "verdict": self.verdict.to_dict(),
            "table": None if self.table is None else self.table.to_dict(),
            "trace": self.trace,
            "trace_problem": self.trace_problem,
            "baseline": self.baseline,
            "warmup_used": self.warmup_used,
            "iterations": self.iterations,
            "rounds": self.rounds,
            "reduction": self.reduction,
            "outcome": self.outcome,
            "confirmed": self.confirmed,
            "environment": dict(self.environment),
            "protocol": dict(self.protocol),
            "save_note": self.save_note,
            "benchmark": self.benchmark,
            "side_by_side": self.side_by_side,
            "work": None if self.work is None else self.work.to_dict(),
            "pending": None if self.pending is None else self.pending.to_dict(),
            "tracer": self.tracer,
            "settings": dict(self.settings),
            "costs": self.costs.to_dict(),
            "paired_base": self.paired_base,
            "paired_trace": self.paired_trace,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ProfiledTest:
        return cls(
            nodeid=d["nodeid"],
            verdict=TestVerdict.from_dict(d["verdict"]),
            table=None if d.get("table") is None else OpTable.from_dict(d["table"]),
            trace=d.get("trace"),
            trace_problem=str(d.get("trace_problem", "")),
            baseline=d.get("baseline"),
            warmup_used=int(d.get("warmup_used", 0)),
            iterations=int(d.get("iterations", 1)),
            rounds=int(d.get("rounds", 0)),
            reduction=str(d.get("reduction", "")),
            outcome=str(d.get("outcome", "passed")),
            confirmed=bool(d.get("confirmed", False)),
            environment=d.get("environment", {}),
            protocol=d.get("protocol", {}),
            save_note=str(d.get("save_note", "")),
            benchmark=bool(d.get("benchmark", False)),
            side_by_side=d.get("side_by_side"),
            work=None if d.get("work") is None else WorkTable.from_dict(d["work"]),
            pending=None if d.get("pending") is None else TestVerdict.from_dict(d["pending"]),
            tracer=None if d.get("tracer") is None else str(d["tracer"]),
            settings=dict(d.get("settings") or {}),
            costs=Costs.from_dict(d.get("costs")),
            paired_base=d.get("paired_base"),
            paired_trace=d.get("paired_trace"),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class Source:
    """One side of a comparison: a test's op tables and what is known of where they ran.

    A baseline file gives its sessions, fingerprint and protocol; a Chrome trace gives one
    table and no fingerprint.
    """

    path: Path
    kind: str  # "baseline" or "trace"
    nodeid: str | None
    tables: tuple[OpTable, ...]
    fingerprint: Fingerprint | None = None
    protocol: Mapping[str, Any] = field(default_factory=dict)
    device_names: tuple[str, ...] = ()
    work: WorkTable | None = None  # a baseline's work census (its newest session's)
    hosts: tuple[str | None, ...] = ()  # a baseline's host per session
    settings: Mapping[str, Any] = field(default_factory=dict)  # a baseline's newest session's

    @property
    def label(self) -> str:
        return self.nodeid or self.path.name
