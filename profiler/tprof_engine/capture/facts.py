"""What this torch can do and is set to: versions, CUDA, NVTX, raw events, intra-op threads,
and the compile log of ``torch._dynamo``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from tprof_engine.capture import backends, torch_api
from tprof_engine.model.environment import DEVICE_VERSION_KEYS


@contextlib.contextmanager
def intra_op_threads(n: int) -> Iterator[None]:
    """Run with ``n`` intra-op threads (0 = leave torch's setting), restoring it afterwards.

    On a shared machine a thread pool's barrier waits for its slowest worker, and a worker
    that loses its core stalls the op for a whole time slice: rounds 1000x slower appear.
    One thread measures each op's own work, which is what a regression changes.
    """
    if n <= 0:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def cuda_available() -> bool:
    return bool(torch.cuda.is_available())


profiler_active = torch_api.profiler_enabled  # a torch profiler, ours or the user's, is on

REDUCTION_PATH = "raw-events" if torch_api.FEATURES.raw_events else "key_averages"


def torch_notes(cuda: bool) -> tuple[str, ...]:
    """What this torch lacks that the run would use, and what that costs (the run header)."""
    return torch_api.notes(torch_api.FEATURES, cuda=cuda)


def nvtx_available() -> bool:
    """Whether this torch can emit NVTX ranges (CUDA builds; the CPU build raises)."""
    return backends.detect().ranges_available()


def compile_log() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """What torch.compile has logged in this process so far: each graph break as ``reason
    (file:line)`` (the user's frame torch gives), and each guard failure's reason.  Empty when
    Dynamo was never imported: nothing was compiled."""
    reasons, failures = torch_api.dynamo_compile_log()
    return tuple(map(_graph_break_text, reasons)), tuple(map(str, failures))


def _graph_break_text(reason: Any) -> str:
    text = str(getattr(reason, "reason", reason)).strip()
    first = text.splitlines()[0] if text else "unknown reason"
    stack = getattr(reason, "user_stack", None) or []
    if not stack:
        return first
    frame = stack[-1]
    return f"{first} ({Path(frame.filename).name}:{frame.lineno})"


def torch_facts() -> dict[str, Any]:
    """The torch / CUDA facts of this process that the environment fingerprint needs."""
    cuda = bool(torch.cuda.is_available())
    backend = backends.detect()
    facts: dict[str, Any] = {
        "torch": torch_api.FEATURES.torch,
        "device": backend.family or "cpu",  # the family spec key of its device times
        "device_label": backend.label,  # CUDA, ROCm or CPU
        "cuda_available": cuda,
        # each device family's runtime version, under its key: this process's device's set
        **dict.fromkeys(DEVICE_VERSION_KEYS),
        "cudnn": None,
        "gpus": [],
        "cudnn_benchmark": bool(torch.backends.cudnn.benchmark),  # the header warns of it
    }
    if backend.family is not None:
        facts[backend.family] = backend.version()
    if cuda:
        cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
        facts["cudnn"] = str(cudnn) if cudnn else None
        facts["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        facts["gpu_index"] = torch.cuda.current_device()
        facts["gpu_used"] = torch.cuda.get_device_name(facts["gpu_index"])
    return facts
