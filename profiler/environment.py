"""Environment fingerprint: what must match for calls and for timings to be comparable.

The torch facts are gathered at the capture boundary (:func:`profiler.capture.torch_facts`)
and passed in here as plain data, so this module never imports torch.
"""

from __future__ import annotations

import os
import platform
import re
import socket
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

# Keys that decide comparability.  Calls need STRUCTURE_KEYS equal; timings need all HARD_KEYS.
STRUCTURE_KEYS = ("torch", "device")
HARD_KEYS = (
    "torch",
    "device",
    "cuda",
    "cudnn",
    "gpus",
    "cpu_model",
    "threads",
    "deterministic",
    "tf32_matmul",
    "tf32_cudnn",
    "python",
)


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


@dataclass(frozen=True, slots=True, kw_only=True)
class Fingerprint:
    """Hard keys (comparability) and soft keys (information only) of one environment."""

    hard: Mapping[str, Any]
    soft: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def collect(
        cls, torch_facts: Mapping[str, Any], extra_soft: Mapping[str, Any] | None = None
    ) -> Fingerprint:
        hard: dict[str, Any] = {
            "torch": torch_facts.get("torch"),
            "device": "cuda" if torch_facts.get("cuda_available") else "cpu",
            "cuda": torch_facts.get("cuda"),
            "cudnn": torch_facts.get("cudnn"),
            "gpus": list(torch_facts.get("gpus") or []),
            "cpu_model": cpu_model(),
            "threads": torch_facts.get("threads"),
            "deterministic": torch_facts.get("deterministic"),
            "tf32_matmul": torch_facts.get("tf32_matmul"),
            "tf32_cudnn": torch_facts.get("tf32_cudnn"),
            "python": f"{sys.version_info.major}.{sys.version_info.minor}",
        }
        soft: dict[str, Any] = {
            "hostname": socket.gethostname(),
            "system": platform.system().lower(),
            "machine": platform.machine().lower(),
            "cpu_count": os.cpu_count(),
        }
        soft.update(extra_soft or {})
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
        device = "cpu"
        if self.hard.get("device") == "cuda":
            device = f"cuda{self.hard.get('cuda') or ''}"
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
    for k in ("iterations", "activities", "record_shapes", "probe", "profile_memory"):
        if base.get(k) != current.get(k):
            out.append(f"{k} {_show(base.get(k))} → {_show(current.get(k))}")
    return out


def _show(v: Any) -> str:
    if isinstance(v, list):
        return "[" + ", ".join(map(str, v)) + "]" if v else "none"
    return "none" if v is None else str(v)


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
