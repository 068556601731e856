"""Our reduction agrees with torch's own numbers (``key_averages()``) on real CPU workloads.

Each workload runs for a few rounds under one ``torch.profiler`` session, every round a
``ProfilerStep#N`` annotation as :func:`tprof_engine.capture.capture` makes them.  The raw-event
path (``events_from_kineto`` + ``reduce_events``) must give exactly the calls of
``key_averages()`` for every op and its self CPU totals within 1 %; the fallback path
(``table_from_function_events``) must give the same calls, round by round.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest
import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile, record_function

from tprof_engine.capture.kineto import events_from_kineto, table_from_function_events
from tprof_engine.model.records import OpTable
from tprof_engine.reduce.ops import ROUND_PREFIX, reduce_events

ROUNDS = 6
WARMUP = 2
SELF_CPU_MIN_US = 100.0  # ops below this session total are too small for a relative check
SELF_CPU_RTOL = 0.01


def _mlp() -> Callable[[], object]:
    # Big enough that several ops pass the 100 µs relative check on a fast machine too.
    model = nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(),
                          nn.Linear(1024, 10))  # fmt: skip
    x = torch.randn(128, 256)
    y = torch.randint(0, 10, (128,))

    def step() -> object:
        model.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        return loss

    return step


def _conv_block() -> Callable[[], object]:
    block = nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2)
    )
    x = torch.randn(8, 3, 32, 32)

    def step() -> object:
        block.zero_grad()
        out = block(x)
        out.mean().backward()
        return out

    return step


def _attention() -> Callable[[], object]:
    attn = nn.MultiheadAttention(64, 4, batch_first=True).eval()
    x = torch.randn(4, 32, 64)

    def step() -> object:
        with torch.no_grad():
            return attn(x, x, x)[0]

    return step


def _encoder_training_step() -> Callable[[], object]:
    layer = nn.TransformerEncoderLayer(64, 4, 128, dropout=0.1, batch_first=True)
    opt = torch.optim.AdamW(layer.parameters(), lr=1e-3)
    x = torch.randn(8, 16, 64)

    def step() -> object:
        opt.zero_grad()
        loss = layer(x).pow(2).mean()
        loss.backward()
        opt.step()
        return loss

    return step


WORKLOADS: dict[str, Callable[[], Callable[[], object]]] = {
    "mlp_forward_backward": _mlp,
    "conv_block": _conv_block,
    "attention": _attention,
    "encoder_training_step": _encoder_training_step,
}


@dataclass(frozen=True, slots=True, kw_only=True)
class Profiled:
    """One workload's profile, reduced by both of our paths and by torch."""

    raw: OpTable
    fallback: OpTable
    torch_calls: dict[str, int]
    torch_self_cpu_us: dict[str, float]


def _profile(make: Callable[[], Callable[[], object]]) -> Profiled:
    torch.manual_seed(0)
    step = make()
    for _ in range(WARMUP):
        step()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for r in range(ROUNDS):
            with record_function(f"{ROUND_PREFIX}{r}"):
                step()
    raw = reduce_events(events_from_kineto(prof))
    fallback = table_from_function_events(prof, wall_us=np.zeros(ROUNDS))
    rows = [a for a in prof.key_averages() if not a.key.startswith("ProfilerStep")]
    return Profiled(
        raw=raw,
        fallback=fallback,
        torch_calls={a.key: int(a.count) for a in rows},
        torch_self_cpu_us={a.key: float(a.self_cpu_time_total) for a in rows},
    )


@pytest.fixture(scope="module", params=sorted(WORKLOADS))
def profiled(request: pytest.FixtureRequest) -> Profiled:
    return _profile(WORKLOADS[request.param])


def test_every_round_of_the_workload_is_a_column(profiled: Profiled) -> None:
    assert profiled.raw.rounds == ROUNDS
    assert profiled.raw.meta["whole_trace_as_round"] is False
    assert len(profiled.raw.names) >= 5


def test_no_op_is_missing_on_either_side(profiled: Profiled) -> None:
    ours = set(profiled.raw.names)
    theirs = set(profiled.torch_calls)
    assert (sorted(ours - theirs), sorted(theirs - ours)) == ([], [])


def test_calls_equal_key_averages_counts_exactly_for_every_op(profiled: Profiled) -> None:
    totals = profiled.raw.session_totals()
    ours = {name: int(t["calls"]) for name, t in totals.items()}
    mismatches = {
        name: (ours.get(name), count)
        for name, count in profiled.torch_calls.items()
        if ours.get(name) != count
    }
    assert mismatches == {}


def test_self_cpu_totals_are_within_one_percent_of_key_averages(profiled: Profiled) -> None:
    totals = profiled.raw.session_totals()
    checked = 0
    off: dict[str, tuple[float, float]] = {}
    # Every op above 100 µs, and at least the three largest whatever the machine's speed.
    third = sorted(profiled.torch_self_cpu_us.values(), reverse=True)[:3][-1]
    threshold = min(SELF_CPU_MIN_US, third)
    for name, theirs in profiled.torch_self_cpu_us.items():
        if theirs < threshold or name not in totals:
            continue
        checked += 1
        ours = totals[name]["self_cpu_us"]
        if abs(ours - theirs) > SELF_CPU_RTOL * theirs:
            off[name] = (round(ours, 3), round(theirs, 3))
    assert off == {}
    assert checked >= 3  # the check must have compared real ops, not none


def test_the_fallback_path_gives_the_raw_paths_calls_round_by_round(
    profiled: Profiled,
) -> None:
    # The two paths may order their ops differently: compare op by op.
    raw, fallback = profiled.raw, profiled.fallback
    assert sorted(fallback.names) == sorted(raw.names)
    raw_rows, fallback_rows = raw.index(), fallback.index()
    differing = {
        name: (raw.calls[raw_rows[name]].tolist(), fallback.calls[fallback_rows[name]].tolist())
        for name in raw.names
        if not np.array_equal(raw.calls[raw_rows[name]], fallback.calls[fallback_rows[name]])
    }
    assert differing == {}
