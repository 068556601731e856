"""Baseline files: strict reading of every kind of damage, portable names, stable writing."""

from __future__ import annotations

import copy
import hashlib
import json
import os
import random
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tprof_engine import window
from tprof_engine.model.environment import Fingerprint
from tprof_engine.model.errors import BaselineError
from tprof_engine.model.records import OpTable
from tprof_engine.store import baselines, paths, reading, schema

FIX = "restore it from git or re-record it with --tprof-save"
NODEID = "tests/test_m.py::test_a"
ROUNDS = 4


def make_table(rounds: int = ROUNDS, *, calls: int = 2, seed: int = 0) -> OpTable:
    names = ("aten::add", "aten::mm")
    rng = np.random.default_rng(seed)
    self_cpu = 10.0 + rng.random((len(names), rounds))
    zeros = np.zeros((len(names), rounds))
    return OpTable(
        names=names,
        calls=np.full((len(names), rounds), calls, dtype=np.int64),
        self_cpu_us=self_cpu,
        total_cpu_us=self_cpu * 2,
        self_device_us=zeros,
        total_device_us=zeros,
        wall_us=100.0 + rng.random(rounds),
        probe_cpu_us=50.0 + rng.random(rounds),
        probe_device_us=np.zeros(rounds),
    )


def make_fingerprint(**hard: Any) -> Fingerprint:
    keys = {"torch": "2.13.0", "device": "cpu", "cpu_model": "Test CPU", "threads": 2}
    return Fingerprint(hard={**keys, **hard}, soft={"hostname": "ci-1"})


def make_protocol(rounds: int = ROUNDS) -> dict[str, Any]:
    return {"rounds": rounds, "warmup": 1, "iterations": 1, "activities": ["cpu"], "probe": "p1"}


def make_session(table: OpTable | None = None) -> schema.Session:
    return schema.Session(
        table=table if table is not None else make_table(),
        recorded_at="2026-01-02T03:04:05+00:00",
        warmup_used=1,
    )


def make_baseline(nodeid: str = NODEID) -> schema.Baseline:
    return schema.Baseline(
        nodeid=nodeid,
        fingerprint=make_fingerprint(),
        protocol=make_protocol(),
        sessions=(make_session(),),
    )


def valid_dict() -> dict[str, Any]:
    return make_baseline().to_dict()


def write(path: Path, content: str | bytes) -> Path:
    if isinstance(content, str):
        content = content.encode("utf-8")
    path.write_bytes(content)
    return path


def load_error(path: Path, expected_nodeid: str | None = NODEID) -> str:
    with pytest.raises(BaselineError) as info:
        baselines.load_baseline(path, expected_nodeid=expected_nodeid)
    return str(info.value)


# --------------------------------------------------------------------------- damaged files


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    """A mutation setting ``a.b[0].c`` (dots and list indices) to ``value``."""

    def mutate(d: dict[str, Any]) -> None:
        *parents, last = _steps(path)
        node: Any = d
        for step in parents:
            node = node[step]
        node[last] = value

    return mutate


def _delete(path: str) -> Callable[[dict[str, Any]], None]:
    def mutate(d: dict[str, Any]) -> None:
        *parents, last = _steps(path)
        node: Any = d
        for step in parents:
            node = node[step]
        del node[last]

    return mutate


def _steps(path: str) -> list[str | int]:
    return [int(s) if s.isdigit() else s for s in re.split(r"\.|\[|\]\.?", path) if s]


