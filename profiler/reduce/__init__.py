"""Reduce: raw events → per-op, per-round tables (:mod:`.ops`), with the device's rows
(:mod:`.device`) and the allocator's (:mod:`.memory`).  Arrays in, arrays out.
"""
