"""The only reader of pytest options and ini values; everything else takes the settings."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from profiler.errors import ConfigError
from profiler.rule import Rule
from profiler.runner import RunConfig
from profiler.store import DEFAULT_WINDOW

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
        "--tprof-markdown",
        "tprof_markdown",
        "path",
        None,
        "write a Markdown summary to this path "
        "(default: none; also appended to $GITHUB_STEP_SUMMARY when set)",
    ),
)

MARKER_KWARGS = {
    "rounds": int,
    "warmup": int,
    "rel_floor": float,
    "abs_floor_us": float,
    "ignore": (list, tuple, str),
    "strict": bool,
    "work_floor": float,
}
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


def _value(config: pytest.Config, ini: str, kind: str, default: Any) -> Any:
    cli = config.getoption(ini)
    if cli is not None:
        return cli
    raw = config.getini(ini)
    if kind == "bool":
        return bool(raw)
    if raw in (None, ""):
        return default
    try:
        return {"int": int, "float": float, "path": str}[kind](raw)
    except ValueError:
        raise pytest.UsageError(f"ini option '{ini}' must be {kind} (got {raw!r})") from None


def read_settings(config: pytest.Config) -> Settings:
    values = {ini: _value(config, ini, kind, default) for _, ini, kind, default, _ in _OPTIONS}
    root = Path(config.rootpath)

    def path(v: Any) -> Path | None:
        if v is None:
            return None
        p = Path(v)
        return p if p.is_absolute() else root / p

    minimums = {"tprof_rounds": 2, "tprof_warmup": 0, "tprof_window": 1, "tprof_threads": 0}
    for name, minimum in minimums.items():
        if values[name] < minimum:
            opt = "--" + name.replace("_", "-")
            raise pytest.UsageError(f"'{opt}' must be >= {minimum} (got {values[name]})")
    floor = values["tprof_floor"]
    if floor is not None and not 0 <= floor < 10:
        raise pytest.UsageError(f"'--tprof-floor' must be a fraction like 0.1 (got {floor})")
    run = RunConfig(
        rounds=values["tprof_rounds"],
        warmup=values["tprof_warmup"],
        baseline_dir=path(values["tprof_baseline_dir"]) or root / "baselines",
        trace_dir=path(values["tprof_trace_dir"]),
        save=values["tprof_save"],
        window=values["tprof_window"],
        rule=Rule(rel_floor=floor, strict_calls=values["tprof_strict"]),
        confirm=not values["tprof_no_confirm"],
        min_round_us=values["tprof_min_round_us"],
        require_baseline=values["tprof_require_baseline"],
        threads=values["tprof_threads"],
        save_trace=values["tprof_save_trace"],
        census=not values["tprof_no_census"],
        stack=values["tprof_stack"],
    )
    return Settings(
        enabled=bool(values["tprof"] or values["tprof_save"]),
        run=run,
        json_path=path(values["tprof_json"]),
        markdown_path=path(values["tprof_markdown"]),
        rootdir=root,
    )


def marker_overrides(item: pytest.Item, rule: Rule) -> tuple[dict[str, int], Rule]:
    """Rounds/warm-up and the rule after the test's ``@pytest.mark.tprof(...)`` keywords."""
    counts: dict[str, int] = {}
    changes: dict[str, Any] = {}
    for mark in reversed(list(item.iter_markers("tprof"))):  # closest marker wins
        if mark.args:
            raise ConfigError(f"@pytest.mark.tprof takes keywords only (got {mark.args!r})")
        for key, value in mark.kwargs.items():
            if key not in MARKER_KWARGS:
                valid = ", ".join(sorted(MARKER_KWARGS))
                raise ConfigError(
                    f"@pytest.mark.tprof got an unknown keyword {key!r}; valid: {valid}"
                )
            expected = MARKER_KWARGS[key]
            if isinstance(value, bool) and expected is not bool:
                raise ConfigError(f"@pytest.mark.tprof '{key}' must be a number (got {value!r})")
            if expected is float and isinstance(value, int):
                value = float(value)
            if not isinstance(value, expected):  # type: ignore[arg-type]
                raise ConfigError(f"@pytest.mark.tprof '{key}' has the wrong type (got {value!r})")
            if key in ("rounds", "warmup"):
                minimum = 2 if key == "rounds" else 0
                if value < minimum:
                    raise ConfigError(
                        f"@pytest.mark.tprof '{key}' must be >= {minimum} (got {value})"
                    )
                counts[key] = value
            elif key == "ignore":
                changes["ignore"] = (value,) if isinstance(value, str) else tuple(value)
            elif key == "strict":
                changes["strict_calls"] = value
            else:
                if value < 0:
                    raise ConfigError(f"@pytest.mark.tprof '{key}' must be >= 0 (got {value})")
                changes[key] = value
    return counts, replace(rule, **changes) if changes else rule
