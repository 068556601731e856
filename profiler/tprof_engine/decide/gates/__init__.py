"""The gates beyond the families' timing, one module each: its finder, its cause's kind and
exactness (its :class:`~.finding.Gate`) and its text.  :mod:`.registry` lists them in the order
the judge joins them; :mod:`.finding` is what a gate says and how it joins the verdict.

- :mod:`.memory`: allocations per op and the round's peak, exactly;
- :mod:`.compiled`: torch.compile's graphs per call and recompilations;
- :mod:`.communication`: the collectives, exactly (and whether the ranks' censuses agree);
- :mod:`.work`: the work census (FLOPs, bytes, calls per op, module and phase), with
  :mod:`.replacements` (an op replaced by others doing the same work);
- :mod:`.settings`: the numeric settings the test's code chose;
- :mod:`.busy`: the machine that kept the timing from being judged (a cause, never exact).
"""

__all__ = [  # the package's modules (tests/test_house.py keeps it whole)
    "busy",
    "communication",
    "compiled",
    "finding",
    "memory",
    "registry",
    "replacements",
    "settings",
    "work",
]
