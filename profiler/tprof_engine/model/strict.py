"""Reading a decoded file strictly: each value checked where it is read, and a
:class:`~tprof_engine.model.errors.BaselineError` naming where it is and what it held."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tprof_engine.model.errors import BaselineError


def shown(value: Any) -> str:
    if value is None or isinstance(value, (bool, int, float, str)):
        text = repr(value)
        return text if len(text) <= 60 else text[:57] + "..."
    if isinstance(value, list) and all(isinstance(v, str) for v in value) and len(value) <= 8:
        return repr(value)
    return f"a {type(value).__name__}"


def mapping(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        raise BaselineError(f"'{where}' must be an object (got {shown(value)})")
    return value


def keys(
    obj: Mapping[str, Any], where: str, expected: tuple[str, ...], optional: tuple[str, ...] = ()
) -> None:
    missing = [k for k in expected if k not in obj]
    if missing:
        raise BaselineError(f"'{where}' is missing {', '.join(repr(k) for k in missing)}")
    unknown = sorted(set(obj) - set(expected) - set(optional))
    if unknown:
        raise BaselineError(f"'{where}' has unknown keys {', '.join(repr(k) for k in unknown)}")


def count(obj: Mapping[str, Any], key: str, where: str) -> int:
    value = obj[key]
    if type(value) is not int or value < 0:
        raise BaselineError(f"'{where}.{key}' must be an integer >= 0 (got {shown(value)})")
    return value


def string(obj: Mapping[str, Any], key: str, where: str, *, empty: bool = True) -> str:
    value = obj[key]
    if not isinstance(value, str) or (not empty and not value):
        rule = "a string" if empty else "a non-empty string"
        raise BaselineError(f"'{where}.{key}' must be {rule} (got {shown(value)})")
    return value


def flag(obj: Mapping[str, Any], key: str, where: str) -> bool:
    value = obj[key]
    if not isinstance(value, bool):
        raise BaselineError(f"'{where}.{key}' must be true or false (got {shown(value)})")
    return value


def names(obj: Mapping[str, Any], key: str, where: str) -> tuple[str, ...]:
    value = obj[key]
    if (
        not isinstance(value, list)
        or not all(isinstance(v, str) and v for v in value)
        or value != sorted(set(value))
    ):
        raise BaselineError(
            f"'{where}.{key}' must be a sorted list of distinct names (got {shown(value)})"
        )
    return tuple(value)


def items(obj: Mapping[str, Any], key: str, where: str) -> list[tuple[int, Any]]:
    value = obj[key]
    if not isinstance(value, list):
        raise BaselineError(f"'{where}.{key}' must be a list (got {shown(value)})")
    return list(enumerate(value))
