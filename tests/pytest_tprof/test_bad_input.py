"""Real pytest runs against bad baselines, bad environments, bad test bodies and faults.

Every run is in-process (torch is imported by tests/conftest.py first) with tiny bodies and
few rounds; each test asserts the exact lines a user reads in the terminal.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

# torch.profiler imports torch._inductor when a session starts.  An in-process pytester run
# drops the modules it imported, and importing torch._inductor a second time fails
# ("Only a single TORCH_LIBRARY can be used to register the namespace _inductor_test"), so
# import it once here, outside the runs.
import torch._inductor.config
from tprof_testing import FaultyOs, Suite, enospc, line, open_form, summary

from tprof_engine.model.environment import cpu_model
from tprof_engine.model.errors import BaselineError
from tprof_engine.store import baselines, paths, reading

FIX = "restore it from git or re-record it with --tprof-save"


@pytest.fixture
def suite(pytester: pytest.Pytester) -> Suite:
    return Suite(pytester)


def no_internal_error(result: pytest.RunResult) -> None:
    text = "\n".join(result.outlines + result.errlines)
    assert "INTERNALERROR" not in text
    assert result.ret in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED), text[-3000:]


PARAMETRIZED = """
import pytest
import torch

@pytest.mark.parametrize("case", {cases!r})
def test_case(tprof, case):
    x = torch.ones(8)
    tprof(torch.add, x, x)
