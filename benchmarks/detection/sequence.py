"""Seeded simulation of the whole confirmation sequence against a stored baseline: false
failures and power of a test's final verdict, and what a verdict short of its floor measured
again costs.  Three procedures on the same draws: a short verdict measured again in a fresh
process and judged on both (``decide.again``, now); each confirmation's measurement pooled with
the others (``decide.timing.pooling``), a short verdict standing as it is (before); each
confirmation judged on its own (earlier).

One trial: three baseline sessions, each a process of its own; then the run's process captures
the test and the project's own ``compare`` judges it; a timing regression is captured again in
the same process and merged (``policy.after_remeasurement``), and one still standing is run in
a fresh process and merged again (``policy.after_fresh_process``); under the rule now, a
verdict short of its floor is measured in a fresh process and judged on both
(``again.after_second_look``).  A process is the model of
``model.py``, the noise model ``simulate.py`` draws from (``draw_process``, ``capture``): its
machine drift, memory-bound mode and per-op drift drawn once and kept by every capture it
takes; each capture draws its own rounds.  A trial fails when the final verdict is regressed.

    python -m benchmarks.detection.sequence [--trials 1000] [--power-trials 200]

README.md in this folder has the last run's table.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from benchmarks.detection.model import (
    SEED,
    Layout,
    Process,
    Scenario,
    Session,
    capture,
    draw_process,
    op_drift,
    slowed,
    to_table,
    with_op_drift,
)
from benchmarks.detection.simulate import trial_rng
from tprof_engine.decide import again, policy
from tprof_engine.decide.timing.compare import compare
from tprof_engine.decide.timing.rule import Rule
from tprof_engine.model.arrays import FloatArray
from tprof_engine.model.verdicts import REGRESSED, TestVerdict


@dataclass(frozen=True, slots=True)
class Run:
    """One pytest process of a trial: its parts (``simulate.Process``) and its ops' own
    factors (the per-op drift), kept by every capture it takes."""

    process: Process
    ops: FloatArray


def draw_run(rng: np.random.Generator, scen: Scenario) -> Run:
    return Run(process=draw_process(rng, scen), ops=op_drift(rng, scen))


def captured(rng: np.random.Generator, scen: Scenario, layout: Layout, run: Run) -> Session:
    """One capture's rounds in ``run``'s process."""
    return with_op_drift(capture(rng, scen, layout, run.process), run.ops)


# A merge: the standing verdict and the new measurement's → the verdict after it.
Merge = Callable[[TestVerdict, TestVerdict], TestVerdict]


def separate_remeasure(first: TestVerdict, again: TestVerdict) -> TestVerdict:
    """The rule before pooling: the second measurement's verdict whenever it judged the
    families that failed (repeated or not), the first's otherwise."""
    slower = policy.slower_families(first)
    judged = [f for f in again.families if f.family in slower and f.gates and not f.too_noisy]
    return again if judged else first


def separate_fresh(verdict: TestVerdict, child: TestVerdict) -> TestVerdict:
    """The rule before pooling: a fresh process that judged the families and didn't find them
    failing on their time took the regression back."""
    slower = policy.slower_families(verdict)
    judged = [f for f in child.families if f.family in slower and f.gates]
    if any(f.timing_regressed or f.op_gate for f in judged):
        return verdict
    if [f for f in judged if not f.too_noisy]:
        return replace(verdict, verdict="inconclusive")
    return verdict


@dataclass(frozen=True, slots=True)
class Procedure:
    name: str
    remeasure: Merge
    fresh: Merge
    again: bool = False  # a verdict short of its floor is measured again in a fresh process


PROCEDURES = (
    Procedure(
        "measured again when short (now)",
        policy.after_remeasurement,
        policy.after_fresh_process,
        again=True,
    ),
    Procedure("pooled (before)", policy.after_remeasurement, policy.after_fresh_process),
    Procedure("each on its own (earlier)", separate_remeasure, separate_fresh),
)


