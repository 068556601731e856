"""Hostile files for the library: FIFOs, devices, gzip bombs, huge counts, concurrent savers,
folders where files should be (and files where folders should be), unwritable traces."""

from __future__ import annotations

import errno
import gzip
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from tprof_testing import deadline, enospc

from tprof_engine import window
from tprof_engine.capture import session
from tprof_engine.cli import main
from tprof_engine.model.environment import Fingerprint
from tprof_engine.model.errors import BaselineError, ConfigError, TraceError
from tprof_engine.model.limits import MAX_ITERATIONS
from tprof_engine.model.records import OpTable
from tprof_engine.store import baselines, files, paths, reading, schema, trace_gzip, traces

FIX = "restore it from git or re-record it with --tprof-save"
NODEID = "tests/test_m.py::test_a"
TRACE_FIX = "pass a trace written by torch.profiler or pytest --tprof"
needs_fifo = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")


def make_table(rounds: int = 4, value: float = 10.0) -> OpTable:
    times = np.full((1, rounds), value)
    return OpTable(
        names=("aten::mm",),
        calls=np.ones((1, rounds), dtype=np.int64),
        self_cpu_us=times,
        total_cpu_us=times,
        self_device_us=times * 0,
        total_device_us=times * 0,
        wall_us=np.full(rounds, value * 2),
        probe_cpu_us=np.full(rounds, 50.0),
        probe_device_us=np.zeros(rounds),
    )


def make_baseline(sessions: int = 1, nodeid: str = NODEID) -> schema.Baseline:
    return schema.Baseline(
        nodeid=nodeid,
        fingerprint=Fingerprint(hard={"torch": "2.13.0"}),
        protocol={"rounds": 4, "iterations": 1},
        sessions=tuple(
            schema.Session(table=make_table(value=10.0 + i), recorded_at=f"s{i}", warmup_used=0)
            for i in range(sessions)
        ),
    )


