"""Where one test's profiling time went: seconds per stage, as plain data.

The stages, in the order a test meets them:

- ``load``: the baseline read and checked;
- ``calibrate``: timing the body to choose the calls per round (a run without a baseline);
- ``rounds``: the warm-up and measured rounds under the profiler, body and drift probe;
- ``profiler``: starting and stopping the profiler session (the stop collects the events);
- ``reduce``: the events reduced to the op table;
- ``export``: the Chrome trace written;
- ``census``: the work census (the body run once more under the FLOP counter);
- ``judge``: the verdict (statistics, work gate) and the side-by-side trace of a regression;
- ``save``: the baseline read, merged and written;
- ``ranks``: a distributed test's ranks started and stopped (new processes, torch imported,
  the process group joined and left), beyond what their stages took.

A re-capture (a busy machine, a confirmation) adds to the same stages.  Everything but
``rounds`` is what the plugin adds to the body's own time.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

STAGES = (
    "load",
    "calibrate",
    "rounds",
    "profiler",
    "reduce",
    "export",
    "census",
    "judge",
    "save",
    "ranks",
)
BODY_STAGES = frozenset({"rounds"})  # the body's own time, profiled


@dataclass(frozen=True, slots=True)
class Costs:
    """Seconds per stage (see the module's docstring); a stage not met is absent."""

    seconds: Mapping[str, float] = field(default_factory=dict)

    def plus(self, other: Costs) -> Costs:
        """Both costs, stage by stage."""
        merged = dict(self.seconds)
        for stage, s in other.seconds.items():
            merged[stage] = merged.get(stage, 0.0) + s
        return Costs(merged)

    @property
    def total_s(self) -> float:
        """Every stage's seconds together."""
        return sum(self.seconds.values())

    @property
    def plugin_s(self) -> float:
        """What the plugin added: every stage but the profiled rounds themselves."""
        return sum(s for stage, s in self.seconds.items() if stage not in BODY_STAGES)

    def to_dict(self) -> dict[str, float]:
        order = {stage: i for i, stage in enumerate(STAGES)}
        ranked = sorted(self.seconds, key=lambda s: (order.get(s, len(order)), s))
        return {stage: round(self.seconds[stage], 6) for stage in ranked}

    @classmethod
    def from_dict(cls, d: Mapping[str, float] | None) -> Costs:
        return cls({str(k): float(v) for k, v in (d or {}).items()})


class Stopwatch:
    """Adds up the seconds spent in each stage: ``with watch.stage("census"): ...``."""

    def __init__(self) -> None:
        self._seconds: dict[str, float] = {}

    @contextlib.contextmanager
    def stage(self, name: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.add(name, time.perf_counter() - t0)

    def add(self, name: str, seconds: float) -> None:
        self._seconds[name] = self._seconds.get(name, 0.0) + seconds

    def merge(self, costs: Costs) -> None:
        for name, seconds in costs.seconds.items():
            self.add(name, seconds)

    def costs(self) -> Costs:
        return Costs(dict(self._seconds))
