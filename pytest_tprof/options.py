"""The only reader of pytest options and ini values; everything else takes the settings."""

from __future__ import annotations

import os
import pickle
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from tprof_engine.decide.rule import Rule
from tprof_engine.model.errors import ConfigError
from tprof_engine.model.limits import ROUNDS_LIMIT, WARMUP_LIMIT, number_problem
from tprof_engine.runner import RunConfig
from tprof_engine.store.baselines import DEFAULT_WINDOW

# (option, ini name, type, default, help)
_OPTIONS: tuple[tuple[str, str, str, Any, str], ...] = (
    (
        "--tprof",
        "tprof",
        "bool",
        False,
        "profile tests that use the tprof fixture and compare them "
        "with their baselines (default: off)",
    ),
    ("--tprof-rounds", "tprof_rounds", "int", 20, "measured rounds per test (default: 20)"),
    (
        "--tprof-warmup",
        "tprof_warmup",
        "int",
        3,
        "warm-up rounds per test, extended while the ops called still change (default: 3)",
    ),
    (
        "--tprof-save",
        "tprof_save",
        "bool",
        False,
        "record baselines for the profiled tests that "
        "pass, adding a session to each baseline's window; no gating in that run (default: off)",
    ),
    (
        "--tprof-reset",
        "tprof_reset",
        "bool",
        False,
        "with --tprof-save: start each saved test's window afresh from this run's session, "
        "dropping the older ones, to accept an intended change (default: off)",
    ),
    (
        "--tprof-baseline-dir",
        "tprof_baseline_dir",
        "path",
        "baselines",
        "folder of baseline files (default: baselines under the rootdir)",
    ),
    (
        "--tprof-trace-dir",
        "tprof_trace_dir",
        "path",
        ".tprof/traces",
        "folder for the Chrome traces (default: .tprof/traces under the rootdir)",
    ),
    (
        "--tprof-json",
        "tprof_json",
        "path",
        None,
        "write a JSON report of every profiled test to this path (default: none)",
    ),
    (
        "--tprof-require-baseline",
        "tprof_require_baseline",
        "bool",
        False,
        "a profiled test without a baseline is an error instead of 'no-baseline' (default: off)",
    ),
    (
        "--tprof-window",
        "tprof_window",
        "int",
        DEFAULT_WINDOW,
        f"sessions kept in a baseline's rolling window by --tprof-save (default: {DEFAULT_WINDOW})",
    ),
    (
        "--tprof-strict",
        "tprof_strict",
        "bool",
        False,
        "fail on any change of an op's call count "
        "(default: off, only calls that add material time fail)",
    ),
    (
        "--tprof-floor",
        "tprof_floor",
        "float",
        None,
        "fixed relative floor, e.g. 0.1 for 10%% "
        "(default: learned from the baseline's sessions; 15%% with one session)",
    ),
    (
        "--tprof-no-confirm",
        "tprof_no_confirm",
        "bool",
        False,
        "don't re-measure a test whose timing regressed before failing it (default: "
        "re-measure once in the same process, then once in a fresh pytest process)",
    ),
    (
        "--tprof-min-round-us",
        "tprof_min_round_us",
        "float",
        1000.0,
        "call a fast body several "
        "times per round so a round lasts at least this long (default: 1000)",
    ),
    (
        "--tprof-save-trace",
        "tprof_save_trace",
        "bool",
        False,
        "with --tprof-save, keep each test's trace next to its baseline; a later regression "
        "then writes both runs into one side-by-side trace (default: off, traces are large)",
    ),
    (
        "--tprof-threads",
        "tprof_threads",
        "int",
        1,
        "torch intra-op threads while profiling; 0 keeps torch's setting "
        "(default: 1, steady on shared machines)",
    ),
    (
        "--tprof-no-census",
        "tprof_no_census",
        "bool",
        False,
        "don't take the work census (FLOPs, bytes, shapes per op and module) of each test; "
        "only timing and calls gate (default: off, the census is taken)",
    ),
    (
        "--tprof-stack",
        "tprof_stack",
        "bool",
        False,
        "name the source line of each flagged op in a failure, from the work census's "
        "stack of each op's first call (default: off)",
    ),
    (
        "--tprof-nvtx",
        "tprof_nvtx",
        "bool",
        False,
        "mark each profiled test and each of its rounds with an NVTX range "
        "(tprof:<nodeid>:round<N>) for Nsight Systems; a torch without CUDA notes it in the "
        "header and runs without them (default: off)",
    ),
    (
        "--tprof-counters",
        "tprof_counters",
        "bool",
        False,
        "count the CPU instructions of each measured round with a hardware counter "
        "(Linux perf_event_open); where the machine has none, the header says so once "
        "(default: off)",
    ),
    (
        "--tprof-memory",
        "tprof_memory",
        "bool",
        False,
        "profile memory too (profile_memory): bytes each op allocates per round and the "
        "round's peak, gated exactly where they are the same every round; costs time in "
        "every allocation of the timed rounds (default: off)",
    ),
    (
        "--tprof-markdown",
        "tprof_markdown",
        "path",
        None,
        "write a Markdown summary to this path "
        "(default: none; also appended to $GITHUB_STEP_SUMMARY when set)",
    ),
)

