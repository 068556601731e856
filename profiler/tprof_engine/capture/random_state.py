"""The random generators' state as a test starts, read in one process and set in another: a
fresh process confirming a regression runs the test alone, so its inputs would come from
generators no earlier test has advanced, and data-dependent speed (denormal floats, a sort's
order, which rows a mask keeps) would be measured on other data.

Python's ``random``, numpy's global generator and torch's CPU generator (and each CUDA
device's, where CUDA is already initialised: reading it must not start CUDA) are read; the
state is plain bytes and tuples, picklable.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch

from tprof_engine.capture import backends


def read() -> dict[str, Any]:
    """The generators' state now."""
    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.random.get_rng_state().numpy().tobytes(),
    }
    device = backends.detect()
    if device.family is not None and (raws := device.rng_states()) is not None:
        state[device.family] = raws
    return state


def restore(state: dict[str, Any]) -> list[str]:
    """Set the generators to ``state``; the ones that could not be set, named."""
    failed = []
    device = backends.detect()
    setters = {**_SETTERS, **({device.family: device.set_rng_states} if device.family else {})}
    for name, put in setters.items():
        if name not in state:
            continue
        try:
            put(state[name])
        except (RuntimeError, TypeError, ValueError):
            failed.append(name)
    return failed


def _torch(raw: bytes) -> None:
    torch.random.set_rng_state(torch.frombuffer(bytearray(raw), dtype=torch.uint8))


_SETTERS: dict[str, Any] = {
    "python": random.setstate,
    "numpy": np.random.set_state,
    "torch": _torch,
}
