"""Saving baselines under faults: full disks, read-only folders, kills and concurrent savers."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from tprof_testing import FaultyOs, enospc

from tprof_engine.model.environment import Fingerprint
from tprof_engine.model.errors import BaselineError
from tprof_engine.model.records import OpTable
from tprof_engine.store import baselines, packing, paths, reading, schema

NODEID = "tests/test_m.py::test_a"

# A child process that saves baselines; shared by the kill and concurrency tests.
CHILD = textwrap.dedent(
    """
    import os, sys, time
    from pathlib import Path
    import numpy as np
    from tprof_engine.model.environment import Fingerprint
    from tprof_engine.model.records import OpTable
    from tprof_engine.store import baselines, paths, reading, schema

    def baseline(nodeid, ops, rounds, value):
        names = tuple(f"aten::op{i:04d}" for i in range(ops))
        times = np.full((ops, rounds), float(value))
        table = OpTable(
            names=names, calls=np.full((ops, rounds), value, dtype=np.int64),
            self_cpu_us=times, total_cpu_us=times, self_device_us=times * 0,
            total_device_us=times * 0, wall_us=np.full(rounds, float(value)),
            probe_cpu_us=np.ones(rounds), probe_device_us=np.zeros(rounds),
        )
        session = schema.Session(table=table, recorded_at="t", warmup_used=0)
        return schema.Baseline(
            nodeid=nodeid, fingerprint=Fingerprint(hard={"torch": "x"}),
            protocol={"rounds": rounds}, sessions=(session,),
        )

    mode, folder = sys.argv[1], Path(sys.argv[2])
    if mode == "kill":  # fork savers and SIGKILL them at random points
        import json, random, signal
        rng = random.Random(int(sys.argv[3]))
        real_write = os.write

        def slow_write(fd, data):  # a slow disk: the kill often lands mid-file
            time.sleep(0.0005)
            return real_write(fd, data[:2048])

        env, results = folder / "env", []
        for k in range(int(sys.argv[4])):
            pid = os.fork()
            if pid == 0:
                paths.os = type("SlowOs", (), {
                    "__getattr__": staticmethod(lambda name: getattr(os, name)),
                    "write": staticmethod(slow_write),
                })()
                while True:
                    for i in (k % 3, (k + 1) % 3, (k + 2) % 3):
                        node = f"t.py::test_{i}"
                        baselines.save_baseline(paths.baseline_path(folder, "env", node),
                                                baseline(node, 60, 10, k + 1))
            time.sleep(rng.uniform(0.0, 0.1))
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            temps = [p.name for p in env.glob(".*.tmp")] if env.exists() else []
            loaded = {}
            for path in paths.iter_baselines(env):
                try:
                    loaded[path.name] = int(baselines.load_baseline(path).tables[0].calls[0, 0])
                except Exception as exc:
                    loaded[path.name] = repr(exc)
            results.append({"temps": len(temps), "loaded": loaded})
        print(json.dumps(results), flush=True)
    elif mode == "stall":  # write, then hang just before the rename
        def stalled_replace(src, dst):
            print("replacing", flush=True)
            time.sleep(60)
        paths.os = type("StalledOs", (), {
            "__getattr__": staticmethod(lambda name: getattr(os, name)),
            "replace": staticmethod(stalled_replace),
        })()
        node = "t.py::test_0"
        baselines.save_baseline(paths.baseline_path(folder, "env", node), baseline(node, 5, 4, 2))
    elif mode == "many":  # save distinct tests as fast as possible
        prefix, count = sys.argv[3], int(sys.argv[4])
        while not (folder.parent / "go").exists():
            time.sleep(0.001)
        for i in range(count):
            node = f"t.py::test_{prefix}_{i}"
            path = paths.baseline_path(folder, "env", node)
            baselines.save_baseline(path, baseline(node, 30, 8, i))
    """
)


def child(*args: str) -> subprocess.Popen[str]:
    """Run CHILD with the same ``tprof_engine`` package this test imported."""
    package_root = str(Path(baselines.__file__).resolve().parents[2])
    return subprocess.Popen(
        [sys.executable, "-c", CHILD, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=package_root,
        env={**os.environ, "PYTHONPATH": package_root},
    )


def make_baseline(value: float = 1.0) -> schema.Baseline:
    rounds = 4
    times = np.full((1, rounds), value)
    table = OpTable(
        names=("aten::mm",),
        calls=np.ones((1, rounds), dtype=np.int64),
        self_cpu_us=times,
        total_cpu_us=times,
        self_device_us=times * 0,
        total_device_us=times * 0,
        wall_us=np.full(rounds, value),
        probe_cpu_us=np.ones(rounds),
        probe_device_us=np.zeros(rounds),
    )
    return schema.Baseline(
        nodeid=NODEID,
        fingerprint=Fingerprint(hard={"torch": "2.13.0"}),
        protocol={"rounds": rounds},
        sessions=(schema.Session(table=table, recorded_at="t", warmup_used=0),),
    )


def temp_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.name.endswith(".tmp"))


# --------------------------------------------------------------------------- full disk


@pytest.mark.parametrize("call", ["write", "fsync", "replace"])
def test_a_full_disk_fails_the_save_naming_the_path_and_keeps_the_old_baseline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, call: str
) -> None:
    path = baselines.save_baseline(tmp_path / "env" / "b.json", make_baseline(1.0))
    before = path.read_bytes()
    monkeypatch.setattr(paths, "os", FaultyOs(**{call: enospc}))
    with pytest.raises(BaselineError) as info:
        baselines.save_baseline(path, make_baseline(2.0))
    assert str(info.value) == (
        f"{path}: can't write the baseline (No space left on device); the previous baseline "
        f"is unchanged; free space on or fix the permissions of {path.parent} and re-run with "
        "--tprof-save"
    )
    assert path.read_bytes() == before
    assert temp_files(tmp_path) == []


def test_a_short_write_is_completed_not_truncated(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def dribble(fd: int, data: Any) -> int:
        return os.write(fd, bytes(data[:7]))  # a disk that takes 7 bytes per call

    monkeypatch.setattr(paths, "os", FaultyOs(write=dribble))
    path = baselines.save_baseline(tmp_path / "b.json", make_baseline(3.0))
    monkeypatch.undo()
    whole = reading.dumps(packing.packed(make_baseline(3.0).to_dict()))
    assert path.read_text(encoding="utf-8") == whole


def test_ctrl_c_during_a_save_leaves_no_temp_file_and_the_old_baseline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = baselines.save_baseline(tmp_path / "b.json", make_baseline(1.0))
    before = path.read_bytes()

    def interrupted(fd: int) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(paths, "os", FaultyOs(fsync=interrupted))
    with pytest.raises(KeyboardInterrupt):
        baselines.save_baseline(path, make_baseline(2.0))
    assert path.read_bytes() == before
    assert temp_files(tmp_path) == []


# --------------------------------------------------------------------------- read-only folder


def test_an_unwritable_folder_fails_the_save_naming_the_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = baselines.save_baseline(tmp_path / "b.json", make_baseline(1.0))
    before = path.read_bytes()

    def denied(**kwargs: Any) -> Any:
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES))

    monkeypatch.setattr(paths, "tempfile", SimpleNamespace(mkstemp=denied))
    with pytest.raises(BaselineError) as info:
        baselines.save_baseline(path, make_baseline(2.0))
    assert str(info.value) == (
        f"{path}: can't write the baseline (Permission denied); make {tmp_path} writable "
        "and re-run with --tprof-save"
    )
    assert path.read_bytes() == before


def test_a_read_only_folder_for_real(tmp_path: Path) -> None:
    folder = tmp_path / "ro"
    path = baselines.save_baseline(folder / "b.json", make_baseline(1.0))
    before = path.read_bytes()
    folder.chmod(0o555)
    try:
        probe = folder / "probe"
        try:
            probe.write_text("x", encoding="utf-8")
        except PermissionError:
            pass
        else:
            probe.unlink()
            pytest.skip("this user can write into a 0555 folder (root or a permissive file system)")
        with pytest.raises(BaselineError) as info:
            baselines.save_baseline(path, make_baseline(2.0))
        assert str(info.value) == (
            f"{path}: can't write the baseline (Permission denied); make {folder} writable "
            "and re-run with --tprof-save"
        )
        assert path.read_bytes() == before
    finally:
        folder.chmod(0o755)


def test_a_baseline_folder_that_is_a_file_fails_the_save_naming_it(tmp_path: Path) -> None:
    (tmp_path / "env").write_text("not a folder", encoding="utf-8")
    path = tmp_path / "env" / "b.json"
    with pytest.raises(BaselineError) as info:
        baselines.save_baseline(path, make_baseline())
    assert str(info.value) == (
        f"{path}: can't write the baseline: {tmp_path / 'env'} is a file, not a folder; "
        "move it away and re-run with --tprof-save"
    )


# --------------------------------------------------------------------------- kills


def test_a_save_killed_at_random_points_never_leaves_a_partial_baseline(tmp_path: Path) -> None:
    # One child forks 30 savers (a slow disk, so kills often land mid-file) and SIGKILLs
    # each at a random point; after every kill it loads every baseline that exists.
    with child("kill", str(tmp_path), "11", "30") as proc:
        out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    results = json.loads(out)
    assert len(results) == 30
    for kill, result in enumerate(results):
        assert all(isinstance(v, int) for v in result["loaded"].values()), (kill, result)
    # A baseline, once there, stays there: only its contents move on.
    seen = [len(r["loaded"]) for r in results]
    assert seen == sorted(seen)
    assert max(seen) == 3
    # Kills inside the file writing leave a temp file, which the next saver removes.
    assert any(r["temps"] for r in results), "no kill landed inside a save; the test proved nothing"
    assert all(r["temps"] <= 1 for r in results)


def test_a_save_killed_between_write_and_rename_keeps_the_old_baseline(tmp_path: Path) -> None:
    path = paths.baseline_path(tmp_path, "env", "t.py::test_0")
    old = make_baseline(1.0)
    baselines.save_baseline(path, old)
    before = path.read_bytes()
    with child("stall", str(tmp_path)) as proc:
        assert proc.stdout is not None
        assert proc.stdout.readline() == "replacing\n"
        proc.send_signal(signal.SIGKILL)
        proc.communicate()
    # The old baseline is whole; the new one sits complete in a temp file nobody reads.
    assert path.read_bytes() == before
    leftovers = temp_files(tmp_path)
    assert [p.name.split(".json.")[0] for p in leftovers] == [f".{path.stem}"]
    assert leftovers[0].name.startswith(f".{path.name}.{proc.pid}-")
    assert baselines.load_baseline(leftovers[0]).tables[0].calls[0, 0] == 2
    assert list(paths.iter_baselines(tmp_path)) == [path]
    # The next save into the folder removes the dead process's leftover.
    baselines.save_baseline(path, make_baseline(3.0))
    assert temp_files(tmp_path) == []


def test_a_leftover_of_a_running_process_is_not_removed(tmp_path: Path) -> None:
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        live = tmp_path / f".b.json.{sleeper.pid}-abc.tmp"
        live.write_text("{}", encoding="utf-8")
        mine = tmp_path / f".b.json.{os.getpid()}-def.tmp"
        mine.write_text("{}", encoding="utf-8")
        other = tmp_path / ".notes.tmp"
        other.write_text("x", encoding="utf-8")
        baselines.save_baseline(tmp_path / "b.json", make_baseline())
        assert temp_files(tmp_path) == sorted([live, mine, other])
    finally:
        sleeper.kill()
        sleeper.wait()
    baselines.save_baseline(tmp_path / "b.json", make_baseline())
    assert temp_files(tmp_path) == sorted([mine, other])


# --------------------------------------------------------------------------- concurrency


def test_two_processes_saving_into_one_folder_lose_nothing(tmp_path: Path) -> None:
    folder = tmp_path / "base"  # does not exist yet: both create it
    procs = [child("many", str(folder), name, "25") for name in ("w1", "w2")]
    time.sleep(0.5)
    (tmp_path / "go").touch()
    for proc in procs:
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
    found = {baselines.load_baseline(p).nodeid for p in paths.iter_baselines(folder)}
    assert found == {f"t.py::test_{w}_{i}" for w in ("w1", "w2") for i in range(25)}
    assert temp_files(folder) == []
