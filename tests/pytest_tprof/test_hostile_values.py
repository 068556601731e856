"""Real pytest runs with hostile values: markers, options, ``pedantic`` arguments, bodies that
run nothing, and baselines whose times can't support a comparison.

Every run is in-process (torch is imported by tests/conftest.py first) with tiny bodies and
few rounds; each test asserts the exact line a user reads.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

# See tests/pytest_tprof/test_bad_input.py: torch.profiler imports it once per process.
import torch._inductor.config  # noqa: F401
from tprof_testing import Suite, open_form, summary

from tprof_engine.store import baselines, paths, reading

RERECORD = "re-record it with --tprof-save"


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return Suite(pytester).run(*args)


def no_traceback(result: pytest.RunResult) -> str:
    """The run's whole output, once it holds no internal error and no plugin frame."""
    text = "\n".join(result.outlines + result.errlines)
    assert "INTERNALERROR" not in text
    assert "Traceback (most recent call last)" not in text, text[-3000:]
    for module in ("options.py", "fixture.py", "plugin.py", "runner.py", "checks.py"):
        assert f"{module}:" not in text, text[-3000:]
    return text


def e_lines(result: pytest.RunResult) -> set[str]:
    """The ``E`` lines of the failures, without their indent."""
    return {x[1:].strip() for x in result.outlines if x.startswith("E ")}


def baseline_path(pytester: pytest.Pytester, nodeid: str) -> Path:
    [env] = [d for d in (pytester.path / "baselines").iterdir() if d.is_dir()]
    return paths.baseline_path(pytester.path / "baselines", env.name, nodeid)


def edit(path: Path, change: Any) -> None:
    data = open_form(path)
    change(data)
    path.write_text(reading.dumps(data), encoding="utf-8")


# --------------------------------------------------------------------------- item 12: Adam

ADAM = """
import torch

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
x, y = torch.randn(16, 32), torch.randn(16, 8)


def step():
    opt.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()


def test_adam(tprof):
    tprof(step)
"""


def test_saving_an_unchanged_adam_step_three_times_keeps_three_sessions(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_adam=ADAM)
    advice = baselines.sessions_advice
    for what in (
        f"recorded; {advice(1)}",
        f"appended (2 sessions); {advice(2)}",
        "appended (3 sessions)",
    ):
        # The defaults that showed it: the first save's calibration runs the step before the
        # profiler; later saves take the baseline's iterations, so the first of their three
        # warm-up rounds makes Adam's state, and the warm-up settles in rounds 2 and 3.
        result = run(pytester, "--tprof-save", "--tprof-min-round-us=1000", "--tprof-warmup=3")
        result.assert_outcomes(passed=1)
        path = baseline_path(pytester, "test_adam.py::test_adam")
        assert f"SAVED        test_adam.py::test_adam | {what}: {path}" in summary(result)
    for session in baselines.load_baseline(path).sessions:
        assert session.table.calls.any(axis=1).all(), session.table.names


# --------------------------------------------------------------------------- item 2: times


def line(verdict: str, nodeid: str, rest: str) -> str:
    return f"{verdict.upper():<12} {nodeid} | {rest}"


THREE = """
import pytest
import torch

@pytest.mark.parametrize("case", ["tiny_probe", "zero_times", "healthy"])
def test_case(tprof, case):
    x = torch.ones(8)
    tprof(torch.add, x, x)
"""


def _tiny_probe(data: dict[str, Any]) -> None:
    for session in data["sessions"]:
        session["probe_cpu_us"] = [0.001] * len(session["probe_cpu_us"])


def _zero_times(data: dict[str, Any]) -> None:
    for session in data["sessions"]:
        session["wall_us"] = [0.0] * len(session["wall_us"])
        session["probe_cpu_us"] = [0.0] * len(session["probe_cpu_us"])
        for op in session["ops"].values():
            for metric in ("self_cpu_us", "total_cpu_us"):
                op[metric] = [0.0] * len(op[metric])


