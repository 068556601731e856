"""The timing families as data: one entry per family says what it measures, in which unit,
against which drift probe, its floor's minimum, whether it gates a test or only reports, and
how reports name it, and its **role** (``device``: a device's kernel time; ``launch``: the
ops' host side; ``host``: time outside any op; ``idle``): decide and render ask the role,
never a family's name.  Adding a device (XPU, MPS) is one ``device`` entry here and its
capture backend (``capture/backends.py``), whose ``family`` is the entry's key.

Which families gate depends on where the test's work runs (measured on an H100 with torch
2.11, ``benchmarks/gpu_replay.py``):

- a test whose ops ran kernels is judged on its **device time** (raw kernel, copy and fill
  µs: four unchanged sessions agreed within 0.1 %, so its floor's minimum is 3 %) and its
  **host time** outside any op (a Python loop between launches);
- its ops' CPU time there is the launches' host side, which drifted +59 % over four unchanged
  sessions of an encoder step on a quiet 16-core machine, and the device's idle time follows
  the host: both are reported beside the verdict, never gate it, never veto it;
- a test with no device time is judged on its ops' CPU time and its host time, as on a
  machine without a GPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

__all__ = [
    "FAMILIES",
    "FamilySpec",
    "Role",
    "device_spec",
    "family_total",
    "gates",
    "is_device",
    "spec",
    "with_role",
]

# What a family's times are: a device's kernel time, the ops' host side (their launches on a
# device run), the time outside any op, or the device's idle time.
Role = Literal["device", "launch", "host", "idle"]


@dataclass(frozen=True, slots=True, kw_only=True)
class FamilySpec:
    """One timing family; the defaults are an op family judged wherever the test's ops ran."""

    name: str  # its key in records and reports
    label: str  # how reports name it
    role: Role = "launch"  # what its times are (decide and render ask this, not its name)
    column: str | None = None  # the OpTable column of its op times (None: a total of its own)
    total_words: str = "total op time"  # what its judged total measures, after the label
    unit: str = "µs per round"
    probe: str | None = None  # the OpTable column of the drift probe it is divided by; None: raw
    min_floor: float | None = None  # the learned floor's minimum; None: the rule's min_rel_floor
    gates_with_device: bool = True  # gates a test whose ops ran on a device
    gates_without_device: bool = True  # gates a test whose ops ran on the CPU alone
    vouches: bool = True  # its floor says whether the test's timing could see a slowdown at all


FAMILIES: Final = {
    "cpu": FamilySpec(
        name="cpu",
        label="CPU",
        column="self_cpu_us",
        probe="probe_cpu_us",
        role="launch",
        gates_with_device=False,
    ),
    "cuda": FamilySpec(
        name="cuda",
        label="CUDA",
        role="device",
        column="self_device_us",
        unit="device µs per round",
        min_floor=0.03,
        gates_without_device=False,
    ),
    "host": FamilySpec(
        name="host",
        label="host",
        role="host",
        total_words="time outside any op",
        probe="probe_cpu_us",
        vouches=False,
    ),
    "gpu-idle": FamilySpec(
        name="gpu-idle",
        label="GPU",
        role="idle",
        total_words="idle time",
        unit="device µs per round",
        gates_with_device=False,
        gates_without_device=False,
        vouches=False,
    ),
}


def spec(name: str) -> FamilySpec:
    """The family named ``name`` (an unknown name reads as an op family judged anywhere)."""
    return FAMILIES.get(name) or FamilySpec(name=name, label=name)


def with_role(role: Role) -> tuple[FamilySpec, ...]:
    """The families of one role, in the table's order."""
    return tuple(s for s in FAMILIES.values() if s.role == role)


def is_device(name: str) -> bool:
    """Whether family ``name`` holds a device's kernel times."""
    return spec(name).role == "device"


def device_spec(name: str | None = None) -> FamilySpec:
    """The device family named ``name``; without one (a table or record from before devices
    were told apart), the table's first device family, whose times every stored baseline has."""
    if name is not None:
        s = spec(name)
        if s.role != "device":
            raise ValueError(f"'device family' must be one of {_device_names()} (got {name!r})")
        return s
    return with_role("device")[0]


def _device_names() -> str:
    return ", ".join(s.name for s in with_role("device"))


def gates(name: str, *, device_test: bool) -> bool:
    """Whether family ``name`` gates a test whose ops ran on a device (or not)."""
    s = spec(name)
    return s.gates_with_device if device_test else s.gates_without_device


def family_total(name: str) -> str:
    """A family's judged total in words: ``CPU total op time``, ``host time outside any op``."""
    s = spec(name)
    return f"{s.label} {s.total_words}"
