"""pytest-tprof's engine: capture, reduce, compare and store per-op profiles of PyTorch code.

Nothing here imports pytest; only :mod:`tprof_engine.capture` imports torch.
"""

from __future__ import annotations

__version__ = "0.1.0"