# Numeric marker keywords: (minimum, maximum, integer, below the maximum).  NaN or an
# infinite floor would switch a gate off; each maximum is where a value stops being a setting.
_MARKER_NUMBERS: dict[str, tuple[float, float, bool, bool]] = {
    "rounds": (2, ROUNDS_LIMIT, True, False),
    "warmup": (0, WARMUP_LIMIT, True, False),
    # A fraction (0.1 = 10 %), bounded as --tprof-floor: +1000 % is no floor but "never".
    "rel_floor": (0.0, 10.0, False, True),
    # The smallest slowdown of a round worth failing; rounds run 20+ times per test, so no
    # profiled round is long enough for a 10 s floor to be one.  'ignore' leaves ops out.
    "abs_floor_us": (0.0, 1e7, False, False),
    # A share of the test's total work: at 1 the work may double unnoticed; more is no gate.
    "work_floor": (0.0, 1.0, False, False),
}
MARKER_KWARGS = (*_MARKER_NUMBERS, "ignore", "strict")
MARKER_HELP = (
    "tprof(rounds=N, warmup=N, rel_floor=F, abs_floor_us=F, ignore=[patterns], strict=bool, "
    "work_floor=F): "
    "per-test overrides for pytest-tprof"
)


def add_options(parser: pytest.Parser) -> None:
    group = parser.getgroup("tprof", "op-level performance regression testing (pytest-tprof)")
    for opt, ini, kind, default, help_text in _OPTIONS:
        ini_help = help_text.replace("%%", "%")  # argparse unescapes %%; ini help is shown as is
        if kind == "bool":
            group.addoption(opt, action="store_true", default=None, dest=ini, help=help_text)
            parser.addini(ini, ini_help, type="bool", default=default)
        else:
            conv = {"int": int, "float": float, "path": str}[kind]
            group.addoption(opt, action="store", type=conv, default=None, dest=ini, help=help_text,
                            metavar=kind.upper())  # fmt: skip
            parser.addini(ini, ini_help, default=None if default is None else str(default))


@dataclass(frozen=True, slots=True, kw_only=True)
class Settings:
    """pytest-tprof's view of the command line and ini file."""

    enabled: bool
    run: RunConfig
    json_path: Path | None
    markdown_path: Path | None
    rootdir: Path
    pytest_cov: bool = False  # pytest-cov measures this run (--cov given, no --no-cov)
    step_summary: Path | None = None  # $GITHUB_STEP_SUMMARY, which the Markdown is appended to


# A fresh process confirming a regression (pytest_tprof.fresh) judges under its parent's
# settings, which this names the file of; its own command line and ini are not read for them.
INHERITED_SETTINGS = "TPROF_FRESH_PROCESS"


# Numeric options: (minimum, maximum, integer); each maximum is where a value stops being a
# setting and becomes a typo.
_RANGES: dict[str, tuple[float, float, bool]] = {
    "tprof_rounds": (2, ROUNDS_LIMIT, True),
    "tprof_warmup": (0, WARMUP_LIMIT, True),
    # The learned floor's range constants stop at 10 sessions and every kept session is read
    # and pooled on each run: a longer window only slows the run.
    "tprof_window": (1, 100, True),
    "tprof_threads": (0, 1024, True),  # more intra-op threads than any machine has cores
    # The body runs rounds + warm-up rounds per test and calibration stops at 1000 calls per
    # round: above a second, a minimum only makes each test's profiling minutes long.
    "tprof_min_round_us": (0.0, 1e6, False),
}


