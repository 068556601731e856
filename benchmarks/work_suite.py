"""The suite ``work_plants.py`` writes and runs: its test file, its tests, what a work reason
must name to catch each plant, and one test's result read from the JSON report.

The tests and plants are described in ``work_plants.py``'s docstring.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

SUITE = '''
"""A new user's model tests, profiled with pytest-tprof's ``tprof`` fixture."""

import math
import os

import pytest
import torch
from torch import nn

PLANT = os.environ.get("WORK_PLANT", "")


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


class Classifier(nn.Module):
    def __init__(self, ff):
        super().__init__()
        layer = nn.TransformerEncoderLayer(64, 4, dim_feedforward=ff, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, num_layers=2)
        self.head = nn.Linear(64, 10)

    def forward(self, x):
        return self.head(self.encoder(x).mean(dim=1))


def test_encoder_train(tprof):
    model = Classifier(282 if PLANT == "ffn" else 256)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()
    x = torch.randn(16, 32, 64)
    y = torch.randint(0, 10, (16,))

    def step():
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss

    tprof(step)


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(512, 512)
        self.fc2 = nn.Linear(512, 512)
        self.fc3 = nn.Linear(512, 10)

    def forward(self, x):
        h = torch.relu(self.fc1(x))
        if PLANT == "copy":
            h = h.t().contiguous().t()
        h = torch.relu(self.fc2(h))
        return self.fc3(h)


def test_mlp_forward(tprof):
    model = MLP().eval()
    x = torch.randn(64, 512)
    with torch.no_grad():
        out = tprof(model, x)
    assert out.shape == (64, 10)


class SelfAttention(nn.Module):
    def __init__(self, dim=64, heads=4):
        super().__init__()
        self.heads = heads
        self.q = nn.Linear(dim, dim)
        self.k = nn.Linear(dim, dim)
        self.v = nn.Linear(dim, dim)
        self.out = nn.Linear(dim, dim)

    def forward(self, x):
        b, t, d = x.shape
        dh = d // self.heads

        def split(z):
            return z.view(b, t, self.heads, dh).transpose(1, 2)

        q, k, v = split(self.q(x)), split(self.k(x)), split(self.v(x))
        scores = q @ k.transpose(-2, -1) / math.sqrt(dh)
        if PLANT == "float64":
            attn = scores.double().softmax(dim=-1).float()
        else:
            attn = scores.softmax(dim=-1)
        ctx = (attn @ v).transpose(1, 2).reshape(b, t, d)
        return self.out(ctx)


def test_attention_fp32(tprof):
    block = SelfAttention()
    x = torch.randn(8, 128, 64)

    def step():
        block.zero_grad()
        block(x).pow(2).mean().backward()

    tprof(step)
    assert block.q.weight.grad is not None


class HandLayerNorm(nn.Module):
    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim))

    def forward(self, x):
        mean = x.mean(dim=-1, keepdim=True)
        var = x.var(dim=-1, unbiased=False, keepdim=True)
        return (x - mean) / torch.sqrt(var + self.eps) * self.weight + self.bias


def test_layernorm_model(tprof):
    norm = HandLayerNorm(256) if PLANT == "layernorm" else nn.LayerNorm(256)
    model = nn.Sequential(nn.Linear(128, 256), norm, nn.GELU(), nn.Linear(256, 128))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(32, 64, 128)
    target = torch.randn(32, 64, 128)

    def step():
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(x), target)
        loss.backward()
        opt.step()

    tprof(step)


class Tagger(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(nn.Conv1d(8, 32, 5, padding=2), nn.ReLU())
        self.gru = nn.GRU(32, 64, batch_first=True)
        self.head = nn.Linear(64, 4)

    def forward(self, x):
        h = self.features(x).transpose(1, 2)
        out, _ = self.gru(h)
        return self.head(out[:, -1])


def test_conv_gru_inference(tprof):
    model = Tagger().eval()
    x = torch.randn(16, 8, 100)
    with torch.no_grad():
        out = tprof(model, x)
    assert out.shape == (16, 4)
'''

TESTS = (
    "test_encoder_train",
    "test_mlp_forward",
    "test_attention_fp32",
    "test_layernorm_model",
    "test_conv_gru_inference",
)
PROFILE_ARGS = ("--tprof-rounds=12", "--tprof-warmup=2")
OTHER_CPU = "Other CPU"
NOT_COMPARED = "timings not compared"
FAILED = ("regressed", "error")

Work = dict[str, Any]  # a test's "work" object in the JSON report


# --------------------------------------------------------------------------- what a catch names


def _stem(row: Work) -> str:
    """A row's label up to its phase: ``aten::mm in encoder.layers.0.linear1 (backward``.

    The label may go on with what ran it (``(backward of MmBackward0)``), so reasons are
    matched on this stem followed by ``)`` or a space.
    """
    where = f"in {row['module']}" if row["module"] else "at top level"
    return f"{row['op']} {where} ({row['phase']}"


def _names(line: str, row: Work) -> bool:
    stem = _stem(row)
    return line.startswith(stem) and line[len(stem) : len(stem) + 1] in (")", " ")


def _named_rows(work: Work) -> list[Work]:
    """The moved rows that a work reason names."""
    reasons = work.get("reasons", [])
    return [r for r in work.get("rows", []) if any(_names(x, r) for x in reasons)]


def ffn_named(work: Work) -> bool:
    return any(
        r["op"] in ("aten::addmm", "aten::mm")
        and ("linear1" in r["module"] or "linear2" in r["module"])
        for r in _named_rows(work)
    )


def copy_named(work: Work) -> bool:
    return any(r["op"] == "aten::clone" for r in _named_rows(work))


def float64_named(work: Work) -> bool:
    return any(
        r["op"] == "aten::_to_copy" or "f64" in r["cur_signature"] for r in _named_rows(work)
    )


def layernorm_named(work: Work) -> bool:
    """``aten::native_layer_norm`` named gone, or new ops named in the norm's module ``1``
    (one line for the replacement: ``in 1 (forward): aten::native_layer_norm gone, …``)."""
    replaced = re.compile(r"in 1 \([a-z ]+\): aten::native_layer_norm\S* gone")
    return any(replaced.match(x) for x in work.get("reasons", [])) or any(
        (r["op"].startswith("aten::native_layer_norm") and r["status"] == "deleted")
        or (r["module"] == "1" and r["status"] == "added")
        for r in _named_rows(work)
    )


@dataclass(frozen=True)
class Plant:
    name: str
    test: str
    expected: str  # what the work reasons must name, in words
    named: Callable[[Work], bool]


PLANTS = (
    Plant("ffn", "test_encoder_train", "aten::addmm / aten::mm in *linear1|2", ffn_named),
    Plant("copy", "test_mlp_forward", "aten::clone", copy_named),
    Plant("float64", "test_attention_fp32", "aten::_to_copy or an f64 input", float64_named),
    Plant("layernorm", "test_layernorm_model", "layer norm gone / new ops in 1", layernorm_named),
)


# --------------------------------------------------------------------------- running pytest


@dataclass(frozen=True)
class Result:
    """One test's outcome in one pytest run, from the JSON report."""

    verdict: str
    reason: str
    work: Work
    timing_regressed: bool  # a family's times regressed: its total or an op (statistical layer)
    calls_regressed: bool  # a family's calls regressed (structure layer)
    notes: tuple[str, ...] = ()

    @property
    def work_verdict(self) -> str:
        return str(self.work.get("verdict", "-")) if self.work else "-"

    @property
    def failed(self) -> bool:
        return self.verdict in FAILED

    @property
    def layer(self) -> str:
        """The layer that failed the test: error, work, calls or timing."""
        if self.verdict == "error":
            return "error"
        if self.work_verdict == "regressed":
            return "work"
        return "calls" if self.calls_regressed else "timing"

    @property
    def timings_compared(self) -> bool:
        return not any(NOT_COMPARED in n for n in self.notes)

    def caught(self, plant: Plant) -> bool:
        return (
            self.verdict == "regressed"
            and self.work_verdict == "regressed"
            and plant.named(self.work)
        )


def result_of(t: Work) -> Result:
    fams = t.get("families", [])
    return Result(
        verdict=t["verdict"],
        reason=t["reason"],
        work=t.get("work") or {},
        # as TestVerdict.timing_regressed: the total, or an op on its own
        timing_regressed=any(f.get("timing_regressed") or f.get("op_gate") for f in fams),
        calls_regressed=any(f.get("structure_regressed") for f in fams),
        notes=tuple(t.get("notes", [])),
    )
