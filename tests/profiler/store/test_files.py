"""Atomic writes: the target is the old file or the whole new one, and no temp file is left."""

from __future__ import annotations

import errno
import gzip
import os
from pathlib import Path
from typing import Any

import pytest
from tprof_testing import FaultyOs, enospc

from tprof_engine.store import files
from tprof_engine.store import paths as store


def temp_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.name.endswith(files.TMP_SUFFIX))


@pytest.fixture
def old(tmp_path: Path) -> Path:
    path = tmp_path / "out.json"
    path.write_bytes(b"old contents\n")
    return path


@pytest.mark.parametrize("call", ["write", "fsync", "replace"])
def test_a_failed_write_raises_oserror_keeps_the_old_file_and_leaves_no_temp_file(
    old: Path, monkeypatch: pytest.MonkeyPatch, call: str
) -> None:
    monkeypatch.setattr(files, "os", FaultyOs(**{call: enospc}))
    with pytest.raises(OSError) as info:
        files.write_atomic(old, b"new contents\n")
    assert info.value.strerror == "No space left on device"
    monkeypatch.undo()
    assert old.read_bytes() == b"old contents\n"
    assert temp_files(old.parent) == []


def test_an_interrupted_write_keeps_the_old_file_and_leaves_no_temp_file(
    old: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def interrupted(fd: int) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(files, "os", FaultyOs(fsync=interrupted))
    with pytest.raises(KeyboardInterrupt):
        files.write_atomic(old, b"new contents\n")
    monkeypatch.undo()
    assert old.read_bytes() == b"old contents\n"
    assert temp_files(old.parent) == []


def test_a_producer_that_fails_keeps_the_old_file_and_leaves_no_temp_file(old: Path) -> None:
    with pytest.raises(ValueError, match="half done"), files.atomic_path(old) as tmp:
        tmp.write_bytes(b"new con")
        raise ValueError("half done")
    assert old.read_bytes() == b"old contents\n"
    assert temp_files(old.parent) == []


def test_a_folder_that_cant_take_a_file_is_an_oserror(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        files.write_atomic(tmp_path / "missing" / "out.json", "x")


def test_short_writes_are_continued_so_the_new_file_is_whole(
    old: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def dribble(fd: int, data: Any) -> int:
        return os.write(fd, bytes(data[:7]))  # a disk that takes 7 bytes per call

    data = "µs per round\n" * 1000
    monkeypatch.setattr(files, "os", FaultyOs(write=dribble))
    files.write_atomic(old, data)
    monkeypatch.undo()
    assert old.read_text(encoding="utf-8") == data


def test_until_the_rename_the_target_is_the_old_file_and_the_temp_file_the_whole_new_one(
    old: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: dict[str, bytes] = {}

    def watched_replace(src: str, dst: str) -> None:
        seen["target"] = Path(dst).read_bytes()
        seen["temp"] = Path(src).read_bytes()
        os.replace(src, dst)

    monkeypatch.setattr(files, "os", FaultyOs(replace=watched_replace))
    files.write_atomic(old, b"new contents\n")
    assert seen == {"target": b"old contents\n", "temp": b"new contents\n"}
    assert old.read_bytes() == b"new contents\n"


def test_the_temp_file_sits_beside_the_target_under_the_name_the_store_cleans_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    names: list[str] = []

    def watched_replace(src: str, dst: str) -> None:
        names.append(src)
        os.replace(src, dst)

    monkeypatch.setattr(files, "os", FaultyOs(replace=watched_replace))
    files.write_atomic(tmp_path / "b.json", b"{}")
    (tmp,) = map(Path, names)
    assert tmp.parent == tmp_path
    assert tmp.name.startswith(f".b.json.{os.getpid()}-")
    assert tmp.name.endswith(".tmp")
    assert list(store.iter_baselines(tmp_path)) == [tmp_path / "b.json"]


@pytest.mark.parametrize("like_existing", [True, False])
def test_a_new_file_gets_the_mode_of_a_plain_new_file_not_0600(
    tmp_path: Path, like_existing: bool
) -> None:
    mask = os.umask(0o027)
    try:
        files.write_atomic(tmp_path / "new.json", "{}", mode_like_existing=like_existing)
        (tmp_path / "plain.json").write_text("{}", encoding="utf-8")
    finally:
        os.umask(mask)
    assert (tmp_path / "plain.json").stat().st_mode & 0o777 == 0o640
    assert (tmp_path / "new.json").stat().st_mode & 0o777 == 0o640


def test_a_replaced_file_keeps_its_mode_when_asked(old: Path) -> None:
    old.chmod(0o604)
    files.write_atomic(old, b"new contents\n")
    assert old.stat().st_mode & 0o777 == 0o604


def test_a_replaced_file_gets_a_new_files_mode_when_not_asked(old: Path) -> None:
    old.chmod(0o604)
    mask = os.umask(0o022)
    try:
        files.write_atomic(old, b"new contents\n", mode_like_existing=False)
    finally:
        os.umask(mask)
    assert old.stat().st_mode & 0o777 == 0o644


def test_a_producer_writes_through_the_temp_path_and_its_file_replaces_the_target(
    old: Path,
) -> None:
    with files.atomic_path(old) as tmp, gzip.open(tmp, "wt", encoding="utf-8") as f:
        f.write("new contents\n")
    assert gzip.decompress(old.read_bytes()) == b"new contents\n"
    assert temp_files(old.parent) == []


def test_a_rename_that_cant_be_synced_to_disk_still_counts_as_written(
    old: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_open = os.open

    def no_folder_open(path: Any, flags: int, *args: Any) -> int:
        if Path(path) == old.parent:
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES))  # as on Windows
        return real_open(path, flags, *args)

    monkeypatch.setattr(files, "os", FaultyOs(open=no_folder_open))
    files.write_atomic(old, b"new contents\n")
    assert old.read_bytes() == b"new contents\n"


def test_a_scratch_folder_is_removed_on_exit_with_its_contents_even_after_an_error(
    tmp_path: Path,
) -> None:
    with pytest.raises(RuntimeError), files.scratch_dir(tmp_path / "t.json.gz") as scratch:
        assert scratch.parent == tmp_path
        assert scratch.name.startswith(f".t.json.gz.{os.getpid()}-")
        (scratch / "trace.json").write_text("partial", encoding="utf-8")
        (scratch / "trace.json.tmp").write_text("a producer's own leftover", encoding="utf-8")
        raise RuntimeError
    assert list(tmp_path.iterdir()) == []
