"""Work rows grouped by the module that owns them, as every report lists them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tprof_engine.model.work import Phase
from tprof_engine.model.work_verdict import WorkDelta


@dataclass(frozen=True, slots=True, kw_only=True)
class ModuleWork:
    """One module and phase's work on both sides: the sums of its rows."""

    module: str
    phase: Phase
    base_flops: int
    cur_flops: int
    base_bytes: int
    cur_bytes: int

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in ModuleWork.__dataclass_fields__}


def by_module(rows: Sequence[WorkDelta]) -> list[ModuleWork]:
    """The rows summed per module path and phase, the modules whose work moved most first."""
    sums: dict[tuple[str, Phase], list[int]] = {}
    for r in rows:
        acc = sums.setdefault((r.module, r.phase), [0, 0, 0, 0])
        acc[0] += r.base_flops
        acc[1] += r.cur_flops
        acc[2] += r.base_bytes
        acc[3] += r.cur_bytes
    out = [
        ModuleWork(
            module=m, phase=p, base_flops=a[0], cur_flops=a[1], base_bytes=a[2], cur_bytes=a[3]
        )
        for (m, p), a in sums.items()
    ]
    return sorted(
        out,
        key=lambda w: (
            -abs(w.cur_flops - w.base_flops),
            -abs(w.cur_bytes - w.base_bytes),
            -w.base_flops,
            w.module,
            w.phase,
        ),
    )
