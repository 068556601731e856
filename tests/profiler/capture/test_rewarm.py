"""A tprof ab round that follows the peer's rounds gets the body, unmeasured, before it
(pairing.opens_turn) until the body runs warm again: the calls run, and the round's op table
counts nothing of them."""

from __future__ import annotations

import time
from types import SimpleNamespace

import torch

from tprof_engine.capture.in_round import REWARM_MAX_CALLS
from tprof_engine.capture.session import Call, RoundSpec, capture_rounds

ROUNDS = 6


def body(x: torch.Tensor) -> torch.Tensor:
    return torch.relu(x @ x).sum()


def captured(opens: set[int]) -> tuple[int, object]:
    """The body's calls and the table of a capture whose pace opens the turn at ``opens``."""
    seen = 0

    def counted(x: torch.Tensor) -> torch.Tensor:
        nonlocal seen
        seen += 1
        return body(x)

    pace = SimpleNamespace(
        before=lambda j: j in opens, after=lambda j: None, finish=lambda: None, agree=None
    )
    spec = RoundSpec(rounds=ROUNDS, warmup=2, probe=False, pace=pace)
    result = capture_rounds(Call(fn=counted, args=(torch.ones(32, 32),)), spec)
    return seen, result.table


def test_a_round_after_the_peers_gets_unmeasured_calls_that_count_nowhere() -> None:
    plain_calls, plain = captured(set())
    calls, table = captured({1, 3, 5})
    assert plain_calls + 3 <= calls <= plain_calls + 3 * REWARM_MAX_CALLS
    assert table.names == plain.names  # type: ignore[attr-defined]
    assert (table.calls == plain.calls).all()  # type: ignore[attr-defined]
    assert table.calls.shape[1] == ROUNDS  # type: ignore[attr-defined]


COLD_MS = (16.0, 8.0, 4.0)  # the body's first calls after the peer's turn, as a cache refills


def test_a_body_that_warms_up_over_several_calls_is_called_until_warm_before_its_round() -> None:
    """A body whose first calls after the peer's turn take 16, 8 and 4 ms, and 1 ms once warm:
    its round after the peer's begins warm, not halfway through warming up.  What is checked
    is which call each round measured (its last before the round ends), not the rounds' times,
    which a loaded machine stretches."""
    cold = 0
    measured: list[bool] = []  # each round's measured call: cold?
    last_cold = False

    def opens(j: int) -> bool:
        nonlocal cold
        if j in (1, 3):
            cold = len(COLD_MS)
        return j in (1, 3)

    def warming(x: torch.Tensor) -> torch.Tensor:
        nonlocal cold, last_cold
        last_cold = cold > 0
        time.sleep((COLD_MS[-cold] if cold else 1.0) / 1000.0)
        cold = max(cold - 1, 0)
        return x + 1

    def after(j: int) -> None:
        if j >= 0:
            measured.append(last_cold)

    pace = SimpleNamespace(before=opens, after=after, finish=lambda: None, agree=None)
    spec = RoundSpec(rounds=5, warmup=2, probe=False, pace=pace)
    capture_rounds(Call(fn=warming, args=(torch.ones(4),)), spec)
    assert len(measured) == spec.rounds
    assert not any(measured)  # no round measured a cold call
