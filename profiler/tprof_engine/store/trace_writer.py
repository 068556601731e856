"""Chrome traces written off the test's path: a writer thread takes each capture's export and
writes it while the next test sets up, calibrates and warms up.

- **Bounded.** At most :data:`PENDING` exports wait (each holds its profiler session's
  events); a test that finds the queue full waits for room, as it would have written its own.
- **Never beside measured rounds.** :meth:`TraceWriter.quiet` waits until nothing is being
  written: a capture calls it before its profiled rounds start, so an export's CPU, memory
  bandwidth and GIL never share a round (nor a profiler session) with a test being measured.
- **Flushed.** :meth:`TraceWriter.finish` waits for every export, at the end of the run (and of
  an xdist worker), and gives what each wrote or why it couldn't: a failed write is a note on
  its test and a line in the summary; the verdict never depends on it.
- **The warning filters stay the test's.** They are the process's, so the writer can't quiet
  a warning of the export the way the main thread does (``torch_api.own_warnings_quiet``)
  without touching the running test's.  An export that a filter turns into an error (a
  ``filterwarnings = error`` suite) is handed back and written by the main thread, quietly, at
  the next :meth:`TraceWriter.quiet` or :meth:`TraceWriter.finish`.
- **Atomic.** Each export goes to a temporary name and is renamed when complete
  (``store.files.atomic_path``): a run killed mid-export leaves no half-written trace under a
  final name, and every trace of a test whose export finished is whole.
"""

from __future__ import annotations

import atexit
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

PENDING: Final = 2  # exports waiting at most: each holds a profiler session's events

# Writes a capture's trace to a path: (the path written or None, why not).
Export = Callable[[Path], tuple[Path | None, str]]


@dataclass(frozen=True, slots=True)
class Written:
    """One export's outcome: the test, the path it was given, the path written (None: not)
    and why not."""

    nodeid: str
    path: Path
    written: Path | None
    problem: str = ""


_Job = tuple[str, Path, Export, Callable[["Written"], None] | None]


@dataclass
class _State:
    done: list[Written] = field(default_factory=list)
    busy: int = 0  # exports taken and not finished
    handed_back: list[_Job] = field(default_factory=list)  # for the main thread to write


class TraceWriter:
    """A thread writing traces in the order given; started on the first :meth:`submit`."""

    def __init__(self) -> None:
        self._jobs: queue.Queue[_Job | None] = queue.Queue(maxsize=PENDING)
        self._state = _State()
        self._idle = threading.Condition()
        self._thread: threading.Thread | None = None

    def submit(
        self, nodeid: str, path: Path, export: Export, then: Callable[[Written], None] | None = None
    ) -> None:
        """Queue the export of ``nodeid``'s trace to ``path`` (waits while the queue is full);
        ``then`` runs in the writer once it is written (pruning the test's older traces)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="tprof-traces", daemon=True)
            self._thread.start()
            atexit.register(self.finish)  # a harness that never finishes still gets its traces
        with self._idle:
            self._state.busy += 1
        self._jobs.put((nodeid, path, export, then))

    def quiet(self) -> None:
        """Return once no export is queued or being written, and those handed back are
        written (by the calling thread, the main one)."""
        with self._idle:
            self._idle.wait_for(lambda: self._state.busy == 0)
            back, self._state.handed_back = self._state.handed_back, []
        for job in back:
            outcome = _written(job)
            with self._idle:
                self._state.done.append(outcome)

    def finish(self) -> list[Written]:
        """Wait for every export and stop the thread; what each export did, in order."""
        self.quiet()
        if self._thread is not None:
            self._jobs.put(None)
            self._thread.join()
            self._thread = None
        with self._idle:
            done, self._state.done = self._state.done, []
        return done

    def _run(self) -> None:
        while (job := self._jobs.get()) is not None:
            outcome: Written | None = None
            try:
                outcome = _written(job, hand_back=Warning)
            except Warning:  # a filter made one an error: the main thread writes it quietly
                pass
            except Exception as exc:  # pruning after it failed: say so, never end the run
                outcome = Written(job[0], job[1], None, f"{job[1]}: {type(exc).__name__}: {exc}")
            finally:
                with self._idle:
                    if outcome is None:
                        self._state.handed_back.append(job)
                    else:
                        self._state.done.append(outcome)
                    self._state.busy -= 1
                    self._idle.notify_all()


def _written(job: _Job, hand_back: type[BaseException] | tuple[()] = ()) -> Written:
    """One export done: what it wrote, or why not (``hand_back`` propagates)."""
    nodeid, path, export, then = job
    try:
        written, problem = export(path)
    except hand_back:
        raise
    except Exception as exc:  # a writer's failure must not end the run
        return Written(
            nodeid, path, None, f"{path}: trace not written ({type(exc).__name__}: {exc})"
        )
    outcome = Written(nodeid, path, written, problem)
    if then is not None and written is not None:
        then(outcome)
    return outcome
