"""The random generators' state read in one place and set again: what a fresh process starts
a test from."""

from __future__ import annotations

import pickle
import random

import numpy as np
import torch

from tprof_engine.capture import random_state


def draws() -> tuple[float, float, float]:
    return random.random(), float(np.random.random()), float(torch.rand(1))


def test_the_generators_start_again_where_the_state_was_read_even_after_a_pickle() -> None:
    torch.manual_seed(3)
    state = pickle.loads(pickle.dumps(random_state.read()))
    first = draws()
    assert draws() != first  # the generators moved on
    assert random_state.restore(state) == []
    assert draws() == first


def test_a_state_that_cannot_be_set_is_named_and_the_others_are_set() -> None:
    state = random_state.read()
    first = draws()
    broken = {**state, "numpy": ("not a state",)}
    assert random_state.restore(broken) == ["numpy"]
    after = draws()
    assert (after[0], after[2]) == (first[0], first[2])
