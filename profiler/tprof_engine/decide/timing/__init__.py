"""Timing: the statistics that say whether a test's ops and families took longer.

- :mod:`.compare`: the timing rule over a test's families (per-op tests, family totals,
  calls that came or went) into a verdict;
- :mod:`.samples`: each op's and total's samples and their statistical tests; :mod:`.units`:
  whether a family is judged in drift-probe units or raw µs; :mod:`.stats`:
  the tests themselves (numpy); :mod:`.rule`: the parameters (floors, the paired rule);
- :mod:`.families`: the host and device-idle families; :mod:`.device`: kernels, copies and
  host waits; :mod:`.structure`: calls and ops that came or went;
- :mod:`.busy`: which rounds the machine disturbed; :mod:`.beside`: beside busy processes, the
  CPU times read over the shift every op shared; :mod:`.pooling`: a re-measurement's blocks
  pooled with the first;
- :mod:`.sides`: what each side of a judgement recorded, as the timing and the gates read it.
"""

__all__ = [  # the package's modules (tests/test_house.py keeps it whole)
    "beside",
    "busy",
    "compare",
    "device",
    "families",
    "pooling",
    "rule",
    "samples",
    "sides",
    "stats",
    "structure",
    "units",
]
