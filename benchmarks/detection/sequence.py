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


# One trial: each procedure's final verdict (regressed or not), and whether it was measured
# again when short (the cost).
Trial = tuple[Mapping[str, bool], bool]


def tallied(
    label: str,
    unchanged: Sequence[Trial],
    caught: Mapping[float, Iterable[Mapping[str, bool]]],
    names: Sequence[str],
) -> dict[str, object]:
    """One cell's row (here and in ``pairs.py``): its unchanged trials' false failures and how
    many were measured again, and per slowdown, how many trials each procedure caught."""
    row: dict[str, object] = {
        "label": label,
        "false": tally((v for v, _ in unchanged), names),
        "again": sum(started for _, started in unchanged),
    }
    for slowdown, verdicts in caught.items():
        row[f"+{slowdown:.0%}"] = tally(verdicts, names)
    return row


@dataclass(frozen=True, slots=True)
class Table:
    """How a simulation's table prints: its first column's head and width, its slowdowns, the
    procedure whose cost the "again" column gives, and the words under it."""

    first: str
    width: int
    slowdowns: Sequence[float]
    again: str
    under: str

    def head(self, what: str) -> None:
        heads = "  ".join(f"{'+' + format(s, '.0%'):>7}" for s in self.slowdowns)
        print(
            f"{self.first:<{self.width}} {'procedure':<32} {'again':>6}  {'false':>7}  {heads}"
            f"   ({what})"
        )

    def row(self, row: dict[str, object], names: Sequence[str], trials: int, power: int) -> None:
        for name in names:
            false = row["false"][name]  # type: ignore[index]
            cells = [f"{false / trials:7.2%}"]
            for slowdown in self.slowdowns:
                hits = row[f"+{slowdown:.0%}"][name]  # type: ignore[index]
                cells.append(f"{hits / power:7.1%}")
            share = f"{row['again'] / trials:6.1%}" if name == self.again else " " * 6  # type: ignore[operator]
            label = f"{row['label']:<{self.width}} {name:<32} {share}"
            print(f"{label}  " + "  ".join(cells), flush=True)


def main_of(
    doc: str,
    table: Table,
    what: str,
    run_all: Callable[[int, int, int], object],
    argv: Sequence[str] | None,
) -> int:
    """A simulation's command line (``--trials``, ``--power-trials``, ``--seed``): its table,
    head first, rows as ``run_all`` makes them, then the time it took."""
    parser = argparse.ArgumentParser(description=doc.split("\n")[0])
    parser.add_argument("--trials", type=int, default=1000, help="unchanged trials per cell")
    parser.add_argument("--power-trials", type=int, default=200, help="per slowdown")
    parser.add_argument("--seed", type=int, default=SEED)
    args = parser.parse_args(argv)
    started = time.monotonic()
    table.head(what)
    run_all(args.trials, args.power_trials, args.seed)
    print(f"\n{time.monotonic() - started:.0f} s; {table.under}")
    return 0


NAMES = [p.name for p in PROCEDURES]
TABLE = Table(
    first="scenario",
    width=38,
    slowdowns=SLOWDOWNS,
    again=PROCEDURES[0].name,
    under="final verdict after re-measurement and a fresh process; again: unchanged trials "
    "measured again in a fresh process when short; false: unchanged trials whose final verdict "
    "is regressed",
)


def run(trials: int, power_trials: int, seed: int) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    for scen in GRID:
        op = Layout.for_ops(scen.ops).target("largest")
        unchanged = [final_verdicts(scen, t, 1.0, 0, seed) for t in range(trials)]
        caught = {
            s: [final_verdicts(scen, t, 1.0 + s, op, seed)[0] for t in range(power_trials)]
            for s in SLOWDOWNS
        }
        rows.append(tallied(scen.label, unchanged, caught, NAMES))
        TABLE.row(rows[-1], NAMES, trials, power_trials)
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    return main_of(__doc__, TABLE, "largest op slowed", run, argv)


if __name__ == "__main__":
    sys.exit(main())
