"""What this torch can do and is set to: versions, CUDA, NVTX, raw events, intra-op threads,
and the compile log of ``torch._dynamo``.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch


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


def profiler_active() -> bool:
    """Whether a torch profiler (ours or the user's) is collecting right now."""
    return bool(torch.autograd.profiler._is_profiler_enabled)


def raw_events_supported() -> bool:
    """Whether this torch exposes the raw kineto events the fast reduction reads."""
    try:
        from torch._C._autograd import _KinetoEvent
    except ImportError:
        return False
    needed = (
        "name",
        "start_ns",
        "end_ns",
        "start_thread_id",
        "end_thread_id",
        "device_type",
        "correlation_id",
        "linked_correlation_id",
        "is_user_annotation",
        "is_async",
    )
    return all(hasattr(_KinetoEvent, n) for n in needed)


REDUCTION_PATH = "raw-events" if raw_events_supported() else "key_averages"


def nvtx_available() -> bool:
    """Whether this torch can emit NVTX ranges (CUDA builds; the CPU build raises)."""
    try:
        torch.cuda.nvtx.range_push("tprof:check")
    except RuntimeError:  # "NVTX functions not installed. Are you sure you have a CUDA build?"
        return False
    torch.cuda.nvtx.range_pop()
    return True


def compile_log() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """What torch.compile has logged in this process so far: each graph break as ``reason
    (file:line)`` (the user's frame torch gives), and each guard failure's reason.  Empty when
    Dynamo was never imported: nothing was compiled."""
    if "torch._dynamo" not in sys.modules:
        return (), ()
    from torch._dynamo import utils

    breaks = tuple(_graph_break_text(r) for r in list(utils.graph_break_reasons))
    guards = tuple(str(g) for failures in list(utils.guard_failures.values()) for g in failures)
    return breaks, guards


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
    facts: dict[str, Any] = {
        "torch": str(torch.__version__),
        "cuda_available": cuda,
        "cuda": torch.version.cuda if cuda else None,
        "cudnn": None,
        "gpus": [],
        "threads": int(torch.get_num_threads()),
        "deterministic": bool(torch.are_deterministic_algorithms_enabled()),
        "tf32_matmul": bool(torch.backends.cuda.matmul.allow_tf32),
        "tf32_cudnn": bool(torch.backends.cudnn.allow_tf32),
        "cudnn_benchmark": bool(torch.backends.cudnn.benchmark),
    }
    if cuda:
        cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
        facts["cudnn"] = str(cudnn) if cudnn else None
        facts["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        facts["gpu_index"] = torch.cuda.current_device()
        facts["gpu_used"] = torch.cuda.get_device_name(facts["gpu_index"])
    return facts
