"""Decide: the verdicts, from two sides' tables and a :class:`~.rule.Rule`.

- :mod:`.judge`: the one judging path (comparability → timing → exact gates → too-noisy);
- :mod:`.outcome`: what a verdict does (the pytest test fails or not, its causes typed, the
  next steps), and the words no judgement gives (no baseline, saved, not saved, …);
- :mod:`.policy`: the confirmation policy as data (:func:`.policy.next_step`) and the merges of
  each confirmation into the verdict, each measurement a block pooled with the others
  (:mod:`.pooling`);
- :mod:`.timing` with :mod:`.samples` (per-op statistical tests), :mod:`.structure` (calls and
  ops that came or went), :mod:`.families` (the host and device-idle families) and
  :mod:`.device`: the timing rule;
- :mod:`.gates`: the gates beyond timing as entries (memory, compiled graphs, collectives,
  work, settings), each finding joined to the verdict one way; :mod:`.work_gate`,
  :mod:`.memory_gate`, :mod:`.comm_gate`, :mod:`.compile_gate`: the exact gates' rules;
- :mod:`.sides`: what each side of a judgement recorded, and what the gates read;
- :mod:`.busy`: which rounds the machine disturbed; :mod:`.stats`: the tests (numpy);
  :mod:`.rule`: the parameters.
"""

__all__ = [  # the stage's modules: its face (tests/test_house.py keeps it whole)
    "busy",
    "comm_gate",
    "compile_gate",
    "device",
    "families",
    "gates",
    "judge",
    "memory_gate",
    "outcome",
    "policy",
    "pooling",
    "replacements",
    "rule",
    "samples",
    "sides",
    "stats",
    "structure",
    "timing",
    "work_gate",
]
