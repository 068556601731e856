"""Model: the records every stage passes on, plain numbers and numpy arrays.

:mod:`.records` (op tables, event arrays, round loads), :mod:`.device_tables`,
:mod:`.work` (the census), :mod:`.communication` (its collectives), :mod:`.tensors` (tensor
facts as text), :mod:`.verdicts`,
:mod:`.work_verdict`, :mod:`.device_delta`, :mod:`.memory_verdict`, :mod:`.results`,
:mod:`.environment` (the fingerprint), :mod:`.settings` (the numeric settings a test's code
chose), :mod:`.family_specs` (the timing families as data), :mod:`.gpu_clocks` (the GPU's
clock-event reasons), :mod:`.limits`, :mod:`.errors` and :mod:`.strict` (reading a decoded
file, each value checked).  It imports no other stage.
"""

__all__ = [  # the stage's modules: its face (tests/test_house.py keeps it whole)
    "arrays",
    "communication",
    "costs",
    "device_delta",
    "device_tables",
    "environment",
    "errors",
    "family_specs",
    "gpu_clocks",
    "limits",
    "memory_verdict",
    "ranks",
    "records",
    "results",
    "settings",
    "strict",
    "tensors",
    "verdicts",
    "work",
    "work_verdict",
]