def _append(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def mutate(d: dict[str, Any]) -> None:
        node: Any = d
        for step in _steps(path):
            node = node[step]
        node.append(value)

    return mutate


def _replace_all(d: dict[str, Any], new: dict[str, Any]) -> None:
    d.clear()
    d.update(new)


MM = "sessions[0].ops.aten::mm"
DICT_CASES: list[tuple[str, Callable[[dict[str, Any]], None], str]] = [
    (
        "schema version missing",
        _delete("schema_version"),
        f"'schema_version' is missing; {FIX}",
    ),
    (
        "schema version a string",
        _set("schema_version", "1"),
        f"'schema_version' must be an integer (got '1'); {FIX}",
    ),
    (
        "schema version newer",
        _set("schema_version", 4),
        "written by a newer pytest-tprof (schema_version 4 > 3); upgrade pytest-tprof to read it",
    ),
    (
        "schema version older",
        _set("schema_version", 0),
        "written in an older format (schema_version 0 < 1) that this pytest-tprof can't read; "
        "re-record it with --tprof-save",
    ),
    (
        "another test's node id",
        _set("nodeid", "tests/test_m.py::test_b"),
        "holds the baseline of 'tests/test_m.py::test_b', not of 'tests/test_m.py::test_a'; "
        "re-record it with --tprof-save",
    ),
    (
        "node id not a string",
        _set("nodeid", 7),
        f"'nodeid' must be a non-empty string (got 7); {FIX}",
    ),
    (
        "negative time",
        _set("sessions[0].wall_us[1]", -3.5),
        f"'sessions[0].wall_us' holds -3.5; times must be >= 0; {FIX}",
    ),
    (
        "negative op time",
        _set(f"{MM}.self_cpu_us[0]", -1),
        f"'sessions[0].ops['aten::mm'].self_cpu_us' holds -1; times must be >= 0; {FIX}",
    ),
    (
        "time as a string",
        _set("sessions[0].probe_cpu_us[2]", "12.5"),
        f"'sessions[0].probe_cpu_us' holds '12.5'; times must be numbers; {FIX}",
    ),
    (
        "time as a boolean",
        _set(f"{MM}.total_cpu_us[3]", True),
        f"'sessions[0].ops['aten::mm'].total_cpu_us' holds True; times must be numbers; {FIX}",
    ),
    (
        "absurdly large time",
        _set("sessions[0].wall_us[0]", 10**30),
        f"'sessions[0].wall_us' holds 1000000000000000000000000000000; "
        f"times must be below 1e12 µs; {FIX}",
    ),
    (
        "fractional calls",
        _set(f"{MM}.calls[1]", 1.5),
        f"'sessions[0].ops['aten::mm'].calls' holds 1.5; calls must be integers >= 0; {FIX}",
    ),
    (
        "negative calls",
        _set(f"{MM}.calls[0]", -2),
        f"'sessions[0].ops['aten::mm'].calls' holds -2; calls must be integers >= 0; {FIX}",
    ),
    (
        "calls as booleans",
        _set(f"{MM}.calls[0]", False),
        f"'sessions[0].ops['aten::mm'].calls' holds False; calls must be integers >= 0; {FIX}",
    ),
    (
        "calls beyond int64",
        _set(f"{MM}.calls[2]", 2**70),
        f"'sessions[0].ops['aten::mm'].calls' holds 1180591620717411303424; "
        f"calls must be <= 10**12; {FIX}",
    ),
    (
        "calls shorter than the rounds",
        _set(f"{MM}.calls", [2, 2, 2]),
        f"'sessions[0].ops['aten::mm'].calls' must be a list of 4 counts (got 3 values); {FIX}",
    ),
    (
        "calls not a list",
        _set(f"{MM}.calls", {"0": 2}),
        f"'sessions[0].ops['aten::mm'].calls' must be a list of 4 counts "
        f"(got a JSON object); {FIX}",
    ),
    (
        "op times longer than the rounds",
        _append(f"{MM}.self_cpu_us", 1.0),
        f"'sessions[0].ops['aten::mm'].self_cpu_us' has 5 values but the session has 4 rounds; "
        f"{FIX}",
    ),
    (
        "probe shorter than the rounds",
        _set("sessions[0].probe_cpu_us", [1.0, 2.0]),
        f"'sessions[0].probe_cpu_us' has 2 values but the session has 4 rounds; {FIX}",
    ),
    (
        "device times of the wrong length on a CPU session",
        _set(f"{MM}.self_device_us", [0.0]),
        f"'sessions[0].ops['aten::mm'].self_device_us' has 1 values but the session has "
        f"4 rounds; {FIX}",
    ),
    (
        "device session without device times",
        _set("sessions[0].has_device", True),
        f"'sessions[0].ops['aten::add'].self_device_us' is missing; {FIX}",
    ),
    (
        "op time missing",
        _delete(f"{MM}.total_cpu_us"),
        f"'sessions[0].ops['aten::mm'].total_cpu_us' is missing; {FIX}",
    ),
    (
        "session rounds disagree with the protocol",
        _set("protocol.rounds", 5),
        f"'sessions[0]' has 4 rounds but 'protocol.rounds' is 5; {FIX}",
    ),
    (
        "one round only",
        _set("sessions[0].wall_us", [1.0]),
        f"'sessions[0].wall_us' must hold one time per round, >= 2 rounds (got 1); {FIX}",
    ),
    (
        "no sessions",
        _set("sessions", []),
        f"'sessions' must be a non-empty list; {FIX}",
    ),
    (
        "rounds missing",
        _delete("protocol.rounds"),
        f"'protocol.rounds' must be an integer >= 2 (got None); {FIX}",
    ),
    (
        "iterations zero",
        _set("protocol.iterations", 0),
        f"'protocol.iterations' must be an integer from 1 to 1000 (got 0); {FIX}",
    ),
    (
        "environment without hard keys",
        _set("environment", {"soft": {}}),
        f"'environment.hard' must be an object; {FIX}",
    ),
    (
        "soft keys not an object",
        _set("environment.soft", "ab"),
        f"'environment.soft' must be an object (got a JSON string); {FIX}",
    ),
    (
        "op entry not an object",
        _set(MM, [1, 2, 3, 4]),
        f"'sessions[0].ops['aten::mm']' must be an object (got a JSON array); {FIX}",
    ),
    (
        "op name with a lone surrogate",
        _set("sessions[0].ops.\ud800", {}),
        f"'sessions[0].ops['\\ud800']' is not a valid op name; {FIX}",
    ),
    (
        "a pytest-benchmark file",
        lambda d: _replace_all(d, {"machine_info": {}, "benchmarks": [], "version": "5.1"}),
        "not a pytest-tprof baseline (it looks like a pytest-benchmark file): 'schema' is None; "
        "move it out of the baseline folder",
    ),
    (
        "another tool's schema",
        _set("schema", "other/thing"),
        "not a pytest-tprof baseline: 'schema' is 'other/thing'; "
        "move it out of the baseline folder",
    ),
]


@pytest.mark.parametrize(
    ("mutate", "message"),
    [pytest.param(m, msg, id=name) for name, m, msg in DICT_CASES],
)
def test_a_damaged_baseline_is_an_error_naming_the_file_the_rule_and_the_fix(
    tmp_path: Path, mutate: Callable[[dict[str, Any]], None], message: str
) -> None:
    data = valid_dict()
    mutate(data)
    path = write(tmp_path / "b.json", json.dumps(data, indent=2))
    assert load_error(path) == f"{path}: {message}"


def test_the_valid_file_the_damage_cases_start_from_loads(tmp_path: Path) -> None:
    path = write(tmp_path / "b.json", json.dumps(valid_dict(), indent=2))
    loaded = baselines.load_baseline(path, expected_nodeid=NODEID)
    assert loaded.nodeid == NODEID
    assert loaded.path == path


def test_an_empty_file_is_an_error(tmp_path: Path) -> None:
    for content in ("", "  \n\n"):
        path = write(tmp_path / "b.json", content)
        assert load_error(path) == f"{path}: empty file; {FIX}"


def test_a_truncated_file_is_an_error_naming_line_and_column(tmp_path: Path) -> None:
    path = write(tmp_path / "b.json", '{\n  "schema": "pytest-tprof/baseline",\n  "sessions": [')
    assert load_error(path) == f"{path}: truncated JSON at line 3 col 16; {FIX}"


def test_a_file_cut_inside_a_string_is_called_truncated(tmp_path: Path) -> None:
    path = write(tmp_path / "b.json", '{\n  "schema": "pytest-tp')
    assert load_error(path) == f"{path}: truncated JSON at line 2 col 13; {FIX}"


def test_a_real_baseline_cut_in_half_is_truncated(tmp_path: Path) -> None:
    text = reading.dumps(valid_dict())
    cut = text[: text.index("[", text.index('"wall_us"')) + 1]
    path = write(tmp_path / "b.json", cut)
    line = cut.count("\n") + 1
    col = len(cut.splitlines()[-1]) + 1
    assert load_error(path) == f"{path}: truncated JSON at line {line} col {col}; {FIX}"


def test_broken_json_in_the_middle_names_the_problem_and_position(tmp_path: Path) -> None:
    path = write(tmp_path / "b.json", '{\n  "a": 1,,\n  "b": 2\n}\n')
    assert load_error(path) == (
        f"{path}: invalid JSON (Expecting property name enclosed in double quotes) "
        f"at line 2 col 10; {FIX}"
    )


def test_git_conflict_markers_are_an_error_naming_the_line(tmp_path: Path) -> None:
    lines = reading.dumps(valid_dict()).splitlines(keepends=True)
    ours, theirs = lines[6], lines[6].replace("2", "3")
    merged = [
        *lines[:6],
        "<<<<<<< HEAD\n",
        ours,
        "=======\n",
        theirs,
        ">>>>>>> feature\n",
        *lines[7:],
    ]
    path = write(tmp_path / "b.json", "".join(merged))
    assert load_error(path) == (
        f"{path}: git conflict marker at line 7; resolve the merge by keeping one side "
        "(or re-record with --tprof-save)"
    )


def test_a_diff3_base_marker_alone_is_found_too(tmp_path: Path) -> None:
    lines = reading.dumps(valid_dict()).splitlines(keepends=True)
    path = write(tmp_path / "b.json", "".join([*lines[:3], "||||||| merged common ancestors\n"]))
    assert load_error(path).startswith(f"{path}: git conflict marker at line 4;")


@pytest.mark.parametrize("token", ["NaN", "Infinity", "-Infinity"])
def test_nan_and_infinity_are_errors_naming_their_position(tmp_path: Path, token: str) -> None:
    text = reading.dumps(valid_dict())
    start = text.index("[", text.index('"wall_us"')) + 1
    end = text.index(",", start)
    damaged = text[:start] + token + text[end:]
    path = write(tmp_path / "b.json", damaged)
    line = damaged.count("\n", 0, start) + 1
    col = start - damaged.rfind("\n", 0, start)
    assert load_error(path) == (
        f"{path}: holds {token} at line {line} col {col}; times must be finite numbers; {FIX}"
    )


def test_an_overflowing_number_is_an_infinite_time(tmp_path: Path) -> None:
    text = reading.dumps(valid_dict())
    start = text.index("[", text.index('"wall_us"')) + 1
    path = write(tmp_path / "b.json", text[:start] + "1e999" + text[text.index(",", start) :])
    message = f"'sessions[0].wall_us' holds inf; times must be finite; {FIX}"
    assert load_error(path) == f"{path}: {message}"


def test_a_number_past_pythons_digit_limit_is_invalid_json(tmp_path: Path) -> None:
    path = write(tmp_path / "b.json", '{"schema": ' + "9" * 5000 + "}")
    assert load_error(path) == (
        f"{path}: invalid JSON (Exceeds the limit (4300 digits) for integer string conversion); "
        f"{FIX}"
    )


def test_bytes_that_are_not_utf8_are_an_error(tmp_path: Path) -> None:
    path = write(tmp_path / "b.json", b'{"schema": "\xff\xfe"}')
    assert load_error(path) == f"{path}: not UTF-8 text (byte 12); {FIX}"


def test_valid_json_that_is_not_an_object_is_not_a_baseline(tmp_path: Path) -> None:
    path = write(tmp_path / "b.json", "[1, 2, 3]\n")
    assert load_error(path) == (
        f"{path}: not a pytest-tprof baseline (top level is a JSON array); "
        "move it out of the baseline folder"
    )


def test_a_real_pytest_benchmark_file_is_recognised(tmp_path: Path) -> None:
    bench = {
        "machine_info": {"node": "ci-1", "processor": "x86_64", "cpu": {"brand_raw": "Test"}},
        "commit_info": {"id": "abc", "dirty": False},
        "benchmarks": [{"name": "test_a", "stats": {"min": 0.1, "mean": 0.2, "rounds": 5}}],
        "datetime": "2026-01-02T03:04:05",
        "version": "5.1.0",
    }
    path = write(tmp_path / "b.json", json.dumps(bench, indent=4))
    assert load_error(path) == (
        f"{path}: not a pytest-tprof baseline (it looks like a pytest-benchmark file): "
        "'schema' is None; move it out of the baseline folder"
    )


def test_a_missing_file_and_a_folder_in_its_place_are_errors(tmp_path: Path) -> None:
    missing = tmp_path / "none.json"
    assert load_error(missing) == f"{missing}: no such baseline file; record one with --tprof-save"
    folder = tmp_path / "dir.json"
    folder.mkdir()
    assert load_error(folder) == (
        f"{folder}: is a folder, not a baseline file; move it away or re-record with --tprof-save"
    )


def test_deep_nesting_is_an_error_not_a_recursion_crash(tmp_path: Path) -> None:
    path = write(tmp_path / "b.json", "[" * 200_000 + "]" * 200_000)
    assert load_error(path) == f"{path}: JSON nested too deeply; {FIX}"


def test_a_huge_value_is_cut_short_in_the_message(tmp_path: Path) -> None:
    data = valid_dict()
    data["schema_version"] = "x" * 10_000
    path = write(tmp_path / "b.json", json.dumps(data))
    message = load_error(path)
    assert message == f"{path}: 'schema_version' must be an integer (got '{'x' * 38}…); {FIX}"


def test_loading_never_touches_a_damaged_file(tmp_path: Path) -> None:
    path = write(tmp_path / "b.json", "<<<<<<< HEAD\n{}\n")
    os.utime(path, ns=(1_000_000_000, 1_000_000_000))
    load_error(path)
    assert path.read_bytes() == b"<<<<<<< HEAD\n{}\n"
    assert path.stat().st_mtime_ns == 1_000_000_000


# --------------------------------------------------------------------------- file names

NASTY_IDS = [
    "tests/test_a.py::test_x",
    "tests/test_a.py::test_X",
    "tests/test_A.py::test_x",
    "tests/sub/test_a.py::test_x",
    "tests\\win\\test_a.py::test_x",
    "tests/test_a.py::TestC::test_x",
    "tests/test_a.py::test_x[a/b]",
    "tests/test_a.py::test_x[a\\b]",
    "tests/test_a.py::test_x[a:b]",
    "tests/test_a.py::test_x[[nested]]",
    "tests/test_a.py::test_x[*]",
    "tests/test_a.py::test_x[?]",
    'tests/test_a.py::test_x["quoted"]',
    "tests/test_a.py::test_x[<lt>]",
    "tests/test_a.py::test_x[a|b]",
    'tests/test_a.py::test_x[/\\:[]*?"<>|]',
    "tests/test_a.py::test_x[ ]",
    "tests/test_a.py::test_x[.]",
    "tests/test_a.py::test_x[..]",
    "tests/test_a.py::test_x[-]",
    "tests/test_a.py::test_x[\t\n]",
    "tests/test_a.py::test_x[\x00]",
    "tests/test_a.py::test_x[ünïcødé]",
    "tests/test_a.py::test_x[unicode]",
    "tests/test_a.py::test_x[日本語]",
    "tests/test_a.py::test_x[中文]",
    "tests/test_a.py::test_x[😀]",
    "tests/test_a.py::test_x[\udcff]",  # an undecodable byte in a path, as surrogateescape
    "tests/test_a.py::test_x[" + "p" * 300 + "]",
    "tests/test_a.py::test_x[" + "p" * 299 + "q]",
    "tests/test_a.py::test_x[" + "P" * 300 + "]",
    "tests/" + "d" * 300 + "/test_a.py::test_x",
    "CON",
    "con",
    "CON.py::test_x",
    "nul.txt",
    "NUL.txt::test",
    "tests/aux.py::test_x",
    "prn",
    "com1.py::t",
    "LPT9",
    "COM¹.py::t",
    ".hidden.py::test_x",
    "",
    "::",
    "日本語.py::テスト",
]
ALLOWED = re.compile(r"[A-Za-z0-9._=+-]+")
WINDOWS_RESERVED = {"con", "prn", "aux", "nul"} | {
    f"{p}{i}" for p in ("com", "lpt") for i in range(10)
}


def test_nasty_node_ids_map_to_distinct_portable_file_names(tmp_path: Path) -> None:
    names = [paths.baseline_path(tmp_path, "env", n).name for n in NASTY_IDS]
    assert len(set(names)) == len(NASTY_IDS)
    # Distinct on case-insensitive file systems (macOS, Windows) too.
    assert len({n.lower() for n in names}) == len(NASTY_IDS)
    for node, name in zip(NASTY_IDS, names, strict=True):
        assert name.endswith(".json"), node
        assert len(name) < 120, node
        assert ALLOWED.fullmatch(name), (node, name)
        assert not name.startswith((".", "-")), (node, name)
        assert name.split(".")[0].lower() not in WINDOWS_RESERVED, (node, name)
        assert name.split("-")[0].split(".")[0].lower() not in WINDOWS_RESERVED, (node, name)
    folder = tmp_path / "env"
    folder.mkdir()
    for name in names:
        (folder / name).write_text("{}", encoding="utf-8")
    assert len(list(folder.iterdir())) == len(NASTY_IDS)


def test_many_random_node_ids_never_collide() -> None:
    rng = random.Random(7)
    alphabet = 'aA_/\\:[]*?"<>|.- 0é日😀'
    ids = {
        "tests/t.py::test[" + "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40))) + "]"
        for _ in range(3000)
    }
    slugs = {paths.slug(n).lower() for n in ids}
    assert len(slugs) == len(ids)


