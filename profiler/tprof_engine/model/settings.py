"""The numeric settings a test's code chooses, as plain data: their names, how reports call
them, and what differs between two captures.

torch keeps these process-wide (TF32, float32 matmul precision, cuDNN and oneDNN switches,
reduced-precision reductions, deterministic algorithms, the SDPA backends, intra-op threads),
so one test's choice stays set for every later test of the process.  They are read once per
capture (:mod:`tprof_engine.capture.settings`) and stored with each baseline session: a change
is a named cause of the verdict, and timing is still compared, so a test slowed by it fails.
The machine's facts (GPU, driver, CUDA, torch) stay in the session-wide fingerprint.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

# Each setting's key, as stored, and how a report names it; in the order a report lists them.
LABELS: Final[Mapping[str, str]] = {
    "float32_matmul_precision": "float32 matmul precision",
    "cublas_fp32_precision": "cuBLAS fp32 precision",
    "cudnn_conv_fp32_precision": "cuDNN conv fp32 precision",
    "cudnn_rnn_fp32_precision": "cuDNN RNN fp32 precision",
    "onednn_matmul_fp32_precision": "oneDNN matmul fp32 precision",
    "onednn_conv_fp32_precision": "oneDNN conv fp32 precision",
    "onednn_rnn_fp32_precision": "oneDNN RNN fp32 precision",
    "fp32_precision": "fp32 precision",
    "fp16_reduced_precision_reduction": "fp16 reduced-precision reductions",
    "bf16_reduced_precision_reduction": "bf16 reduced-precision reductions",
    "cudnn_enabled": "cuDNN enabled",
    "cudnn_benchmark": "cuDNN benchmark",
    "cudnn_deterministic": "cuDNN deterministic",
    "onednn_enabled": "oneDNN enabled",
    "deterministic_algorithms": "deterministic algorithms",
    "sdp_flash": "SDPA flash backend",
    "sdp_mem_efficient": "SDPA memory-efficient backend",
    "sdp_math": "SDPA math backend",
    "sdp_cudnn": "SDPA cuDNN backend",
    "intra_op_threads": "intra-op threads",
}

SHOWN = 3  # changes a cause names before "+N more"


def differences(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[str]:
    """Settings both sides read that differ, as ``'cuBLAS fp32 precision ieee → tf32'``.

    A setting one side didn't read (an older baseline, a torch without it) is no difference:
    nothing is known of it.
    """
    out = []
    for key, label in LABELS.items():
        if key in before and key in after and before[key] != after[key]:
            out.append(f"{label} {_shown(before[key])} → {_shown(after[key])}")
    return out


def described(changes: list[str]) -> str:
    """``settings: a → b, c → d (+2 more)``: the cause's text."""
    more = f" (+{len(changes) - SHOWN} more)" if len(changes) > SHOWN else ""
    return "settings: " + ", ".join(changes[:SHOWN]) + more


def checked(value: Any) -> dict[str, Any] | None:
    """A stored settings object, or None when it isn't one (the caller says where)."""
    if not isinstance(value, Mapping):
        return None
    if not all(isinstance(k, str) and isinstance(v, bool | int | str) for k, v in value.items()):
        return None
    return dict(value)


def _shown(value: Any) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value)
