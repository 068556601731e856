"""The only reader of pytest options and ini values; everything else takes the settings."""

from __future__ import annotations

import argparse
import os
import pickle
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from tprof_engine.api import DEFAULT_WINDOW, Rule
from tprof_engine.config import RunConfig
from tprof_engine.model.limits import FLOOR_LIMIT, ROUNDS_LIMIT, WARMUP_LIMIT, number_problem


@dataclass(frozen=True, slots=True)
class _Option:
    """One setting: its command-line flag (whose name is its ini name, ``dest``, unless it is
    an action of a single run), its default, a one-phrase help and its kind."""

    flag: str
    default: Any
    help: str
    kind: str  # "switch" (on/off, --no-… too), "action" (one run only), int, float, path, list

    @property
    def dest(self) -> str:
        return self.flag.removeprefix("--").replace("-", "_")

    @property
    def in_ini(self) -> bool:
        return self.kind != "action" and self.dest not in _PER_RUN


COLLECTABLE = ("memory", "stack", "nvtx", "counters", "traces")
_OLD = COLLECTABLE[:4]  # each was a flag of its own (``--tprof-memory``) before
# Paths of one run's reports: on the command line only.
_PER_RUN = frozenset({"tprof_json", "tprof_markdown", "tprof_html"})
_switch, _action = partial(_Option, kind="switch"), partial(_Option, kind="action")
_int, _float = partial(_Option, kind="int"), partial(_Option, kind="float")
_path, _list = partial(_Option, kind="path"), partial(_Option, kind="list")
_OPTIONS: tuple[_Option, ...] = (
    _switch(
        "--tprof",
        False,
        "profile tests that use the tprof fixture, comparing with baselines (default: off)",
    ),
    _action(
        "--tprof-save", False, "record the passing tests' sessions into their baselines (no gating)"
    ),
    _action(
        "--tprof-reset",
        False,
        "with --tprof-save: start each test's window afresh, accepting a change",
    ),
    _action(
        "--tprof-save-trace", False, "with --tprof-save: keep each test's trace beside its baseline"
    ),
    _int("--tprof-rounds", 20, "measured rounds per test (default: 20)"),
    _int("--tprof-warmup", 3, "warm-up rounds, more while the ops still change (default: 3)"),
    _float(
        "--tprof-min-round-us",
        1000.0,
        "shortest round; a fast body is called several times per round (default: 1000)",
    ),
    _int(
        "--tprof-threads",
        1,
        "torch intra-op threads while profiling, 0 for torch's own (default: 1)",
    ),
    _path("--tprof-baseline-dir", "baselines", "folder of baselines (default: baselines)"),
    _path("--tprof-trace-dir", ".tprof/traces", "folder of Chrome traces (default: .tprof/traces)"),
    _switch(
        "--tprof-traces",
        True,
        "write every profiled test's Chrome trace; --no-tprof-traces: only those whose "
        "ops moved (default: on)",
    ),
    _int(
        "--tprof-trace-keep",
        3,
        "runs of each test whose traces stay; a failing test's stay until it passes (default: 3)",
    ),
    _int(
        "--tprof-window", DEFAULT_WINDOW, f"sessions a baseline keeps (default: {DEFAULT_WINDOW})"
    ),
    _float(
        "--tprof-floor",
        None,
        "fixed relative floor, e.g. 0.1 for 10%% (default: learned from the sessions)",
    ),
    _switch("--tprof-strict", False, "fail on any change of an op's calls (default: off)"),
    _switch(
        "--tprof-confirm", True, "measure a timing regression again before failing (default: on)"
    ),
    _switch(
        "--tprof-census", True, "take the work census: FLOPs, bytes and shapes per op (default: on)"
    ),
    _list(
        "--tprof-collect",
        (),
        f"also collect, comma-separated: {', '.join(COLLECTABLE)} (default: none)",
    ),
    _switch(
        "--tprof-require-baseline",
        False,
        "a test without a baseline is an error naming the folder (default: off)",
    ),
    _path("--tprof-json", None, "write the JSON report to this path"),
    _path(
        "--tprof-markdown",
        None,
        "write the Markdown summary to this path (also to $GITHUB_STEP_SUMMARY)",
    ),
    _path("--tprof-html", None, "write the HTML report to this path (needs the 'html' extra)"),
)


