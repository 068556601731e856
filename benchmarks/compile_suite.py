"""The suite ``compile_reruns.py`` writes and runs: its test file, what counts as a compile-time
op name, one test's result read from the JSON report, and the plants with what catches them.

The tests and plants are described in ``compile_reruns.py``'s docstring.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

SUITE = '''
"""A new user's compiled model tests, profiled with pytest-tprof's ``tprof`` fixture."""

import os

import pytest
import torch
from torch import nn

PLANT = os.environ.get("COMPILE_PLANT", "")


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


class MLPBlock(nn.Module):
    def __init__(self, dim=256, hidden=512):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x):
        h = self.act(self.fc1(x))
        if PLANT == "break":
            torch._dynamo.graph_break()
        return self.fc2(h)


def test_compiled_mlp(tprof):
    model = MLPBlock(hidden=1024 if PLANT == "wide" else 512).eval()
    compiled = torch.compile(model)
    x = torch.randn(64, 256)
    with torch.no_grad():
        out = tprof(compiled, x)
    assert out.shape == (64, 256)


class EncoderClassifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.TransformerEncoderLayer(
            d_model=64, nhead=4, dim_feedforward=256, batch_first=True
        )
        self.head = nn.Linear(64, 10)
        self.temperature = 1.0

    def forward(self, x):
        return self.head(self.encoder(x).mean(dim=1)) * self.temperature


def test_compiled_encoder_train(tprof):
    model = EncoderClassifier()
    compiled = torch.compile(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()
    x = torch.randn(16, 32, 64)
    y = torch.randint(0, 10, (16,))
    calls = [0]

    def step():
        calls[0] += 1
        if PLANT == "recompile" and calls[0] == 6:
            model.temperature = 0.5  # a guard fails: Dynamo recompiles in a measured round
        opt.zero_grad()
        loss = loss_fn(compiled(x), y)
        loss.backward()
        opt.step()
        return loss

    tprof(step)


def test_eager_control(tprof):
    model = nn.Sequential(nn.Linear(128, 256), nn.ReLU(), nn.Linear(256, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(32, 128)
    y = torch.randint(0, 10, (32,))

    def step():
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()

    tprof(step)
'''

TESTS = ("test_compiled_mlp", "test_compiled_encoder_train", "test_eager_control")
PROFILE_ARGS = ("--tprof-rounds=12", "--tprof-warmup=2")
ROUNDS, WARMUP = 12, 2
FAILED = ("regressed", "error")
PLANT_ENV = "COMPILE_PLANT"
CACHE_ENV = {"TORCHINDUCTOR_FX_GRAPH_CACHE": "1", "TORCHINDUCTOR_AUTOGRAD_CACHE": "1"}

# Op names that are compile time (Dynamo / AOT / Inductor), never an op row.
COMPILE_MARKS = (
    "dynamo_timed",
    "compile_id",
    "bytecode_tracing",
    "backend_compile",
    "entire_frame_compile",
    "entire_backward_compile",
    "compile_attempt",
    "prims::",
)
COMPILE_EXACT = frozenset({"dynamo"})
RAW_GRAPH = re.compile(r"^## Call CompiledFxGraph (?!#\d+ ##$)")
RAW_REGION = re.compile(r"^Torch-Compiled Region: ")
GRAPH_OR_REGION = re.compile(r"^(## Call CompiledFxGraph #\d+ ##|Torch-Compiled Region #\d+)$")

Doc = dict[str, Any]  # a test's object in the JSON report


def compile_time_name(name: str) -> bool:
    return (
        name in COMPILE_EXACT
        or any(m in name for m in COMPILE_MARKS)
        or RAW_GRAPH.match(name) is not None
        or RAW_REGION.match(name) is not None
    )


# --------------------------------------------------------------------------- one test's result


@dataclass(frozen=True)
class Result:
    """One test's outcome in one pytest run, from the JSON report."""

    doc: Doc

    @property
    def verdict(self) -> str:
        return str(self.doc["verdict"])

    @property
    def reason(self) -> str:
        return str(self.doc["reason"])

    @property
    def notes(self) -> list[str]:
        return list(self.doc.get("notes", []))

    @property
    def work(self) -> Doc:
        return self.doc.get("work") or {}

    @property
    def work_verdict(self) -> str:
        return str(self.work.get("verdict", "-")) if self.work else "-"

    @property
    def ops(self) -> list[Doc]:
        return list(self.doc.get("ops", []))

    @property
    def failed(self) -> bool:
        return self.verdict in FAILED

    def layers(self) -> list[str]:
        """Every layer that failed the test, the deciding one first."""
        fams = self.doc.get("families", [])
        out = []
        if self.verdict == "error":
            out.append("error")
        if "compile:" in self.reason:
            out.append("compile")
        if self.work_verdict == "regressed":
            out.append("work")
        if any(f.get("structure_regressed") for f in fams):
            out.append("calls")
        if any(f.get("timing_regressed") or f.get("op_gate") for f in fams):
            out.append("timing")
        return out or ["?"]

    def regressed_ops(self) -> list[str]:
        return [o["op"] for o in self.ops if o.get("verdict") == "regressed"]

    def compile_rows(self) -> list[str]:
        return [o["op"] for o in self.ops if compile_time_name(str(o["op"]))]


def work_names_addmm_fc(work: Doc) -> bool:
    """A work reason names ``aten::addmm`` in a module ``fc1`` or ``fc2``."""
    return any(
        re.match(r"^aten::addmm in (\S+\.)?fc[12] \(", str(line)) is not None
        for line in work.get("reasons", [])
    )


def wide_layers(r: Result) -> list[str]:
    """The layers that named the wider MLP: graph (a compiled-graph / region op row
    regressed), work (a work reason names aten::addmm in fc1/fc2), addmm (that op row
    regressed)."""
    out = []
    regressed = r.regressed_ops()
    if any(GRAPH_OR_REGION.match(o) for o in regressed):
        out.append("graph")
    if r.work_verdict == "regressed" and work_names_addmm_fc(r.work):
        out.append("work")
    if "aten::addmm" in regressed:
        out.append("addmm")
    return out


def wide_caught(r: Result) -> bool:
    return r.verdict == "regressed" and bool({"graph", "work"} & set(wide_layers(r)))


def break_caught(r: Result) -> bool:
    return r.verdict == "regressed" and "a new graph break" in r.reason


def recompile_caught(r: Result) -> bool:
    return (
        r.verdict == "regressed"
        and "recompiled" in r.reason
        and "during the measured rounds" in r.reason
    )


@dataclass(frozen=True)
class Plant:
    name: str
    test: str
    expected: str  # what a catch must name, in words
    caught: Callable[[Result], bool]


PLANTS = {
    "wide": Plant("wide", "test_compiled_mlp", "graph/region row or addmm in fc1|2", wide_caught),
    "break": Plant("break", "test_compiled_mlp", '"a new graph break"', break_caught),
    "recompile": Plant(
        "recompile",
        "test_compiled_encoder_train",
        '"recompiled … measured rounds"',
        recompile_caught,
    ),
}
