"""A distributed test end to end: its ranks as one capture source of the runner
(docs/design.md §17).

:class:`Ranked` starts the ranks for every capture the runner asks for (the first, a busy
machine's retries, a confirmation's re-measurement), joins their tables into one
(:mod:`tprof_engine.reduce.ranks`), keeps the first capture's census and each capture's
per-rank traces, and writes those into one folder per run when the verdict wants a trace:
``<traces>/<test>.<run>/rank<N>.pt.trace.json.gz``, the layout Holistic Trace Analysis loads.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from tprof_engine.config import RunConfig
from tprof_engine.decide.gates.communication import diverged
from tprof_engine.decide.judge import iterations_of
from tprof_engine.model.costs import Costs
from tprof_engine.model.errors import CaptureError
from tprof_engine.model.records import OpTable
from tprof_engine.model.work import WorkTable
from tprof_engine.reduce.ranks import join_tables, join_work, rank_notes
from tprof_engine.store import schema
from tprof_engine.store.trace_files import rank_folder


@dataclass(frozen=True, slots=True, kw_only=True)
class RankTables:
    """One rank's tables, as a distributed test gets them back."""

    rank: int
    table: OpTable
    work: WorkTable | None


@dataclass(frozen=True, slots=True, kw_only=True)
class DistributedBody:
    """What ``tprof.distributed`` asks to profile."""

    make_step: Callable[[int], Callable[[], Any]]
    world_size: int
    backend: str = "gloo"
    timeout_s: float = 300.0


class Ranked:
    """The ranks of a distributed test as a capture source (``runner.Source``)."""

    pairable = False  # tprof ab: the ranks' rounds don't take turns with another side's

    def __init__(self, runner: Any, body: DistributedBody) -> None:
        from tprof_engine.capture import distributed

        self._launch, self._plan_type = distributed.launch, distributed.RankPlan
        self._runner, self._body = runner, body
        self._config: RunConfig = runner.config
        self._scratch = Path(tempfile.mkdtemp(prefix="tprof-rank-traces-"))
        self._captures = 0
        self._work: WorkTable | None = None
        self._notes: tuple[str, ...] = ()
        self.ranks: tuple[RankTables, ...] = ()

    def __enter__(self) -> Ranked:
        return self

    def __exit__(self, *exc: object) -> None:
        shutil.rmtree(self._scratch, ignore_errors=True)

    def iterations(self, baseline: schema.Baseline | None) -> int:
        stored = None if baseline is None else iterations_of(baseline.protocol)
        return stored or 0  # 0: the ranks calibrate and agree on the most any needs

    def capture(self, spec: Any) -> Any:
        """Start the ranks, run ``spec``'s rounds in each, and join what they bring back."""
        if spec.before_rounds is not None:  # the ranks' rounds, not beside a trace export
            spec.before_rounds()
        spec = replace(spec, before_rounds=None, pace=None)  # the ranks are processes of their own
        self._captures += 1
        first = self._captures == 1
        traces = self._scratch / f"capture{self._captures}"
        plan = self._plan_type(
            make_step=self._body.make_step,
            world_size=self._body.world_size,
            backend=self._body.backend,
            spec=spec,
            min_round_us=self._config.min_round_us,
            census=first and self._config.census,
            stack=self._config.stack,
            threads=self._config.threads,
            trace_dir=None if self._config.trace_dir is None else str(traces),
            timeout_s=self._body.timeout_s,
        )
        started = time.perf_counter()
        results = self._launch(plan)
        slowest = _slowest_rank(r.costs for r in results)
        launch = Costs({"ranks": max(0.0, time.perf_counter() - started - slowest.total_s)})
        tables = [r.table for r in results]
        if first:
            self._first_census(results)
        works = [r.work for r in results] if first else [t.work for t in self.ranks]
        self.ranks = tuple(
            RankTables(rank=r.rank, table=r.table, work=w)
            for r, w in zip(results, works, strict=True)
        )
        from tprof_engine.capture.session import CaptureResult

        return CaptureResult(
            table=join_tables(tables),
            value=None,
            warmup_used=max(r.warmup_used for r in results),
            iterations=results[0].iterations,
            trace_path=None,
            trace_problem="; ".join(r.trace_problem for r in results if r.trace_problem),
            reduction=self._runner.reduction,
            costs=slowest.plus(launch),
            device_family=next((t.device_family for t in tables if t.device_family), None),
            warmup_settled=all(r.warmup_settled for r in results),
            meta={"ranks": len(results)},
            write_trace=lambda path: _move_traces(traces, results, path),
            trace_later=False,  # moved out of the scratch folder before it goes
        )

    def _first_census(self, results: list[Any]) -> None:
        works = [r.work for r in results]
        why = diverged(works)
        if why is not None:
            raise CaptureError(why)
        if self._config.census:
            self._work = join_work(works)
            self._notes = tuple(dict.fromkeys(r.census_note for r in results if r.census_note))
        self._notes += rank_notes([r.table for r in results])

    def census(self) -> tuple[WorkTable | None, tuple[str, ...]]:
        return self._work, self._notes


def _slowest_rank(costs: Any) -> Costs:
    """Each stage's seconds in the rank that took longest over it: the ranks run at once."""
    merged: dict[str, float] = {}
    for c in costs:
        for stage, s in c.seconds.items():
            merged[stage] = max(merged.get(stage, 0.0), s)
    return Costs(merged)


def _move_traces(scratch: Path, results: list[Any], path: Path) -> tuple[Path | None, str]:
    """The ranks' traces moved into the run's folder for the test; rank 0's is the path the
    reports name.  A trace that can't be moved is a note, as one that can't be written."""
    folder = rank_folder(path)
    written = [Path(r.trace) for r in results if r.trace]
    if not written:
        return None, "no rank wrote a trace"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        for trace in written:
            shutil.move(str(trace), folder / trace.name)
    except OSError as exc:
        return None, f"{folder}: traces not written ({exc.strerror or exc})"
    first = folder / written[0].name
    return first, ""


def profile_distributed(
    runner: Any,
    nodeid: str,
    body: DistributedBody,
    *,
    rounds: int | None,
    warmup: int | None,
    rule: Any,
) -> tuple[tuple[RankTables, ...], Any]:
    """Profile and judge a distributed test; its ranks' tables and the ``ProfiledTest``."""
    with Ranked(runner, body) as ranked:
        _, test = runner.profile_source(nodeid, ranked, rounds=rounds, warmup=warmup, rule=rule)
        return ranked.ranks, test


def check_body(make_step: Any, *, world_size: Any, backend: Any, timeout_s: Any) -> None:
    """A ConfigError naming the first argument of ``tprof.distributed`` that can't be used
    (the capture stage's check; torch loads here)."""
    from tprof_engine.capture import distributed

    distributed.check(make_step, world_size=world_size, backend=backend, timeout_s=timeout_s)


def run_unprofiled(
    make_step: Callable[[int], Callable[[], Any]],
    *,
    world_size: int,
    backend: str,
    timeout_s: float,
) -> None:
    """Every rank builds its step and runs it once, unprofiled: the test without --tprof."""
    from tprof_engine.capture import distributed

    distributed.run_once(make_step, world_size=world_size, backend=backend, timeout_s=timeout_s)