@dataclass(frozen=True, slots=True)
class _Deprecated:
    """An old spelling that still works for one release, and what replaces it."""

    name: str  # the old flag (``--tprof-…``) or ini name
    dest: str  # the new setting it sets
    value: Any  # the value it gives that setting (a COLLECTABLE name for tprof_collect)
    instead: str


_DEPRECATED: tuple[_Deprecated, ...] = (
    _Deprecated("--tprof-no-confirm", "tprof_confirm", False, "--no-tprof-confirm"),
    _Deprecated("--tprof-no-census", "tprof_census", False, "--no-tprof-census"),
    *(_Deprecated(f"--tprof-{c}", "tprof_collect", c, f"--tprof-collect={c}") for c in _OLD),
    _Deprecated("tprof_no_confirm", "tprof_confirm", False, "tprof_confirm = false"),
    _Deprecated("tprof_no_census", "tprof_census", False, "tprof_census = false"),
    *(_Deprecated(f"tprof_{c}", "tprof_collect", c, f"tprof_collect = {c}") for c in _OLD),
    _Deprecated("tprof_json", "tprof_json", None, "--tprof-json on the command line"),
    _Deprecated("tprof_markdown", "tprof_markdown", None, "--tprof-markdown on the command line"),
    _Deprecated("tprof_save_trace", "tprof_save_trace", True, "--tprof-save-trace"),
)
# Actions of one run that an ini file must not make the default of every run.
_NOT_READ_FROM_INI = {"tprof_save": "--tprof-save", "tprof_reset": "--tprof-reset"}


def add_options(parser: pytest.Parser) -> None:
    group = parser.getgroup("tprof", "op-level performance regression testing (pytest-tprof)")
    for o in _OPTIONS:
        if o.kind in ("switch", "action"):
            action: Any = argparse.BooleanOptionalAction if o.kind == "switch" else "store_true"
            group.addoption(o.flag, action=action, default=None, dest=o.dest, help=o.help)
        else:
            parsed = {"type": _PARSE[o.kind], "metavar": _METAVAR[o.kind]}
            group.addoption(
                o.flag, action="store", default=None, dest=o.dest, help=o.help, **parsed
            )
        if o.in_ini:
            ini_type: Any = "bool" if o.kind == "switch" else "string"
            default = o.default if o.kind == "switch" else None
            parser.addini(o.dest, o.help.replace("%%", "%"), type=ini_type, default=default)
    for d in _DEPRECATED:
        if d.name.startswith("--"):
            hidden = {"dest": _old_dest(d.name), "help": argparse.SUPPRESS}
            group.addoption(d.name, action="store_true", default=None, **hidden)
        else:
            kind: Any = "string" if d.value is None else "bool"
            parser.addini(d.name, f"deprecated: use {d.instead}", type=kind, default=None)
    for name, flag in _NOT_READ_FROM_INI.items():
        parser.addini(name, f"not read: give {flag} on the command line", type="bool")


_PARSE: dict[str, Any] = {"int": int, "float": float, "path": str, "list": str}
_METAVAR = {"int": "N", "float": "F", "path": "PATH", "list": "LIST"}


def flags_with_values() -> frozenset[str]:
    """This plugin's command-line flags that take a value (``--tprof-rounds 8``)."""
    return frozenset(o.flag for o in _OPTIONS if o.kind not in ("switch", "action"))


def _old_dest(flag: str) -> str:
    return "tprof_old_" + flag.removeprefix("--tprof-").replace("-", "_")


