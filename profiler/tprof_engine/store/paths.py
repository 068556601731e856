"""Where a test's baseline lives: ``<root>/<environment key>/<slug>-<hash>.json``, the
folder's checks, its lock and the save's temp file.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import tempfile
import unicodedata
from collections.abc import Iterator
from pathlib import Path

from tprof_engine.model.errors import BaselineError
from tprof_engine.store import files

_SLUG_MAX = 80
_RESERVED = {"con", "prn", "aux", "nul"} | {f"{p}{i}" for p in ("com", "lpt") for i in range(10)}


def slug(nodeid: str) -> str:
    """A readable, portable file stem for a node id, unique by a hash of the exact id.

    ``tests/test_x.py::TestA::test_b[1-2]`` → ``test_x.TestA.test_b_1-2-<hash>``: ASCII
    letters, digits and ``._=+-`` only, at most 91 characters, never a Windows device name
    (``CON``, ``nul.txt``), and distinct for distinct ids, even ids that differ only in case.
    """
    path, _, rest = nodeid.partition("::")
    stem = Path(path).stem if path else ""
    readable = f"{stem}.{rest.replace('::', '.')}" if rest else stem
    readable = unicodedata.normalize("NFKD", readable).encode("ascii", "ignore").decode()
    readable = re.sub(r"[^A-Za-z0-9._=+-]+", "_", readable).strip("._-") or "test"
    readable = readable[:_SLUG_MAX].rstrip("._-")
    if readable.split(".")[0].lower() in _RESERVED:
        readable = f"_{readable}"
    digest = hashlib.sha1(nodeid.encode("utf-8", "surrogatepass")).hexdigest()[:10]
    return f"{readable}-{digest}"


def baseline_path(root: Path, env_key: str, nodeid: str) -> Path:
    return Path(root) / env_key / f"{slug(nodeid)}.json"


def other_environments(root: Path, env_key: str, nodeid: str) -> list[Path]:
    """Baseline files of the same test recorded in other environments."""
    name = f"{slug(nodeid)}.json"
    try:
        folders = [d for d in Path(root).iterdir() if d.is_dir() and d.name != env_key]
    except OSError:  # no baseline folder yet, or one we may not list
        return []
    return sorted(d / name for d in folders if (d / name).is_file())


def baselines_of(root: Path, nodeid: str) -> list[Path]:
    """The test's baseline files in every environment folder under ``root``."""
    return other_environments(root, "", nodeid)  # no folder is named "": none is left out


def iter_baselines(folder: Path) -> Iterator[Path]:
    """Every baseline file under ``folder`` (one environment folder or the root).

    Temporary files of a save (``.<name>.json.<pid>-<random>.tmp``) and lock files
    (``.<name>.json.lock``) are not baselines.
    """
    yield from sorted(p for p in Path(folder).rglob("*.json") if not p.name.startswith("."))


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold the lock of the baseline ``path`` while inside (its folder made first).

    A save reads the baseline, appends its session and writes it under this lock, so two
    processes saving the same test at once (two pytest runs) each keep their session.
    Any failure is a :class:`BaselineError` naming the path.
    """
    path = Path(path)
    folder = path.parent
    _check_folder(path)
    with contextlib.ExitStack() as stack:
        try:
            folder.mkdir(parents=True, exist_ok=True)
            stack.enter_context(files.locked(path))
        except OSError as exc:
            raise BaselineError(
                f"{path}: can't write the baseline ({exc.strerror}); make {folder} writable "
                "and re-run with --tprof-save"
            ) from None
        yield


def folder_error(path: Path) -> str | None:
    """Why the baseline ``path`` can't exist: a file stands where one of its folders should."""
    blocking = files.file_in_the_way(Path(path).parent)
    if blocking is None:
        return None
    return (
        f"{blocking}: is a file, not a baseline folder; move it away or point "
        "--tprof-baseline-dir at a folder"
    )


def is_folder(path: Path) -> BaselineError:
    return BaselineError(
        f"{path}: can't write the baseline: it is a folder; move it away and re-run with "
        "--tprof-save"
    )


def _check_folder(path: Path) -> None:
    """That the baseline's folder can be made: no file stands where it or a parent should."""
    blocking = files.file_in_the_way(path.parent)
    if blocking is not None:
        raise BaselineError(
            f"{path}: can't write the baseline: {blocking} is a file, not a folder; move it away "
            "and re-run with --tprof-save"
        )


def temp_file_for(path: Path) -> files.TempFile:
    """The save's temp file beside ``path``, made after its folder and dead saves' leftovers."""
    folder = path.parent
    _check_folder(path)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        _remove_leftovers(folder)
        # This module's os and mkstemp, which the fault tests replace to fail a save.
        return files.TempFile.beside(path, system=os, mkstemp=tempfile.mkstemp)
    except OSError as exc:
        raise BaselineError(
            f"{path}: can't write the baseline ({exc.strerror}); make {folder} writable "
            "and re-run with --tprof-save"
        ) from None


def _remove_leftovers(folder: Path) -> None:
    """Delete temp files of saves whose process has ended (killed mid-save)."""
    if os.name != "posix":  # os.kill(pid, 0) only probes on POSIX
        return
    for entry in folder.iterdir():
        name = entry.name
        if not (name.startswith(".") and name.endswith(files.TMP_SUFFIX) and ".json." in name):
            continue
        pid_text = name.rsplit(".json.", 1)[1].split("-", 1)[0]
        if not pid_text.isdigit() or int(pid_text) == os.getpid() or _running(int(pid_text)):
            continue
        with contextlib.suppress(OSError):
            entry.unlink()


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # exists but isn't ours (EPERM), or can't tell: leave its file alone
        return True
    return True