def test_a_slug_is_readable_and_ends_in_a_hash_of_the_exact_id() -> None:
    node = "tests/test_x.py::TestA::test_b[1-2]"
    digest = hashlib.sha1(node.encode()).hexdigest()[:10]
    assert paths.slug(node) == f"test_x.TestA.test_b_1-2-{digest}"
    assert paths.slug("nul.txt").startswith("_nul-")
    assert paths.slug("CON").startswith("_CON-")


# --------------------------------------------------------------------------- writing


def test_a_saved_baseline_loads_back_equal(tmp_path: Path) -> None:
    path = paths.baseline_path(tmp_path, "env", NODEID)
    baselines.save_baseline(path, make_baseline())
    loaded = baselines.load_baseline(path, expected_nodeid=NODEID)
    np.testing.assert_allclose(loaded.tables[0].self_cpu_us, make_table().self_cpu_us, atol=1e-3)
    assert loaded.tables[0].names == ("aten::add", "aten::mm")
    assert loaded.fingerprint.hard == make_fingerprint().hard
    assert dict(loaded.protocol) == make_protocol()


def test_a_baselines_op_holders_load_back_and_bad_ones_name_the_field(tmp_path: Path) -> None:
    from dataclasses import replace

    path = paths.baseline_path(tmp_path, "env", NODEID)
    held = {"aten::mkldnn_convolution": "aten::_convolution"}
    baselines.save_baseline(path, replace(make_baseline(), holders=held))
    assert dict(baselines.load_baseline(path).holders) == held
    baselines.save_baseline(path, make_baseline())  # an older file has none
    assert "holders" not in json.loads(path.read_text())
    assert dict(baselines.load_baseline(path).holders) == {}
    doc = json.loads(path.read_text())
    doc["holders"] = {"aten::mm": 3}
    path.write_text(json.dumps(doc))
    with pytest.raises(BaselineError, match="'holders' must be an object of op name"):
        baselines.load_baseline(path)