@dataclass(frozen=True, slots=True, kw_only=True)
class Settings:
    """pytest-tprof's view of the command line and ini file."""

    enabled: bool
    run: RunConfig
    json_path: Path | None
    markdown_path: Path | None
    rootdir: Path
    html_path: Path | None = None
    pytest_cov: bool = False  # pytest-cov measures this run (--cov given, no --no-cov)
    step_summary: Path | None = None  # $GITHUB_STEP_SUMMARY, which the Markdown is appended to
    record_args: tuple[str, ...] = ()  # what a command recording this run's baselines repeats
    invocation_dir: Path | None = None  # where pytest was started: a pasted command runs there
    # A fresh process confirming a regression: the torch settings (model.settings) its parent's
    # capture ran under, and the random generators' state as the parent's test started, both
    # set before the test starts.
    torch_settings: Mapping[str, Any] = field(default_factory=dict)
    random_state: dict[str, Any] | None = None


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
    "tprof_trace_keep": (1, 1000, True),
    # The body runs rounds + warm-up rounds per test and calibration stops at 1000 calls per
    # round: above a second, a minimum only makes each test's profiling minutes long.
    "tprof_min_round_us": (0.0, 1e6, False),
}


def _value(config: pytest.Config, o: _Option) -> tuple[Any, str]:
    """The setting's value, and its name for an error: the command line's, else the ini's."""
    cli = config.getoption(o.dest)
    if cli is not None:
        return _typed(cli, o.kind, f"'{o.flag}'"), f"'{o.flag}'"
    if not o.in_ini:
        return o.default, f"'{o.flag}'"
    name = f"ini option '{o.dest}'"
    raw = _ini(config, o.dest, name)
    if o.kind == "switch":
        return bool(raw), name
    if raw in (None, ""):
        return o.default, name
    return _typed(raw, o.kind, name), name


def _ini(config: pytest.Config, ini: str, name: str) -> Any:
    try:
        return config.getini(ini)
    except (pytest.UsageError, ValueError) as exc:  # a bool that isn't one; no name in it
        found = re.search(r"(?:invalid truth value|got \w+:) (.+)$", str(exc))
        got = f"got {found.group(1)}" if found else str(exc)
        raise pytest.UsageError(f"{name} must be true or false ({got})") from None


def _typed(raw: Any, kind: str, name: str) -> Any:
    if kind in ("switch", "action"):
        return bool(raw)
    if kind == "list":
        return _collected(raw, name)
    try:
        return {"int": int, "float": float, "path": str}[kind](raw)
    except (TypeError, ValueError):  # TypeError: a TOML list or table
        raise pytest.UsageError(f"{name} must be {kind} (got {raw!r})") from None


def _collected(raw: Any, name: str) -> tuple[str, ...]:
    """``--tprof-collect``'s names, each one of :data:`COLLECTABLE`."""
    parts = raw if isinstance(raw, list) else str(raw).split(",")
    names = tuple(dict.fromkeys(str(p).strip() for p in parts if str(p).strip()))
    unknown = [n for n in names if n not in COLLECTABLE]
    if unknown:
        raise pytest.UsageError(
            f"{name} got {', '.join(map(repr, unknown))}; valid: {', '.join(COLLECTABLE)}"
        )
    return names


def _with_deprecated(config: pytest.Config, given: dict[str, tuple[Any, str]]) -> None:
    """Apply the old spellings used (each with a deprecation warning), unless the command line
    gave the new one; say that an ini file's save or reset is not read."""
    for d in _DEPRECATED:
        used = (
            config.getoption(_old_dest(d.name))
            if d.name.startswith("--")
            else _ini(config, d.name, f"ini option '{d.name}'")
        )
        if not used:
            continue
        _warn(config, f"{d.name} is deprecated and will be removed: use {d.instead}")
        value, name = given[d.dest]
        if d.dest == "tprof_collect":  # what to collect adds up, whichever spelling asked
            given[d.dest] = tuple(dict.fromkeys((*value, d.value))), name
        elif config.getoption(d.dest) is None:  # the command line's new spelling wins
            given[d.dest] = (used if d.value is None else d.value), name
    for ini, flag in _NOT_READ_FROM_INI.items():
        if _ini(config, ini, f"ini option '{ini}'"):
            _warn(config, f"ini option '{ini}' is not read: give {flag} to the run that should")