def _value(config: pytest.Config, ini: str, kind: str, default: Any) -> tuple[Any, str]:
    """The option's value, and its name for an error: the command line's, else the ini's."""
    cli = config.getoption(ini)
    if cli is not None:
        return cli, "'--" + ini.replace("_", "-") + "'"
    name = f"ini option '{ini}'"
    try:
        raw = config.getini(ini)
    except (pytest.UsageError, ValueError) as exc:  # a bool that isn't one; no name in it
        found = re.search(r"(?:invalid truth value|got \w+:) (.+)$", str(exc))
        got = f"got {found.group(1)}" if found else str(exc)
        raise pytest.UsageError(f"{name} must be true or false ({got})") from None
    if kind == "bool":
        return bool(raw), name
    if raw in (None, ""):
        return default, name
    try:
        return {"int": int, "float": float, "path": str}[kind](raw), name
    except (TypeError, ValueError):  # TypeError: a TOML list or table
        raise pytest.UsageError(f"{name} must be {kind} (got {raw!r})") from None


def _checked(given: dict[str, tuple[Any, str]]) -> dict[str, Any]:
    """The values, once every number is within its range (a UsageError naming it if not)."""
    for ini, (minimum, maximum, integer) in _RANGES.items():
        value, name = given[ini]
        problem = number_problem(value, minimum=minimum, maximum=maximum, integer=integer)
        if problem is not None:
            raise pytest.UsageError(f"{name} {problem}")
    if given["tprof_reset"][0] and not given["tprof_save"][0]:
        raise pytest.UsageError(
            f"{given['tprof_reset'][1]} restarts the windows a save appends to: "
            "give it with --tprof-save"
        )
    floor, name = given["tprof_floor"]
    if floor is not None and not 0 <= floor < 10:
        raise pytest.UsageError(f"{name} must be a fraction like 0.1 (got {floor})")
    return {ini: value for ini, (value, _) in given.items()}


def own_load(env: Mapping[str, str], threads: int) -> int:
    """Tasks of this run that may be runnable beside a round and are not a neighbour's load:
    the other xdist workers (each worker's timing verdicts already say they ran beside them)
    and the body's other intra-op threads (``--tprof-threads``; 0, torch's own setting, is
    one per CPU)."""
    workers = 0
    if "PYTEST_XDIST_WORKER" in env:
        try:
            workers = max(0, int(env.get("PYTEST_XDIST_WORKER_COUNT", "1")) - 1)
        except ValueError:
            workers = 0
    pool = threads if threads > 0 else (os.cpu_count() or 1)
    return workers + pool - 1


def read_settings(config: pytest.Config) -> Settings:
    inherited = os.environ.get(INHERITED_SETTINGS)
    if inherited:
        return _inherited(Path(inherited))
    values = _checked(
        {ini: _value(config, ini, kind, default) for _, ini, kind, default, _ in _OPTIONS}
    )
    root = Path(config.rootpath)

    def path(v: Any) -> Path | None:
        if v is None:
            return None
        p = Path(v)
        return p if p.is_absolute() else root / p

    floor = values["tprof_floor"]
    run = RunConfig(
        rounds=values["tprof_rounds"],
        warmup=values["tprof_warmup"],
        baseline_dir=path(values["tprof_baseline_dir"]) or root / "baselines",
        trace_dir=path(values["tprof_trace_dir"]),
        save=values["tprof_save"],
        reset=values["tprof_reset"],
        window=values["tprof_window"],
        rule=Rule(
            rel_floor=floor,
            strict_calls=values["tprof_strict"],
            siblings=own_load(os.environ, values["tprof_threads"]),
        ),
        confirm=not values["tprof_no_confirm"],
        min_round_us=values["tprof_min_round_us"],
        require_baseline=values["tprof_require_baseline"],
        threads=values["tprof_threads"],
        save_trace=values["tprof_save_trace"],
        census=not values["tprof_no_census"],
        stack=values["tprof_stack"],
        nvtx=values["tprof_nvtx"],
        counters=values["tprof_counters"],
        profile_memory=values["tprof_memory"],
    )
    return Settings(
        enabled=bool(values["tprof"] or values["tprof_save"]),
        run=run,
        json_path=path(values["tprof_json"]),
        markdown_path=path(values["tprof_markdown"]),
        rootdir=root,
        pytest_cov=_pytest_cov_on(config),
        step_summary=Path(os.environ["GITHUB_STEP_SUMMARY"])
        if os.environ.get("GITHUB_STEP_SUMMARY")
        else None,
    )