def test_saving_the_same_baseline_twice_writes_the_same_bytes(tmp_path: Path) -> None:
    path = tmp_path / "b.json"
    baselines.save_baseline(path, make_baseline())
    first = path.read_bytes()
    baselines.save_baseline(path, baselines.load_baseline(path))
    assert path.read_bytes() == first
    assert first.decode().endswith("}\n")


def test_a_new_baseline_gets_the_mode_of_a_new_file_not_0600(tmp_path: Path) -> None:
    mask = os.umask(0o022)
    try:
        path = baselines.save_baseline(tmp_path / "b.json", make_baseline())
    finally:
        os.umask(mask)
    assert path.stat().st_mode & 0o777 == 0o644


def test_a_resaved_baseline_keeps_its_mode(tmp_path: Path) -> None:
    path = baselines.save_baseline(tmp_path / "b.json", make_baseline())
    path.chmod(0o664)
    baselines.save_baseline(path, make_baseline())
    assert path.stat().st_mode & 0o777 == 0o664


def test_a_baseline_that_cant_be_json_is_a_save_error_and_writes_nothing(tmp_path: Path) -> None:
    table = make_table()
    table.wall_us[0] = float("nan")
    bad = schema.Baseline(
        nodeid=NODEID,
        fingerprint=make_fingerprint(),
        protocol=make_protocol(),
        sessions=(make_session(table),),
    )
    path = tmp_path / "b.json"
    with pytest.raises(BaselineError) as info:
        baselines.save_baseline(path, bad)
    assert str(info.value) == (
        f"{path}: not saved, the baseline holds a value JSON can't store (NaN, infinity, "
        "invalid Unicode or a non-JSON type); please report this as a pytest-tprof bug"
    )
    assert list(tmp_path.iterdir()) == []


