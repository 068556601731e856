"""The memory gate's verdict record."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True, kw_only=True)
class MemoryVerdict:
    """The memory gate: ``regressed``, ``improved`` or ``unchanged``, with its reasons, and
    how many ops allocate a different amount from round to round (reported, never gated)."""

    verdict: str
    reasons: tuple[str, ...]
    varying_ops: int
