"""Atomic file writes: a temp file beside the target, fsynced, then ``os.replace``.

Readers see the old file or the new one, never a part.  The temp file is
``.<name>.<pid>-<random>.tmp`` in the target's folder: the readers skip dot-files, and
:mod:`tprof_engine.store` removes a baseline's temp file once the process that wrote it is gone.
Every failure is an ``OSError`` (the temp file removed, the target unchanged): each caller
words its own message.

Reading goes through :func:`read_regular` (regular files only, up to a size), and writers that
read, change and write one file in several processes hold :func:`locked` around the three.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
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
def scratch_dir(beside: Path) -> Iterator[Path]:
    """An empty temp folder beside ``beside`` for intermediate products, removed on exit with
    everything in it (a producer's own temp files included: kineto leaves ``<name>.tmp``
    behind when its write fails)."""
    beside = Path(beside)
    name = tempfile.mkdtemp(prefix=_prefix(beside, os), suffix=TMP_SUFFIX, dir=beside.parent)
    try:
        yield Path(name)
    finally:
        shutil.rmtree(name, ignore_errors=True)


class NotRegularFileError(OSError):
    """The path is a FIFO, a device or a socket: reading it could block or never end."""

    def __init__(self, path: Path, kind: str) -> None:
        super().__init__(errno.EINVAL, f"is a {kind}, not a regular file", str(path))
        self.kind = kind


class FileTooLargeError(OSError):
    """The file holds more bytes than the reader accepts."""

    def __init__(self, path: Path, limit: int) -> None:
        super().__init__(errno.EFBIG, f"larger than {limit // 2**20} MiB", str(path))
        self.limit = limit


def file_state(path: Path) -> tuple[int, int, int, int] | None:
    """What a rewrite or a replacement of a regular file changes (device, inode, size,
    modification time), or None for anything else."""
    try:
        info = os.stat(path)
    except OSError:
        return None
    if not stat.S_ISREG(info.st_mode):
        return None
    return info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns


def read_regular(path: Path, *, limit: int) -> bytes:
    """The bytes of the regular file ``path``, at most ``limit`` of them.

    A folder is an ``IsADirectoryError``; a FIFO, device or socket a
    :class:`NotRegularFileError` (checked on the open file, which a FIFO can't stall:
    it is opened non-blocking); a file over ``limit`` a :class:`FileTooLargeError`.
    """
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
        if not stat.S_ISREG(info.st_mode):
            raise NotRegularFileError(Path(path), _kind(info.st_mode))
        if info.st_size > limit:
            raise FileTooLargeError(Path(path), limit)
        data = f.read(limit + 1)  # it may have grown since
    if len(data) > limit:
        raise FileTooLargeError(Path(path), limit)
    return data


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "FIFO"
    if stat.S_ISCHR(mode):
        return "character device"
    if stat.S_ISBLK(mode):
        return "block device"
    return "socket" if stat.S_ISSOCK(mode) else "special file"


# flock can't work on this file system (NFS without a lock daemon, some FUSE mounts).
_NO_LOCKS = frozenset({errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL})


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold an exclusive lock for ``path`` (which need not exist) while inside.

    The lock is ``flock`` on ``.<name>.lock`` beside ``path``, so writers in different
    processes (two pytest runs saving at once) take turns; the lock file is removed on exit.
    Without ``fcntl`` (Windows) or on a file system without ``flock`` it doesn't lock.
    Creating the lock file can fail like any write: an ``OSError``.
    """
    try:
        import fcntl
    except ImportError:
        yield
        return
    lock_path = Path(path).with_name(f".{Path(path).name}.lock")
    fd = _acquire(fcntl, lock_path)
    try:
        yield
    finally:
        if fd is not None:
            # Removed while held: a process waiting on this inode sees the path gone and retries.
            with contextlib.suppress(OSError):
                os.unlink(lock_path)
            os.close(fd)


def _acquire(fcntl: Any, lock_path: Path) -> int | None:
    """An open, locked descriptor of ``lock_path``'s current inode (None: no locks here)."""
    while True:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            held = os.fstat(fd)
            now = os.stat(lock_path)
        except FileNotFoundError:  # the holder removed it as we got it: take the new one
            os.close(fd)
            continue
        except OSError as exc:
            os.close(fd)
            if exc.errno in _NO_LOCKS:
                with contextlib.suppress(OSError):
                    os.unlink(lock_path)
                return None
            raise
        except BaseException:  # Ctrl-C while waiting
            os.close(fd)
            raise
        if (held.st_dev, held.st_ino) == (now.st_dev, now.st_ino):
            return fd
        os.close(fd)


@dataclass(frozen=True, slots=True, kw_only=True)
class TempFile:
    """A new temp file beside ``target``, open as ``fd``, that replaces ``target`` on commit.

    Use it once, through :meth:`write` or :meth:`committing`; both close ``fd``.  ``system``
    is the ``os`` module its calls go through (:mod:`tprof_engine.store` passes its own module's).
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


def file_in_the_way(folder: Path) -> Path | None:
    """The file that stands where ``folder`` or one of its parents should be, if any."""
    for p in (Path(folder), *Path(folder).parents):
        try:
            if p.exists():
                return None if p.is_dir() else p
        except OSError:  # can't tell (no permission to look): let the write name the problem
            return None
    return None


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