"""


# --------------------------------------------------------------------------- damaged files


def _json(text: str, change: Callable[[dict[str, Any]], None]) -> bytes:
    data = open_form(text)
    change(data)
    return reading.dumps(data).encode()


def _first_op(text: str) -> str:
    return str(sorted(open_form(text)["sessions"][0]["ops"])[0])


def _wall_start(text: str) -> int:
    return text.index("[", text.index('"wall_us"')) + 1


def _position(text: str, pos: int) -> str:
    return f"line {text.count(chr(10), 0, pos) + 1} col {pos - text.rfind(chr(10), 0, pos)}"


def _conflicted(text: str) -> bytes:
    lines = text.splitlines(keepends=True)
    merged = [*lines[:3], "<<<<<<< HEAD\n", lines[3], "=======\n", ">>>>>>> b\n", *lines[4:]]
    return "".join(merged).encode()


def _nan(text: str) -> bytes:
    start = _wall_start(text)
    return (text[:start] + "NaN" + text[text.index(",", start) :]).encode()


def _set_in(path: tuple[Any, ...], value: Any) -> Callable[[str], bytes]:
    def damage(text: str) -> bytes:
        def change(d: dict[str, Any]) -> None:
            node: Any = d
            for step in path[:-1]:
                node = node[_first_op(text) if step is _first_op else step]
            node[path[-1]] = value

        return _json(text, change)

    return damage


BENCHMARK_JSON = json.dumps(
    {
        "machine_info": {"node": "ci-1", "cpu": {"brand_raw": "Test CPU"}},
        "commit_info": {"id": "abc"},
        "benchmarks": [{"name": "test_case", "stats": {"mean": 0.1, "rounds": 5}}],
        "datetime": "2026-01-02T03:04:05",
        "version": "5.1.0",
    },
    indent=4,
).encode()

# case → (damage of the saved text, expected message after "<path>: ")
DAMAGE: dict[str, tuple[Callable[[str], bytes], Callable[[str, str], str]]] = {
    "empty": (lambda t: b"", lambda t, op: f"empty file; {FIX}"),
    "truncated": (
        lambda t: t[: _wall_start(t)].encode(),
        lambda t, op: f"truncated JSON at {_position(t, _wall_start(t))}; {FIX}",
    ),
    "conflict": (
        _conflicted,
        lambda t, op: (
            "git conflict marker at line 4; resolve the merge by keeping one side "
            "(or re-record with --tprof-save)"
        ),
    ),
    "benchmark": (
        lambda t: BENCHMARK_JSON,
        lambda t, op: (
            "not a pytest-tprof baseline (it looks like a pytest-benchmark file): "
            "'schema' is None; move it out of the baseline folder"
        ),
    ),
    "nan": (
        _nan,
        lambda t, op: (
            f"holds NaN at {_position(t, _wall_start(t))}; times must be finite numbers; {FIX}"
        ),
    ),
    "negative_time": (
        _set_in(("sessions", 0, "wall_us", 0), -1.0),
        lambda t, op: f"'sessions[0].wall_us' holds -1.0; times must be >= 0; {FIX}",
    ),
    "fractional_calls": (
        _set_in(("sessions", 0, "ops", _first_op, "calls", 1), 1.5),
        lambda t, op: (
            f"'sessions[0].ops[{op!r}].calls' holds 1.5; calls must be integers >= 0; {FIX}"
        ),
    ),
    "negative_calls": (
        _set_in(("sessions", 0, "ops", _first_op, "calls", 0), -1),
        lambda t, op: (
            f"'sessions[0].ops[{op!r}].calls' holds -1; calls must be integers >= 0; {FIX}"
        ),
    ),
    "short_array": (
        _set_in(("sessions", 0, "ops", _first_op, "self_cpu_us"), [1.0, 2.0, 3.0]),
        lambda t, op: (
            f"'sessions[0].ops[{op!r}].self_cpu_us' has 3 values but the session has "
            f"4 rounds; {FIX}"
        ),
    ),
    "rounds": (
        _set_in(("protocol", "rounds"), 6),
        lambda t, op: f"'sessions[0]' has 4 rounds but 'protocol.rounds' is 6; {FIX}",
    ),
    "no_version": (
        lambda t: _json(t, lambda d: d.pop("schema_version")),
        lambda t, op: f"'schema_version' is missing; {FIX}",
    ),
    "newer": (
        _set_in(("schema_version",), 4),
        lambda t, op: (
            "written by a newer pytest-tprof (schema_version 4 > 3); "
            "upgrade pytest-tprof to read it"
        ),
    ),
    "older": (
        _set_in(("schema_version",), 0),
        lambda t, op: (
            "written in an older format (schema_version 0 < 1) that this pytest-tprof "
            "can't read; re-record it with --tprof-save"
        ),
    ),
    "other_test": (
        _set_in(("nodeid",), "test_damaged.py::test_case[healthy1]"),
        lambda t, op: (
            "holds the baseline of 'test_damaged.py::test_case[healthy1]', not of "
            "'test_damaged.py::test_case[other_test]'; re-record it with --tprof-save"
        ),
    ),
}
HEALTHY = ["healthy1", "healthy2"]


def test_each_damaged_baseline_fails_its_own_test_naming_the_file_and_the_fix(
    suite: Suite,
) -> None:
    suite.pytester.makepyfile(test_damaged=PARAMETRIZED.format(cases=[*DAMAGE, *HEALTHY]))
    saved = suite.run("--tprof-save")
    saved.assert_outcomes(passed=len(DAMAGE) + len(HEALTHY))
    expected = {}
    for case, (damage, explain) in DAMAGE.items():
        nodeid = f"test_damaged.py::test_case[{case}]"
        path = suite.path_of(nodeid)
        text = path.read_text(encoding="utf-8")
        path.write_bytes(damage(text))
        expected[nodeid] = f"{path}: {explain(text, _first_op(text))}"
    before = suite.snapshot()

    result = suite.run("--tprof")

    no_internal_error(result)
    result.assert_outcomes(passed=len(HEALTHY), failed=len(DAMAGE))
    lines = summary(result)
    shown = "\n".join(lines)
    for nodeid, message in expected.items():
        assert line("error", nodeid, message) in lines, shown
        assert f"tprof: error — {message}" in result.outlines, shown
    for case in HEALTHY:
        # A healthy file beside damaged ones is judged as usual: whatever its timing says on
        # this machine, it is no error and doesn't fail.
        [found] = [x for x in lines if f" test_damaged.py::test_case[{case}] " in x]
        assert found.split()[0] not in ("ERROR", "REGRESSED"), shown
    assert suite.snapshot() == before, "a damaged or healthy baseline was rewritten"


# --------------------------------------------------------------------------- environments

FOUR_TESTS = """
import torch