def test_a_new_session_is_appended_while_environment_protocol_and_calls_match() -> None:
    base, what = window.with_session(
        None,
        nodeid=NODEID,
        fingerprint=make_fingerprint(),
        protocol=make_protocol(),
        session=make_session(),
    )
    assert what == "recorded"
    for i in range(6):
        base, what = window.with_session(
            base,
            nodeid=NODEID,
            fingerprint=make_fingerprint(),
            protocol=make_protocol(),
            session=make_session(make_table(seed=i + 1)),
            window=3,
        )
    assert what == "appended (3 sessions)"
    assert len(base.sessions) == 3


@pytest.mark.parametrize(
    ("fingerprint", "protocol", "table", "reason"),
    [
        (
            make_fingerprint(torch="2.12.1"),
            make_protocol(),
            make_table(),
            "environment changed: torch 2.13.0 → 2.12.1",
        ),
        (
            make_fingerprint(),
            {**make_protocol(), "iterations": 4},
            make_table(),
            "protocol changed: iterations 1 → 4",
        ),
        (make_fingerprint(), make_protocol(), make_table(calls=3), "ops or calls changed"),
    ],
)
def test_the_window_restarts_when_a_session_measured_something_else(
    fingerprint: Fingerprint, protocol: dict[str, Any], table: OpTable, reason: str
) -> None:
    updated, what = window.with_session(
        make_baseline(),
        nodeid=NODEID,
        fingerprint=fingerprint,
        protocol=protocol,
        session=make_session(table),
    )
    assert what == f"restarted ({reason})"
    assert len(updated.sessions) == 1


