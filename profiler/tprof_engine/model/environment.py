"""Environment fingerprint: what must match for calls and for timings to be comparable.

The torch facts are gathered at the capture boundary (:func:`tprof_engine.capture.torch_facts`)
and passed in here as plain data, so this module never imports torch.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import re
import socket
import sys
import types
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tprof_engine.model.family_specs import device_spec, with_role

# Keys that decide comparability.  Calls and work need STRUCTURE_KEYS equal; timings need all
# HARD_KEYS.  Another torch or Python still runs the same code on the same kind of device, so its
# calls and work compare (a torch upgrade that changes them says so) while its timings don't.
# The machine's facts only: what a test's code may set (TF32, precision, threads, cuDNN and
# SDPA switches) is read per capture instead (model.settings), since one test's choice stays
# set for every later test of the process.  Files written before keep those keys; unread.
STRUCTURE_KEYS = ("device",)


# Each device family's key holds its runtime's version (``cuda``: CUDA's).
DEVICE_VERSION_KEYS = tuple(s.name for s in with_role("device"))
HARD_KEYS = ("torch", "device", *DEVICE_VERSION_KEYS, "cudnn", "gpus", "cpu_model", "python")


def device_of(facts: Mapping[str, Any]) -> str:
    """The family spec key of the device a process profiles (``cpu``: none), from its torch
    facts; facts without the key (written before it) name the first device family's."""
    named = facts.get("device")
    if named:
        return str(named)
    return device_spec().name if facts.get("cuda_available") else "cpu"


