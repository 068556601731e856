"""One run's traces: where each test's goes, whether its verdict wants one, written now or by
the writer thread (``store.trace_writer``), and the older ones pruned (``store.trace_files``).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from tprof_engine.model.costs import Stopwatch
from tprof_engine.model.results import ProfiledTest
from tprof_engine.store import trace_files
from tprof_engine.store.trace_writer import TraceWriter, Written


class RunTraces:
    """The traces of one run into ``folder`` (None: the run writes none)."""

    def __init__(
        self, folder: Path | None, *, every: bool, save_trace: bool, keep_runs: int
    ) -> None:
        self.folder = folder
        self.every, self.save_trace, self.keep_runs = every, save_trace, keep_runs
        self.stamp = trace_files.run_stamp()  # names this run's traces
        self.writer = TraceWriter()  # writes them while the next test sets up
        self.pruned: list[Path] = []  # older traces this run removed (the keep bound)

    def path(self, nodeid: str) -> Path | None:
        """Where this run writes the test's trace, when it writes one."""
        if self.folder is None:
            return None
        return trace_files.trace_path(self.folder, nodeid, self.stamp)

    def kept(
        self, test: ProfiledTest, export: Any, watch: Stopwatch, *, later: bool = True
    ) -> ProfiledTest:
        """The test naming its trace when its verdict wants one: a regression's written now
        (its side-by-side trace reads it), and one that can't wait (``later`` False), every
        other one queued for the writer; a passing test's older traces pruned to the newest
        runs."""
        path = self.path(test.nodeid)
        if path is None or export is None:
            return test
        word = test.verdict.verdict
        prune = trace_files.prunes(word)
        if not trace_files.wanted(word, every=self.every, save_trace=self.save_trace):
            if prune:
                self._prune(Written(test.nodeid, path, None))
            return test
        if test.verdict.regressed or not later:
            with watch.stage("export"):
                test = trace_files.with_written(test, *export(path))
            if prune and test.trace is not None:
                self._prune(Written(test.nodeid, path, Path(test.trace)))
            return test
        self.writer.submit(test.nodeid, path, export, self._prune if prune else None)
        return replace(test, trace=str(path))

    def _prune(self, written: Written) -> None:
        folder = written.path.parent
        self.pruned += trace_files.prune_runs(folder, written.nodeid, self.keep_runs)

    def quiet(self) -> None:
        """Return once no trace is being written (before profiled rounds start)."""
        self.writer.quiet()

    def finish(self) -> list[Written]:
        """Wait for the queued traces; what each export did."""
        return self.writer.finish()
