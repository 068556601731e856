"""decide.stats' quick quantile and median against numpy's."""

from __future__ import annotations

import numpy as np
import pytest

from tprof_engine.decide.timing import stats


@pytest.mark.parametrize("seed", range(6))
def test_quantile_and_median_are_numpys_to_the_last_bit(seed: int) -> None:
    rng = np.random.default_rng(seed)
    for n in (*range(1, 12), 20, 23, 60, 100, 137):
        values = rng.lognormal(5.0, 1.0, n)
        if seed % 2:
            values = np.round(values)  # ties
        for q in (0.0, 0.1, 0.25, 0.333, 0.5, 0.75, 0.9, 1.0):
            assert stats.quantile(values, q) == float(np.quantile(values, q))
        assert stats.median(values) == float(np.median(values))
