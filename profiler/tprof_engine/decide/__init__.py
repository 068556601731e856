"""Decide: the verdicts, from two sides' tables and a :class:`~.timing.rule.Rule`, in three
rooms, each importing only the ones before it:

- :mod:`.timing`: the statistics (samples, floors, families, the paired rule, the machine's
  disturbed rounds) that say whether a test's timing moved;
- :mod:`.gates`: the gates beyond timing (memory, compiled graphs, collectives, work,
  settings), one module each, listed in :mod:`.gates.registry`;
- the verdict, here at the stage's top: :mod:`.judge` (the one judging path: comparability →
  timing → the gates → too-noisy), :mod:`.policy` (the confirmation policy as data and the
  merges of each confirmation into the verdict), :mod:`.again` (a verdict short of its floor
  measured again, in a fresh process or pair) and :mod:`.outcome` (what a verdict does: the
  test fails or not, its causes typed, the next steps, and the words no judgement gives).
"""

__all__ = [  # the stage's modules: its face (tests/test_house.py keeps it whole)
    "again",
    "gates",
    "judge",
    "outcome",
    "policy",
    "timing",
]