def test_a_census_counted_by_older_rules_keeps_the_window_and_is_replaced() -> None:
    from dataclasses import replace

    from tprof_engine.model.work import WorkRow, WorkTable

    row = WorkRow(op="aten::mm", module="", phase="forward", calls=1, flops=8, bytes_read=4,
                  bytes_written=4)  # fmt: skip
    old, now = WorkTable(rows=(row,), census=1), WorkTable(rows=(replace(row, flops=16),))
    base = make_baseline()
    base = replace(base, sessions=(*base.sessions[:-1], replace(base.sessions[-1], work=old)))
    updated, what = window.with_session(
        base,
        nodeid=NODEID,
        fingerprint=make_fingerprint(),
        protocol=make_protocol(),
        session=replace(make_session(), work=now),
    )
    assert what == (
        f"appended ({len(base.sessions) + 1} sessions); "
        "the work census is now counted by this tprof's rules"
    )
    assert updated.work == now


def test_other_environments_finds_the_same_test_in_other_folders_only(tmp_path: Path) -> None:
    mine = paths.baseline_path(tmp_path, "env-a", NODEID)
    other = paths.baseline_path(tmp_path, "env-b", NODEID)
    unrelated = paths.baseline_path(tmp_path, "env-c", "tests/test_m.py::test_z")
    for p in (mine, other, unrelated):
        baselines.save_baseline(p, make_baseline())
    assert paths.other_environments(tmp_path, "env-a", NODEID) == [other]
    assert paths.other_environments(tmp_path / "missing", "env-a", NODEID) == []


