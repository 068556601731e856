"""The runner's first room: a test's rounds recorded (docs/design.md §3).

What one test's rounds are (:func:`round_spec`), their capture, taken again while a busy
machine left too few undisturbed rounds to judge (:class:`Capture`, the busy retries), and the
record of a capture before any verdict (:func:`tested`).  The runner's state
(:class:`tprof_engine.runner.Runner`) is read, never changed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from tprof_engine.decide import policy
from tprof_engine.decide.timing.busy import Reference, quietest
from tprof_engine.decide.timing.rule import Rule
from tprof_engine.model.costs import Stopwatch
from tprof_engine.model.records import concat_rounds
from tprof_engine.model.results import ProfiledTest
from tprof_engine.model.verdicts import NO_BASELINE, TestVerdict
from tprof_engine.store import trace_gzip


def round_spec(
    runner: Any,
    nodeid: str,
    iterations: int,
    *,
    rounds: int | None,
    warmup: int | None,
    pairing: Any = None,
) -> Any:
    """What this test's rounds are: the marker's or the run's counts, the iterations,
    what each round records, and (tprof ab) how they take turns with the other side's."""
    cfg = runner.config
    rounds = cfg.rounds if rounds is None else rounds
    return runner._session.RoundSpec(
        rounds=rounds,
        pace=None if pairing is None else pairing.pacer(rounds),
        warmup=cfg.warmup if warmup is None else warmup,
        iterations=iterations,
        device=runner._session.detect(),
        probe=cfg.probe,
        record_shapes=cfg.record_shapes,
        profile_memory=cfg.profile_memory,
        nvtx_label=f"tprof:{nodeid}" if runner.nvtx else None,
        trace_metadata={"nodeid": nodeid},  # the trace is written once judged
        before_rounds=runner.traces.quiet,  # no trace export beside the profiled rounds
        write_trace=trace_gzip.write_gzipped,
    )


class Capture:
    """One test's captures by its source: the first, the busy retries and a re-measurement,
    each with the iterations the first agreed on, the newest kept for its trace."""

    def __init__(self, source: Any, spec: Any, watch: Stopwatch, ref: Reference | None) -> None:
        self.source, self.spec, self.watch = source, spec, watch
        self.ref = ref  # the baseline's quiet readings, which rounds beside others are read against
        self.latest: Any = None

    def run(self) -> Any:
        """One capture of the rounds."""
        # a source that calibrates in its own processes fixes the count on its first capture
        agreed = self.spec.iterations if self.latest is None else self.latest.iterations
        result = self.source.capture(replace(self.spec, iterations=agreed))
        self.watch.merge(result.costs)
        self.latest = result
        return result

    def first(self, cfg: Any, rule: Rule, *, judged: bool, paired: bool) -> Any:
        """The first capture, taken again as often as ``policy.busy_retries`` allows; a
        recording keeps the protocol's rounds, undisturbed ones first, so later runs can judge
        against it."""
        retries = policy.busy_retries(
            cfg.busy_retries, recording=cfg.save, judged=judged, paired=paired
        )
        result = quiet_enough(self.run, rule, retries, self.ref)
        if cfg.save:
            return replace(result, table=quietest(result.table, rule, self.spec.rounds))
        return result

    def again(self, rule: Rule, retries: int) -> Any:
        """A re-measurement: the rounds captured afresh, busy retries included."""
        return quiet_enough(self.run, rule, retries, self.ref)


def quiet_enough(run: Callable[[], Any], rule: Rule, retries: int, ref: Any) -> Any:
    """A capture with enough undisturbed rounds to judge timing: captured again while
    ``policy.capture_again`` asks (``ref``: the baseline's quiet readings, which the judge
    reads rounds beside other processes against), all rounds joined in one table."""
    result = run()
    tables = [result.table]
    while policy.capture_again(tables, rule, retries=retries, reference=ref):
        tables.append(run().table)
    if len(tables) == 1:
        return result
    return replace(result, table=concat_rounds(tables))


def tested(runner: Any, nodeid: str, result: Any, protocol: Mapping[str, Any]) -> ProfiledTest:
    """The record of a capture, before any verdict."""
    return ProfiledTest(
        nodeid=nodeid,
        verdict=TestVerdict(verdict=NO_BASELINE, reason=""),
        table=result.table,
        trace=None if result.trace_path is None else str(result.trace_path),
        trace_problem=result.trace_problem,
        baseline=str(runner.baseline_path(nodeid)),
        warmup_used=result.warmup_used,
        iterations=result.iterations,
        rounds=result.table.rounds,
        reduction=result.reduction,
        environment=runner.fingerprint.to_dict(),
        protocol={**protocol, "warmup_used": result.warmup_used},
        settings=dict(result.settings),
    )