def fifo(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(path)
    return path


# --------------------------------------------------------------------------- regular files only


@needs_fifo
def test_a_fifo_named_like_a_baseline_is_an_error_not_a_hang(tmp_path: Path) -> None:
    path = fifo(tmp_path / "b.json")
    with deadline(20), pytest.raises(BaselineError) as info:
        baselines.load_baseline(path)
    assert str(info.value) == (
        f"{path}: is a FIFO, not a baseline file; move it away or re-record with --tprof-save"
    )
    with deadline(20):
        assert reading.read_nodeid(path) is None


@needs_fifo
def test_the_stale_listing_and_tprof_show_pass_a_fifo_in_the_baseline_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = baselines.save_baseline(tmp_path / "env" / "good.json", make_baseline())
    bad = fifo(tmp_path / "env" / "stray.json")
    assert list(paths.iter_baselines(tmp_path)) == [good, bad]
    with deadline(30):
        assert [reading.read_nodeid(p) for p in paths.iter_baselines(tmp_path)] == [NODEID, None]
        code = main(["show", str(tmp_path)])
    captured = capsys.readouterr()
    assert code == 2
    assert captured.out.startswith(f"{NODEID}  ({good})\n")
    assert captured.err.splitlines() == [
        f"tprof: error: {bad}: is a FIFO, not a baseline file; move it away or re-record with "
        "--tprof-save"
    ]


@needs_fifo
def test_tprof_show_of_a_fifo_or_dev_zero_is_an_error_not_a_hang(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pipe = fifo(tmp_path / "pipe.json")
    gz = fifo(tmp_path / "pipe.pt.trace.json.gz")
    with deadline(30):
        codes = [main(["show", str(p)]) for p in (pipe, gz, Path("/dev/zero"))]
    assert codes == [2, 2, 2]
    assert capsys.readouterr().err.splitlines() == [
        f"tprof: error: {pipe}: is a FIFO, not a baseline file; move it away or re-record with "
        "--tprof-save",
        f"tprof: error: {gz}: is a FIFO, not a trace file; {TRACE_FIX}",
        "tprof: error: /dev/zero: is a character device, not a baseline file; move it away or "
        "re-record with --tprof-save",
    ]


def test_read_regular_refuses_folders_devices_and_files_over_the_limit(tmp_path: Path) -> None:
    with pytest.raises(IsADirectoryError):
        files.read_regular(tmp_path, limit=10)
    with pytest.raises(files.NotRegularFileError) as info:
        files.read_regular(Path("/dev/null"), limit=10)
    assert info.value.kind == "character device"
    big = tmp_path / "big.json"
    big.write_bytes(b"x" * 11)
    with pytest.raises(files.FileTooLargeError):
        files.read_regular(big, limit=10)
    assert files.read_regular(big, limit=11) == b"x" * 11


def test_a_baseline_over_the_size_limit_is_an_error_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = baselines.save_baseline(tmp_path / "b.json", make_baseline())
    monkeypatch.setattr(reading, "MAX_BASELINE_BYTES", 2**20 - 1)
    path.write_bytes(b" " * 2**20)
    with pytest.raises(BaselineError) as info:
        baselines.load_baseline(path)
    assert str(info.value) == (
        f"{path}: larger than 0 MiB, so not a baseline this version wrote; {FIX}"
    )


# --------------------------------------------------------------------------- traces: size caps


def test_a_gzip_trace_that_expands_past_the_cap_is_an_error_before_it_is_all_in_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(traces, "MAX_TRACE_BYTES", 2**20)
    bomb = tmp_path / "bomb.pt.trace.json.gz"
    # 1 MiB + 1 byte of JSON, compressed to a few KB: the cap, not the file size, stops it.
    bomb.write_bytes(gzip.compress(b"[" + b" " * 2**20 + b"]", compresslevel=9))
    assert bomb.stat().st_size < 10_000
    with pytest.raises(TraceError) as info:
        traces.read_trace(bomb)
    assert str(info.value) == (
        f"{bomb}: expands to more than 1 MiB of JSON, more than tprof reads; "
        "pass a trace of fewer rounds or steps"
    )
    plain = tmp_path / "big.pt.trace.json"
    plain.write_bytes(b"[" + b" " * 2**20 + b"]")
    with pytest.raises(TraceError) as info:
        traces.read_trace(plain)
    assert str(info.value) == (
        f"{plain}: larger than 1 MiB, more than tprof reads; pass a trace of fewer rounds or steps"
    )


def test_the_default_trace_cap_is_far_above_what_tprof_writes() -> None:
    # ≈ 250 bytes per event: a 105k-event trace is ≈ 27 MB, a tenth of the cap.
    assert 105_000 * 250 * 9 < traces.MAX_TRACE_BYTES <= 256 * 2**20


# --------------------------------------------------------------------------- what a file may ask


def test_a_baseline_asking_for_more_iterations_than_calibration_gives_is_an_error(
    tmp_path: Path,
) -> None:
    data = make_baseline().to_dict()
    data["protocol"]["iterations"] = 1_000_000
    path = tmp_path / "b.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(BaselineError) as info:
        baselines.load_baseline(path)
    assert str(info.value) == (
        f"{path}: 'protocol.iterations' must be an integer from 1 to 1000 (got 1000000); {FIX}"
    )
    assert MAX_ITERATIONS == 1000
    data["protocol"]["iterations"] = 1000
    path.write_text(json.dumps(data), encoding="utf-8")
    assert baselines.load_baseline(path).protocol["iterations"] == 1000


def test_calibration_never_asks_for_more_iterations_than_a_baseline_may_hold() -> None:
    assert session.calibrate_iterations(lambda: None, min_round_us=1e9) == MAX_ITERATIONS


def test_a_baseline_of_10000_sessions_is_read_as_its_newest_window(tmp_path: Path) -> None:
    data = make_baseline(sessions=12).to_dict()
    newest = data["sessions"]
    # Older sessions are never read, so this costs what a file of the window does.
    data["sessions"] = ["not a session"] * 9_988 + newest
    path = tmp_path / "b.json"
    path.write_text(json.dumps(data), encoding="utf-8")

    kept = baselines.load_baseline(path, keep=5)
    assert [s.recorded_at for s in kept.sessions] == [f"s{i}" for i in range(7, 12)]
    # Without a window (tprof show, diff) the reader takes the newest 100: here, the junk too.
    assert schema.MAX_SESSIONS == 100
    with pytest.raises(BaselineError) as info:
        baselines.load_baseline(path)
    assert str(info.value) == (
        f"{path}: 'sessions[9900]' must be an object (got a JSON string); {FIX}"
    )


def test_a_save_after_reading_the_window_keeps_every_session_the_window_keeps(
    tmp_path: Path,
) -> None:
    path = baselines.save_baseline(tmp_path / "b.json", make_baseline(sessions=8))
    existing = baselines.load_baseline(path, keep=10)
    session = schema.Session(table=make_table(value=99.0), recorded_at="new", warmup_used=0)
    updated, what = window.with_session(
        existing,
        nodeid=NODEID,
        fingerprint=existing.fingerprint,
        protocol=existing.protocol,
        session=session,
        window=10,
    )
    assert what == "appended (9 sessions)"
    assert [s.recorded_at for s in updated.sessions] == [*(f"s{i}" for i in range(8)), "new"]


# --------------------------------------------------------------------------- saving: locks


SAVER = textwrap.dedent(
    """
    import os, sys, time
    from pathlib import Path
    from tprof_engine.store import files, reading

    path, name, n = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    go = path.parent / "go"
    while not go.exists():
        time.sleep(0.01)
    for i in range(n):
        with files.locked(path):  # read, wait (a slow disk), write: loses lines without it
            lines = path.read_text().splitlines() if path.exists() else []
            time.sleep(0.01)
            files.write_atomic(path, "\\n".join([*lines, f"{name}-{i}"]) + "\\n")
    """
)


def test_the_lock_makes_read_modify_write_of_two_processes_lose_nothing(tmp_path: Path) -> None:
    path = tmp_path / "b.json"
    root = str(Path(files.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": root}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", SAVER, str(path), name, "20"],
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for name in ("a", "b")
    ]
    (tmp_path / "go").touch()
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
    lines = path.read_text().splitlines()
    assert sorted(lines) == sorted(f"{w}-{i}" for w in "ab" for i in range(20))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.json", "go"]  # no lock file left


def test_a_lock_file_is_no_baseline_and_a_stale_one_does_not_block(tmp_path: Path) -> None:
    path = baselines.save_baseline(tmp_path / "env" / "b.json", make_baseline())
    stale = path.with_name(".b.json.lock")
    stale.write_text("", encoding="utf-8")  # left by a process killed holding the lock
    assert list(paths.iter_baselines(tmp_path)) == [path]
    with deadline(20), paths.locked(path):
        assert list(paths.iter_baselines(tmp_path)) == [path]
    assert not stale.exists()


def test_locking_where_a_file_stands_for_the_folder_is_an_error_naming_it(tmp_path: Path) -> None:
    (tmp_path / "base").write_text("a file", encoding="utf-8")
    path = tmp_path / "base" / "env" / "b.json"
    with pytest.raises(BaselineError) as info, paths.locked(path):
        pass
    assert str(info.value) == (
        f"{path}: can't write the baseline: {tmp_path / 'base'} is a file, not a folder; "
        "move it away and re-run with --tprof-save"
    )


def test_a_file_system_without_flock_saves_without_a_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import fcntl

    def no_locks(fd: int, op: int) -> None:
        raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))

    monkeypatch.setattr(fcntl, "flock", no_locks)
    path = tmp_path / "b.json"
    with files.locked(path):
        files.write_atomic(path, "{}")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.json"]