def _inherited(path: Path) -> Settings:
    """The settings a parent process wrote for this one (:mod:`pytest_tprof.fresh`)."""
    try:
        settings = pickle.loads(path.read_bytes())
    except (OSError, pickle.UnpicklingError, EOFError, AttributeError) as exc:
        raise pytest.UsageError(
            f"{INHERITED_SETTINGS}={path}: not the settings of a pytest-tprof run ({exc}); "
            f"unset {INHERITED_SETTINGS}"
        ) from None
    if not isinstance(settings, Settings):
        raise pytest.UsageError(
            f"{INHERITED_SETTINGS}={path}: not the settings of a pytest-tprof run; "
            f"unset {INHERITED_SETTINGS}"
        )
    return settings


def _pytest_cov_on(config: pytest.Config) -> bool:
    """pytest-cov measures this run: it registers "_cov" when a --cov is given (and rewrites
    the option's value, so the plugin is what tells), and --no-cov turns it off."""
    return config.pluginmanager.hasplugin("_cov") and not config.getoption("no_cov", False)


def requested_early(config: pytest.Config) -> bool:
    """Whether profiling was asked for, read before pytest configures (a worker's GPU must be
    chosen before anything initialises CUDA).  A value that isn't one is left for
    :func:`read_settings` to report."""
    args = config.known_args_namespace
    for ini in ("tprof", "tprof_save"):
        if getattr(args, ini, None):
            return True
        try:
            if config.getini(ini):
                return True
        except (pytest.UsageError, ValueError):
            continue
    return False


def marker_overrides(item: pytest.Item, rule: Rule) -> tuple[dict[str, int], Rule]:
    """Rounds/warm-up and the rule after the test's ``@pytest.mark.tprof(...)`` keywords."""
    counts: dict[str, int] = {}
    changes: dict[str, Any] = {}
    for mark in reversed(list(item.iter_markers("tprof"))):  # closest marker wins
        if mark.args:
            raise ConfigError(f"@pytest.mark.tprof takes keywords only (got {mark.args!r})")
        for key, value in mark.kwargs.items():
            if key == "ignore":
                changes["ignore"] = _ignore_patterns(value)
            elif key == "strict":
                if not isinstance(value, bool):
                    raise ConfigError(
                        f"@pytest.mark.tprof 'strict' must be True or False (got {value!r})"
                    )
                changes["strict_calls"] = value
            elif key in _MARKER_NUMBERS:
                minimum, maximum, integer, below = _MARKER_NUMBERS[key]
                problem = number_problem(
                    value, minimum=minimum, maximum=maximum, integer=integer, below_maximum=below
                )
                if problem is not None:
                    raise ConfigError(f"@pytest.mark.tprof '{key}' {problem}")
                if integer:
                    counts[key] = value
                else:
                    changes[key] = float(value)
            else:
                valid = ", ".join(sorted(MARKER_KWARGS))
                raise ConfigError(
                    f"@pytest.mark.tprof got an unknown keyword {key!r}; valid: {valid}"
                )
    return counts, replace(rule, **changes) if changes else rule


def _ignore_patterns(value: Any) -> tuple[str, ...]:
    """The marker's ``ignore``: one op name pattern or a list of them."""
    patterns = (value,) if isinstance(value, str) else value
    if not isinstance(patterns, (list, tuple)) or not all(isinstance(p, str) for p in patterns):
        raise ConfigError(
            "@pytest.mark.tprof 'ignore' must be an op name pattern or a list of them "
            f"(got {value!r})"
        )
    return tuple(patterns)