def test_a_baseline_whose_times_cant_support_a_comparison_is_an_error_for_its_test(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_times=THREE)
    run(pytester, "--tprof-save").assert_outcomes(passed=3)
    tiny = baseline_path(pytester, "test_times.py::test_case[tiny_probe]")
    zero = baseline_path(pytester, "test_times.py::test_case[zero_times]")
    edit(tiny, _tiny_probe)
    edit(zero, _zero_times)
    expected = {
        "test_times.py::test_case[tiny_probe]": (
            f"{tiny}: 'sessions[0].probe_cpu_us' has a median of 0.001 µs, but the drift probe "
            f"takes >= 1 µs, so these times can't support a comparison; {RERECORD}"
        ),
        "test_times.py::test_case[zero_times]": (
            f"{zero}: 'sessions[0]' has op calls but no self CPU time in round 0, so these "
            f"times can't support a comparison; {RERECORD}"
        ),
    }

    result = run(pytester, "--tprof")

    no_traceback(result)
    result.assert_outcomes(passed=1, failed=2)
    lines = summary(result)
    for nodeid, message in expected.items():
        assert line("error", nodeid, message) in lines
        assert f"tprof: error — {message}" in result.outlines


# --------------------------------------------------------------------------- item 11: no ops

NO_OPS = """
import torch

x = torch.ones(4)

def test_generator(tprof):
    def body():
        yield x + 1
    tprof(body)

def test_no_torch(tprof):
    tprof(lambda: 1 + 1)

def test_returns_a_callable(tprof):
    tprof(lambda: torch.relu)
"""
CAPTURE_ERROR = "tprof_engine.model.errors.CaptureError: "
NO_OPS_ERRORS = [
    CAPTURE_ERROR + "the profiled body ran no torch ops (it returned a generator, which runs "
    "nothing until it is iterated: iterate it inside the body, e.g. list(gen()))",
    CAPTURE_ERROR + "the profiled body ran no torch ops; profile a function that runs torch code",
    CAPTURE_ERROR + "the profiled body ran no torch ops (it returned a callable: call it inside "
    "the body instead of returning it)",
]


@pytest.mark.parametrize("mode", ["--tprof-save", "--tprof"])
def test_a_body_that_runs_no_torch_ops_fails_its_test_saying_why(
    pytester: pytest.Pytester, mode: str
) -> None:
    pytester.makepyfile(test_no_ops=NO_OPS)

    result = run(pytester, mode)

    no_traceback(result)
    result.assert_outcomes(failed=3)
    assert set(NO_OPS_ERRORS) <= e_lines(result)
    assert not list((pytester.path / "baselines").rglob("*.json"))


# --------------------------------------------------------------------------- item 7: pedantic

PEDANTIC = """
import torch

x = torch.ones(4)

def test_rounds_as_text(tprof):
    tprof.pedantic(torch.relu, (x,), rounds="3")

def test_huge_rounds(tprof):
    tprof.pedantic(torch.relu, (x,), rounds=10**20)

def test_negative_warmup(tprof):
    tprof.pedantic(torch.relu, (x,), warmup=-1)

def test_setup_not_callable(tprof):
    tprof.pedantic(torch.relu, (x,), setup=5)

def test_args_not_a_tuple(tprof):
    tprof.pedantic(torch.relu, x)

def test_a_result_not_a_function(tprof):
    tprof(torch.relu(x))
"""
CONFIG_ERROR = "tprof_engine.model.errors.ConfigError: "
PEDANTIC_ERRORS = [
    CONFIG_ERROR + "tprof.pedantic 'rounds' must be an integer (got '3')",
    CONFIG_ERROR + "tprof.pedantic 'rounds' must be <= 10000 (got 100000000000000000000)",
    CONFIG_ERROR + "tprof.pedantic 'warmup' must be >= 0 (got -1)",
    CONFIG_ERROR + "tprof.pedantic 'setup' must be callable or None (got an int)",
    CONFIG_ERROR + "tprof.pedantic 'args' must be a tuple (got a Tensor)",
    CONFIG_ERROR + "tprof's first argument must be the function to profile (got a Tensor); pass "
    "the function and its arguments: tprof(fn, *args)",
]


@pytest.mark.parametrize("mode", [(), ("--tprof",)], ids=["without --tprof", "with --tprof"])
def test_bad_arguments_to_tprof_fail_the_test_naming_the_argument(
    pytester: pytest.Pytester, mode: tuple[str, ...]
) -> None:
    pytester.makepyfile(test_pedantic=PEDANTIC)

    result = run(pytester, *mode)

    no_traceback(result)
    result.assert_outcomes(failed=len(PEDANTIC_ERRORS))
    assert set(PEDANTIC_ERRORS) <= e_lines(result)


# --------------------------------------------------------------------------- items 1, 7: markers