def cpu_model() -> str:
    """The CPU's model name (Linux /proc/cpuinfo, else what platform says)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def host_id() -> str:
    """This host as timing knows it: the hostname and a short hash of this boot.

    Timings differ between machines whose CPU model reads the same (cloud VMs, CI runners with
    one hostname) and between boots of one machine, so a host is one boot of one machine
    (Linux's boot id; elsewhere the machine id, else the hostname alone).  docs/design.md §7.
    """
    name = socket.gethostname() or "unknown"
    for source in ("/proc/sys/kernel/random/boot_id", "/etc/machine-id"):
        try:
            with open(source, encoding="ascii", errors="replace") as f:
                token = f.read(128).strip()
        except OSError:
            continue
        if token:
            return f"{name}·{hashlib.sha1(token.encode()).hexdigest()[:8]}"
    return name


@dataclass(frozen=True, slots=True, kw_only=True)
class Fingerprint:
    """Hard keys (comparability) and soft keys (information only) of one environment."""

    hard: Mapping[str, Any]
    soft: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def collect(cls, torch_facts: Mapping[str, Any]) -> Fingerprint:
        hard: dict[str, Any] = {
            "torch": torch_facts.get("torch"),
            "device": device_of(torch_facts),
            **{key: torch_facts.get(key) for key in DEVICE_VERSION_KEYS},
            "cudnn": torch_facts.get("cudnn"),
            # The GPU the tests run on, not every GPU of the machine: an xdist worker sees only
            # its own, and its timings compare with a run that used the same model of GPU.
            "gpus": [used] if (used := torch_facts.get("gpu_used")) else [],
            "cpu_model": cpu_model(),
            "python": f"{sys.version_info.major}.{sys.version_info.minor}",
        }
        soft: dict[str, Any] = {
            "hostname": socket.gethostname(),
            "host": host_id(),
            "system": platform.system().lower(),
            "machine": platform.machine().lower(),
            "cpu_count": os.cpu_count(),
            "device": device_used(torch_facts, os.environ),
        }
        return cls(hard=hard, soft=soft)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Fingerprint:
        return cls(hard=dict(data.get("hard", {})), soft=dict(data.get("soft", {})))

    def to_dict(self) -> dict[str, Any]:
        return {"hard": dict(self.hard), "soft": dict(self.soft)}

    @property
    def key(self) -> str:
        """Human-readable folder name, e.g. ``linux-x86_64-cpu-torch2.13.0-py3.11``."""
        system = str(self.soft.get("system") or platform.system().lower())
        machine = str(self.soft.get("machine") or platform.machine().lower())
        torch_v = re.sub(r"\+.*$", "", str(self.hard.get("torch")))
        device = str(self.hard.get("device") or "cpu")
        if device != "cpu":  # the device's family and its runtime's version: cuda12.8
            device = f"{device}{self.hard.get(device) or ''}"
        key = f"{system}-{machine}-{device}-torch{torch_v}-py{self.hard.get('python')}"
        return re.sub(r"[^A-Za-z0-9._-]", "_", key)


def differences(
    base: Fingerprint, current: Fingerprint, keys: tuple[str, ...] = HARD_KEYS
) -> list[str]:
    """Hard keys that differ, as ``'torch 2.12.1 → 2.13.0'``."""
    out = []
    for k in keys:
        b, c = base.hard.get(k), current.hard.get(k)
        if b != c:
            out.append(f"{k} {_show(b)} → {_show(c)}")
    return out


def protocol_differences(base: Mapping[str, Any], current: Mapping[str, Any]) -> list[str]:
    """Protocol keys that must match for timings to compare (rounds may differ)."""
    out = []
    for k in ("iterations", "activities", "record_shapes", "probe"):
        if base.get(k) != current.get(k):
            out.append(f"{k} {_show(base.get(k))} → {_show(current.get(k))}")
    memory = bool(base.get("profile_memory")), bool(current.get("profile_memory"))
    if memory[0] != memory[1]:
        out.append(
            "the baseline was saved without --tprof-collect=memory, this run profiles memory "
            "(which slows each op): re-save with it, or run without it"
            if memory[1]
            else "the baseline was saved with --tprof-collect=memory, which slows each op: run "
            "with it, or re-save without it"
        )
    return out


def _show(v: Any) -> str:
    if isinstance(v, list):
        return "[" + ", ".join(map(str, v)) + "]" if v else "none"
    return "none" if v is None else str(v)


def line_tracer() -> str | None:
    """What traces every Python line in this thread, as a timing difference; None if nothing.

    coverage.py (``pytest --cov``, ``coverage run -m pytest``) installs a ``sys.settrace``
    tracer, or on Python 3.12+ may register as ``sys.monitoring``'s coverage tool; debuggers do
    the same.  Each traced line costs the body time no baseline recorded without it paid.
    """
    tracer = sys.gettrace()
    if tracer is not None:
        owner = getattr(tracer, "__self__", tracer)  # coverage's PyTracer traces with a method
        if isinstance(owner, types.FunctionType):
            return _tracer_text(owner.__module__, owner.__qualname__)
        return _tracer_text(type(owner).__module__, type(owner).__qualname__)
    monitoring = getattr(sys, "monitoring", None)  # Python 3.12+
    if monitoring is not None:
        tool = monitoring.get_tool(monitoring.COVERAGE_ID)
        if tool is not None:
            return _tracer_text(str(tool), "sys.monitoring tool")
    return None


def _tracer_text(owner: str, name: str) -> str:
    if owner.split(".", 1)[0] == "coverage":  # its modules, and its sys.monitoring tool name
        return f"coverage: coverage.py's {name} traced every line while profiling"
    return f"line tracer: {owner}.{name} traced every line while profiling"


def comparability(
    base: Fingerprint,
    current: Fingerprint,
    base_protocol: Mapping[str, Any],
    current_protocol: Mapping[str, Any],
) -> tuple[list[str], list[str]]:
    """What differs for calls (structure keys) and what differs for timings (the rest)."""
    structure = differences(base, current, STRUCTURE_KEYS)
    timing = differences(base, current) + protocol_differences(base_protocol, current_protocol)
    return structure, timing


VISIBLE_DEVICES = "CUDA_VISIBLE_DEVICES"


def visible_devices(environ: Mapping[str, str], count_gpus: Callable[[], int]) -> tuple[str, ...]:
    """The CUDA devices this process may use, as ``CUDA_VISIBLE_DEVICES`` entries.

    A list the user set is kept as given (indices, UUIDs or MIG names); without one, the
    machine's GPUs by index, counted by ``count_gpus`` (which must not initialise CUDA).
    """
    listed = environ.get(VISIBLE_DEVICES)
    if listed is None:
        return tuple(str(i) for i in range(max(0, count_gpus())))
    entries = tuple(e.strip() for e in listed.split(",") if e.strip())
    # CUDA stops reading the list at an invalid index: "-1" hides every device.
    return () if entries[:1] == ("-1",) else entries


def worker_number(worker_id: str | None) -> int | None:
    """The number of an xdist worker id (``gw3`` → 3), or None outside a worker."""
    match = re.fullmatch(r"gw(\d+)", worker_id or "")
    return int(match.group(1)) if match else None


def device_for_worker(worker_id: str | None, devices: Sequence[str]) -> str | None:
    """The device entry an xdist worker profiles on: round-robin over ``devices``."""
    number = worker_number(worker_id)
    if number is None or not devices:
        return None
    return devices[number % len(devices)]


def sharing_warning(workers: int, devices: Sequence[str]) -> str | None:
    """A warning when xdist workers outnumber the GPUs, naming who shares which device."""
    if not devices or workers <= len(devices):
        return None
    shares = {
        d: [f"gw{w}" for w in range(workers) if w % len(devices) == i]
        for i, d in enumerate(devices)
    }
    plan = "; ".join(f"{', '.join(ws)} → {d}" for d, ws in shares.items())
    return (
        f"{workers} xdist workers share {len(devices)} GPU{'s' if len(devices) > 1 else ''} "
        f"round-robin ({plan}); workers on one GPU disturb each other's timings: "
        f"use -n {len(devices)} for one GPU per worker"
    )


def nvml_gpu_count() -> int:
    """The GPUs the NVIDIA driver reports, read through NVML; 0 without a driver.

    NVML is the driver's management library: reading the count from it neither initialises
    CUDA nor needs torch, so ``CUDA_VISIBLE_DEVICES`` can still be set afterwards.
    """
    try:
        nvml = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return 0
    count = ctypes.c_uint(0)
    if nvml.nvmlInit_v2() != 0:
        return 0
    try:
        if nvml.nvmlDeviceGetCount_v2(ctypes.byref(count)) != 0:
            return 0
        return int(count.value)
    finally:
        nvml.nvmlShutdown()


def device_used(facts: Mapping[str, Any], environ: Mapping[str, str]) -> str:
    """The device a process profiles on, e.g. ``cuda:0 NVIDIA H100 (CUDA_VISIBLE_DEVICES=1)``."""
    listed = environ.get(VISIBLE_DEVICES)
    shown = f" ({VISIBLE_DEVICES}={listed})" if listed is not None else ""
    device = device_of(facts)
    if device == "cpu":
        return f"cpu{shown}"
    name = facts.get("gpu_used") or "unknown GPU"
    return f"{device}:{facts.get('gpu_index', 0)} {name}{shown}"
