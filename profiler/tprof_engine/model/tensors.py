"""Tensors as the census writes them (``f32[64,16,3,3]``), signatures compared, and which
ops copy between devices or make the host wait.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Final

from tprof_engine.model.work import DATA_DEPENDENT, VALUE_READS

HOST_DEVICES: Final = frozenset({"cpu", "meta"})


_DTYPE_CODES: Final = {
    "float64": "f64",
    "float32": "f32",
    "float16": "f16",
    "bfloat16": "bf16",
    "int64": "i64",
    "int32": "i32",
    "int16": "i16",
    "int8": "i8",
    "uint8": "u8",
    "bool": "b8",
    "complex128": "c128",
    "complex64": "c64",
}


_LIST_RUNS: Final = 8  # runs of equal tensors a tensor-list item shows before it abbreviates


def distinct_elements(shape: Sequence[int], strides: Sequence[int]) -> int:
    """Elements a strided tensor addresses: broadcast (stride 0) dimensions count once."""
    count = 1
    for size, stride in zip(shape, strides, strict=True):
        if size == 0:
            return 0
        if stride != 0:
            count *= size
    return count


def dtype_code(name: str) -> str:
    """``float32`` → ``f32``: the short dtype of a signature (unknown names stay as they are)."""
    return _DTYPE_CODES.get(name, name)


def format_tensor(dtype: str, shape: Sequence[int], strides: Sequence[int]) -> str:
    """``f32[4, 8]``; the transpose of a contiguous tensor gets ``ᵀ``, other layouts their strides.

    ``dtype`` is the dtype's name (``float32``).
    """
    text = f"{dtype_code(dtype)}[{', '.join(str(s) for s in shape)}]"
    if _is_contiguous(shape, strides):
        return text
    if len(shape) >= 2 and _is_contiguous(shape[::-1], strides[::-1]):
        return text + "ᵀ"
    return f"{text} (strides {', '.join(str(s) for s in strides)})"


def _is_contiguous(shape: Sequence[int], strides: Sequence[int]) -> bool:
    expected = 1
    for size, stride in zip(reversed(shape), reversed(strides), strict=True):
        if size != 1 and stride != expected:
            return False
        expected *= size
    return True


def format_tensor_list(items: Sequence[str]) -> str:
    """A tensor-list argument: equal neighbours as runs, ``[f32[64]×3, f32[8]]``."""
    runs: list[list[Any]] = []
    for item in items:
        if runs and runs[-1][0] == item:
            runs[-1][1] += 1
        else:
            runs.append([item, 1])
    shown = [text if n == 1 else f"{text}×{n}" for text, n in runs[:_LIST_RUNS]]
    if len(runs) > _LIST_RUNS:
        shown.append(f"… {len(items)} tensors")
    return "[" + ", ".join(shown) + "]"


def split_signature(signature: str) -> list[str]:
    """The top-level items of a signature (commas inside brackets or parentheses stay)."""
    items: list[str] = []
    depth = 0
    start = 0
    for i, ch in enumerate(signature):
        if ch in "[(":
            depth += 1
        elif ch in "])":
            depth -= 1
        elif ch == "," and depth == 0:
            items.append(signature[start:i].strip())
            start = i + 1
    tail = signature[start:].strip()
    if tail or items:
        items.append(tail)
    return items


def first_difference(sig_a: str, sig_b: str, *, limit: int = 3) -> str:
    """The inputs that differ between two signatures, each named by its argument where the
    signatures name them: ``mat1 f32[8, 512] → f32[8, 563], self f32[512] → f32[563]``.

    Empty when they are equal.
    """
    if sig_a == sig_b:
        return ""
    a, b = split_signature(sig_a), split_signature(sig_b)
    moved = list(dict.fromkeys(_item_change(x, y) for x, y in zip(a, b, strict=False) if x != y))
    if len(a) > len(b):
        moved += [f"{_named(x, 'input')} removed" for x in a[len(b) :]]
    if len(b) > len(a):
        moved += [f"{_named(y, 'input')} added" for y in b[len(a) :]]
    if not moved:
        return f"signature {sig_a!r} → {sig_b!r}"
    return ", ".join(moved[:limit]) + (
        f" (+{len(moved) - limit} more)" if len(moved) > limit else ""
    )


def _item_change(a: str, b: str) -> str:
    (name_a, value_a), (name_b, value_b) = _argument(a), _argument(b)
    if name_a and name_a == name_b:
        return f"{name_a} {value_a} → {value_b}"
    return f"input {value_a} → {value_b}"


def _named(item: str, fallback: str) -> str:
    name, value = _argument(item)
    return f"{name or fallback} {value}"


def _argument(item: str) -> tuple[str, str]:
    """(argument name, value) of a signature item; no name for an unnamed one."""
    name, sep, value = item.partition(ARG)
    return (name, value) if sep else ("", item)


ARG: Final = "="  # ``mat1=f32[8, 512]``: a signature item named by its argument


def copy_direction(read_devices: Iterable[str], written_devices: Iterable[str]) -> str | None:
    """``cpu→cuda`` when an op read tensors on a device type other than the one it wrote.

    Device types are names (``cpu``, ``cuda``); ``meta`` tensors hold no data and don't count.
    """
    written = set(written_devices) - {"meta"}
    sources = sorted(set(read_devices) - written - {"meta"})
    if len(written) != 1 or not sources:
        return None
    return f"{sources[0]}→{next(iter(written))}"


def is_host_sync(op: str, device: str) -> bool:
    """Whether a call of ``op`` on tensors of ``device`` makes the host wait for their values.

    Reading a value (``.item()``, ``float(t)``) counts on every device; ops whose output size
    depends on the data (``nonzero``, ``unique``, ...) only off the host.
    """
    return op in VALUE_READS or (op in DATA_DEPENDENT and device not in HOST_DEVICES)
