"""The gates the judge runs, in the order their findings join the verdict (and their texts
the reason).  Adding a gate is its module in this package and its line here (docs/design.md,
"Adding a gate")."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from tprof_engine.decide.gates import busy, communication, compiled, memory, settings, work
from tprof_engine.decide.gates.finding import Finding, Gate
from tprof_engine.decide.timing.sides import Sides

__all__ = ["GATES", "findings"]

GATES: Final[tuple[Gate, ...]] = (
    busy.GATE,
    memory.GATE,
    compiled.GATE,
    communication.GATE,
    work.GATE,
    settings.GATE,
)


def findings(sides: Sides, gates: Sequence[Gate] | None = None) -> list[Finding]:
    """Every gate's finding on ``sides``, in the gates' order (``gates``: :data:`GATES`)."""
    return [g.find(sides) for g in (GATES if gates is None else gates)]
