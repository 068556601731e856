"""The array types of the records, and the strict readers of their JSON arrays."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]


def checked_table(rows: list[Any], rounds: int, dtype: type, what: str) -> Any:
    if not rows:
        return np.zeros((0, rounds), dtype=dtype)
    try:
        out: Any = np.asarray(rows, dtype=dtype)
    except (TypeError, ValueError):
        raise ValueError(f"'{what}' must hold numbers only") from None
    if out.shape != (len(rows), rounds) or (out.dtype.kind == "f" and not np.isfinite(out).all()):
        raise ValueError(f"'{what}' must hold one finite number per round ({rounds})")
    if (out < 0).any():
        raise ValueError(f"'{what}' must not be negative")
    return out


def per_round(values: Any, rounds: int, what: str, *, nan_ok: bool = False) -> FloatArray:
    if not isinstance(values, list) or len(values) != rounds:
        raise ValueError(f"'{what}' must hold one number per round ({rounds})")
    try:
        out = np.asarray([np.nan if v is None and nan_ok else v for v in values], dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"'{what}' must hold numbers only") from None
    if ((out < 0) | (np.isinf(out)) | (np.isnan(out) & (not nan_ok))).any():
        raise ValueError(f"'{what}' must hold finite numbers >= 0")
    return out


def rounded(values: Sequence[float] | FloatArray) -> list[float]:
    # 1 ns resolution is what the profiler has; more digits only make diffs noisy.
    return [round(float(v), 3) for v in values]
