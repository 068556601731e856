"""NVML's clock-event reasons as data: which of them the machine imposes on a round, and
how reports name them (the readings come from :mod:`tprof_engine.capture.gpu_state`)."""

from __future__ import annotations

# NVML's clock-event ("throttle") reasons that the machine, not the test, imposes: hardware
# slowdown, software and hardware thermal slowdown, the power brake.  The software power cap
# (0x4) is left out: a large GEMM on an H100 reaches it on its own, in every run alike.
SLOWING_REASONS = 0x8 | 0x20 | 0x40 | 0x80
REASON_NAMES = {
    0x4: "power cap",
    0x8: "hardware slowdown",
    0x20: "thermal",
    0x40: "hardware thermal",
    0x80: "power brake",
}


def reasons_text(bits: int) -> str:
    """``thermal, power brake``: the named reasons among ``bits``."""
    return ", ".join(name for bit, name in REASON_NAMES.items() if bits & bit) or "none"
