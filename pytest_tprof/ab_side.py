"""A pytest process that is one side of ``tprof ab`` (``$TPROF_AB`` set by the controller,
:mod:`tprof_engine.ab`): it meets the other side at each common test, in the same order, and
its runner paces, hands over or judges that test's rounds (:mod:`tprof_engine.pairing`).
"""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Generator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tprof_engine.ab import foreign_message, foreign_modules, is_xdist
from tprof_engine.pairing import BASE, ENV, Pairing, SideConfig, channel_from_fd

# The tool itself is not the code measured: both sides may load it from one place.
_TOOL = ("tprof_engine", "pytest_tprof")
# Fixtures of the tests tprof profiles (pytest-benchmark's, under --tprof, too).
_PROFILED = frozenset({"tprof", "benchmark"})


def side_config() -> SideConfig | None:
    """This process's side, when ``tprof ab`` started it."""
    text = os.environ.get(ENV)
    if not text:
        return None
    try:
        return SideConfig.from_env(text)
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from exc


class AbSide:
    """The hooks of one side: the common tests in one order, a meeting at each."""

    def __init__(self, plugin: Any, config: SideConfig) -> None:
        self.plugin, self.config = plugin, config
        self.pairing = Pairing(config, channel_from_fd(config.fd))
        self.common: set[str] = set()
        if config.side == BASE:  # the head reports; the base only measures
            plugin.settings = replace(
                plugin.settings,
                json_path=None,
                markdown_path=None,
                html_path=None,
                step_summary=None,
            )

    def described(self) -> dict[str, object]:
        """The run's two sides, for its reports."""
        c = self.config
        return {"base": c.label, "mode": c.mode, "cpus": list(c.cpus), "side": c.side}

    def pytest_report_header(self) -> list[str]:
        if self.config.side == BASE:
            return [f"tprof ab: base side ({self.config.label}); the head side judges"]
        return [
            f"tprof ab: head (working tree) against base {self.config.label}: each test's "
            f"rounds paired with the base's ({self.config.mode}), judged pair by pair"
        ]

    def header_words(self, baselines: Path, traces: Path | None) -> tuple[str, str]:
        """The run header's mode and folders on a side: what its rounds are for, and the
        stored baselines the head judges beside the pairs only where that folder exists."""
        if self.config.side == BASE:
            return "measuring the base's rounds for tprof ab", f"tprof: traces {traces}"
        stored = f"; stored baselines, judged beside the pairs: {baselines}"
        return (
            "judging against the base's rounds, pair by pair (tprof ab)",
            f"tprof: traces {traces}" + (stored if baselines.is_dir() else ""),
        )

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(
        self, config: pytest.Config, items: list[pytest.Item]
    ) -> None:
        if self.config.only:  # a retry of the tests whose timing was not judged
            keep = set(self.config.only)
            config.hook.pytest_deselected(items=[i for i in items if i.nodeid not in keep])
            items[:] = [i for i in items if i.nodeid in keep]
        own, other = self._roots()
        found = [m for m in foreign_modules(sys.modules, own, other) if not m[0].startswith(_TOOL)]
        if found:
            self.pairing.channel.close()
            pytest.exit(foreign_message(self.config.side, found), returncode=4)
        profiled = [i.nodeid for i in items if _PROFILED & set(getattr(i, "fixturenames", ()))]
        common = self.pairing.common_tests(profiled) or []
        items[:] = in_order(items, common)
        self.common = set(common)
        self.plugin.runner.pairing = self.pairing

    def _roots(self) -> tuple[str, str]:
        c = self.config
        return (c.base_root, c.head_root) if c.side == BASE else (c.head_root, c.base_root)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> Generator[None, object, object]:
        if item.nodeid not in self.common:
            self.pairing.solo(item.nodeid, f"the {self.pairing.other} side has no such test")
            return (yield)
        self.pairing.begin(item.nodeid)
        try:
            return (yield)
        finally:
            self.pairing.end(item.nodeid)

    def pytest_sessionfinish(self) -> None:
        self.pairing.channel.close()


def in_order(items: Sequence[pytest.Item], common: Sequence[str]) -> list[pytest.Item]:
    """``items`` with the common tests in ``common``'s order, in the places the common tests
    held; the others stay where they were."""
    by_id = {i.nodeid: i for i in items}
    queue = iter(by_id[n] for n in common if n in by_id)
    wanted = set(common)
    return [next(queue) if i.nodeid in wanted else i for i in items]


def register(config: pytest.Config, plugin: Any) -> AbSide | None:
    """The side's hooks, registered when ``tprof ab`` started this process."""
    found = side_config()
    if found is None:
        return None
    if plugin.workers > 1 or config.getoption("numprocesses", None):
        raise pytest.UsageError(
            f"tprof ab runs each side serially: drop -n (given {xdist_source(config)})"
        )
    side = AbSide(plugin, found)
    config.pluginmanager.register(side, "tprof-ab-side")
    plugin.state.report_extra["ab"] = side.described()  # the reports say which base
    return side


def xdist_source(config: pytest.Config) -> str:
    """Where the run's -n came from: the command line, PYTEST_ADDOPTS or the ini file's
    addopts (pytest reads them all as one command line)."""
    if is_xdist(config.invocation_params.args):
        return "on the command line, after REF"
    if is_xdist(shlex.split(os.environ.get("PYTEST_ADDOPTS", ""))):
        return "in PYTEST_ADDOPTS"
    if config.inipath is not None:  # as seen from where the run started, on either side
        return f"in addopts of {os.path.relpath(config.inipath, config.invocation_params.dir)}"
    return "to pytest"
