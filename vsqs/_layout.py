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
    .vsqs/<integration>/         an integration's own files (see :class:`vsqs.Storage`)

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

from . import _fs, _host
from ._errors import UnsafeEntry
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
FIFO_LOCK: Final = "fifo.lock"
CORE: Final = frozenset({META, DELAYED, DEDUP, STATS, CLOSED, CAPACITY_LOCK, CAPACITY_COUNT,
                         SETTINGS, SETTINGS_LOCK, FIFO_LOCK})  # fmt: skip
"""The names the core keeps in ``.vsqs`` (no integration's directory takes one)."""
TMP: Final = ".tmp-"  # a file :func:`write_at` is writing, renamed over its name once whole

READ_LIMITS: Final = {ROOT: 64 << 10, STATS: 64 << 10, META: 1 << 20, DEDUP: 64 << 20}
"""The most vsqs reads of one of its files, by directory (bytes; 1 MiB in any other).
Each is a small JSON record or a number (a metadata record holds at most 8 KiB of
attributes; a batch's deduplication record lists its ids): anything larger is not
vsqs's, and is refused after one ``fstat`` (``EFBIG``, naming it) without being read."""
_OTHER_LIMIT: Final = 1 << 20

# What opening a planted entry as a directory gives: a symlink (ELOOP, O_NOFOLLOW), a
# file or FIFO where a directory belongs (ENOTDIR).
_NOT_A_DIR: Final = frozenset({errno.ELOOP, errno.ENOTDIR})


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
    :param base: reach the directory by this descriptor (:meth:`open_queue`), not its path.
    """

    def __init__(
        self,
        path: str,
        dir_mode: int = 0o777,
        file_mode: int | None = None,
        *,
        durable: bool = True,
        base: int | None = None,
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
        self._base = base

    def message(self, name: str) -> str:
        """The path of a message file named *name* (any state)."""
        return f"{self.path}/{name}"

    @property
    def closed_path(self) -> str:
        """The shutdown marker's path, only for the existence probe of every publish (an
        ``access`` that reads nothing); reading and creating it go through descriptors."""
        return f"{self.root}/{CLOSED}"

    def dir_path(self, sub: str) -> str:
        """The path of ``.vsqs/<sub>`` (``.vsqs`` itself for :data:`ROOT`)."""
        return f"{self.root}/{sub}" if sub else self.root

    def sub_of(self, path: str) -> str | None:
        """The *sub* argument that names *path*, if it is ``.vsqs`` or a directory below
        it (``"spark/streams"`` for ``<queue>/.vsqs/spark/streams``); ``None`` if elsewhere."""
        path = os.path.normpath(path)  # no "..": a sub never climbs out of .vsqs
        if path == self.root:
            return ROOT
        inside = path.removeprefix(self.root + "/")
        return None if inside == path else inside

    def wake(self) -> str:
        """A fresh, unique name in the queue directory for an inotify poke."""
        return f"{self.path}/{WAKE}{os.getpid()}-{os.urandom(4).hex()}"

    def poke(self) -> None:
        """Make a file event in the queue directory (a fresh ``.wake-`` name made and
        removed), which wakes receives blocked on it in this and other processes."""
        name = self.wake()
        _fs.close(_fs.create_exclusive(name))
        _fs.unlink(name)

    def remove_poke(self, name: str, *, older_than: float) -> bool:
        """Remove the poke or announcement *name* a process died between making and
        removing, if it is an empty regular file (not a link) last changed before
        *older_than* (wall clock), as such debris is and no user's file (one ``lstat``)."""
        try:
            info = _host.lstatus(self.message(name))
        except FileNotFoundError:
            return False  # RACE: its maker removed it meanwhile
        stale = stat.S_ISREG(info.st_mode) and info.st_size == 0 and info.st_mtime < older_than
        return stale and _fs.unlink(self.message(name))

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
        base, at = self._base, () if self._base is None else (self._base,)
        staged = self.wake() if base is None else os.path.basename(self.wake())
        announced = f"{staged}-{sub}"
        _fs.close(_fs.create_exclusive(staged, 0o666, *at))
        try:
            _fs.rename_noreplace(staged, announced, *at)
        finally:  # nobody else makes these names (a process id and a random suffix)
            for name in (announced, staged):  # the first that is there
                if _fs.unlink(name) if base is None else _fs.unlink_at(name, base):
                    break

    @property
    def create_mode(self) -> int:
        """The mode to create files with."""
        return 0o666 if self.file_mode is None else self.file_mode

    # -- descriptors ----------------------------------------------------------------------

    def _open(self, sub: str, *, create: bool) -> int | None:
        """The descriptor of ``.vsqs`` (``sub=""``) or ``.vsqs/<sub>`` (``<sub>`` may be
        nested: ``spark/streams``, each level opened from its parent's); ``None`` if absent.

        :raises UnsafeEntry: an entry on the way is a symlink or not a directory.
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
                above, _, name = sub.rpartition("/")
                parent = self._open(above, create=create)
                if parent is None:
                    return None
            else:
                parent = _fs.open_queue_dir(self.path) if self._base is None else self._base
                name = DIR
            try:
                fd = self._open_child(parent, name, sub, create=create)
            finally:
                if not sub and parent != self._base:
                    _fs.close(parent)
            if fd is not None:
                fds[sub] = fd
            return fd

    def _open_child(self, parent: int, name: str, sub: str, *, create: bool) -> int | None:
        shown = f"{DIR}/{sub}" if sub else DIR
        for _ in range(2):
            try:
                return _fs.open_dir(name, parent)
            except FileNotFoundError:
                if not create:
                    return None
                above = self.dir_path(sub.rpartition("/")[0]) if sub else self.path
                flush = above if self.durable else None
                made = _fs.make_dir_at(name, self.dir_mode, parent, flush_in=flush)
                if made and self.file_mode is not None:
                    _fs.fchmod_dir_at(name, self.dir_mode, parent)
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

    # -- moves into this queue from another ------------------------------------------------

    def open_queue(self) -> int:
        """A new descriptor of the queue directory, its own name opened without following
        a symlink (the path above it is the user's): what a move into this queue goes
        through, before it writes anything (the caller closes it).

        :raises UnsafeEntry: the queue's name is now a symlink or not a directory.
        """
        above, name = os.path.split(self.path)
        parent = _fs.open_queue_dir(above or "/")
        try:
            return _fs.open_dir(name, parent)
        except OSError as exc:
            if exc.errno in _NOT_A_DIR:
                raise UnsafeEntry(
                    exc.errno,
                    f"queue {self.path!r} is no longer a directory (a symlink or a file "
                    "planted there); vsqs never moves a message through it",
                    self.path,
                ) from None
            raise
        finally:
            _fs.close(parent)

    # -- operations on files under .vsqs, each by (directory, name) ------------------------

    def has_dir(self, sub: str) -> bool:
        """Whether anything is at ``.vsqs/<sub>`` (a hint: one ``access``, no exception):
        anything there (a planted link or file too) says yes, and every read and write
        still goes through the descriptors, treating a non-directory as absent."""
        return _fs.exists(self.dir_path(sub))

    def read(self, sub: str, name: str, limit: int | None = None) -> bytes | None:
        """The content of a regular file; ``None`` if it (or its directory) is absent.

        Bounded: a file larger than *limit* (by default what :data:`READ_LIMITS` allows
        for *sub*) is never read.

        :raises OSError: ``EINVAL``/``ELOOP`` for a non-file, ``EFBIG`` for one too large;
            :class:`UnsafeEntry`.
        """
        fd = self._open(sub, create=False)
        if fd is None:
            return None
        try:
            limit = READ_LIMITS.get(sub, _OTHER_LIMIT) if limit is None else limit
            return _fs.read_at(name, fd, limit)
        except FileNotFoundError:
            return None
        except OSError as exc:
            self._name_in(exc, sub, name)
            raise

    def create(self, sub: str, name: str, data: bytes, *, durable: bool) -> bool:
        """Create a file exclusively with *data*; ``False`` if the name is taken."""
        fd = self._open(sub, create=True)
        assert fd is not None
        try:
            file_fd = _fs.create_at(name, self.create_mode, fd)
            flush = self.dir_path(sub) if durable else None
            _fill(file_fd, data, self.file_mode, flush_in=flush, cleanup=(name, fd))
        except FileExistsError:
            return False
        except OSError as exc:
            self._name_in(exc, sub, name)
            raise
        return True

    def write(self, sub: str, name: str, data: bytes, *, durable: bool) -> None:
        """Replace a file with *data* atomically (:func:`write_at`)."""
        fd = self._open(sub, create=True)
        assert fd is not None
        try:
            flush_in = self.dir_path(sub) if durable else None
            write_at(fd, name, data, self.create_mode, self.file_mode, flush_in=flush_in)
        except OSError as exc:
            if isinstance(exc.filename, str):
                self._name_in(exc, sub, exc.filename)  # the temporary file's, or *name*'s
            raise

    def remove(self, sub: str, name: str) -> bool:
        """Remove a file (a planted link itself, never its target); ``False`` if absent."""
        fd = self._open(sub, create=False)
        try:
            return fd is not None and _fs.unlink_at(name, fd)
        except OSError as exc:
            self._name_in(exc, sub, name)
            raise

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
        try:
            _fs.rename_noreplace_at(src, dst, fd)
        except OSError as exc:
            self._name_in(exc, sub, src)
            raise

    def open_lock(self, name: str) -> int:
        """A descriptor of the lock file ``.vsqs/<name>`` (created; never a link)."""
        fd = self._open(ROOT, create=True)
        assert fd is not None
        try:
            return _fs.open_lock_at(name, self.create_mode, fd)
        except OSError as exc:
            self._name_in(exc, ROOT, name)
            raise

    def _name_in(self, exc: OSError, sub: str, name: str) -> None:
        """Make *exc* name ``.vsqs/<sub>/<name>`` by its full path, not the bare *name* a
        descriptor-relative call gives (``Permission denied: settings.lock`` said
        neither which queue nor where). The same exception, re-raised by the caller."""
        if exc.filename == name:
            exc.filename = f"{self.root}/{sub}/{name}" if sub else f"{self.root}/{name}"

    def open_dir(self, sub: str, *, create: bool) -> int | None:
        """The descriptor of ``.vsqs/<sub>`` (created if *create*; ``None`` if absent) for
        :class:`vsqs.Storage`; the layout's own (:meth:`close` closes it).

        :raises UnsafeEntry: an entry on the way is a symlink or not a directory.
        """
        return self._open(sub, create=create)

    def fsync(self, sub: str) -> None:
        """Make the latest changes to ``.vsqs/<sub>``'s entries durable."""
        fd = self._open(sub, create=False)
        if fd is not None:
            _fs.fsync(fd, self.dir_path(sub))

    def now_us(self) -> int:
        """The filesystem's clock (µs), read from a file created now in ``.vsqs``."""
        fd = self._open(ROOT, create=True)
        assert fd is not None
        return _fs.now_us_at(fd)


def write_at(
    fd: int, name: str, data: bytes, mode: int, file_mode: int | None, *, flush_in: str | None
) -> None:
    """Replace *name* in the directory *fd* (path: *flush_in*, flushed if given) atomically:
    a ``.tmp-<name>-...`` file made there (*mode*, *file_mode* forced) renamed over it (a
    link there replaced, not followed). Readers see old or new; on failure *name* is kept."""
    tmp = f"{TMP}{name}-{os.getpid()}-{os.urandom(4).hex()}"
    _fill(_fs.create_at(tmp, mode, fd), data, file_mode, flush_in=flush_in, cleanup=(tmp, fd))
    try:
        _fs.replace_at(tmp, name, fd)
    except BaseException:
        _fs.unlink_at(tmp, fd)
        raise


def _fill(
    fd: int, data: bytes, file_mode: int | None, *, flush_in: str | None, cleanup: tuple[str, int]
) -> None:
    """Write *data* to a fresh *fd* (flushed in *flush_in*) and close it; unlink on failure."""
    try:
        if file_mode is not None:
            _fs.fchmod(fd, file_mode)  # whatever the process umask
        _fs.write_all(fd, memoryview(data))
        if flush_in is not None:
            _fs.fsync(fd, flush_in)
    except BaseException:
        _fs.close(fd)
        _fs.unlink_at(*cleanup)
        raise
    _fs.close(fd)
