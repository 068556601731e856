"""The packed baseline file: the same numbers the rule uses, a fraction of the size, a damaged
pack an error naming the key."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from tprof_engine.model.errors import BaselineError
from tprof_engine.store import baselines, packing, reading

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = sorted((ROOT / "baselines").glob("*/*.json"))


def open_file(path: Path) -> Path:
    """A copy of a committed example baseline, in the open form (``schema_version`` 2)."""
    doc = json.loads(path.read_text(encoding="utf-8"))
    if doc["schema_version"] == packing.PACKED_VERSION:
        doc = packing.unpacked(doc, lambda msg, fix="": BaselineError(msg))
    return doc


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_a_packed_file_reads_back_every_number_the_rule_uses(example: Path, tmp_path: Path) -> None:
    old = tmp_path / "open.json"
    old.write_text(reading.dumps(open_file(example)), encoding="utf-8")
    before = baselines.load_baseline(old)  # an open file still reads
    new = baselines.save_baseline(tmp_path / "packed.json", before)
    after = baselines.load_baseline(new)
    assert json.loads(new.read_text(encoding="utf-8"))["schema_version"] == 3
    assert new.stat().st_size < old.stat().st_size / 2
    assert len(after.sessions) == len(before.sessions) >= 2
    for a, b in zip(before.sessions, after.sessions, strict=True):
        x, y = a.table, b.table
        called = [i for i, name in enumerate(x.names) if x.calls[i].any()]
        assert [x.names[i] for i in called] == list(y.names)
        for metric in ("calls", "self_cpu_us", "self_device_us"):
            assert np.array_equal(getattr(x, metric)[called], getattr(y, metric)), metric
        assert np.array_equal(y.total_cpu_us, y.self_cpu_us)  # totals aren't kept
        for metric in ("wall_us", "probe_cpu_us"):
            assert np.array_equal(getattr(x, metric), getattr(y, metric)), metric
        if x.host_before_us is not None:
            assert np.array_equal(x.host_before_us[called], y.host_before_us)
        assert a.work == b.work and a.soft == b.soft and a.recorded_at == b.recorded_at
    doc = json.loads(new.read_text(encoding="utf-8"))
    distinct = {json.dumps(s.work.to_dict(), sort_keys=True) for s in before.sessions if s.work}
    assert len(doc["work"]) == len(distinct) < len(doc["sessions"])  # equal censuses once
    assert len({id(s.work) for s in after.sessions if s.work}) == len(distinct)  # read once


def test_a_census_equal_to_a_valid_one_is_read_once_and_a_damaged_one_still_fails(
    tmp_path: Path,
) -> None:
    doc = open_file(EXAMPLES[0])
    with_work = [i for i, s in enumerate(doc["sessions"]) if "work" in s]
    assert len(with_work) >= 2
    last = with_work[-1]
    doc["sessions"][last]["work"] = json.loads(json.dumps(doc["sessions"][with_work[0]]["work"]))
    doc["sessions"][last]["work"]["rows"][0]["flops"] = -1
    path = tmp_path / "open.json"
    path.write_text(reading.dumps(doc), encoding="utf-8")
    with pytest.raises(BaselineError) as err:
        baselines.load_baseline(path)
    assert f"'sessions[{last}].work.rows[0].flops'" in str(err.value)


def packed_copy(tmp_path: Path) -> tuple[Path, dict]:
    path = tmp_path / "b.json"
    shutil.copyfile(EXAMPLES[0], path)
    baselines.save_baseline(path, baselines.load_baseline(path))
    return path, json.loads(path.read_text(encoding="utf-8"))


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda d: d["sessions"][0].__setitem__("rounds", "not base85 ~~~"),
         "'sessions[0].rounds' is not packed rounds (base85 of zlib data): the packed rounds are "
         "damaged"),
        (lambda d: d["sessions"][0].__setitem__("rounds", d["sessions"][1]["rounds"][:-12]),
         "the packed rounds are damaged"),
        (lambda d: d["ops"].pop(),
         "'sessions[0].rounds' holds "),
        (lambda d: d["ops"].append(d["ops"][0]), "'ops' names an op twice"),
        (lambda d: d["sessions"][0].__setitem__("work", 7),
         "'sessions[0].work' must be the index of one of the 2 censuses in 'work'"),
        (lambda d: d["work"][0]["rows"]["rows"][0].pop(),
         "'work[0].rows.rows[0]' must be a list of "),
        (lambda d: d["work"][0]["rows"]["rows"][0].__setitem__(0, -5), "must be an integer >= 0"),
    ],
)  # fmt: skip
def test_a_damaged_pack_is_an_error_naming_the_file_and_the_key(
    tmp_path: Path, damage, message: str
) -> None:
    path, doc = packed_copy(tmp_path)
    damage(doc)
    path.write_text(reading.dumps(doc), encoding="utf-8")
    with pytest.raises(BaselineError) as err:
        baselines.load_baseline(path)
    assert str(err.value).startswith(f"{path}: ")
    assert message in str(err.value)
    assert "re-record it with --tprof-save" in str(err.value)


def test_a_pack_that_inflates_past_its_rounds_is_refused_without_inflating_it(
    tmp_path: Path,
) -> None:
    import base64
    import zlib

    path, doc = packed_copy(tmp_path)
    doc["sessions"][0]["rounds"] = base64.b85encode(zlib.compress(b"\0" * (64 << 20))).decode()
    path.write_text(reading.dumps(doc), encoding="utf-8")
    with pytest.raises(BaselineError, match=r"'sessions\[0\].rounds' holds \d+\+ bytes of rounds"):
        baselines.load_baseline(path)
