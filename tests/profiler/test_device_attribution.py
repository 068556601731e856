"""The kernel-attribution rate: device time linked to a CPU op, against all device time."""

from __future__ import annotations

import numpy as np

from profiler.records import KIND_ANNOTATION, KIND_DEVICE, KIND_OP, EventArrays
from profiler.reduce import device_attribution, reduce_events

# (name, start ns, end ns, kind, corr, link); CPU events on thread 1, device events on 100
EVENTS = [
    ("ProfilerStep#0", 0, 10_000, KIND_ANNOTATION, 0, 0),
    ("aten::mm", 1_000, 2_000, KIND_OP, 5, 0),
    ("gemm", 3_000, 4_000, KIND_DEVICE, 0, 5),
    ("Memcpy DtoH", 4_000, 4_500, KIND_DEVICE, 0, 5),
    ("orphan", 3_000, 9_000, KIND_DEVICE, 0, 77),
    ("unlinked", 3_000, 5_000, KIND_DEVICE, 0, 0),
]


def arrays(rows: list[tuple[str, int, int, int, int, int]]) -> EventArrays:
    names = tuple(dict.fromkeys(r[0] for r in rows))

    def col(k: int) -> np.ndarray:
        return np.asarray([r[k] for r in rows], dtype=np.int64)

    return EventArrays(
        names=names,
        name_idx=np.asarray([names.index(r[0]) for r in rows], dtype=np.int64),
        start_ns=col(1),
        end_ns=col(2),
        thread=np.asarray([100 if r[3] == KIND_DEVICE else 1 for r in rows], dtype=np.int64),
        kind=col(3).astype(np.int8),
        corr=col(4),
        link=col(5),
    )


def test_the_rate_counts_what_the_reduction_gives_ops_against_all_device_time() -> None:
    ev = arrays(EVENTS)
    attributed, total = device_attribution(ev)
    assert (attributed, total) == (1.5, 9.5)
    # the same device time the op rows carry
    assert reduce_events(ev).self_device_us.sum() == attributed


def test_a_cpu_run_has_no_device_time() -> None:
    assert device_attribution(arrays(EVENTS[:2])) == (0.0, 0.0)