def final_verdicts(
    scen: Scenario, trial: int, factor: float, op: int, seed: int
) -> tuple[dict[str, bool], bool]:
    """Whether each procedure's final verdict of one trial is regressed, and whether a fresh
    process measured a short verdict again (the cost)."""
    rng = trial_rng(seed, scen, trial)
    layout = Layout.for_ops(scen.ops)
    rule = Rule()
    base = [
        to_table(captured(rng, scen, layout, draw_run(rng, scen)), layout)
        for _ in range(scen.sessions)
    ]

    def measured(run: Run) -> TestVerdict:
        s = captured(rng, scen, layout, run)
        return compare(base, to_table(slowed(s, op, factor) if factor != 1.0 else s, layout), rule)

    here = draw_run(rng, scen)
    first = measured(here)
    step = policy.next_step(first, again_rule=rule)
    if step == policy.MEASURE_AGAIN:
        fresh = measured(draw_run(rng, scen))
        now = again.after_second_look(first, fresh, rule).verdict == REGRESSED
        return {p.name: now if p.again else first.verdict == REGRESSED for p in PROCEDURES}, True
    if step != policy.REMEASURE:
        return {p.name: first.verdict == REGRESSED for p in PROCEDURES}, False
    second = measured(here)
    fresh = measured(draw_run(rng, scen))  # drawn for every trial: each procedure sees it
    out = {}
    for p in PROCEDURES:
        v = p.remeasure(first, second)
        if policy.next_step(v, in_process=False) == policy.FRESH_PROCESS:
            v = p.fresh(v, fresh)
        out[p.name] = v.verdict == REGRESSED
    return out, False


GRID = (
    Scenario(ops=8, cv=0.05, drift=0.02),
    Scenario(ops=8, cv=0.10, drift=0.05),
    Scenario(ops=8, cv=0.05, drift=0.02, heavy=True),
    Scenario(ops=8, cv=0.05, drift=0.02, op_drift=0.05),
    Scenario(ops=8, cv=0.05, drift=0.02, probe_wander=0.10),
    Scenario(ops=16, cv=0.20, drift=0.05, rounds=12),
)
SLOWDOWNS = (0.10, 0.25)


def tally(trials: Iterable[Mapping[str, bool]], names: Iterable[str]) -> dict[str, int]:
    """How many of ``trials`` (each procedure's verdict: regressed or not) each named
    procedure's verdict was regressed in."""
    counts = dict.fromkeys(names, 0)
    for verdicts in trials:
        for name, failed in verdicts.items():
            counts[name] += failed
    return counts


def run(trials: int, power_trials: int, seed: int) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    names = [p.name for p in PROCEDURES]
    for scen in GRID:
        op = Layout.for_ops(scen.ops).target("largest")
        unchanged = [final_verdicts(scen, t, 1.0, 0, seed) for t in range(trials)]
        row: dict[str, object] = {
            "scenario": scen.label,
            "false": tally((v for v, _ in unchanged), names),
            "again": sum(started for _, started in unchanged),
        }
        for slowdown in SLOWDOWNS:
            factor = 1.0 + slowdown
            caught = (final_verdicts(scen, t, factor, op, seed)[0] for t in range(power_trials))
            row[f"+{slowdown:.0%}"] = tally(caught, names)
        rows.append(row)
        print_row(row, trials, power_trials)
    return rows


def print_row(row: dict[str, object], trials: int, power_trials: int) -> None:
    for p in PROCEDURES:
        false = row["false"][p.name]  # type: ignore[index]
        cells = [f"{false / trials:7.2%}"]
        for slowdown in SLOWDOWNS:
            hits = row[f"+{slowdown:.0%}"][p.name]  # type: ignore[index]
            cells.append(f"{hits / power_trials:7.1%}")
        again_share = f"{row['again'] / trials:6.1%}" if p.again else " " * 6  # type: ignore[operator]
        print(f"{row['scenario']:<38} {p.name:<32} {again_share}  " + "  ".join(cells), flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, default=1000, help="unchanged trials per cell")
    parser.add_argument("--power-trials", type=int, default=200, help="per slowdown")
    parser.add_argument("--seed", type=int, default=SEED)
    args = parser.parse_args(argv)
    started = time.monotonic()
    heads = "  ".join(f"{'+' + format(s, '.0%'):>7}" for s in SLOWDOWNS)
    print(
        f"{'scenario':<38} {'procedure':<32} {'again':>6}  {'false':>7}  {heads}"
        "   (largest op slowed)"
    )
    run(args.trials, args.power_trials, args.seed)
    print(
        f"\n{time.monotonic() - started:.0f} s; final verdict after re-measurement and a "
        "fresh process; again: unchanged trials measured again in a fresh process when short; "
        "false: unchanged trials whose final verdict is regressed"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
