"""Which torch releases pytest-tprof supports, read without importing torch.

The range is the one ``benchmarks/torch_matrix.py`` ran the whole suite and a profiled workload
on (README, "Install"; docs/torch.md has its table).  An older torch is refused once, at
start-up, with what to do, instead of a crash inside a test.  What each release offers, and
the run header's line for one newer than the range, are the adapter's
(``tprof_engine.capture.torch_api``).
"""

from __future__ import annotations

import re
from importlib import metadata

__all__ = ["MINIMUM", "VERIFIED", "parse_version", "torch_problem"]

MINIMUM = (2, 6)  # pyproject.toml's "torch>=2.6"
# the releases the matrix ran on (benchmarks/torch_matrix.py; tests/data/torch-releases/)
VERIFIED = (
    "2.6.0",
    "2.7.1",
    "2.8.0",
    "2.9.1",
    "2.10.0",
    "2.11.0",
    "2.12.1",
    "2.13.0",
    "2.14.1",
)


def parse_version(text: str) -> tuple[int, int] | None:
    """``(major, minor)`` of a torch version string (``2.11.0+cu130`` → ``(2, 11)``)."""
    found = re.match(r"\s*(\d+)\.(\d+)", text)
    return None if found is None else (int(found.group(1)), int(found.group(2)))


def _installed() -> str | None:
    try:
        return metadata.version("torch")
    except metadata.PackageNotFoundError:
        return None


def _span() -> str:
    return f"{VERIFIED[0]} to {VERIFIED[-1]}"


def torch_problem(version: str | None = None) -> str | None:
    """Why this environment's torch can't run pytest-tprof, and what to do; None when it can.

    ``version`` is read from the installed distribution when not given (None when torch is
    not installed at all)."""
    version = version or _installed()
    if version is None:
        return (
            "pytest-tprof needs torch, and this environment has none: install the torch "
            "your code uses (pip install torch), then run again"
        )
    parsed = parse_version(version)
    wanted = ".".join(map(str, MINIMUM))
    if parsed is None or parsed >= MINIMUM:
        return None
    return (
        f"pytest-tprof needs torch >= {wanted} and this environment has torch {version}: "
        f"its profiler lacks what tprof reads (verified on {_span()}); "
        f"upgrade torch (pip install 'torch>={wanted}') or run without --tprof"
    )
