"""Atomic file writes: a temp file beside the target, fsynced, then ``os.replace``.

Readers see the old file or the new one, never a part.  The temp file is
``.<name>.<pid>-<random>.tmp`` in the target's folder: the readers skip dot-files, and
:mod:`profiler.store` removes a baseline's temp file once the process that wrote it is gone.
Every failure is an ``OSError`` (the temp file removed, the target unchanged): each caller
words its own message.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TMP_SUFFIX = ".tmp"

MakeTemp = Callable[..., tuple[int, str]]


def write_atomic(path: Path, data: bytes | str, *, mode_like_existing: bool = True) -> None:
    """Replace ``path`` with ``data`` (a ``str`` as UTF-8), whole or not at all.

    The new file gets the mode of the file it replaces when ``mode_like_existing`` and
    ``path`` exists, else the mode of a plain new file (0666 less the umask).
    """
    TempFile.beside(path, mode_like_existing=mode_like_existing).write(data)


@contextlib.contextmanager
def atomic_path(path: Path, *, mode_like_existing: bool = True) -> Iterator[Path]:
    """A temp path beside ``path`` for a producer that writes the file itself.

    On a clean exit the file written there replaces ``path``; on any exception,
    ``KeyboardInterrupt`` included, it is removed and ``path`` is left as it was.
    """
    with TempFile.beside(path, mode_like_existing=mode_like_existing).committing() as tmp:
        yield tmp


@contextlib.contextmanager
def scratch_path(beside: Path) -> Iterator[Path]:
    """An empty temp file beside ``beside`` for an intermediate product, removed on exit."""
    beside = Path(beside)
    fd, name = tempfile.mkstemp(prefix=_prefix(beside, os), suffix=TMP_SUFFIX, dir=beside.parent)
    os.close(fd)
    try:
        yield Path(name)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(name)


@dataclass(frozen=True, slots=True, kw_only=True)
class TempFile:
    """A new temp file beside ``target``, open as ``fd``, that replaces ``target`` on commit.

    Use it once, through :meth:`write` or :meth:`committing`; both close ``fd``.  ``system``
    is the ``os`` module its calls go through (:mod:`profiler.store` passes its own module's).
    """

    target: Path
    path: Path
    fd: int
    mode_like_existing: bool
    system: Any

    @classmethod
    def beside(
        cls,
        target: Path,
        *,
        mode_like_existing: bool = True,
        system: Any = None,
        mkstemp: MakeTemp | None = None,
    ) -> TempFile:
        """Create the temp file; an ``OSError`` here means the folder can't take a file.

        ``system`` and ``mkstemp`` default to this module's ``os`` and ``tempfile.mkstemp``.
        """
        target = Path(target)
        system = os if system is None else system
        make = tempfile.mkstemp if mkstemp is None else mkstemp
        fd, name = make(prefix=_prefix(target, system), suffix=TMP_SUFFIX, dir=target.parent)
        return cls(
            target=target,
            path=Path(name),
            fd=fd,
            mode_like_existing=mode_like_existing,
            system=system,
        )

    def write(self, data: bytes | str) -> None:
        """Write all of ``data`` (short writes continued) and replace the target with it."""
        with self.committing():
            view = memoryview(data.encode("utf-8") if isinstance(data, str) else data)
            while view:
                view = view[self.system.write(self.fd, view) :]

    @contextlib.contextmanager
    def committing(self) -> Iterator[Path]:
        """Yield the temp path to fill; on a clean exit fsync it and replace the target.

        On any exception, ``KeyboardInterrupt`` included, the temp file is removed.
        """
        system = self.system
        try:
            try:
                _set_mode(system, self.fd, self.target, like_existing=self.mode_like_existing)
                yield self.path
                system.fsync(self.fd)
            finally:
                system.close(self.fd)
            system.replace(self.path, self.target)
        except BaseException:
            with contextlib.suppress(OSError):
                system.unlink(self.path)
            raise
        _fsync_folder(system, self.target.parent)


def _prefix(target: Path, system: Any) -> str:
    return f".{target.name}.{system.getpid()}-"


def _set_mode(system: Any, fd: int, target: Path, *, like_existing: bool) -> None:
    """Give the temp file the target's mode or a plain new file's (mkstemp makes it 0600)."""
    if not hasattr(system, "fchmod"):
        return
    mode = None
    if like_existing:
        with contextlib.suppress(OSError):
            mode = target.stat().st_mode & 0o777
    if mode is None:
        mask = system.umask(0)  # reading the umask means setting it; put it straight back
        system.umask(mask)
        mode = 0o666 & ~mask
    system.fchmod(fd, mode)


def _fsync_folder(system: Any, folder: Path) -> None:
    """Make the rename durable where the platform allows (not on Windows)."""
    with contextlib.suppress(OSError):
        dfd = system.open(folder, system.O_RDONLY)
        try:
            system.fsync(dfd)
        finally:
            system.close(dfd)