MARKED = """
import pytest
import torch

@pytest.mark.parametrize("case", {cases!r})
def test_case(tprof, case):
    x = torch.ones(8)
    tprof(torch.add, x, x)
"""
# Each marker's keywords, as source text, and the message its test errors with.
MARKERS = {
    "floor_nan": ("floor=float('nan')", "'floor' must be a finite number >= 0 (got nan)"),
    "floor_inf": ("floor=float('inf')", "'floor' must be a finite number >= 0 (got inf)"),
    "floor_10": ("floor=10", "'floor' must be < 10 (got 10)"),
    "abs_floor_nan": (
        "abs_floor_us=float('nan')",
        "'abs_floor_us' must be a finite number >= 0 (got nan)",
    ),
    "abs_floor_huge": ("abs_floor_us=1e300", "'abs_floor_us' must be <= 10000000 (got 1e+300)"),
    "work_floor_inf": (
        "work_floor=float('-inf')",
        "'work_floor' must be a finite number >= 0 (got -inf)",
    ),
    "work_floor_2": ("work_floor=2", "'work_floor' must be <= 1 (got 2)"),
    "rounds_huge": ("rounds=10**20", "'rounds' must be <= 10000 (got 100000000000000000000)"),
    "rounds_text": ("rounds='3'", "'rounds' must be an integer (got '3')"),
    "warmup_float": ("warmup=1.0", "'warmup' must be an integer (got 1.0)"),
    "ignore_mixed": (
        "ignore=[1, None]",
        "'ignore' must be an op name pattern or a list of them (got [1, None])",
    ),
    "strict_int": ("strict=1", "'strict' must be True or False (got 1)"),
}


def _setup_error(result: pytest.RunResult, test: str) -> str:
    """The message a test's setup error shows (the line after its section header)."""
    lines = result.outlines
    start = next(i for i, x in enumerate(lines) if f"ERROR at setup of {test} " in x)
    return next(x for x in lines[start + 1 :] if x.strip())


def test_a_nan_infinite_or_out_of_range_marker_value_errors_its_test_at_setup(
    pytester: pytest.Pytester,
) -> None:
    body = "\n".join(
        f"@pytest.mark.tprof({kwargs})\ndef test_{case}(tprof):\n    tprof(torch.relu, x)\n"
        for case, (kwargs, _) in MARKERS.items()
    )
    pytester.makepyfile(test_marked=f"import pytest\nimport torch\n\nx = torch.ones(4)\n\n{body}")

    result = run(pytester, "--tprof")

    no_traceback(result)
    result.assert_outcomes(errors=len(MARKERS))
    for case, (_, message) in MARKERS.items():
        assert _setup_error(result, f"test_{case}") == f"@pytest.mark.tprof {message}"


# --------------------------------------------------------------------------- item 7: options

ONE_TEST = """
def test_plain():
    pass
"""
OPTION_ERRORS = [
    (
        ["--tprof-min-round-us=nan"],
        "ERROR: '--tprof-min-round-us' must be a finite number >= 0 (got nan)",
    ),
    (
        ["--tprof-min-round-us=inf"],
        "ERROR: '--tprof-min-round-us' must be a finite number >= 0 (got inf)",
    ),
    (
        ["-o", "tprof_min_round_us=nan"],
        "ERROR: ini option 'tprof_min_round_us' must be a finite number >= 0 (got nan)",
    ),
    (
        ["--tprof-min-round-us=1e7"],
        "ERROR: '--tprof-min-round-us' must be <= 1000000 (got 10000000.0)",
    ),
    (["--tprof-rounds", "1000000000"], "ERROR: '--tprof-rounds' must be <= 10000 (got 1000000000)"),
    (["--tprof-warmup=5000"], "ERROR: '--tprof-warmup' must be <= 1000 (got 5000)"),
    (["--tprof-window=1000"], "ERROR: '--tprof-window' must be <= 100 (got 1000)"),
    (["--tprof-threads=100000"], "ERROR: '--tprof-threads' must be <= 1024 (got 100000)"),
    (["-o", "tprof_rounds=0"], "ERROR: ini option 'tprof_rounds' must be >= 2 (got 0)"),
    (["--tprof-floor=nan"], "ERROR: '--tprof-floor' must be a fraction like 0.1 (got nan)"),
    (["-o", "tprof=maybe"], "ERROR: ini option 'tprof' must be true or false (got 'maybe')"),
    (["-o", "tprof_save=2"], "ERROR: ini option 'tprof_save' must be true or false (got '2')"),
]


@pytest.mark.parametrize(("args", "message"), OPTION_ERRORS, ids=[m for _, m in OPTION_ERRORS])
def test_a_nan_infinite_or_huge_option_is_a_usage_error_naming_the_option(
    pytester: pytest.Pytester, args: list[str], message: str
) -> None:
    pytester.makepyfile(test_one=ONE_TEST)

    result = pytester.runpytest("-p", "no:cacheprovider", *args)  # read with or without --tprof

    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert message in result.errlines
    no_traceback(result)