def test_a(tprof):
    tprof(torch.add, torch.ones(8), torch.ones(8))

def test_b(tprof):
    tprof(torch.add, torch.ones(8), torch.ones(8))

def test_c(tprof):
    tprof(torch.add, torch.ones(8), torch.ones(8))

def test_d(tprof):
    tprof(torch.add, torch.ones(8), torch.ones(8))
"""


def _edit(path: Path, change: Callable[[dict[str, Any]], None]) -> None:
    data = open_form(path)
    change(data)
    path.write_text(reading.dumps(data), encoding="utf-8")


def test_a_baseline_of_another_environment_or_protocol_is_named_key_by_key(
    suite: Suite,
) -> None:
    suite.pytester.makepyfile(test_env=FOUR_TESTS)
    suite.run("--tprof-save").assert_outcomes(passed=4)
    env = suite.env_dir
    here = torch.__version__
    # test_a: only a baseline recorded under another torch, in that environment's folder.
    other = "2.11.0" if here.startswith("2.12.1") else "2.12.1"
    a = suite.path_of("test_env.py::test_a")
    other_folder = suite.base / f"linux-x86_64-cpu-torch{other}-py3.11"
    other_folder.mkdir()
    moved = other_folder / a.name
    a.rename(moved)
    _edit(moved, lambda d: d["environment"]["hard"].update(torch=other))
    # test_b: a baseline of another device in this folder; test_c: another CPU; test_d: shapes on.
    _edit(
        suite.path_of("test_env.py::test_b"),
        lambda d: d["environment"]["hard"].update(device="cuda"),
    )
    _edit(
        suite.path_of("test_env.py::test_c"),
        lambda d: d["environment"]["hard"].update(cpu_model="Other CPU 9000"),
    )
    _edit(suite.path_of("test_env.py::test_d"), lambda d: d["protocol"].update(record_shapes=True))
    report = suite.pytester.path / "report.json"

    result = suite.run("--tprof", f"--tprof-json={report}")

    no_internal_error(result)
    result.assert_outcomes(passed=4)
    lines = summary(result)
    # another torch: calls and work still compared, timings not
    assert (
        line(
            "inconclusive",
            "test_env.py::test_a",
            f"calls and work unchanged; timings not compared: torch {other} → {here}",
        )
        in lines
    )
    assert (
        line(
            "incomparable",
            "test_env.py::test_b",
            "calls and timings not comparable: device cuda → cpu",
        )
        in lines
    )
    tests = {t["nodeid"]: t for t in json.loads(report.read_text(encoding="utf-8"))["tests"]}
    a_notes = " ".join(tests["test_env.py::test_a"]["notes"])
    assert (
        f"judged against the baseline recorded in linux-x86_64-cpu-torch{other}-py3.11" in a_notes
    )
    assert tests["test_env.py::test_a"]["differences"] == [f"torch {other} → {here}"]
    cpu = f"cpu_model Other CPU 9000 → {cpu_model()}"
    c = tests["test_env.py::test_c"]
    assert (c["verdict"], c["differences"]) == ("inconclusive", [cpu])
    assert f"timings not compared: {cpu}" in c["notes"]
    d = tests["test_env.py::test_d"]
    assert (d["verdict"], d["differences"]) == ("inconclusive", ["record_shapes True → False"])
    assert "timings not compared: record_shapes True → False" in d["notes"]
    assert env.is_dir()


# --------------------------------------------------------------------------- missing and stale

KEEP_AND_GONE = """
import torch