# --------------------------------------------------------------------------- folders and files


def test_saving_over_a_folder_says_it_is_a_folder(tmp_path: Path) -> None:
    path = tmp_path / "b.json"
    path.mkdir()
    with pytest.raises(BaselineError) as info:
        baselines.save_baseline(path, make_baseline())
    assert str(info.value) == (
        f"{path}: can't write the baseline: it is a folder; move it away and re-run with "
        "--tprof-save"
    )


def test_a_baseline_folder_that_is_a_file_is_named_as_the_reason_there_is_no_baseline(
    tmp_path: Path,
) -> None:
    root = tmp_path / "baselines"
    root.write_text("a file", encoding="utf-8")
    assert paths.folder_error(paths.baseline_path(root, "env", NODEID)) == (
        f"{root}: is a file, not a baseline folder; move it away or point --tprof-baseline-dir "
        "at a folder"
    )
    assert paths.folder_error(paths.baseline_path(tmp_path / "other", "env", NODEID)) is None


def test_a_report_never_replaces_a_baseline(tmp_path: Path) -> None:
    root = tmp_path / "baselines"
    inside = baselines.save_baseline(root / "env" / "b.json", make_baseline())
    moved = tmp_path / "copy.json"
    moved.write_bytes(inside.read_bytes())
    with pytest.raises(ConfigError) as info:
        reading.check_not_baseline(inside, root)
    assert str(info.value) == (
        f"{inside}: is inside the baseline folder {root}, and only --tprof-save writes "
        "baselines; write the report elsewhere"
    )
    with pytest.raises(ConfigError) as info:
        reading.check_not_baseline(moved, root)
    assert str(info.value) == (
        f"{moved}: is a pytest-tprof baseline, and only --tprof-save writes baselines; "
        "write the report elsewhere"
    )
    reading.check_not_baseline(tmp_path / "report.json", root)  # new files are fine
    (tmp_path / "old.json").write_text('{"tests": []}', encoding="utf-8")
    reading.check_not_baseline(tmp_path / "old.json", root)  # so are old reports