# --------------------------------------------------------------------------- fuzz

TIME_ARRAYS = ("wall_us", "probe_cpu_us")
OP_TIMES = ("self_cpu_us", "total_cpu_us")
BAD_TIMES: list[Any] = [-1, -0.5, "1", None, True, [], {}, 1e13, 10**20]
BAD_CALLS: list[Any] = [1.5, -1, "2", None, True, [], 10**13]
REQUIRED = [
    "schema",
    "schema_version",
    "nodeid",
    "environment",
    "protocol",
    "sessions",
    "protocol.rounds",
    "environment.hard",
    "sessions[0].wall_us",
    "sessions[0].ops",
    f"{MM}.calls",
    f"{MM}.self_cpu_us",
    "sessions[0].ops.aten::add.total_cpu_us",
]
JSON_KEYS = ["schema", "schema_version", "nodeid", "sessions", "ops", "calls", "wall_us", "x"]


def _random_json(rng: random.Random, depth: int = 0) -> Any:
    kind = rng.randrange(7 if depth < 4 else 5)
    if kind == 0:
        return rng.choice([None, True, False])
    if kind == 1:
        return rng.choice([0, -1, 1, 2, 10**15, rng.randint(-(10**6), 10**6)])
    if kind == 2:
        return rng.choice([0.0, -0.0, 1e308, -1e-308, rng.uniform(-1e6, 1e6)])
    if kind == 3:
        return rng.choice(["", "pytest-tprof/baseline", "\u0000", "x" * rng.randint(0, 50)])
    if kind == 4:
        return rng.choice([[], {}, "é", "日"])
    if kind == 5:
        return [_random_json(rng, depth + 1) for _ in range(rng.randint(0, 5))]
    return {rng.choice(JSON_KEYS): _random_json(rng, depth + 1) for _ in range(rng.randint(0, 5))}


