"""Confirm a timing regression in a fresh pytest process.

On a shared machine an op's speed can belong to the process: in real reruns one op read
27-54 % slower in some pytest processes and not in others, and re-measuring in the same
process repeats it.  So a timing regression that survived the in-process re-measurement is
run once more in a new process, and fails the test only if it repeats there too.  The engine's
one confirmation loop (:mod:`tprof_engine.confirm`) decides when; :class:`Steps` is this glue's
part of its executor (a fresh process, a fresh pair, the serial re-run after xdist's workers),
and the child's JSON report is read back by the engine (``confirm.look_in_report``).

The child judges under this run's own settings, not under a command line rebuilt from them:
the parent hands it its :class:`~pytest_tprof.options.Settings` (window, floors, ``-o``
overrides and all), with outputs of the child's own (a JSON report in a temporary folder, no
Markdown, no step summary).  It also hands over the numeric torch settings the test's capture
ran under (TF32, precision, cuDNN, SDPA: ``tprof_engine.model.settings``), which the child sets
before the test starts: an earlier test of the parent may have set them, and the child runs
no earlier test, and the random generators' state its test started from (under xdist, sent by
the worker with its results).  Its environment is the parent's, whole.  A child that still ran
under other settings is no evidence either way.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from pytest_tprof.options import INHERITED_SETTINGS, Settings, flags_with_values
from tprof_engine import ab
from tprof_engine.confirm import Look, look_in_report
from tprof_engine.model.results import ProfiledTest
from tprof_engine.pairing import BASE, HEAD, SideConfig


def in_child() -> bool:
    """True inside the process this module started (it confirms nothing further)."""
    return bool(os.environ.get(INHERITED_SETTINGS))


def settings_for_child(
    settings: Settings,
    out: Path,
    torch_in_force: Mapping[str, Any] | None = None,
    random_state: dict[str, Any] | None = None,
) -> Settings:
    """The parent's settings as the child runs under them: comparing, never saving, writing
    only its JSON report and traces under ``out``, and setting the torch settings the parent's
    capture ran under and the random generators' state its test started from before the test
    starts."""
    run = replace(settings.run, trace_dir=out, save=False, reset=False, save_trace=False)
    return replace(
        settings,
        enabled=True,
        run=run,
        torch_settings=dict(torch_in_force or {}),
        random_state=random_state,
        json_path=out / "report.json",
        markdown_path=None,
        html_path=None,
        step_summary=None,
    )


def child_args(config: pytest.Config, nodeid: str) -> list[str]:
    """The command line that runs ``nodeid`` alone: what collects and sets it up as this run
    did (the rootdir, the ini file, the plugins and the options of the user's own conftest,
    such as ``--model-size``); the tprof settings come from the file the child inherits."""
    args = [
        sys.executable,
        "-m",
        "pytest",
        nodeid,
        "-q",
        "-p",
        "no:cacheprovider",
        f"--rootdir={config.rootpath}",
        "--tprof",
    ]
    args += passed_on(config.invocation_params.args, config.option.file_or_dir or ())
    if config.inipath is not None:
        args += ["-c", str(config.inipath)]
    if config.pluginmanager.hasplugin("xdist"):
        args.append("-n0")
    return args


# Options of the parent's command line the child must not repeat, with whether each takes a
# value: what selects or schedules tests (the child runs one, alone), what the cache plugin
# the child runs without reads, a debugger waiting on a terminal, the files and folders the
# parent writes (``--basetemp``: pytest empties it as a session starts), and what the child
# is given otherwise (the rootdir and ini file; the tprof settings, inherited whole).
NOT_PASSED_ON: dict[str, bool] = {
    **dict.fromkeys(("-n", "--numprocesses", "--maxprocesses", "--dist", "--tx"), True),
    **dict.fromkeys(("--rsyncdir", "--max-worker-restart", "--maxschedchunk"), True),
    **dict.fromkeys(("-d", "--distload", "-f", "--looponfail"), False),
    **dict.fromkeys(("--lf", "--last-failed", "--ff", "--failed-first", "--nf"), False),
    **dict.fromkeys(("--new-first", "--cache-clear", "--sw", "--stepwise"), False),
    **dict.fromkeys(("--sw-skip", "--stepwise-skip", "--sw-reset", "--stepwise-reset"), False),
    **dict.fromkeys(("--cache-show", "--lfnf", "--last-failed-no-failures"), True),
    **dict.fromkeys(("--pdb", "--trace", "--collect-only", "--co", "--setup-only"), False),
    **dict.fromkeys(("--setup-plan", "--setup-show"), False),
    **dict.fromkeys(("--pdbcls", "--basetemp", "--junitxml", "--junit-xml"), True),
    **dict.fromkeys(("--junit-prefix", "--report-log", "--result-log"), True),
    **dict.fromkeys(("--rootdir", "-c", "--config-file", "--confcutdir"), True),
}


def passed_on(given: Sequence[str], positional: Sequence[str] = ()) -> list[str]:
    """The parent's command line ``given`` as the child repeats it: its options, the user's
    own included (a conftest's ``--plant`` or ``--model-size`` changes what the test does),
    without the test paths and node ids it selected (``positional``: pytest's
    ``file_or_dir``), tprof's own options and :data:`NOT_PASSED_ON`."""
    paths = list(positional)
    valued = {**NOT_PASSED_ON, **dict.fromkeys(flags_with_values(), True)}
    out: list[str] = []
    rest = iter(given)
    for arg in rest:
        flag, eq, _ = arg.partition("=")
        if arg in paths:
            paths.remove(arg)
        elif flag in valued or flag.startswith(("--tprof", "--no-tprof")):
            if valued.get(flag) and not eq:
                next(rest, None)
        elif flag in ("-n", "-c") or (arg.startswith(("-n", "-c")) and arg[2:3] != "-"):
            continue  # -n4, -cfile.ini
        else:
            out.append(arg)
    return out


class Steps:
    """The confirmation steps this glue carries out for the engine's loop
    (:class:`tprof_engine.runner.FreshSteps`): a fresh process (on a side of tprof ab, a fresh
    pair) and, under xdist, the serial re-run once the workers finish.  Each child starts its
    test from the random state the parent's test started from (:meth:`started`)."""

    def __init__(
        self,
        config: pytest.Config,
        settings: Callable[[], Settings],
        *,
        workers: int = 1,
        pair: Callable[[], SideConfig | None] = lambda: None,
        before: Callable[[], None] = lambda: None,
    ) -> None:
        self._config, self._settings, self._pair, self._before = config, settings, pair, before
        self.workers = workers
        self.fresh_open = not in_child()
        self.random_states: dict[str, dict[str, Any]] = {}
        self._started = time.monotonic()

    def started(self, nodeid: str, random_state: dict[str, Any] | None = None) -> None:
        """A test starts: its clock (a fresh process gets 5x its time) and random state."""
        self._started = time.monotonic()
        if random_state is not None:
            self.random_states[nodeid] = random_state

    def remeasure(self, test: ProfiledTest) -> Look:
        """Never asked here: a re-measurement is the engine's, in the test's own process."""
        return Look(verdict=None, why="no capture of the test in this process")

    def fresh_process(self, test: ProfiledTest) -> Look:
        self._before()
        return verdict_in_fresh_process(
            self._config,
            self._settings(),
            test.nodeid,
            timeout=60.0 + 5.0 * (time.monotonic() - self._started),
            torch_in_force=test.settings,
            pair=self._pair(),
            random_state=self.random_states.get(test.nodeid),
        )

    def after_workers(self, test: ProfiledTest) -> Look:
        return verdict_in_fresh_process(
            self._config,
            self._settings(),
            test.nodeid,
            timeout=SERIAL_TIMEOUT_S,
            torch_in_force=test.settings,
            random_state=self.random_states.get(test.nodeid),
        )


SERIAL_TIMEOUT_S = 600.0  # one test re-run alone after the workers: generous, it runs once


def verdict_in_fresh_process(
    config: pytest.Config,
    settings: Settings,
    nodeid: str,
    *,
    timeout: float,
    torch_in_force: Mapping[str, Any] | None = None,
    pair: SideConfig | None = None,
    random_state: dict[str, Any] | None = None,
) -> Look:
    """``nodeid``'s verdict in a new pytest process set to the torch settings ``torch_in_force``
    (the parent capture's) and the generators' ``random_state`` (the parent test's at its
    start), or None and why none came back.  On a side of ``tprof ab`` (``pair``) both sides
    run it afresh, paired again."""
    if pair is not None:
        with_state = replace(settings, random_state=random_state)
        return _verdict_in_fresh_pair(config, with_state, nodeid, pair, timeout, torch_in_force)
    with tempfile.TemporaryDirectory(prefix="tprof-fresh-") as tmp:
        out = Path(tmp)
        inherited = out / "settings.pickle"
        child_settings = settings_for_child(settings, out, torch_in_force, random_state)
        inherited.write_bytes(pickle.dumps(child_settings))
        env = {**os.environ, INHERITED_SETTINGS: str(inherited)}
        try:
            done = subprocess.run(
                child_args(config, nodeid),
                cwd=config.rootpath,
                env=env,
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return Look(verdict=None, why=f"the fresh process took over {timeout:.0f} s")
        except OSError as exc:
            return Look(verdict=None, why=f"the fresh process did not start ({exc})")
        said = (done.returncode, done.stdout + done.stderr)
        return look_in_report(out / "report.json", nodeid, child_settings.torch_settings, said)


def _verdict_in_fresh_pair(
    config: pytest.Config,
    settings: Settings,
    nodeid: str,
    pair: SideConfig,
    timeout: float,
    torch_in_force: Mapping[str, Any] | None,
) -> Look:
    """Both sides of ``tprof ab`` run ``nodeid`` afresh, paired, each from the random state
    the head's test started from; the head child's verdict."""
    head_root, base_root = pair.head_root, pair.base_root
    with tempfile.TemporaryDirectory(prefix="tprof-fresh-pair-") as tmp:
        out = Path(tmp)
        launches = []
        for side, root in ((BASE, base_root), (HEAD, head_root)):
            (out / side).mkdir()
            inherited = out / side / "settings.pickle"
            inherited.write_bytes(
                pickle.dumps(
                    settings_for_child(settings, out / side, torch_in_force, settings.random_state)
                )
            )
            args = [a.replace(head_root, root) for a in child_args(config, nodeid)]
            env = {
                **os.environ,
                INHERITED_SETTINGS: str(inherited),
                "PYTHONPATH": ab.import_path(Path(root), os.environ),
            }
            cwd = Path(str(config.rootpath).replace(head_root, root))
            launches.append(ab.Launch(command=args, cwd=cwd, env=env))
        head_log = out / "head.log"
        with head_log.open("w") as said:
            codes = ab.run_pair(
                launches[0],
                launches[1],
                pair,
                base_log=out / "base.log",
                head_out=said,
                timeout=timeout,
            )
        if codes[1] < 0:
            return Look(verdict=None, why=f"the fresh pair took over {timeout:.0f} s")
        text = head_log.read_text(errors="replace")
        report = out / HEAD / "report.json"
        return look_in_report(report, nodeid, torch_in_force or {}, (codes[1], text))
