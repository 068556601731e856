"""The kernel-attribution rate: device time linked to a CPU op, against all device time."""

from __future__ import annotations

from tprof_testing import dev, event_arrays, op, step

from tprof_engine.reduce.ops import device_attribution, reduce_events

EVENTS = [
    step(0, 0, 10_000),
    op("aten::mm", 1_000, 2_000, 5),
    dev("gemm", 3_000, 4_000, 5),
    dev("Memcpy DtoH", 4_000, 4_500, 5),
    dev("orphan", 3_000, 9_000, 77),
    dev("unlinked", 3_000, 5_000, 0),
]


def test_the_rate_counts_what_the_reduction_gives_ops_against_all_device_time() -> None:
    ev = event_arrays(EVENTS)
    attributed, total = device_attribution(ev)
    assert (attributed, total) == (1.5, 9.5)
    # the same device time the op rows carry
    assert reduce_events(ev).self_device_us.sum() == attributed


def test_a_cpu_run_has_no_device_time() -> None:
    assert device_attribution(event_arrays(EVENTS[:2])) == (0.0, 0.0)