def test_keep(tprof):
    tprof(torch.add, torch.ones(8), torch.ones(8))

def test_gone(tprof):
    tprof(torch.add, torch.ones(8), torch.ones(8))
"""
KEEP_AND_NEW = KEEP_AND_GONE.replace("test_gone", "test_new")


def test_missing_baselines_are_reported_required_ones_fail_and_stale_ones_listed(
    suite: Suite,
) -> None:
    suite.pytester.makepyfile(test_life=KEEP_AND_GONE)
    suite.run("--tprof-save").assert_outcomes(passed=2)
    gone = suite.path_of("test_life.py::test_gone")
    suite.pytester.makepyfile(test_life=KEEP_AND_NEW)
    no_baseline = "no baseline recorded for this test; record one with --tprof-save"

    result = suite.run("--tprof")

    no_internal_error(result)
    result.assert_outcomes(passed=2)
    lines = summary(result)
    assert line("no-baseline", "test_life.py::test_new", no_baseline) in lines
    assert f"stale baseline (its test no longer exists): {gone}" in lines
    assert not any("test_life.py::test_keep" in x and "NO-BASELINE" in x for x in lines)

    required = suite.run("--tprof", "--tprof-require-baseline")

    no_internal_error(required)
    required.assert_outcomes(passed=1, failed=1)
    assert line(
        "error",
        "test_life.py::test_new",
        f"no baseline for this test in {suite.env_dir.resolve()} (--tprof-require-baseline): "
        "restore that folder (from git, or the CI cache or artifact that keeps it), check "
        "--tprof-baseline-dir, or record baselines with pytest --tprof-save",
    ) in summary(required)
    assert "baseline: " not in required.stdout.str()  # no file named that isn't there
    assert gone.is_file()


def test_a_compare_run_that_found_no_baseline_at_all_names_the_folder(suite: Suite) -> None:
    """A mistyped --tprof-baseline-dir or a CI cache that missed: every test reads
    no-baseline, and the run says where it looked."""
    suite.pytester.makepyfile(test_life=KEEP_AND_GONE)
    suite.run("--tprof-save").assert_outcomes(passed=2)
    wrong = suite.pytester.path / "baseline"  # one letter short

    result = suite.run("--tprof", base=wrong)

    result.assert_outcomes(passed=2)
    folder = (wrong / suite.env_dir.name).resolve()
    fix = (
        "restore that folder (from git, or the CI cache or artifact that keeps it), check "
        "--tprof-baseline-dir, or record baselines with pytest --tprof-save"
    )
    assert (
        f"warning: no profiled test found a baseline in {folder}, which does not exist; {fix}"
        in summary(result)
    )

    required = suite.run("--tprof", "--tprof-require-baseline", base=wrong)

    required.assert_outcomes(failed=2)
    assert (
        f"error: no profiled test found a baseline in {folder}, which does not exist; {fix}"
        in summary(required)
    )
    found = suite.run("--tprof")  # the right folder: nothing to say
    assert not any("found a baseline" in x for x in summary(found))


# --------------------------------------------------------------------------- the test body

OUTCOMES = """
import os
import pytest
import torch

BAD = os.environ.get("TPROF_BAD_BODY") == "1"

def body(kind):
    calls = []
    def fn():
        calls.append(1)
        if BAD and len(calls) == 3:  # inside the measured rounds
            if kind == "raise":
                raise ValueError("the body broke in round 3")
            if kind == "skip":
                pytest.skip("skipped inside the body")
            if kind == "xfail":
                pytest.xfail("known to fail inside the body")
        return torch.ones(4) + 1
    return fn

def test_raises(tprof):
    tprof(body("raise"))

def test_skips(tprof):
    tprof(body("skip"))

def test_xfails(tprof):
    tprof(body("xfail"))

def test_healthy(tprof):
    tprof(body("none"))
