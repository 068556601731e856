"""The busy machine as a cause: too many rounds disturbed (waited for a CPU, ran beside busy
processes, a GPU holding its clocks down) for the timing to be judged.  The timing room says
which rounds (:mod:`tprof_engine.decide.timing.busy`, read by the judge into
:attr:`~tprof_engine.decide.timing.sides.Sides.busy`); this gate names it.  Not exact: nothing
changed, the timing just wasn't judged."""

from __future__ import annotations

from typing import Final

from tprof_engine.decide.gates.finding import NOTHING, Finding, Gate
from tprof_engine.decide.timing.sides import Sides
from tprof_engine.model.verdicts import BUSY

__all__ = ["GATE", "busy_finding"]


def busy_finding(sides: Sides) -> Finding:
    """The busy cause, when the machine kept the timing from being judged (the reason says so
    already: timings not compared)."""
    return NOTHING if sides.busy is None else Finding(cause=GATE.cause(sides.busy))


GATE: Final = Gate(kind=BUSY, exact=False, find=busy_finding)
