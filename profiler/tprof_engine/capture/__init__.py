"""Capture: the only stage that imports torch.

Runs a test body's rounds under one ``torch.profiler`` session (:mod:`.session`, with the drift
probe, the closing sync and tprof ab's re-warm of :mod:`.in_round`, asking the
device's backend, :mod:`.backends`, what to record, wait for and name, with the
per-round load readings of :mod:`.load`, the GPU's of :mod:`.gpu_state`, the numeric settings of
:mod:`.settings`, the random generators' state of :mod:`.random_state` and the instruction
counts of :mod:`.counters`), turns kineto's events into plain arrays (:mod:`.kineto`), writes
the Chrome trace (:mod:`.export`), borrows pytest-benchmark's rounds (:mod:`.borrowed`), takes
the work census under a dispatch mode (:mod:`.census`, placing ops in modules with
:mod:`.modules`), and reads torch's own facts (:mod:`.facts`; every private or version-dependent
call through :mod:`.torch_api`). What leaves it is plain records of :mod:`tprof_engine.model`.

Importing this package loads nothing; :mod:`.session`, :mod:`.census`, :mod:`.borrowed`,
:mod:`.kineto`, :mod:`.export`, :mod:`.in_round` and :mod:`.facts` load torch, so the runner
imports them only once a test is profiled.
"""

__all__ = [  # the stage's modules: its face (tests/test_house.py keeps it whole)
    "backends",
    "borrowed",
    "census",
    "counters",
    "distributed",
    "export",
    "facts",
    "flops",
    "gpu_state",
    "in_round",
    "kineto",
    "load",
    "modules",
    "random_state",
    "session",
    "settings",
    "torch_api",
]