"""
SPOILED = ["test_out.py::test_raises", "test_out.py::test_skips", "test_out.py::test_xfails"]


def test_a_body_that_raises_skips_or_xfails_keeps_its_outcome_and_is_neither_compared_nor_saved(
    suite: Suite, monkeypatch: pytest.MonkeyPatch
) -> None:
    suite.pytester.makepyfile(test_out=OUTCOMES)
    suite.run("--tprof-save").assert_outcomes(passed=4)
    files = [suite.path_of(n) for n in SPOILED]
    before = {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in files}
    monkeypatch.setenv("TPROF_BAD_BODY", "1")

    for mode in ("--tprof-save", "--tprof"):
        result = suite.run(mode, "-rsx")

        no_internal_error(result)
        result.assert_outcomes(passed=1, failed=1, skipped=1, xfailed=1)
        lines = summary(result)
        assert [x.split()[1] for x in lines if x.startswith(("SAVED", "INCONCLUSIVE", "UNCH"))] == [
            "test_out.py::test_healthy"
        ]
        assert not any(n in x for n in SPOILED for x in lines), lines
        result.stdout.fnmatch_lines(
            [
                "E * ValueError: the body broke in round 3",
                "SKIPPED [[]1[]] test_out.py:*: skipped inside the body",
                "XFAIL test_out.py::test_xfails - known to fail inside the body",
            ]
        )
        assert not any(" — " in x for x in result.outlines if x.startswith("tprof: "))
        assert {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in files} == before


MISUSE = """
import torch
from torch.profiler import profile

def test_twice(tprof):
    x = torch.ones(4)
    tprof(torch.add, x, x)
    tprof(torch.mul, x, x)

def test_inside_a_users_profiler(tprof):
    x = torch.ones(4)
    with profile():
        tprof(torch.add, x, x)
"""


def test_calling_tprof_twice_or_inside_a_running_profiler_is_a_clear_error(suite: Suite) -> None:
    suite.pytester.makepyfile(test_misuse=MISUSE)

    result = suite.run("--tprof-save")

    no_internal_error(result)
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(
        [
            "E * tprof_engine.model.errors.CaptureError: tprof was called twice in one test; "
            "profile one callable per test",
        ]
    )
    result.stdout.fnmatch_lines(
        [
            "E * tprof_engine.model.errors.CaptureError: a torch profiler is already running; "
            "tprof opens its own profiler session, so call tprof outside any "
            "torch.profiler.profile() block",
        ]
    )
    assert list(suite.base.rglob("*.json")) == []


CTRL_C = """
import torch

def test_first(tprof):
    tprof(torch.add, torch.ones(4), torch.ones(4))

def test_interrupted(tprof):
    calls = []
    def body():
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return torch.ones(4) + 1
    tprof(body)

def test_never_runs(tprof):
    tprof(torch.add, torch.ones(4), torch.ones(4))
"""


def test_ctrl_c_inside_a_profiled_body_leaves_no_temporary_files(suite: Suite) -> None:
    suite.pytester.makepyfile(test_ctrl_c=CTRL_C)

    result = suite.run("--tprof-save", no_reraise_ctrlc=True)

    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(["*KeyboardInterrupt*"])
    leftovers = [p for d in (suite.base, suite.traces) for p in d.rglob("*") if ".tmp" in p.name]
    assert leftovers == []
    for path in paths.iter_baselines(suite.base):
        assert baselines.load_baseline(path).nodeid == "test_ctrl_c.py::test_first"
    assert not any(suite.traces.glob("test_ctrl_c.test_never_runs-*"))


# --------------------------------------------------------------------------- unwritable folders


ONE_TEST = """
import torch

def test_one(tprof):
    tprof(torch.add, torch.ones(4), torch.ones(4))
