"""Seeded simulation of tprof ab's whole verdict: false failures and power of a paired test's
final verdict through the project's confirmation loop, with up to three looks (the rule now)
and with two (before), on the same draws.

One trial is a ``tprof ab`` run of one test: a base process and a head process whose rounds
alternate on one machine, so the machine's drift of the moment (``model.draw_process``) and
each round's shared factor fall on both rounds of a pair; what each side keeps alone is its own
per-op drift (``model.op_drift``), its own speed as a process (``side``) and its own per-round
noise (``pair_noise``: a round's cache and frequency state, not shared with its partner).  The
project's own ``compare`` judges the head's table against the base's under ``paired_rule``,
and ``confirm.confirmed`` takes it from there: a timing regression is confirmed by a fresh
pair, and one that pair took back is measured by a third (``again.after_dispute``); a verdict
short of its floor is measured again by a fresh pair, and by a third while still short
(``again.after_looks``).  A fresh pair is two new processes at another moment: every part is
drawn again.

    python -m benchmarks.detection.pairs [--trials 2000] [--power-trials 300]

README.md in this folder has the last run's table.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from benchmarks.detection.model import (
    OUTLIER_FACTOR,
    OUTLIER_RATE,
    ROUND_SIGMA,
    Layout,
    Scenario,
    draw_process,
    op_drift,
    to_table,
)
from benchmarks.detection.model import Session as Rounds
from benchmarks.detection.sequence import Looks, Table, main_of, tallied
from benchmarks.detection.simulate import trial_rng
from tprof_engine import confirm
from tprof_engine.decide import policy
from tprof_engine.decide.timing.compare import compare
from tprof_engine.decide.timing.rule import Rule, paired_rule
from tprof_engine.model.arrays import FloatArray
from tprof_engine.model.records import OpTable
from tprof_engine.model.results import ProfiledTest
from tprof_engine.model.verdicts import TestVerdict


@dataclass(frozen=True, slots=True, kw_only=True)
class Cell:
    """One cell: the test's shape and noise (``scen``), each side's own per-round noise and its
    speed as a process (log SDs)."""

    scen: Scenario
    pair_noise: float
    side: float = 0.0

    @property
    def label(self) -> str:
        extra = f" op {self.scen.op_drift:.0%}" if self.scen.op_drift else ""
        return (
            f"K={self.scen.ops:<2} CV {self.scen.cv:.0%} own {self.pair_noise:.0%} "
            f"side {self.side:.0%}{extra}"
        )


def sides(rng: np.random.Generator, cell: Cell, layout: Layout) -> tuple[OpTable, OpTable]:
    """One pair's base and head tables: the machine's moment and each round's shared factor on
    both, each side's process and noise its own."""
    scen, n = cell.scen, cell.scen.rounds
    machine = draw_process(rng, scen)
    shared = machine.machine + machine.heavy + rng.normal(0.0, ROUND_SIGMA, n)
    probe = np.full(n, 1000.0)
    out = []
    for _ in range(2):
        own = rng.normal(0.0, cell.side) + rng.normal(0.0, cell.pair_noise, n)
        sigma = math.sqrt(math.log1p(scen.cv**2))
        noise = rng.normal(0.0, sigma, (scen.ops, n))
        op_us = layout.base_us[:, None] * np.exp(shared + own + noise)
        op_us[rng.random((scen.ops, n)) < OUTLIER_RATE] *= OUTLIER_FACTOR
        op_us *= op_drift(rng, scen)[:, None]
        out.append(to_table(Rounds(op_us=op_us, probe_us=probe), layout))
    return out[0], out[1]


def slowed(table: OpTable, op: int, factor: float) -> OpTable:
    """``table`` with one op's times scaled by ``factor``."""
    scaled: FloatArray = table.self_cpu_us.copy()
    scaled[op] *= factor
    wall = table.wall_us + (scaled[op] - table.self_cpu_us[op])
    return OpTable(
        names=table.names,
        calls=table.calls,
        self_cpu_us=scaled,
        total_cpu_us=scaled,
        self_device_us=table.self_device_us,
        total_device_us=table.total_device_us,
        wall_us=wall,
        probe_cpu_us=table.probe_cpu_us,
        probe_device_us=table.probe_device_us,
    )


RULE = paired_rule(Rule())
# Each procedure: the confirmation loop's plan, differing in how many looks a verdict may get.
PROCEDURES = {
    "up to three looks (now)": confirm.Plan(in_process=False, again_rule=RULE),
    "two looks (before)": confirm.Plan(in_process=False, again_rule=RULE, most_looks=2),
}
NAMES = list(PROCEDURES)


def final_verdicts(
    cell: Cell, trial: int, test_slowdown: float, seed: int
) -> tuple[dict[str, bool], bool]:
    """Whether each procedure's final verdict of one trial is regressed, and whether a fresh
    pair was started for it beyond a confirmation's (the cost); ``test_slowdown``: the share
    of the test the largest op is slowed by.  Every procedure runs the project's own
    confirmation loop (``confirm.confirmed``) over the same draws."""
    scen = cell.scen
    rng = trial_rng(seed, scen, trial)
    layout = Layout.for_ops(scen.ops)
    op = layout.target("largest")
    factor = 1.0 + test_slowdown / float(layout.shares[op])

    def pair() -> TestVerdict:
        base, head = sides(rng, cell, layout)
        return compare([base], slowed(head, op, factor) if test_slowdown else head, RULE)

    first = ProfiledTest(nodeid="sim", verdict=pair())
    confirms = policy.needs_fresh_process(first.verdict)
    pairs = Looks(pair)
    out = {name: pairs.run(first, plan, name) for name, plan in PROCEDURES.items()}
    return out, pairs.used[NAMES[0]] > (1 if confirms else 0)


def _cell(ops: int, cv: float, pair_noise: float, *, side: float = 0.0, op: float = 0.0) -> Cell:
    scen = Scenario(ops=ops, cv=cv, drift=0.02, op_drift=op)
    return Cell(scen=scen, pair_noise=pair_noise, side=side)


GRID = (
    _cell(8, 0.05, 0.02),
    _cell(8, 0.05, 0.06),
    _cell(8, 0.05, 0.09),
    _cell(8, 0.05, 0.06, side=0.02),
    _cell(8, 0.05, 0.06, op=0.05),
    _cell(16, 0.20, 0.09),
)
SLOWDOWNS = (0.05, 0.10, 0.25)  # of the test, in its largest op


TABLE = Table(
    first="cell",
    width=36,
    slowdowns=SLOWDOWNS,
    again=NAMES[0],
    under="again: unchanged trials given a fresh pair beyond a confirmation's; false: "
    "unchanged trials whose final verdict is regressed",
)


def run(trials: int, power_trials: int, seed: int) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    for cell in GRID:
        unchanged = [final_verdicts(cell, t, 0.0, seed) for t in range(trials)]
        caught = {
            s: [final_verdicts(cell, t, s, seed)[0] for t in range(power_trials)] for s in SLOWDOWNS
        }
        rows.append(tallied(cell.label, unchanged, caught, NAMES))
        TABLE.row(rows[-1], NAMES, trials, power_trials)
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    return main_of(__doc__, TABLE, "of the test", run, argv)


if __name__ == "__main__":
    sys.exit(main())
