"""The trace writer: exports off the test's path, bounded, never beside measured rounds,
flushed, and a failed export a note rather than a lost verdict."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from tprof_engine.store.trace_writer import PENDING, TraceWriter, Written


def test_exports_run_in_order_off_the_calling_thread_and_finish_waits_for_them(
    tmp_path: Path,
) -> None:
    writer = TraceWriter()
    threads: list[str] = []

    def export(path: Path) -> tuple[Path | None, str]:
        threads.append(threading.current_thread().name)
        time.sleep(0.01)
        path.write_text("{}")
        return path, ""

    paths = [tmp_path / f"t{i}.json" for i in range(4)]
    for i, p in enumerate(paths):
        writer.submit(f"t{i}", p, export)
    done = writer.finish()
    assert [w.nodeid for w in done] == ["t0", "t1", "t2", "t3"]
    assert all(w.written == p and w.problem == "" for w, p in zip(done, paths, strict=True))
    assert set(threads) == {"tprof-traces"}
    assert writer.finish() == []  # nothing left, and no thread to stop


def test_quiet_returns_only_once_nothing_is_written_and_the_queue_is_bounded(
    tmp_path: Path,
) -> None:
    writer = TraceWriter()
    release = threading.Event()
    started = threading.Event()

    def slow(path: Path) -> tuple[Path | None, str]:
        started.set()
        release.wait(5)
        return path, ""

    writer.submit("first", tmp_path / "a", slow)
    started.wait(5)
    for i in range(PENDING):  # room for PENDING more while the first is written
        writer.submit(f"queued{i}", tmp_path / f"q{i}", lambda p: (p, ""))
    blocked = threading.Thread(target=writer.submit, args=("over", tmp_path / "o", slow))
    blocked.start()
    blocked.join(0.2)
    assert blocked.is_alive()  # the queue is full: the caller waits, as a test that writes would
    quieted = threading.Event()
    waiter = threading.Thread(target=lambda: (writer.quiet(), quieted.set()))
    waiter.start()
    assert not quieted.wait(0.2)  # rounds may not start while an export runs
    release.set()
    blocked.join(5)
    assert quieted.wait(5)
    assert [w.nodeid for w in writer.finish()] == ["first", "queued0", "queued1", "over"]


def test_a_failed_export_is_said_and_the_next_one_still_written(tmp_path: Path) -> None:
    writer = TraceWriter()
    pruned: list[Written] = []

    def broken(path: Path) -> tuple[Path | None, str]:
        raise RuntimeError("kineto gave up")

    writer.submit("bad", tmp_path / "bad.json", broken, then=pruned.append)
    writer.submit("full", tmp_path / "full.json", lambda p: (None, f"{p}: disk full"))
    writer.submit("good", tmp_path / "good.json", lambda p: (p, ""), then=pruned.append)
    bad, full, good = writer.finish()
    assert bad.written is None
    assert (
        bad.problem == f"{tmp_path / 'bad.json'}: trace not written (RuntimeError: kineto gave up)"
    )
    assert full.problem.endswith("disk full") and good.written == tmp_path / "good.json"
    assert pruned == [good]  # pruning follows a trace that was written, only


def test_an_export_a_warning_filter_fails_is_written_by_the_main_thread_quietly(
    tmp_path: Path,
) -> None:
    import warnings

    writer = TraceWriter()
    threads: list[str] = []

    def warns(path: Path) -> tuple[Path | None, str]:
        threads.append(threading.current_thread().name)
        if threading.current_thread() is not threading.main_thread():
            warnings.warn("the profiler warns in export", UserWarning, stacklevel=1)
        path.write_text("{}")
        return path, ""

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a filterwarnings = error suite
        writer.submit("t", tmp_path / "t.json", warns)
        writer.quiet()  # the main thread, before the next test's rounds
    (done,) = writer.finish()
    assert (done.written, done.problem) == (tmp_path / "t.json", "")
    assert threads == ["tprof-traces", "MainThread"]


def test_a_harness_that_never_finishes_still_gets_its_traces_at_exit(tmp_path: Path) -> None:
    import subprocess
    import sys

    script = (
        "import sys, time\n"
        "from pathlib import Path\n"
        "from tprof_engine.store.trace_writer import TraceWriter\n"
        "def slow(p):\n"
        "    time.sleep(0.3)\n"
        "    p.write_text('{}')\n"
        "    return p, ''\n"
        "TraceWriter().submit('t', Path(sys.argv[1]), slow)\n"
    )
    out = tmp_path / "t.json"
    done = subprocess.run([sys.executable, "-c", script, str(out)], timeout=60, check=False)
    assert done.returncode == 0 and out.read_text() == "{}"
