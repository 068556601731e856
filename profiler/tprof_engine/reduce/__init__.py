"""Reduce: raw events → per-op, per-round tables (:mod:`.ops`), with the device's rows
(:mod:`.device`) and the allocator's (:mod:`.memory`).  Arrays in, arrays out.
"""

__all__ = [  # the stage's modules: its face (tests/test_house.py keeps it whole)
    "compiled",
    "device",
    "memory",
    "nesting",
    "ops",
    "ranks",
]
