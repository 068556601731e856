"""A capture names the rows that are user annotations (``record_function`` scopes), and a
saved baseline keeps them: the rule judges their own time at the test's scale
(tests/profiler/decide/test_scope_scale.py).  A damaged list is an error naming its key."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.profiler import record_function

from tprof_engine.capture.session import capture
from tprof_engine.model.errors import BaselineError
from tprof_engine.model.records import OpTable
from tprof_engine.store import baselines, packing, reading

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = sorted((ROOT / "baselines").glob("*/*.json"))[0]


def training_table() -> OpTable:
    layer = nn.Linear(16, 16)
    opt = torch.optim.SGD(layer.parameters(), lr=0.1)
    x = torch.randn(4, 16)

    def step() -> None:
        opt.zero_grad()
        with record_function("my_block"):
            y = layer(x).sum()
        y.backward()
        opt.step()

    return capture(step, rounds=2, warmup=1, probe=False).table


def test_a_capture_names_its_record_function_scopes_and_no_op() -> None:
    t = training_table()
    assert t.scopes == {"Optimizer.step#SGD.step", "Optimizer.zero_grad#SGD.zero_grad", "my_block"}
    assert "aten::addmm" in t.names and "aten::addmm" not in t.scopes
    assert OpTable.from_dict(json.loads(json.dumps(t.to_dict()))).scopes == t.scopes


def open_example() -> dict:
    doc = json.loads(EXAMPLE.read_text(encoding="utf-8"))
    if doc["schema_version"] == packing.PACKED_VERSION:
        doc = packing.unpacked(doc, lambda msg, fix="": BaselineError(msg))
    return doc


def test_a_saved_baseline_keeps_the_scopes_of_each_session(tmp_path: Path) -> None:
    doc = open_example()
    name = sorted(doc["sessions"][-1]["ops"])[0]
    doc["sessions"][-1]["scopes"] = [name, "an op this session never called"]
    path = tmp_path / "open.json"
    path.write_text(reading.dumps(doc), encoding="utf-8")
    saved = baselines.save_baseline(tmp_path / "packed.json", baselines.load_baseline(path))
    sessions = baselines.load_baseline(saved).sessions
    assert sessions[-1].table.scopes == {name}
    assert sessions[0].table.scopes == frozenset()


@pytest.mark.parametrize("damaged", ["Optimizer.step", [1, 2], [""]])
def test_a_damaged_scopes_list_is_an_error_naming_it(tmp_path: Path, damaged: object) -> None:
    doc = open_example()
    doc["sessions"][0]["scopes"] = damaged
    path = tmp_path / "open.json"
    path.write_text(reading.dumps(doc), encoding="utf-8")
    with pytest.raises(BaselineError) as err:
        baselines.load_baseline(path)
    assert "'sessions[0].scopes' must be a list of op names" in str(err.value)