"""


def test_a_full_disk_fails_the_save_run_naming_the_path_and_keeps_the_baseline(
    suite: Suite, monkeypatch: pytest.MonkeyPatch
) -> None:
    suite.pytester.makepyfile(test_disk=ONE_TEST)
    suite.run("--tprof-save").assert_outcomes(passed=1)
    path = suite.path_of("test_disk.py::test_one")
    before = suite.snapshot()
    monkeypatch.setattr(paths, "os", FaultyOs(write=enospc))

    result = suite.run("--tprof-save")

    no_internal_error(result)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert (
        f"save failed: {path}: can't write the baseline (No space left on device); the previous "
        f"baseline is unchanged; free space on or fix the permissions of {path.parent} and "
        "re-run with --tprof-save"
    ) in summary(result)
    assert suite.snapshot() == before


def test_a_read_only_baseline_folder_fails_the_save_run_naming_it(suite: Suite) -> None:
    suite.pytester.makepyfile(test_ro=ONE_TEST)
    suite.run("--tprof-save").assert_outcomes(passed=1)
    folder = suite.env_dir
    path = suite.path_of("test_ro.py::test_one")
    before = suite.snapshot()
    folder.chmod(0o555)
    try:
        try:
            (folder / "probe").touch()
        except PermissionError:
            pass
        else:
            (folder / "probe").unlink()
            pytest.skip("this user can write into a 0555 folder (root or a permissive file system)")
        result = suite.run("--tprof-save")
    finally:
        folder.chmod(0o755)
    no_internal_error(result)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert (
        f"save failed: {path}: can't write the baseline (Permission denied); make {folder} "
        "writable and re-run with --tprof-save"
    ) in summary(result)
    assert suite.snapshot() == before


# --------------------------------------------------------------------------- fuzz


def _fuzzed(rng: random.Random, text: str, kind: int) -> bytes:
    if kind == 0:
        return rng.randbytes(rng.randint(1, 200))
    if kind == 1:
        return json.dumps([rng.random(), {"x": None}, "s" * rng.randint(0, 9)]).encode()
    if kind == 2:
        return ("[" * 100_000).encode()
    if kind == 3:
        return _json(text, lambda d: d["sessions"][0]["wall_us"].__setitem__(1, "fast"))
    if kind == 4:
        return _json(text, lambda d: d["sessions"][0].__setitem__("ops", [1, 2]))
    return text[: rng.randrange(1, len(text))].encode()


def test_fuzzed_baselines_are_each_an_error_for_their_test_and_never_an_internal_error(
    suite: Suite,
) -> None:
    rng = random.Random(99)
    cases = [f"fuzz{i}" for i in range(6)]
    suite.pytester.makepyfile(test_fuzz=PARAMETRIZED.format(cases=[*cases, "healthy"]))
    suite.run("--tprof-save").assert_outcomes(passed=7)
    for i, case in enumerate(cases):
        path = suite.path_of(f"test_fuzz.py::test_case[{case}]")
        path.write_bytes(_fuzzed(rng, path.read_text(encoding="utf-8"), i))
    before = suite.snapshot()

    result = suite.run("--tprof")

    no_internal_error(result)
    result.assert_outcomes(passed=1, failed=6)
    lines = summary(result)
    for case in cases:
        nodeid = f"test_fuzz.py::test_case[{case}]"
        path = suite.path_of(nodeid)
        with pytest.raises(BaselineError) as info:
            baselines.load_baseline(path, expected_nodeid=nodeid)
        assert str(info.value).startswith(f"{path}: ")
        assert line("error", nodeid, str(info.value)) in lines
    assert suite.snapshot() == before


def test_a_stray_deeply_nested_file_in_the_baseline_folder_is_no_internal_error(
    suite: Suite,
) -> None:
    suite.pytester.makepyfile(test_stray=ONE_TEST)
    suite.run("--tprof-save").assert_outcomes(passed=1)
    (suite.env_dir / "stray.json").write_text("[" * 100_000, encoding="utf-8")

    result = suite.run("--tprof")

    no_internal_error(result)
    result.assert_outcomes(passed=1)
