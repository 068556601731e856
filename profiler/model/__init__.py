"""Model: the records every stage passes on, plain numbers and numpy arrays.

:mod:`.records` (op tables, event arrays, round loads), :mod:`.device_tables`,
:mod:`.work` (the census), :mod:`.tensors` (tensor facts as text), :mod:`.verdicts`,
:mod:`.work_verdict`, :mod:`.device_delta`, :mod:`.memory_verdict`, :mod:`.results`,
:mod:`.environment` (the fingerprint), :mod:`.limits` and :mod:`.errors`.  It imports no other
stage.
"""
