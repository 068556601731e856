"""Seeded simulation of the whole confirmation sequence against a stored baseline: false
failures and power of a test's final verdict, and what a verdict short of its floor measured
again costs.  Three procedures on the same draws, each the project's confirmation loop
(``confirm.confirmed``) under another plan: a short verdict measured again in a fresh process,
and a third time while still short (now); measured again once (before); not measured again
(earlier).

One trial: three baseline sessions, each a process of its own; then the run's process captures
the test and the project's own ``compare`` judges it; a timing regression is captured again in
the same process and merged (``policy.after_remeasurement``), and one still standing is run in
a fresh process and merged again (``policy.after_fresh_process``); a verdict short of its
floor is measured in fresh processes and judged on every look (``again.after_looks``).  A
process is the model of ``model.py``, the noise model ``simulate.py`` draws from
(``draw_process``, ``capture``): its machine drift, memory-bound mode and per-op drift drawn
once and kept by every capture it takes; each capture draws its own rounds.  A trial fails when
the final verdict is regressed.

    python -m benchmarks.detection.sequence [--trials 1000] [--power-trials 200]

README.md in this folder has the last run's table.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

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
from tprof_engine import confirm
from tprof_engine.decide.timing.compare import compare
from tprof_engine.decide.timing.rule import Rule
from tprof_engine.model.arrays import FloatArray
from tprof_engine.model.results import ProfiledTest
from tprof_engine.model.verdicts import REGRESSED, TestVerdict


@dataclass(frozen=True, slots=True)
class Run:
    """One pytest process of a trial: its parts (``simulate.Process``) and its ops' own
    factors (the per-op drift), kept by every capture it takes."""

    process: Process
    ops: FloatArray
    size: float = 1.0  # the share of a planted slowdown this process reads


def draw_run(rng: np.random.Generator, scen: Scenario, moving: float = 1.0) -> Run:
    """A process of ``scen``; with ``moving`` below 1, half the processes read a planted
    slowdown at that share of its size (a plant whose size moves with the process)."""
    run = Run(process=draw_process(rng, scen), ops=op_drift(rng, scen))
    if moving != 1.0 and rng.random() < 0.5:
        return Run(process=run.process, ops=run.ops, size=moving)
    return run


def captured(rng: np.random.Generator, scen: Scenario, layout: Layout, run: Run) -> Session:
    """One capture's rounds in ``run``'s process."""
    return with_op_drift(capture(rng, scen, layout, run.process), run.ops)


RULE = Rule()
# Each procedure: the confirmation loop's plan, differing in what a verdict may be measured
# again for.
PROCEDURES = {
    "up to three looks (now)": confirm.Plan(again_rule=RULE),
    "two looks (before)": confirm.Plan(again_rule=RULE, most_looks=2),
    "not measured again (earlier)": confirm.Plan(),
}
NAMES = list(PROCEDURES)


class Looks:
    """The confirmation loop's executor for one trial (here and in ``pairs.py``): its
    re-measurement and its fresh looks drawn once, in order, so that every procedure sees the
    same ones; ``used`` records how many fresh looks each procedure started."""

    def __init__(
        self, fresh: Callable[[], TestVerdict], remeasure: Callable[[], TestVerdict] | None = None
    ) -> None:
        self.draw_fresh, self.draw_again = fresh, remeasure
        self.fresh: list[TestVerdict] = []
        self.again: list[TestVerdict] = []
        self.at = 0
        self.used: dict[str, int] = {}

    def run(self, test: ProfiledTest, plan: confirm.Plan, name: str) -> bool:
        """Whether the loop's final verdict of ``test`` under ``plan`` is regressed."""
        self.at = 0
        final = confirm.confirmed(test, self, plan).verdict.verdict == REGRESSED
        self.used[name] = self.at
        return final

    def fresh_process(self, test: ProfiledTest) -> confirm.Look:
        if self.at == len(self.fresh):
            self.fresh.append(self.draw_fresh())
        self.at += 1
        return confirm.Look(verdict=self.fresh[self.at - 1])

    def remeasure(self, test: ProfiledTest) -> confirm.Look:
        if self.draw_again is None:
            raise AssertionError("not captured again in its process")
        if not self.again:
            self.again.append(self.draw_again())
        return confirm.Look(verdict=self.again[0])

    def after_workers(self, test: ProfiledTest) -> confirm.Look:
        raise AssertionError("no workers")


def final_verdicts(
    scen: Scenario, trial: int, factor: float, op: int, seed: int, moving: float = 1.0
) -> tuple[dict[str, bool], bool]:
    """Whether each procedure's final verdict of one trial is regressed, and whether the rule
    now started a fresh process beyond a confirmation's (the cost).  Every procedure runs the
    project's own confirmation loop (``confirm.confirmed``) over the same draws; ``moving``:
    :func:`draw_run`'s."""
    rng = trial_rng(seed, scen, trial)
    layout = Layout.for_ops(scen.ops)
    base = [
        to_table(captured(rng, scen, layout, draw_run(rng, scen)), layout)
        for _ in range(scen.sessions)
    ]

    def measured(run: Run) -> TestVerdict:
        s = captured(rng, scen, layout, run)
        size = 1.0 + (factor - 1.0) * run.size
        return compare(base, to_table(slowed(s, op, size) if factor != 1.0 else s, layout), RULE)

    here = draw_run(rng, scen, moving)
    first = ProfiledTest(nodeid="sim", verdict=measured(here))
    looks = Looks(lambda: measured(draw_run(rng, scen, moving)), lambda: measured(here))
    out = {name: looks.run(first, plan, name) for name, plan in PROCEDURES.items()}
    now, without = (looks.used[name] for name in (NAMES[0], NAMES[-1]))
    return out, now > without


GRID = (
    Scenario(ops=8, cv=0.05, drift=0.02),
    Scenario(ops=8, cv=0.10, drift=0.05),
    Scenario(ops=8, cv=0.05, drift=0.02, heavy=True),
    Scenario(ops=8, cv=0.05, drift=0.02, op_drift=0.05),
    Scenario(ops=8, cv=0.05, drift=0.02, probe_wander=0.10),
    Scenario(ops=16, cv=0.20, drift=0.05, rounds=12),
)
SLOWDOWNS = (0.10, 0.25)
# A slowdown whose size moves with the process: +50 % in half the processes, a fifth of it
# (+10 %) in the others, as shuffled lookups into a large table read (+9 to +55 %).
MOVING = (0.50, 0.2)


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


TABLE = Table(
    first="scenario",
    width=38,
    slowdowns=(*SLOWDOWNS, MOVING[0]),
    again=NAMES[0],
    under="final verdict after re-measurement and a fresh process; again: unchanged trials "
    "given a fresh process beyond a confirmation's; false: unchanged trials whose final "
    "verdict is regressed; +50%: a slowdown that reads a fifth of its size in half the "
    "processes",
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
        size, share = MOVING
        caught[size] = [
            final_verdicts(scen, t, 1.0 + size, op, seed, share)[0] for t in range(power_trials)
        ]
        rows.append(tallied(scen.label, unchanged, caught, NAMES))
        TABLE.row(rows[-1], NAMES, trials, power_trials)
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    return main_of(__doc__, TABLE, "largest op slowed", run, argv)


if __name__ == "__main__":
    sys.exit(main())
