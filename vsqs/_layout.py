"""Where everything of one queue lives: every path under the queue directory.

A plain message is exactly the design's file, ``<queue>/<name>``, and nothing else.
What vsqs needs beyond that lives in ``<queue>/.vsqs/``, which vsqs 0.3 and any other
reader of the design's format ignore (its name does not parse as an id)::

    .vsqs/meta/<id>              JSON: attributes, receive count, history (when needed)
    .vsqs/delayed/<id>           empty: the held file of <id> is a delayed publish
    .vsqs/dedup/<digest>         the id published under a deduplication id (expires)
    .vsqs/stats/<process>        JSON counters of one process (summed on read)
    .vsqs/closed                 present once the queue was shut down (its time inside)
    .vsqs/capacity.lock          the cross-process lock of bounded queues
    .vsqs/capacity.count         an upper bound on the message count (under that lock)
    .vsqs/settings.json          JSON: the settings stored with the queue (see _stored)
    .vsqs/settings.lock          serialises changes to the settings
    .vsqs/spark/<consumer>/      the state of a Spark consumer

This module is the only one that builds those paths. Its directories are created on
first use (never in a constructor), with the queue's modes, and every one of them is
reached without following a symlink (see :class:`Layout`).
"""

from __future__ import annotations

import errno
import math
import os
import stat
import sys
import threading
from collections.abc import Callable
from typing import Final

from . import _fs
from ._inotify import WAKE

DIR: Final = ".vsqs"
"""The name of the metadata directory inside a queue."""


ROOT: Final = ""
"""The ``.vsqs`` directory itself, as a *sub* argument."""
META: Final = "meta"
DELAYED: Final = "delayed"
DEDUP: Final = "dedup"
STATS: Final = "stats"
CLOSED: Final = "closed"
"""The shutdown marker's name in ``.vsqs``."""
CAPACITY_LOCK: Final = "capacity.lock"
CAPACITY_COUNT: Final = "capacity.count"
SETTINGS: Final = "settings.json"
"""The settings stored with the queue, in ``.vsqs``."""
SETTINGS_LOCK: Final = "settings.lock"

# What opening a planted entry as a directory gives: a symlink (ELOOP, O_NOFOLLOW), a
# file or FIFO where a directory belongs (ENOTDIR).
_NOT_A_DIR: Final = frozenset({errno.ELOOP, errno.ENOTDIR})


class UnsafeEntry(OSError):
    """A ``.vsqs`` entry of the wrong type (a symlink, a file where a directory belongs).

    vsqs never follows it: reads treat what it would hold as absent, writes raise this.
    """


