"""Read the numeric settings a test's code chose (:mod:`tprof_engine.model.settings`), once per
capture, and set them again in another process.

Every read is guarded: a torch where the user mixed its legacy TF32 switches with the newer
``fp32_precision`` ones raises on the legacy getters ("mix of the legacy and new APIs"), and a
release may lack a switch; such a setting is left out of the reading, never an error in a test.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from typing import Any

import torch

_B = torch.backends


_Access = tuple[Callable[[], Any], Callable[[Any], None] | None]


def _attribute(dotted: str, convert: Callable[[Any], Any] = str) -> _Access:
    """Read and set ``torch.backends.<dotted>``, looked up at each call (a release may lack
    it)."""
    path = dotted.split(".")

    def holder() -> Any:
        obj: Any = _B
        for part in path[:-1]:
            obj = getattr(obj, part)
        return obj

    return (lambda: getattr(holder(), path[-1])), (
        lambda v: setattr(holder(), path[-1], convert(v))
    )


def _flag(dotted: str) -> _Access:
    return _attribute(dotted, convert=bool)


def _sdp(name: str) -> _Access:
    return getattr(_B.cuda, f"{name}_sdp_enabled"), getattr(_B.cuda, f"enable_{name}_sdp")


# key → (read, write); a write of None means the setting is read, never set in another process.
# The legacy float32 matmul precision comes first: setting it moves the newer switches too, so
# they are set only where they still differ (setting both kinds makes torch's legacy getters
# raise).  Threads are the plugin's own to set (--tprof-threads), so they are only read.
_ACCESS: dict[str, _Access] = {
    "float32_matmul_precision": (
        torch.get_float32_matmul_precision,
        torch.set_float32_matmul_precision,
    ),
    **{
        f"{name}_fp32_precision": _attribute(f"{where}.fp32_precision")
        for name, where in (
            ("cublas", "cuda.matmul"),
            ("cudnn_conv", "cudnn.conv"),
            ("cudnn_rnn", "cudnn.rnn"),
            ("onednn_matmul", "mkldnn.matmul"),
            ("onednn_conv", "mkldnn.conv"),
            ("onednn_rnn", "mkldnn.rnn"),
        )
    },
    "fp32_precision": _attribute("fp32_precision"),
    "fp16_reduced_precision_reduction": _flag("cuda.matmul.allow_fp16_reduced_precision_reduction"),
    "bf16_reduced_precision_reduction": _flag("cuda.matmul.allow_bf16_reduced_precision_reduction"),
    "cudnn_enabled": _flag("cudnn.enabled"),
    "cudnn_benchmark": _flag("cudnn.benchmark"),
    "cudnn_deterministic": _flag("cudnn.deterministic"),
    "onednn_enabled": _flag("mkldnn.enabled"),
    "deterministic_algorithms": (
        torch.are_deterministic_algorithms_enabled,
        lambda v: torch.use_deterministic_algorithms(bool(v)),
    ),
    "sdp_flash": _sdp("flash"),
    "sdp_mem_efficient": _sdp("mem_efficient"),
    "sdp_math": _sdp("math"),
    "sdp_cudnn": _sdp("cudnn"),
    "intra_op_threads": (torch.get_num_threads, None),
}


def _read(get: Callable[[], Any]) -> Any:
    """The setting's value as JSON keeps it (bool, int or str), or None when unreadable."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            value = get()
    except (AttributeError, RuntimeError, TypeError):
        return None
    if isinstance(value, bool | int):
        return value
    return None if value is None else str(value)


def current() -> dict[str, Any]:
    """The settings in force now, each one this torch lets be read."""
    found = {key: _read(get) for key, (get, _) in _ACCESS.items()}
    return {key: value for key, value in found.items() if value is not None}


def apply(wanted: Mapping[str, Any]) -> list[str]:
    """Set the settings of ``wanted`` that differ from this process's, in the order above;
    returns the keys that could not be set (their torch refused them, or lacks them)."""
    failed = []
    for key, (get, put) in _ACCESS.items():
        if put is None or key not in wanted or _read(get) == wanted[key]:
            continue
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                put(wanted[key])
        except (AttributeError, RuntimeError, TypeError, ValueError):
            failed.append(key)
    return failed