def _mutated(rng: random.Random) -> str | dict[str, Any]:
    """A valid baseline with one change that a strict reader must reject."""
    data = valid_dict()
    kind = rng.randrange(6)
    session = data["sessions"][0]
    op = session["ops"][rng.choice(["aten::add", "aten::mm"])]
    if kind == 0:
        arr = session[rng.choice(TIME_ARRAYS)] if rng.random() < 0.4 else op[rng.choice(OP_TIMES)]
        arr[rng.randrange(len(arr))] = rng.choice(BAD_TIMES)
    elif kind == 1:
        op["calls"][rng.randrange(ROUNDS)] = rng.choice(BAD_CALLS)
    elif kind == 2:
        _delete(rng.choice(REQUIRED))(data)
    elif kind == 3:
        arr = rng.choice([session["wall_us"], op["calls"], op["self_cpu_us"], op["total_cpu_us"]])
        if rng.random() < 0.5:
            arr.pop()
        else:
            arr.append(copy.copy(arr[0]))
    elif kind == 4:
        target = rng.choice(["environment", "protocol", "sessions", "sessions[0]", "nodeid"])
        _set(target, rng.choice([None, 3, "s", [] if target != "sessions" else {}]))(data)
    else:
        text = reading.dumps(data)
        how = rng.randrange(3)
        if how == 0:
            return text[: rng.randrange(len(text.rstrip()))]
        lines = text.splitlines(keepends=True)
        if how == 1:
            at = rng.randrange(len(lines))
            marker = rng.choice(["<<<<<<< HEAD", "=======", ">>>>>>> main", "||||||| base"])
            return "".join([*lines[:at], marker + "\n", *lines[at:]])
        numbers = [m.start() for m in re.finditer(r"(?<=[\[ ])\d+\.\d+", text)]
        at = rng.choice(numbers)
        end = re.match(r"\d+\.\d+", text[at:])
        assert end is not None
        return text[:at] + rng.choice(["NaN", "Infinity", "-Infinity"]) + text[at + end.end() :]
    return data


def test_fuzzed_files_are_each_a_baseline_error_naming_the_file(tmp_path: Path) -> None:
    rng = random.Random(20260)
    cases: list[bytes] = []
    alphabet = b'{}[]":,0123456789.-eE aflnrstu\n\\'
    for _ in range(40):
        cases.append(rng.randbytes(rng.randint(0, 120)))
    for _ in range(40):
        cases.append(bytes(rng.choice(alphabet) for _ in range(rng.randint(0, 120))))
    for i in range(50):
        value = _random_json(rng)
        if i % 2 and isinstance(value, dict):
            value.update(schema=reading.SCHEMA, schema_version=schema.SCHEMA_VERSION, nodeid=NODEID)
        cases.append(json.dumps(value).encode())
    for _ in range(80):
        m = _mutated(rng)
        cases.append((m if isinstance(m, str) else json.dumps(m, indent=1)).encode())
    path = tmp_path / "b.json"
    problems = []
    for i, raw in enumerate(cases):
        path.write_bytes(raw)
        try:
            baselines.load_baseline(path, expected_nodeid=NODEID)
        except BaselineError as exc:
            if not str(exc).startswith(f"{path}: "):
                problems.append((i, raw[:80], str(exc)))
        except Exception as exc:
            problems.append((i, raw[:80], repr(exc)))
        else:
            problems.append((i, raw[:80], "loaded"))
    assert len(cases) == 210
    assert problems == []


def test_random_byte_flips_load_or_fail_cleanly_never_crash(tmp_path: Path) -> None:
    rng = random.Random(5)
    text = bytearray(reading.dumps(valid_dict()).encode())
    path = tmp_path / "b.json"
    outcomes = {"loaded": 0, "error": 0}
    for _ in range(60):
        damaged = bytearray(text)
        for _ in range(rng.randint(1, 3)):
            damaged[rng.randrange(len(damaged))] = rng.randrange(256)
        path.write_bytes(bytes(damaged))
        try:
            baselines.load_baseline(path, expected_nodeid=NODEID)
            outcomes["loaded"] += 1
        except BaselineError:
            outcomes["error"] += 1
    assert outcomes["error"] > 0


def test_read_nodeid_says_which_test_a_file_holds_or_none_never_raising(tmp_path: Path) -> None:
    good = baselines.save_baseline(tmp_path / "good.json", make_baseline())
    assert reading.read_nodeid(good) == NODEID
    cases: list[tuple[str, str | bytes]] = [
        ("deep.json", "[" * 200_000),
        ("list.json", "[1]"),
        ("binary.json", b"\xff\x00"),
        ("nodeid.json", '{"nodeid": 3}'),
        ("empty.json", ""),
    ]
    for name, content in cases:
        assert reading.read_nodeid(write(tmp_path / name, content)) is None, name
    assert reading.read_nodeid(tmp_path / "missing.json") is None


def test_an_empty_op_name_is_kept_since_a_profiler_can_record_one(tmp_path: Path) -> None:
    data = valid_dict()
    ops = data["sessions"][0]["ops"]
    ops[""] = ops.pop("aten::add")
    path = write(tmp_path / "b.json", json.dumps(data))
    assert baselines.load_baseline(path).tables[0].names == ("", "aten::mm")