# --------------------------------------------------------------------------- fuzz

# Marker keyword → (minimum, maximum, integer, maximum excluded); 'ignore' and 'strict' apart.
MARKER_RANGES: dict[str, tuple[float, float, bool, bool]] = {
    "rounds": (2, 10_000, True, False),
    "warmup": (0, 1_000, True, False),
    "floor": (0, 10, False, True),
    "abs_floor_us": (0, 1e7, False, False),
    "work_floor": (0, 1, False, False),
}
HOSTILE = [
    "float('nan')", "float('inf')", "float('-inf')", "-1", "0", "3", "0.5", "10**20", "1e300",
    "'3'", "None", "True", "[]", "[1, None]", "['aten::empty*']", "{}",
]  # fmt: skip


def _accepted(key: str, value: Any) -> bool:
    """The spec the fuzz holds the plugin to: which marker values are settings."""
    if key == "ignore":
        patterns = [value] if isinstance(value, str) else value
        return isinstance(patterns, (list, tuple)) and all(isinstance(p, str) for p in patterns)
    if key == "strict":
        return isinstance(value, bool)
    low, high, integer, below = MARKER_RANGES[key]
    if isinstance(value, bool) or not isinstance(value, int if integer else (int, float)):
        return False
    return low <= value < high if below else low <= value <= high


def test_fuzzed_marker_keywords_are_a_setup_error_naming_the_keyword_or_a_setting(
    pytester: pytest.Pytester,
) -> None:
    cases = [(key, text) for key in (*MARKER_RANGES, "ignore", "strict") for text in HOSTILE]
    params = ",\n    ".join(
        f"pytest.param({i}, marks=pytest.mark.tprof({key}={text}), id='{key}-{i}')"
        for i, (key, text) in enumerate(cases)
    )
    pytester.makepyfile(
        test_fuzz=f"import pytest\nimport torch\n\n@pytest.mark.parametrize('case', [\n"
        f"    {params},\n])\ndef test_case(tprof, case):\n    tprof(torch.relu, torch.ones(4))\n"
    )

    result = run(pytester, "--tprof", "--no-tprof-census", "--tprof-rounds=2", "--tprof-warmup=0")

    no_traceback(result)
    accepted = {i for i, (key, text) in enumerate(cases) if _accepted(key, eval(text))}
    result.assert_outcomes(passed=len(accepted), errors=len(cases) - len(accepted))
    for i, (key, _) in enumerate(cases):
        if i not in accepted:
            message = _setup_error(result, f"test_case[{key}-{i}]")
            assert message.startswith(f"@pytest.mark.tprof '{key}' must be "), message


# Option → (minimum, maximum, integer, maximum excluded).
OPTION_RANGES: dict[str, tuple[float, float, bool, bool]] = {
    "tprof_rounds": (2, 10_000, True, False),
    "tprof_warmup": (0, 1_000, True, False),
    "tprof_window": (1, 100, True, False),
    "tprof_threads": (0, 1024, True, False),
    "tprof_min_round_us": (0, 1e6, False, False),
    "tprof_floor": (0, 10, False, True),
}
RAW = ["nan", "inf", "-inf", "-1", "0", "3", "0.5", "1e300", "100000000000000000000", "x"]


def _option_accepted(ini: str, raw: str) -> bool:
    low, high, integer, below = OPTION_RANGES[ini]
    try:
        value = int(raw) if integer else float(raw)
    except ValueError:
        return False
    return low <= value < high if below else low <= value <= high


def test_fuzzed_option_values_are_a_usage_error_naming_the_option_or_a_setting(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_one=ONE_TEST)
    for ini in OPTION_RANGES:
        for raw in RAW:
            for args, name in (
                ([f"--{ini.replace('_', '-')}={raw}"], f"--{ini.replace('_', '-')}"),
                (["-o", f"{ini}={raw}"], f"ini option '{ini}'"),
            ):
                result = pytester.runpytest("-p", "no:cacheprovider", "--co", *args)
                text = no_traceback(result)
                if _option_accepted(ini, raw):
                    assert result.ret == pytest.ExitCode.OK, (args, text[-2000:])
                else:
                    assert result.ret == pytest.ExitCode.USAGE_ERROR, (args, text[-2000:])
                    assert name in "\n".join(result.errlines), (args, text[-2000:])