def test_tprof_diff_json_refuses_to_overwrite_a_baseline(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = baselines.save_baseline(tmp_path / "a.json", make_baseline())
    b = baselines.save_baseline(tmp_path / "b.json", make_baseline())
    before = a.read_bytes()
    assert main(["diff", str(a), str(b), "--json", str(a)]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"tprof: error: {a}: is a pytest-tprof baseline, and only --tprof-save writes "
        "baselines; write the report elsewhere"
    ]
    assert a.read_bytes() == before


def test_tprof_diff_of_two_files_of_different_tests_refuses_naming_both(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = baselines.save_baseline(tmp_path / "a.json", make_baseline(nodeid="t.py::test_a"))
    b = baselines.save_baseline(tmp_path / "b.json", make_baseline(nodeid="t.py::test_b"))
    assert main(["diff", str(a), str(b)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.splitlines() == [
        f"tprof: error: {a} holds 't.py::test_a' but {b} holds 't.py::test_b', so they can't "
        "be judged as one test; pass two files of the same test"
    ]


# --------------------------------------------------------------------------- traces not written


class FakeProfile:
    """A profiler session whose export writes what kineto would, or fails as kineto does."""

    def __init__(self, *, full_disk: bool = False) -> None:
        self.full_disk = full_disk

    def export_chrome_trace(self, path: str) -> None:
        tmp = Path(path + ".tmp")  # kineto writes <path>.tmp, then renames it
        if self.full_disk:  # kineto logs "Failed to write" and returns
            tmp.write_text('{"traceEvents": [{"ph": "X", "na', encoding="utf-8")
            return
        tmp.write_text('{"traceEvents": []}\n', encoding="utf-8")
        os.replace(tmp, path)


def written_by(prof: FakeProfile, path: Path) -> tuple[Path | None, str]:
    """The store's writer, given the fake session's export."""
    return trace_gzip.write_gzipped(path, export=lambda plain: prof.export_chrome_trace(str(plain)))


def everything(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def test_a_trace_is_written_whole_and_nothing_else_is_left(tmp_path: Path) -> None:
    path = tmp_path / "traces" / "t.pt.trace.json.gz"
    assert written_by(FakeProfile(), path) == (path, "")
    assert json.loads(gzip.decompress(path.read_bytes())) == {"traceEvents": []}
    assert everything(tmp_path / "traces") == ["t.pt.trace.json.gz"]


def test_a_full_disk_under_the_profilers_export_is_a_reason_not_a_truncated_trace(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "traces"
    path = folder / "t.pt.trace.json.gz"
    written_by(FakeProfile(), path)
    before = path.read_bytes()
    written, why = written_by(FakeProfile(full_disk=True), path)
    assert written is None
    assert why == (
        f"{path}: trace not written (the profiler's export failed; is the disk full?); free "
        f"space on or fix the permissions of {folder}, or pass another --tprof-trace-dir"
    )
    assert path.read_bytes() == before
    assert everything(folder) == ["t.pt.trace.json.gz"]  # kineto's temp file went too


def test_a_full_disk_while_gzipping_leaves_no_temp_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(trace_gzip.shutil, "copyfileobj", enospc)
    folder = tmp_path / "traces"
    path = folder / "t.pt.trace.json.gz"
    written, why = written_by(FakeProfile(), path)
    assert written is None
    assert why == (
        f"{path}: trace not written (No space left on device); free space on or fix the "
        f"permissions of {folder}, or pass another --tprof-trace-dir"
    )
    assert everything(folder) == []


@pytest.mark.parametrize("where", ["folder", "parent"])
def test_a_trace_folder_that_is_a_file_is_a_reason_naming_it(tmp_path: Path, where: str) -> None:
    blocking = tmp_path / "traces"
    blocking.write_text("a file", encoding="utf-8")
    folder = blocking if where == "folder" else blocking / "sub"
    path = folder / "t.pt.trace.json.gz"
    assert written_by(FakeProfile(), path) == (
        None,
        f"{path}: trace not written: {blocking} is a file, not a folder; move it away or pass "
        "another --tprof-trace-dir",
    )
    assert everything(tmp_path) == ["traces"]
