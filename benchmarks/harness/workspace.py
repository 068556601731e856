"""The folder a benchmark works in: a temporary one or one it keeps, a suite written into it, a
git repository made of it."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

IDENTITY = ("-c", "user.email=bench@example.com", "-c", "user.name=bench")


@contextmanager
def workspace(
    prefix: str, keep: Path | str | None = None, *, empty: bool = False
) -> Iterator[Path]:
    """A temporary folder removed afterwards, or ``keep`` (made if missing) left in place.

    ``empty``: a kept folder must hold nothing yet (a benchmark that records baselines there).
    """
    if keep is None:
        with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
            yield Path(tmp)
        return
    folder = Path(keep)
    if empty and folder.exists() and any(folder.iterdir()):
        sys.exit(f"{folder}: not empty; name an empty or new folder")
    folder.mkdir(parents=True, exist_ok=True)
    yield folder.resolve()


def prepare(folder: Path, suite_file: str, suite: str, ini: str, subfolders: Iterable[str]) -> None:
    """The suite, an empty conftest and its ini in ``folder``, with the folders runs write."""
    for sub in ("reports", "logs", *subfolders):
        (folder / sub).mkdir(parents=True, exist_ok=True)
    (folder / suite_file).write_text(suite)
    (folder / "conftest.py").write_text("")
    (folder / "pytest.ini").write_text(ini)


def write_files(folder: Path, files: Mapping[str, str]) -> None:
    """Each file of ``files`` (relative path → text) written under ``folder``."""
    for name, text in files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def git(folder: Path, *args: str) -> str:
    """``git -C folder ARGS``; its stdout, stripped.  A failing command stops the benchmark."""
    done = subprocess.run(["git", "-C", str(folder), *args], capture_output=True, check=False)
    if done.returncode != 0:
        sys.exit(f"git {' '.join(args)} in {folder} failed:\n{done.stderr.decode()[-2000:]}")
    return done.stdout.decode().strip()


def commit(folder: Path, subject: str) -> str:
    """Everything in ``folder`` committed as ``subject``; the new commit's sha."""
    git(folder, "add", "-A")
    git(folder, *IDENTITY, "commit", "-qm", subject)
    return git(folder, "rev-parse", "HEAD")


def make_repo(folder: Path, files: Mapping[str, str], ignore: str, subject: str = "base") -> str:
    """A git repository in ``folder`` holding ``files`` and a ``.gitignore`` of ``ignore``
    (one pattern a line), committed once; that commit's sha."""
    write_files(folder, {**files, ".gitignore": ignore})
    git(folder, "init", "-q")
    return commit(folder, subject)
