"""An integration's own files in a queue: a directory under its ``.vsqs``, by name.

The core knows the names it keeps in ``.vsqs`` (:mod:`vsqs._layout`) and no other: an
integration that keeps state with a queue (``vsqs serve``'s SQS record, a Spark query's
epochs) names its own directory through :class:`Storage`, and reaches it with the
guarantees the core's own files have, without importing the core's private modules:
every entry is reached through a descriptor of its directory, opened without following a
symlink; reads are bounded; writes are atomic; locks are the one :class:`~vsqs.FileLock`.
"""

from __future__ import annotations

import errno
import os
import stat
import threading
import time
from typing import Final

from . import _fs, _host, _mountinfo
from ._clock import SYSTEM_CLOCK, Clock
from ._errors import UnsafeEntry
from ._layout import CORE, DIR, TMP, Layout, write_at
from ._lock import FileLock

# What a planted entry gives: a symlink (ELOOP, O_NOFOLLOW), a file where a directory
# belongs (ENOTDIR), a directory or FIFO where a file belongs (EINVAL, EISDIR).
_PLANTED: Final = frozenset({errno.ELOOP, errno.ENOTDIR, errno.EINVAL, errno.EISDIR})
_shared: dict[int, bool] = {}  # device -> whether other hosts write it (looked up once)

Stamp = tuple[int, int, int, int, int]
"""What :meth:`Storage.stamp` returns: device, inode, size, modification and change
times (ns) of a file; another stamp means another content."""


def _check(name: str, what: str) -> None:
    """Refuse a name that could leave its directory or is not a plain name."""
    if not isinstance(name, str):
        raise TypeError(f"{what} must be a str, not {type(name).__name__}")
    if not name or name in {".", ".."} or "/" in name or "\0" in name:
        raise ValueError(f"{what} must be one plain file name (no '/'), not {name!r}")