class Layout:
    """The files of one queue directory, reached without ever following a symlink.

    Message files are direct children of the queue directory, named by the grammar; they
    are reached by path (a rename or unlink acts on a planted link itself, and reads use
    ``O_NOFOLLOW``). Everything under ``.vsqs`` is reached through descriptors of its
    directories, each opened with ``O_NOFOLLOW | O_DIRECTORY`` from its parent's, so a
    symlink planted at ``.vsqs`` or under it is refused, never followed. The descriptors
    are opened on first use (never in a constructor) and released by :meth:`close`.

    :param path: the queue directory (absolute).
    :param dir_mode: the mode of created directories.
    :param file_mode: the mode forced on created files; ``None`` leaves it to the umask.
    :param durable: flush the parent of each directory created, so that what is flushed
        inside it later survives a power loss.
    """

    def __init__(
        self,
        path: str,
        dir_mode: int = 0o777,
        file_mode: int | None = None,
        *,
        durable: bool = True,
    ) -> None:
        self.path = path
        self.durable = durable
        self.root = f"{path}/{DIR}"
        self.meta_dir = f"{self.root}/{META}"
        self.dir_mode = dir_mode
        self.file_mode = file_mode
        self._fds: dict[str, int] = {}
        self._lock = threading.RLock()  # _open takes it again for the parent
        self._pid = os.getpid()

    def message(self, name: str) -> str:
        """The path of a message file named *name* (any state)."""
        return f"{self.path}/{name}"

    @property
    def closed_path(self) -> str:
        """The shutdown marker's path, only for the existence probe of every publish (an
        ``access`` that reads nothing); reading and creating it go through descriptors."""
        return f"{self.root}/{CLOSED}"

    def spark_dir(self, consumer: str) -> str:
        """The state directory of the Spark consumer *consumer*."""
        return f"{self.root}/spark/{consumer}"

    def wake(self) -> str:
        """A fresh, unique name in the queue directory for an inotify poke."""
        return f"{self.path}/{WAKE}{os.getpid()}-{os.urandom(4).hex()}"

    def announce(self, sub: str) -> None:
        """Make sure ``.vsqs/<sub>`` exists, then say so to blocked receives on this host.

        The announcement is a name moved into the queue directory (a fresh
        ``.wake-<pid>-<hex>`` file renamed to ``.wake-<pid>-<hex>-<sub>``, then removed:
        nothing else moves a ``.wake-`` name in). An inotify waiter records it beside the
        messages made ready (:data:`vsqs._inotify.ANNOUNCEMENT`), in event order, so a
        waiter that saw no ``.vsqs/<sub>`` before it slept learns, before any message
        whose record went in there, that it may exist now.

        :raises OSError: the directory or the files could not be made (a full disk).
        """
        self._open(sub, create=True)
        staged = self.wake()
        announced = f"{staged}-{sub}"
        _fs.close(_fs.create_exclusive(staged))
        try:
            _fs.rename_noreplace(staged, announced)
        finally:  # nobody else makes these names (a process id and a random suffix)
            if not _fs.unlink(announced):
                _fs.unlink(staged)

    @property
    def create_mode(self) -> int:
        """The mode to create files with."""
        return 0o666 if self.file_mode is None else self.file_mode

    # -- descriptors ----------------------------------------------------------------------

    def _open(self, sub: str, *, create: bool) -> int | None:
        """The descriptor of ``.vsqs`` (``sub=""``) or ``.vsqs/<sub>``; ``None`` if absent.

        :raises UnsafeEntry: the entry is a symlink or not a directory.
        """
        fds = self._fds
        fd = fds.get(sub)
        if fd is not None and self._pid == os.getpid():
            return fd
        with self._lock:
            if self._pid != os.getpid():
                self._fds, self._pid = {}, os.getpid()  # a fork: the child opens its own
                fds = self._fds
            if sub in fds:
                return fds[sub]
            if sub:
                parent = self._open(ROOT, create=create)
                if parent is None:
                    return None
                name = sub
            else:
                parent = _fs.open_queue_dir(self.path)
                name = DIR
            try:
                fd = self._open_child(parent, name, create=create)
            finally:
                if not sub:
                    _fs.close(parent)
            if fd is not None:
                fds[sub] = fd
            return fd

    def _open_child(self, parent: int, name: str, *, create: bool) -> int | None:
        shown = f"{DIR}/{name}" if name != DIR else DIR
        for _ in range(2):
            try:
                return _fs.open_dir(name, parent)
            except FileNotFoundError:
                if not create:
                    return None
                made = _fs.make_dir_at(name, self.dir_mode, parent, durable=self.durable)
                if made and self.file_mode is not None:
                    # Keep a set-group-id bit inherited from the queue directory: it is
                    # how a shared queue keeps its group on everything created inside.
                    inherited = os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode
                    _fs.fchmod_dir_at(name, self.dir_mode | (inherited & stat.S_ISGID), parent)
            except OSError as exc:
                if exc.errno in _NOT_A_DIR:
                    raise UnsafeEntry(
                        exc.errno,
                        f"{shown} in queue {self.path!r} is not a directory (a symlink or a "
                        "file planted there); vsqs never follows it: remove it",
                        f"{self.path}/{shown}",
                    ) from None
                raise
        raise FileNotFoundError(errno.ENOENT, f"{shown} vanished while created", self.path)

    def close(self) -> None:
        """Release the descriptors (they are opened again on next use)."""
        with self._lock:
            fds, self._fds = self._fds, {}
            if self._pid == os.getpid():
                for fd in fds.values():
                    _fs.close(fd)

    def __del__(self, _finalizing: Callable[[], bool] = sys.is_finalizing) -> None:
        # Bound at definition: at interpreter exit the modules' globals (this one's, and
        # _fs's) may already be gone, and the kernel closes the descriptors anyway.
        if _finalizing():
            return
        try:
            self.close()
        except OSError:
            pass  # closing at interpreter exit: nothing left to do

    # -- operations on files under .vsqs, each by (directory, name) ------------------------

    def has_dir(self, sub: str) -> bool:
        """Whether anything is at ``.vsqs/<sub>`` (a hint: one ``access``, no exception).

        Only a hint for skipping work: anything there (a planted link or file too) says
        yes, and every read and write still goes through the descriptors, never a link,
        treating a non-directory as absent.
        """
        return _fs.exists(f"{self.root}/{sub}" if sub else self.root)

    def read(self, sub: str, name: str) -> bytes | None:
        """The content of a regular file; ``None`` if it (or its directory) is absent.

        :raises OSError: ``EINVAL``/``ELOOP`` for a non-file; :class:`UnsafeEntry`.
        """
        fd = self._open(sub, create=False)
        if fd is None:
            return None
        try:
            return _fs.read_at(name, fd)
        except FileNotFoundError:
            return None

    def create(self, sub: str, name: str, data: bytes, *, durable: bool) -> bool:
        """Create a file exclusively with *data*; ``False`` if the name is taken."""
        fd = self._open(sub, create=True)
        assert fd is not None
        try:
            file_fd = _fs.create_at(name, self.create_mode, fd)
        except FileExistsError:
            return False
        self._fill(file_fd, data, durable=durable, cleanup=(name, fd))
        return True

    def write(self, sub: str, name: str, data: bytes, *, durable: bool) -> None:
        """Replace a file with *data* atomically (a temporary file, then a rename).

        Readers see the old content or the new, never a mix. The temporary file is
        ``.tmp-<name>-...`` in the same directory, removed on failure.
        """
        fd = self._open(sub, create=True)
        assert fd is not None
        tmp = f".tmp-{name}-{os.getpid()}-{os.urandom(4).hex()}"
        self._fill(_fs.create_at(tmp, self.create_mode, fd), data, durable=durable,
                   cleanup=(tmp, fd))  # fmt: skip
        try:
            _fs.replace_at(tmp, name, fd)
        except BaseException:
            _fs.unlink_at(tmp, fd)
            raise

    def _fill(self, fd: int, data: bytes, *, durable: bool, cleanup: tuple[str, int]) -> None:
        """Write *data* to a freshly created *fd* and close it; unlink it on failure."""
        try:
            if self.file_mode is not None:
                _fs.fchmod(fd, self.file_mode)  # whatever the process umask
            _fs.write_all(fd, memoryview(data))
            if durable:
                _fs.fsync(fd)
        except BaseException:
            _fs.close(fd)
            _fs.unlink_at(*cleanup)
            raise
        _fs.close(fd)

    def remove(self, sub: str, name: str) -> bool:
        """Remove a file (a planted link itself, never its target); ``False`` if absent."""
        fd = self._open(sub, create=False)
        return fd is not None and _fs.unlink_at(name, fd)

    def exists(self, sub: str, name: str) -> bool:
        fd = self._open(sub, create=False)
        return fd is not None and _fs.exists_at(name, fd)

    def names(self, sub: str) -> list[str]:
        """The names in ``.vsqs/<sub>``, dot-files included; none if it is absent."""
        fd = self._open(sub, create=False)
        return [] if fd is None else _fs.list_at(fd)

    def mtime(self, sub: str, name: str) -> float:
        """A file's modification time (seconds); infinity if it is gone."""
        fd = self._open(sub, create=False)
        return math.inf if fd is None else _fs.mtime_at(name, fd)

    def mtime_us(self, sub: str, name: str) -> int:
        fd = self._open(sub, create=False)
        if fd is None:
            raise FileNotFoundError(errno.ENOENT, "no such file", f"{self.root}/{sub}/{name}")
        return _fs.mtime_us_at(name, fd)

    def rename_noreplace(self, sub: str, src: str, dst: str) -> None:
        """Rename within ``.vsqs/<sub>``, never replacing (``FileExistsError``)."""
        fd = self._open(sub, create=False)
        if fd is None:
            raise FileNotFoundError(errno.ENOENT, "no such file", f"{self.root}/{sub}/{src}")
        _fs.rename_noreplace_at(src, dst, fd)

    def open_lock(self, name: str) -> int:
        """A descriptor of the lock file ``.vsqs/<name>`` (created; never a link)."""
        fd = self._open(ROOT, create=True)
        assert fd is not None
        return _fs.open_lock_at(name, self.create_mode, fd)

    def fsync(self, sub: str) -> None:
        """Make the latest changes to ``.vsqs/<sub>``'s entries durable."""
        fd = self._open(sub, create=False)
        if fd is not None:
            _fs.fsync(fd)

    def now_us(self) -> int:
        """The filesystem's clock (µs), read from a file created now in ``.vsqs``."""
        fd = self._open(ROOT, create=True)
        assert fd is not None
        return _fs.now_us_at(fd)
