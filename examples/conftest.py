"""Shared models of the example suite; TPROF_SLOW_MATMUL plants a slowdown for the demo."""

from __future__ import annotations

import os

import pytest
import torch


def slow_factor() -> float:
    """Fraction of extra matmul work the demo plants (0 = unchanged code)."""
    return float(os.environ.get("TPROF_SLOW_MATMUL", "0"))


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)
