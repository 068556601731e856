"""Confirm a timing regression in a fresh pytest process.

On a shared machine an op's speed can belong to the process: in real reruns one op read
27-54 % slower in some pytest processes and not in others, and re-measuring in the same
process repeats it.  So a timing regression that survived the in-process re-measurement is
run once more in a new process, and fails the test only if it repeats there too.

The child judges under this run's own settings, not under a command line rebuilt from them:
the parent hands it its :class:`~pytest_tprof.options.Settings` (window, floors, ``-o``
overrides and all), with outputs of the child's own (a JSON report in a temporary folder, no
Markdown, no step summary).
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

import pytest

from pytest_tprof.options import INHERITED_SETTINGS, Settings
from tprof_engine.model.verdicts import Cause, TestVerdict


def in_child() -> bool:
    """True inside the process this module started (it confirms nothing further)."""
    return bool(os.environ.get(INHERITED_SETTINGS))


def settings_for_child(settings: Settings, out: Path) -> Settings:
    """The parent's settings as the child runs under them: comparing, never saving, and
    writing only its JSON report and traces under ``out``."""
    run = replace(settings.run, trace_dir=out, save=False, reset=False, save_trace=False)
    return replace(
        settings,
        enabled=True,
        run=run,
        json_path=out / "report.json",
        markdown_path=None,
        html_path=None,
        step_summary=None,
    )


def child_args(config: pytest.Config, nodeid: str) -> list[str]:
    """The command line that runs ``nodeid`` alone: what collects it as this run did (the
    rootdir, the ini file, ``-o`` overrides, plugins loaded by name); the settings come from
    the file the child inherits."""
    args = [sys.executable, "-m", "pytest", nodeid, "-q", "-p", "no:cacheprovider",
            f"--rootdir={config.rootpath}", "--tprof"]  # fmt: skip
    args += passed_on(config.invocation_params.args)
    if config.inipath is not None:
        args += ["-c", str(config.inipath)]
    if config.pluginmanager.hasplugin("xdist"):
        args.append("-n0")
    return args


def passed_on(given: tuple[str, ...] | list[str]) -> list[str]:
    """The options of a command line the child needs to collect a test as this run did:
    ``-p`` (a plugin loaded by name, this one when it is on the path but not installed) and
    ``-o`` / ``--override-ini`` (ini values for every plugin)."""
    out: list[str] = []
    rest = iter(given)
    for arg in rest:
        if arg in ("-p", "-o", "--override-ini"):
            out += [arg, next(rest, "")]
        elif arg.startswith(("-p", "-o", "--override-ini=")):
            out.append(arg)
    return out


def verdict_in_fresh_process(
    config: pytest.Config, settings: Settings, nodeid: str, *, timeout: float
) -> tuple[TestVerdict | None, str]:
    """``nodeid``'s verdict in a new pytest process, or None and why none came back."""
    with tempfile.TemporaryDirectory(prefix="tprof-fresh-") as tmp:
        out = Path(tmp)
        inherited = out / "settings.pickle"
        inherited.write_bytes(pickle.dumps(settings_for_child(settings, out)))
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
            return None, f"the fresh process took over {timeout:.0f} s"
        except OSError as exc:
            return None, f"the fresh process did not start ({exc})"
        return _verdict_of(out / "report.json", nodeid, done)


def _verdict_of(
    report: Path, nodeid: str, done: subprocess.CompletedProcess[str]
) -> tuple[TestVerdict | None, str]:
    try:
        doc = json.loads(report.read_text())
    except (OSError, ValueError):
        tail = (done.stdout + done.stderr).strip().splitlines()[-1:] or [""]
        return None, f"the fresh process gave no verdict (exit {done.returncode}: {tail[0]})"
    for test in doc.get("tests", []):
        if test.get("nodeid") == nodeid:
            causes = tuple(Cause.from_dict(c) for c in test.get("causes", []))
            return TestVerdict(verdict=test["verdict"], reason=test["reason"], causes=causes), ""
    return None, "the fresh process did not run the test"
