"""Blocks of one change pooled (decide.timing.pooling): what keeps a regression standing."""

from __future__ import annotations

import math

import pytest

from tprof_engine.decide.timing import pooling

ALPHA = 0.01


def block(pct: float, mde_pct: float) -> pooling.Block:
    made = pooling.block(pct, mde_pct, ALPHA)
    assert made is not None
    return made


def stands(first: pooling.Block, newest: pooling.Block, floor_pct: float) -> bool:
    return pooling.stands(pooling.pooled([first, newest]), newest, floor_pct, ALPHA)


def test_a_noisy_second_look_that_is_not_significant_keeps_a_clear_first_one() -> None:
    assert stands(block(82.0, 8.0), block(30.0, 60.0), 10.0)


def test_a_clear_second_look_inside_the_floor_takes_it_back() -> None:
    assert not stands(block(82.0, 8.0), block(0.0, 4.0), 10.0)


def test_a_second_look_inside_the_floor_whose_own_test_found_the_slowdown_leaves_it_pooled() -> (
    None
):
    """A +25 % custom op read +28 % (floor 17 %), then +12 % in a fresh process, sure to a
    few percent and significant by its own test: a smaller slowdown, not none; pooled
    beyond the floor, it stands.  Without its own test's word it is taken back."""
    first = pooling.block(28.0, 4.0, ALPHA, p=3.7e-6)
    assert first is not None
    sure = pooling.block(12.0, 5.0, ALPHA, p=0.0057)
    assert sure is not None and pooling.inside_floor(sure, 17.0, ALPHA)
    assert pooling.stands(pooling.pooled([first, sure]), sure, 17.0, ALPHA)
    # without its own test's word, +12 % sure to a few percent is still slower by more than
    # a quarter of the floor: it stands; +3 % is not, and takes it back
    unsure = pooling.block(12.0, 5.0, ALPHA, p=0.2)
    assert unsure is not None and pooling.still_slower(unsure, 17.0, ALPHA)
    assert pooling.stands(pooling.pooled([first, unsure]), unsure, 17.0, ALPHA)
    small = pooling.block(3.0, 5.0, ALPHA, p=0.6)
    assert small is not None and not pooling.still_slower(small, 17.0, ALPHA)
    assert not pooling.stands(pooling.pooled([first, small]), small, 17.0, ALPHA)
    # pooled inside the floor, it is taken back whatever the newest's own test said
    assert not pooling.stands(pooling.pooled([block(18.0, 6.0), sure]), sure, 17.0, ALPHA)


def test_two_looks_that_disagree_beyond_their_noise_are_that_processs_speed() -> None:
    """+40 % then +1 %, each sure to a few percent: pooled about +19 %, beyond a 10 % floor,
    but one process saw it and the next did not."""
    first, newest = block(40.0, 6.0), block(1.0, 6.0)
    together = pooling.pooled([first, newest])
    assert together.pct > 10.0 and together.q_p < ALPHA
    assert not stands(first, newest, 10.0)
    # a newest block that shows a slowdown by itself keeps it, however the two disagree:
    # +122 % then +103 % of a host time, pooled beyond its 109 % floor
    assert stands(block(122.0, 6.7), block(103.0, 6.7), 109.0)


def test_a_change_with_no_finite_figures_is_no_block() -> None:
    assert pooling.block(math.inf, 5.0, ALPHA) is None
    assert pooling.block(-100.0, 5.0, ALPHA) is None
    assert pooling.block(10.0, None, ALPHA) is not None


def test_blocks_of_one_length_average_with_equal_weights() -> None:
    """+5.6 % (mde 5.75 %) then +6.3 % (mde 2.9 %, a spread that came out small): the
    average is the middle, not the block whose error looked smaller."""
    first, second = block(5.6, 5.75), block(6.3, 2.93)
    assert round(pooling.averaged([first, second]).pct, 2) == 5.95
    assert round(pooling.pooled([first, second]).pct, 2) == 6.15  # inverse variance leans


def test_independent_p_values_combine_by_their_normal_scores() -> None:
    assert pooling.combined_p([0.5, 0.5]) == pytest.approx(0.5)
    assert round(pooling.combined_p([0.035, 0.02]), 4) == 0.0031
    assert round(pooling.combined_p([0.22, 0.041]), 3) == 0.038  # not significant at 0.01
    assert pooling.combined_p([0.001, 0.999]) == pytest.approx(0.5)  # they cancel


def test_a_block_whose_own_test_found_it_slower_is_slower_at_all() -> None:
    """HF Llama generate's fresh process: host +13 % at p=0.00025, its detectable effect 25 %;
    the bound read from that effect reaches below 0, its own test does not."""
    wide = pooling.block(13.0, 25.0, ALPHA)
    assert wide is not None and not pooling.slower_at_all(wide, ALPHA)
    tested = pooling.block(13.0, 25.0, ALPHA, p=0.00025)
    assert tested is not None and pooling.slower_at_all(tested, ALPHA)
    # +98 % then that block: they disagree, but the newest is slower too, so it stands
    first = pooling.block(98.0, 10.0, ALPHA, p=1.5e-6)
    assert first is not None
    together = pooling.pooled([first, tested])
    assert together.q_p < ALPHA
    assert pooling.stands(together, tested, 17.0, ALPHA)
    # a newest block too wide to be inside the floor can't take a clear first one back,
    # however the two disagree: pooled +82 %
    assert pooling.stands(pooling.pooled([first, wide]), wide, 17.0, ALPHA)
