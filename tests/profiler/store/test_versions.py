"""The baseline file's schema as one table per version: every older file still loads as it did,
and a new stored field is one entry that files written before it read without."""

from __future__ import annotations

import copy
import itertools
import json
from pathlib import Path
from typing import Any

import pytest

from tprof_engine.model.errors import BaselineError
from tprof_engine.model.limits import is_count
from tprof_engine.store import baselines, checks, packing, reading, schema, versions
from tprof_engine.store.checks import Reading
from tprof_engine.store.versions import V1, V2, V3, VERSIONS, Field

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = sorted((ROOT / "baselines").glob("*/*.json"))[0]
FIX = "restore it from git or re-record it with --tprof-save"


def packed_doc() -> dict[str, Any]:
    """A committed example baseline as saved today (``schema_version`` 3)."""
    doc = json.loads(EXAMPLE.read_text(encoding="utf-8"))
    assert doc["schema_version"] == 3
    return doc


def open_doc(version: int) -> dict[str, Any]:
    """The example in the open form a file of ``version`` (1 or 2) holds: 1 had no census."""
    doc = packing.unpacked(packed_doc(), lambda msg, fix="": BaselineError(msg))
    doc["schema_version"] = version
    if version == 1:
        for s in doc["sessions"]:
            del s["work"]
    return doc


def written(tmp_path: Path, doc: dict[str, Any], name: str = "b.json") -> Path:
    path = tmp_path / name
    path.write_text(reading.dumps(doc), encoding="utf-8")
    return path


def test_each_version_holds_every_field_of_the_one_before_in_the_same_order() -> None:
    assert [v.number for v in VERSIONS] == [1, 2, 3] == list(range(1, schema.SCHEMA_VERSION + 1))
    for old, new in itertools.pairwise(VERSIONS):
        assert new.file[: len(old.file)] == old.file
        assert new.session[: len(old.session)] == old.session
    assert [f.key for f in V2.session if f not in V1.session] == ["work"]
    assert (V1.packed, V2.packed, V3.packed) == (False, False, True)
    assert V3.keys() == V2.keys()


@pytest.mark.parametrize("version", [1, 2, 3])
def test_a_file_of_each_version_loads_and_writes_back_the_same_sessions(
    version: int, tmp_path: Path
) -> None:
    doc = packed_doc() if version == 3 else open_doc(version)
    base = baselines.load_baseline(written(tmp_path, doc))
    assert base.nodeid == doc["nodeid"] and len(base.sessions) == len(doc["sessions"])
    assert all((s.work is None) == (version == 1) for s in base.sessions)
    again = baselines.load_baseline(baselines.save_baseline(tmp_path / "saved.json", base))
    assert again.to_dict() == base.to_dict()


def test_a_version_1_file_that_holds_a_census_keeps_it() -> None:
    # a key a later version added is read from an older file that holds it: nothing is dropped
    doc = open_doc(2)
    doc["schema_version"] = 1
    base = schema.baseline_from_dict(doc, path=Path("b.json"))
    assert all(s.work is not None for s in base.sessions)


# --------------------------------------------------------------------------- a new field


def clock_mhz(value: Any, at: str, r: Reading) -> int:
    """The check of the field this test adds: a whole number of MHz."""
    if not is_count(value):
        raise r.fail(f"'{at}' must be a clock in whole MHz (got {checks.short(value)})")
    return value


# Adding a stored field: one entry, in the table of a new version.  Files before it have no
# clock: they read as None (``older``); a file of version 4 must hold it.
V4 = versions.added(V3, 4, session=(Field(key="clock_mhz", check=clock_mhz, older=None),))
KNOWN = (*VERSIONS, V4)


def session_fields(doc: dict[str, Any], i: int = 0) -> dict[str, Any]:
    """What the newest table reads of ``doc``'s session ``i`` (``doc`` in the open form)."""
    version = next(v for v in KNOWN if v.number == doc["schema_version"])
    r = Reading(fail=lambda msg, fix=FIX: BaselineError(f"b.json: {msg}; {fix}"))
    return versions.read(doc["sessions"][i], V4.session, version, f"sessions[{i}]", r)


def v4_doc(*, packed: bool = True) -> dict[str, Any]:
    """The example as a save of version 4 writes it (packed), its sessions at 1980 MHz."""
    doc = open_doc(2)
    for s in doc["sessions"]:
        s["clock_mhz"] = 1980
    if not packed:
        doc["schema_version"] = 4
        return doc
    return packing.packed(doc, version=4)


def test_a_file_written_before_a_new_field_loads_with_the_fields_older_value(
    tmp_path: Path,
) -> None:
    for version in (1, 2):
        assert session_fields(open_doc(version))["clock_mhz"] is None
    for version in (1, 2, 3):
        doc = packed_doc() if version == 3 else open_doc(version)
        today = baselines.load_baseline(written(tmp_path, doc))
        assert (
            today.to_dict()
            == schema.baseline_from_dict(doc, path=today.path, known=KNOWN).to_dict()
        )


def test_a_file_of_the_new_version_reads_the_field_and_must_hold_it(tmp_path: Path) -> None:
    assert session_fields(v4_doc(packed=False))["clock_mhz"] == 1980
    doc = v4_doc()
    assert schema.baseline_from_dict(doc, path=Path("b.json"), known=KNOWN).nodeid == doc["nodeid"]
    del doc["sessions"][-1]["clock_mhz"]
    last = len(doc["sessions"]) - 1
    with pytest.raises(BaselineError) as info:
        schema.baseline_from_dict(doc, path=Path("b.json"), known=KNOWN)
    assert str(info.value) == (
        f"b.json: 'sessions[{last}].clock_mhz' must be a clock in whole MHz (got None); {FIX}"
    )


def test_a_bad_value_of_the_new_field_is_an_error_naming_the_file_and_the_key() -> None:
    doc = v4_doc()
    doc["sessions"][-1]["clock_mhz"] = "fast"
    last = len(doc["sessions"]) - 1
    with pytest.raises(BaselineError) as info:
        schema.baseline_from_dict(doc, path=Path("b.json"), known=KNOWN)
    assert str(info.value) == (
        f"b.json: 'sessions[{last}].clock_mhz' must be a clock in whole MHz (got 'fast'); {FIX}"
    )


def test_a_file_of_the_new_version_is_refused_by_the_version_before_it() -> None:
    with pytest.raises(BaselineError) as info:
        schema.baseline_from_dict(v4_doc(), path=Path("b.json"))
    assert str(info.value) == (
        "b.json: written by a newer pytest-tprof (schema_version 4 > 3); "
        "upgrade pytest-tprof to read it"
    )


def test_nothing_a_file_holds_is_changed_by_reading_it(tmp_path: Path) -> None:
    for doc in (packed_doc(), open_doc(1), open_doc(2)):
        path = written(tmp_path, doc)
        before = path.read_bytes()
        kept = copy.deepcopy(doc)
        baselines.load_baseline(path)
        schema.baseline_from_dict(doc, path=path, known=KNOWN)
        assert path.read_bytes() == before and doc == kept
