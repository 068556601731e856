"""A tprof ab round that follows the peer's rounds gets the body once, unmeasured, before it
(pairing.opens_turn): the call runs, and the round's op table counts nothing of it."""

from __future__ import annotations

from types import SimpleNamespace

import torch

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


def test_a_round_after_the_peers_gets_one_unmeasured_call_that_counts_nowhere() -> None:
    plain_calls, plain = captured(set())
    calls, table = captured({1, 3, 5})
    assert calls == plain_calls + 3
    assert table.names == plain.names  # type: ignore[attr-defined]
    assert (table.calls == plain.calls).all()  # type: ignore[attr-defined]
    assert table.calls.shape[1] == ROUNDS  # type: ignore[attr-defined]