def _warn(config: pytest.Config, text: str) -> None:
    config.issue_config_time_warning(pytest.PytestDeprecationWarning(text), stacklevel=2)


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
    if floor is not None and not 0 <= floor < FLOOR_LIMIT:
        raise pytest.UsageError(f"{name} must be a fraction like 0.1 (got {floor})")
    for ini in _FOLDERS:
        _check_folder(*given[ini])
    return {ini: value for ini, (value, _) in given.items()}


_FOLDERS = ("tprof_baseline_dir", "tprof_trace_dir")


def _check_folder(value: Any, name: str) -> None:
    """A folder option given a test instead (``--tprof-baseline-dir tests/t.py::test_x``:
    the option took the next word) is refused before it runs every test into that folder."""
    text = "" if value is None else str(value)
    if "::" in text or text.endswith(".py"):
        flag = name.strip("'")
        raise pytest.UsageError(
            f"{name} got {text!r}, which names a test, not a folder: the option took the next "
            f"word as its value; write {flag}=FOLDER before the tests"
        )


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
    given = {o.dest: _value(config, o) for o in _OPTIONS}
    _with_deprecated(config, given)
    values = _checked(given)
    root = Path(config.rootpath)

    def path(v: Any) -> Path | None:
        if v is None:
            return None
        p = Path(v)
        return p if p.is_absolute() else root / p

    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    baselines = path(values["tprof_baseline_dir"]) or root / "baselines"
    return Settings(
        enabled=bool(values["tprof"] or values["tprof_save"]),
        run=_run_config(values, baselines, path(values["tprof_trace_dir"])),
        json_path=path(values["tprof_json"]),
        markdown_path=path(values["tprof_markdown"]),
        html_path=path(values["tprof_html"]),
        rootdir=root,
        pytest_cov=_pytest_cov_on(config),
        step_summary=Path(summary) if summary else None,
        record_args=_record_args(config),
        invocation_dir=config.invocation_params.dir,
    )


# Settings that say where a baseline is and what its sessions measured: a command that
# records the run's baselines again must repeat those given on the command line.
_RECORDED_WITH = frozenset(
    "tprof_baseline_dir tprof_rounds tprof_warmup tprof_min_round_us tprof_threads "
    "tprof_window tprof_collect".split()
)


def _record_args(config: pytest.Config) -> tuple[str, ...]:
    """The command line's settings of ``_RECORDED_WITH``, spelled as they were given."""
    out = []
    for o in _OPTIONS:
        given = config.getoption(o.dest) if o.dest in _RECORDED_WITH else None
        if given is not None:
            shown = ",".join(given) if isinstance(given, list | tuple) else str(given)
            out.append(f"{o.flag}={shown}")
    return tuple(out)


def _run_config(values: Mapping[str, Any], baseline_dir: Path, trace_dir: Path | None) -> RunConfig:
    collect = set(values["tprof_collect"])
    return RunConfig(
        rounds=values["tprof_rounds"],
        warmup=values["tprof_warmup"],
        baseline_dir=baseline_dir,
        trace_dir=trace_dir,
        save=values["tprof_save"],
        reset=values["tprof_reset"],
        window=values["tprof_window"],
        rule=Rule(
            rel_floor=values["tprof_floor"],
            strict_calls=values["tprof_strict"],
            siblings=own_load(os.environ, values["tprof_threads"]),
        ),
        confirm=values["tprof_confirm"],
        min_round_us=values["tprof_min_round_us"],
        require_baseline=values["tprof_require_baseline"],
        threads=values["tprof_threads"],
        save_trace=values["tprof_save_trace"],
        census=values["tprof_census"],
        stack="stack" in collect,
        nvtx="nvtx" in collect,
        counters="counters" in collect,
        profile_memory="memory" in collect,
        # --tprof-collect=traces asked for every trace before that became the default
        all_traces=values["tprof_traces"] or "traces" in collect,
        trace_runs=values["tprof_trace_keep"],
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
    if getattr(args, "tprof", None) or getattr(args, "tprof_save", None):
        return True
    if getattr(args, "tprof", None) is False:  # --no-tprof
        return False
    try:
        return bool(config.getini("tprof"))
    except (pytest.UsageError, ValueError):
        return False
