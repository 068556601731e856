"""Decide: the verdicts, from two sides' tables and a :class:`~.rule.Rule`.

- :mod:`.judge`: the one judging path (comparability → timing → exact gates → too-noisy);
- :mod:`.policy`: the confirmation policy as data (:func:`.policy.next_step`) and the merges of
  each confirmation into the verdict;
- :mod:`.timing` with :mod:`.samples` (per-op statistical tests), :mod:`.structure` (calls and
  ops that came or went), :mod:`.families` (the host and device-idle families) and
  :mod:`.device`: the timing rule;
- :mod:`.work_gate`, :mod:`.memory_gate`, :mod:`.comm_gate`, :mod:`.compile_gate`: the exact
  gates;
  :mod:`.settings_gate`: a change of the settings a test ran under, as a named cause;
- :mod:`.busy`: which rounds the machine disturbed; :mod:`.stats`: the tests (numpy);
  :mod:`.rule`: the parameters.
"""

__all__ = [  # the stage's modules: its face (tests/test_house.py keeps it whole)
    "busy",
    "comm_gate",
    "compile_gate",
    "device",
    "families",
    "judge",
    "memory_gate",
    "policy",
    "replacements",
    "rule",
    "samples",
    "settings_gate",
    "stats",
    "structure",
    "timing",
    "work_gate",
]
