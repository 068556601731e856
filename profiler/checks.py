"""Checks of values read from files and options, shared by the modules that validate them."""

from __future__ import annotations

from typing import TypeGuard


def is_count(v: object, minimum: int | None = 1) -> TypeGuard[int]:
    """Whether ``v`` is an integer ``>= minimum`` (any integer when ``minimum`` is None).

    ``bool`` is not an integer here: JSON's ``true`` is no count.
    """
    if not isinstance(v, int) or isinstance(v, bool):
        return False
    return minimum is None or v >= minimum