class Storage:
    """The directory ``<queue>/.vsqs/<name>`` of one integration, and its files.

    *name* is the integration's, one name or several joined by ``/`` (``"spark/streams"``),
    none of them a name the core keeps in ``.vsqs``. The directory is created on the
    first write or lock (never by the constructor, which does no I/O) with parents as
    needed; it and ``.vsqs`` are opened without following a symlink, and a planted entry
    (a link, a file where a directory belongs) raises :class:`~vsqs.UnsafeEntry` naming
    it, touching nothing it points to. File names are plain names in that directory.

    A :class:`Storage` may be shared by the threads of a process and used after a fork;
    :meth:`close` releases its descriptors (opened again on next use).

    >>> import tempfile, vsqs
    >>> queue = vsqs.Queue(tempfile.mkdtemp())
    >>> with vsqs.Storage(queue.path, "example") as storage:
    ...     storage.write("state.json", b'{"high": 3}')
    ...     storage.read("state.json", limit=1024), storage.names()
    (b'{"high": 3}', ['state.json'])

    :param queue: the queue's directory.
    :param name: the integration's directory in ``.vsqs``.
    :param elsewhere: *queue* is not a queue but a directory the user named
        (:meth:`outside`), *name* a directory in it.
    :raises ValueError: *name* is empty, climbs out (``..``) or is one of the core's.
    """

    def __init__(self, queue: str, name: str, *, elsewhere: bool = False) -> None:
        parts = name.split("/") if isinstance(name, str) else [name]
        for part in parts:
            _check(part, "a storage name")
        self.name = name
        self._layout: Layout | None = None
        self._outside: tuple[str, list[str]] | None = None
        self._fd: tuple[int, int] | None = None  # (pid, descriptor) of an outside one
        if elsewhere:
            self._outside = (queue, parts)
            self.path = f"{queue.rstrip('/')}/{name}"
            return
        if parts[0] in CORE or name.startswith(TMP):
            raise ValueError(f"{name!r} is a name vsqs itself keeps in {DIR}: choose another")
        self._layout = Layout(os.path.abspath(queue))
        self.path = f"{self._layout.root}/{name}"
        """The directory's path (for messages: it is never used to reach a file)."""

    @classmethod
    def outside(cls, directory: str, name: str) -> Storage:
        """A storage at ``<directory>/<name>``, outside any queue (a Spark ``stateDir``
        the user named): *directory* is opened as named (a symlink the user chose is
        followed) and created with its parents; *name* and the files are not followed.
        """
        return cls(directory, name, elsewhere=True)

    @staticmethod
    def name_of(queue: str, directory: str) -> str | None:
        """The storage name whose directory is *directory* (a path below the queue's
        ``.vsqs``); ``None`` if it is not one (elsewhere, or ``.vsqs`` itself). No I/O."""
        sub = Layout(os.path.abspath(queue)).sub_of(os.path.abspath(directory))
        return sub or None

    # -- the directory, by descriptor ----------------------------------------------------

    def _dir(self, *, create: bool) -> int | None:
        """The directory's descriptor; ``None`` if it is absent (and not *create*)."""
        if self._layout is not None:
            return self._layout.open_dir(self.name, create=create)
        if self._fd is None or self._fd[0] != os.getpid():  # a fork: the child opens its own
            fd = self._open_outside(create=create)
            if fd is None:
                return None
            self._fd = (os.getpid(), fd)
        return self._fd[1]

    def _open_outside(self, *, create: bool) -> int | None:
        assert self._outside is not None
        directory, parts = self._outside
        if create:
            _fs.make_dirs(directory)
        try:
            fd = _fs.open_queue_dir(directory)  # as named: the user's choice
        except FileNotFoundError:
            return None
        shown = directory.rstrip("/")
        for part in parts:
            shown = f"{shown}/{part}"
            child = self._child(fd, part, shown, create=create)  # closes fd
            if child is None:
                return None
            fd = child
        return fd

    def _child(self, parent: int, name: str, shown: str, *, create: bool) -> int | None:
        """The directory *name* in *parent* (closed), never through a link."""
        try:
            for _ in range(2):
                try:
                    return _fs.open_dir(name, parent)
                except FileNotFoundError:
                    if not create:
                        return None
                    _fs.make_dir_at(name, 0o777, parent)
                except OSError as exc:
                    raise self._unsafe(exc, shown) from None
            raise FileNotFoundError(errno.ENOENT, "vanished while created", shown)
        finally:
            _fs.close(parent)

    def _unsafe(self, exc: OSError, shown: str) -> OSError:
        """*exc* as :class:`~vsqs.UnsafeEntry` naming *shown*, if a planted entry caused
        it; otherwise *exc*, naming *shown* instead of a bare name."""
        if exc.errno not in _PLANTED:
            if exc.filename is None or "/" not in str(exc.filename):
                exc.filename = shown
            return exc
        return UnsafeEntry(
            exc.errno or errno.EINVAL,
            # The path is the filename (str() shows it); a server shows it inside its root.
            "a symlink or not what vsqs keeps there; vsqs never follows it: remove it",
            shown,
        )

    # -- files ---------------------------------------------------------------------------

    def read(self, name: str, limit: int) -> bytes | None:
        """The content of the regular file *name*; ``None`` if it (or the directory) is
        absent. Bounded: a file larger than *limit* bytes is refused after one ``fstat``
        (``EFBIG``, naming it), never read. A file replaced meanwhile by :meth:`write`
        reads whole, old or new.

        :raises UnsafeEntry: a symlink or a non-file is at *name* (or on the way).
        """
        _check(name, "a file name")
        fd = self._dir(create=False)
        if fd is None:
            return None
        try:
            return _fs.read_at(name, fd, limit)
        except FileNotFoundError:
            return None  # RACE: another process removed it meanwhile
        except OSError as exc:
            raise self._unsafe(exc, f"{self.path}/{name}") from None

    def write(self, name: str, data: bytes, *, durable: bool = True) -> None:
        """Replace the file *name* with *data* atomically (a temporary file renamed over
        it): readers, on any host, see the old content or the new, never a mix, and a
        failure leaves the old. Two writers at once: the last rename wins (serialise
        read-modify-write with :meth:`lock`). *durable*: the file and its name are
        flushed (``fsync`` of the file, then of the directory) before it returns.
        """
        _check(name, "a file name")
        fd = self._dir(create=True)
        assert fd is not None
        try:
            write_at(fd, name, data, 0o666, None, flush_in=self.path if durable else None)
        except OSError as exc:
            raise self._unsafe(exc, f"{self.path}/{name}") from None
        if durable:
            _fs.fsync(fd, self.path)

    def remove(self, name: str) -> bool:
        """Remove the file *name* (a planted link itself, never its target); ``False``
        if it was absent. One ``unlink``: atomic."""
        _check(name, "a file name")
        fd = self._dir(create=False)
        return fd is not None and _fs.unlink_at(name, fd)

    def exists(self, name: str) -> bool:
        """Whether anything is at *name* (a link is not followed)."""
        _check(name, "a file name")
        fd = self._dir(create=False)
        return fd is not None and _fs.exists_at(name, fd)

    def names(self) -> list[str]:
        """The names in the directory (none if it is absent), but files a write is
        making (or a writer that died left: :meth:`sweep`). A snapshot: it may miss a
        concurrent change."""
        fd = self._dir(create=False)
        return [] if fd is None else [n for n in _fs.list_at(fd) if not n.startswith(TMP)]

    def sweep(self) -> int:
        """Remove the temporary files writers that died left; how many. Call it where
        no other writer runs (under the integration's :meth:`lock`): it would remove a
        live writer's file too, which then fails."""
        fd = self._dir(create=False)
        if fd is None:
            return 0
        # RACE: a writer that finished meanwhile renamed its file: unlink_at says False
        return sum(_fs.unlink_at(n, fd) for n in _fs.list_at(fd) if n.startswith(TMP))

    def stamp(self, name: str, *, settle: float = 0.0) -> Stamp | None:
        """A :data:`Stamp` of the regular file *name* (one ``lstat``), to tell whether it
        changed since it was last read; ``None`` when a stamp cannot tell: the file is
        absent or not a regular file, was modified less than *settle* seconds ago (a
        filesystem with coarse timestamps cannot order two changes in one tick), or
        lives on a filesystem other hosts write (NFS, FUSE...), where a ``stat`` may
        answer from a cache and only opening the file revalidates it.
        """
        _check(name, "a file name")
        try:
            info = _host.lstatus(f"{self.path}/{name}")
        except OSError:
            return None  # absent (or the queue is gone): a read says which
        if not stat.S_ISREG(info.st_mode) or time.time() - info.st_mtime_ns / 1e9 < settle:
            return None
        shared = _shared.get(info.st_dev)
        if shared is None:
            shared = _shared[info.st_dev] = _mountinfo.polls(_host.filesystem_type(self.path))
        if shared:
            return None
        return (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)

    def lock(
        self,
        name: str,
        *,
        timeout: float | None = None,
        threads: threading.Lock | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> FileLock:
        """The lock on the file *name* (created on acquisition, never through a link):
        exclusive across processes and hosts whose filesystem honours ``flock``, and
        across the threads sharing the returned object (or *threads*). No I/O until
        acquired: ``with storage.lock("lock", timeout=10):`` waits up to *timeout*
        seconds, then raises :class:`~vsqs.LockTimeout`; ``acquire(t)`` says ``False``.
        """
        _check(name, "a lock name")
        path = f"{self.path}/{name}"

        def opener() -> int:
            fd = self._dir(create=True)
            assert fd is not None
            try:
                return _fs.open_lock_at(name, 0o666, fd)
            except OSError as exc:
                raise self._unsafe(exc, path) from None

        return FileLock(opener, clock, path, timeout=timeout, threads=threads)

    def close(self) -> None:
        """Release the descriptors (opened again on next use); a held lock stays held."""
        if self._layout is not None:
            self._layout.close()
        elif self._fd is not None:
            pid, fd = self._fd
            self._fd = None
            if pid == os.getpid():
                _fs.close(fd)

    def __enter__(self) -> Storage:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
