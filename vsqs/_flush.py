"""How data reaches stable storage: every flush, and which one each filesystem honours.

The durability half of :mod:`vsqs._fs`, which re-exports every name here (callers and
the kill-point tests reach them as ``_fs.fsync``, ``_fs.sync_files``...). Guarantees:

* :func:`sync_files` flushes every body it is given before it returns: one ``syncfs``
  only where that is a proven barrier for the files' data (local block filesystems and
  tmpfs, Linux 5.8 or later, decided once per directory from its filesystem type);
  elsewhere (FUSE, network filesystems) an ``fsync`` per file, several at once.
* Threads of one process that flush the same filesystem at once share its ``syncfs``
  (group commit, :class:`_SharedSyncfs`): a caller is answered only by a ``syncfs``
  that started after it asked, so after its writes; a failure is raised in every caller
  that ``syncfs`` answered.
* On a memory filesystem (:data:`vsqs._mountinfo.MEMORY_FILESYSTEMS`: tmpfs, ramfs;
  decided once per directory from its filesystem type, as :func:`syncfs_is_barrier` is)
  no flush makes a system call: every function here returns at once. Nothing there ever
  reaches stable storage (the kernel's fsync is a no-op and ``syncfs`` writes nothing
  back; a power loss or a reboot empties it whatever is flushed), so no guarantee is
  given up. Everywhere else (disks, FUSE, network filesystems, an unknown type) every
  flush is made.
* A failed flush raises and is never retried: after a failure a second flush may succeed
  without the data (PostgreSQL's "fsyncgate"). :func:`flushing_published` turns the
  failure of a flush made after messages became visible into a
  :class:`~vsqs.DurabilityError` that names them.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Final

from . import _host, _libc, _mountinfo
from ._errors import DurabilityError

if TYPE_CHECKING:
    from concurrent.futures import ThreadPoolExecutor

__all__ = [
    "flush_made",
    "flushing_published",
    "fsync",
    "fsync_dir",
    "fsync_keeps_new_names",
    "in_memory",
    "missing_dirs",
    "sync_files",
    "sync_filesystem",
    "syncfs_is_barrier",
]

_O_NOFOLLOW: Final = getattr(os, "O_NOFOLLOW", 0)
_O_CLOEXEC: Final = getattr(os, "O_CLOEXEC", 0)
_O_NONBLOCK: Final = getattr(os, "O_NONBLOCK", 0)
_O_DIRECTORY: Final = getattr(os, "O_DIRECTORY", 0)
_READ_FLAGS: Final = os.O_RDONLY | _O_NOFOLLOW | _O_CLOEXEC | _O_NONBLOCK


def _kernel_at_least(major: int, minor: int) -> bool:
    """Whether this kernel's release (``6.1.0-13-amd64``...) is *major*.*minor* or later."""
    found = re.match(r"(\d+)\.(\d+)", os.uname().release)
    return found is not None and (int(found[1]), int(found[2])) >= (major, minor)


# Before Linux 5.8 syncfs returned 0 even when writing a file back failed: an error it
# cannot report makes it no barrier at all (a failed flush must never pass for a good one).
_KERNEL_SYNCFS_REPORTS_ERRORS: Final = _kernel_at_least(5, 8)
# Bodies fsynced at once where there is no filesystem-wide barrier: a network filesystem
# answers each fsync after a round trip, which threads overlap (fsync releases the GIL).
_FSYNC_THREADS: Final = 8


_memory: dict[str, bool] = {}  # by directory: whether it is on a memory filesystem


def in_memory(directory: str) -> bool:
    """Whether *directory* is on a memory filesystem, where no flush reaches anything
    (see the module docstring); decided once per directory from its filesystem's type,
    ``False`` where that cannot be told. A directory is taken to stay on its filesystem
    while this process runs, as :func:`syncfs_is_barrier` takes it."""
    found = _memory.get(directory)
    if found is None:
        found = _mountinfo.in_memory(_host.filesystem_type(directory))
        if len(_memory) >= 1024:  # pragma: no cover - a process that opened that many queues
            _memory.clear()
        # RACE: another thread may decide the same directory at once: same answer.
        _memory[directory] = found
    return found


def fsync(fd: int, directory: str) -> None:
    """Flush a file's data and metadata to stable storage: *fd*, a file in *directory*
    or that directory itself (its filesystem decides; nothing on a memory filesystem)."""
    if not in_memory(directory):
        os.fsync(fd)


def fsync_dir(path: str) -> None:
    """Make the latest renames and unlinks in directory *path* durable (nothing on a
    memory filesystem: not even an ``open``)."""
    if in_memory(path):
        return
    fd = os.open(path, os.O_RDONLY | _O_DIRECTORY | _O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def sync_filesystem(path: str) -> bool:
    """Flush every dirty file and directory of the filesystem holding *path* in one call
    (Linux ``syncfs``); ``False``, doing nothing, where that is not a proven barrier (the
    caller fsyncs each file and directory instead): FUSE, network filesystems, anything
    but those of :data:`vsqs._mountinfo.SYNCFS_FILESYSTEMS`; ``True``, doing nothing, on a
    memory filesystem (nothing there to flush). A failure raises and is never retried:
    after a failed flush a second one may succeed without the data.

    Thread-safe, and shared: threads of this process that call it at once for the same
    filesystem share one ``syncfs`` (:class:`_SharedSyncfs`); each returns only after a
    ``syncfs`` that started after its call began, and each raises if that one failed."""
    if in_memory(path):
        return True
    syncfs = _libc.syncfs()
    if syncfs is None or not syncfs_is_barrier(path):
        return False
    fd = os.open(path, os.O_RDONLY | _O_DIRECTORY | _O_CLOEXEC)
    try:
        code = _shared_syncfs(os.fstat(fd).st_dev).flush(fd, syncfs)
    finally:
        os.close(fd)
    if code:
        raise OSError(code, os.strerror(code), path)
    return True


class _Round:
    """One ``syncfs`` and the callers it answers: those who joined before it started."""

    __slots__ = ("done", "error", "started")

    def __init__(self) -> None:
        self.started = False
        self.done = False
        self.error = 0  # its errno, set with done


class _SharedSyncfs:
    """The ``syncfs`` calls of one filesystem in this process, shared (group commit).

    At most one runs at a time. A caller that arrives while one runs cannot be answered
    by it (it may have started before the caller's writes ended): it joins the *next*
    round, which the first of its callers to see the running one end starts, on its own
    descriptor, for all of them. So every caller waits for at most the end of one
    ``syncfs`` and the whole of the next, and concurrent callers cost two ``syncfs``
    between them, not one each. Every caller a failed round answered gets its errno;
    so does a caller that arrived while a failed round ran (that round may have written
    the caller's pages back, and the kernel reports a write-back error only once).
    Thread-safe; one per filesystem (``st_dev``), forgotten in a forked child.
    """

    __slots__ = ("_changed", "_next", "_running")

    def __init__(self) -> None:
        self._changed = threading.Condition(threading.Lock())
        self._running: _Round | None = None
        self._next: _Round | None = None

    def flush(self, fd: int, syncfs: Callable[[int], int]) -> int:
        """Wait until a ``syncfs`` of *fd*'s filesystem started after this call and
        ended, making it if no other caller does; its errno, ``0`` if it succeeded."""
        with self._changed:
            # RACE: another thread's syncfs, running now, may have started before our
            # writes ended: it never answers us, but it may have flushed our pages, so
            # its failure is ours too.
            overlapped = self._running
            round_ = self._next = self._next or _Round()  # not started: it follows our writes
            while not round_.started and self._running is not None:
                self._changed.wait()  # bounded by one syncfs, as our own would be
            if round_.started:  # another caller of the round started it: it answers us too
                while not round_.done:
                    self._changed.wait()
                return round_.error or (overlapped.error if overlapped is not None else 0)
            round_.started, self._running, self._next = True, round_, None
        # A syncfs whose end nobody saw (this thread interrupted) never passes for a good one.
        error = errno.EIO
        try:
            error = 0 if syncfs(fd) == 0 else (_libc.errno() or errno.EIO)
        finally:
            with self._changed:
                round_.error, round_.done, self._running = error, True, None
                self._changed.notify_all()
        return error or (overlapped.error if overlapped is not None else 0)


_shared: dict[int, _SharedSyncfs] = {}  # by st_dev: every filesystem this process syncs
_shared_lock = threading.Lock()


def _shared_syncfs(device: int) -> _SharedSyncfs:
    """The shared ``syncfs`` of the filesystem numbered *device* (made on first use)."""
    with _shared_lock:
        found = _shared.get(device)
        if found is None:
            found = _shared[device] = _SharedSyncfs()
        return found


_barriers: dict[str, bool] = {}  # by directory: whether syncfs flushes its files


def syncfs_is_barrier(directory: str) -> bool:
    """Whether one ``syncfs`` makes the files of *directory* durable (decided once per
    directory from its filesystem's type; see :func:`sync_filesystem`)."""
    found = _barriers.get(directory)
    if found is None:
        fstype = _host.filesystem_type(directory)
        found = (
            _libc.syncfs() is not None
            and _KERNEL_SYNCFS_REPORTS_ERRORS
            and _mountinfo.syncfs_flushes(fstype)
        )
        if len(_barriers) >= 1024:  # pragma: no cover - a process that opened that many queues
            _barriers.clear()
        _barriers[directory] = found
    return found


_names_kept: dict[str, bool] = {}  # by directory: whether a file's fsync keeps its name


def fsync_keeps_new_names(directory: str) -> bool:
    """Whether fsync of a file just created in *directory* also makes its name durable
    (so the directory needs no fsync of its own for it); decided once per directory
    from its filesystem's type, see :data:`vsqs._mountinfo.NAMES_KEPT_BY_FSYNC`."""
    found = _names_kept.get(directory)
    if found is None:
        found = _mountinfo.fsync_keeps_names(_host.filesystem_type(directory))
        if len(_names_kept) >= 1024:  # pragma: no cover - a process that opened that many
            _names_kept.clear()
        _names_kept[directory] = found
    return found


def sync_files(directory: str, names: list[str]) -> None:
    """Flush the files *names* of *directory* (their data; not the directory entries):
    one ``syncfs`` where that is a barrier (:func:`sync_filesystem`) and there are several,
    else an ``fsync`` each, several at once (those are not shared with other threads:
    each flushes its own files); nothing on a memory filesystem. Every flush is waited
    for; the first failure is raised (a flush is never retried)."""
    if in_memory(directory):
        return
    if len(names) > 1 and sync_filesystem(directory):
        return
    paths = [f"{directory}/{name}" for name in names]
    if len(paths) <= 1:
        for path in paths:
            _fsync_path(path, directory)
        return
    from concurrent.futures import wait  # noqa: PLC0415 -- 4 ms of logging and threads at import

    futures = [_fsync_pool().submit(_fsync_path, path, directory) for path in paths]
    wait(futures)
    for future in futures:
        future.result()  # the first failure, in the order of *names*


def _fsync_path(path: str, directory: str) -> None:
    fd = os.open(path, _READ_FLAGS)  # never through a symlink, never blocking on a FIFO
    try:
        fsync(fd, directory)
    finally:
        os.close(fd)


_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _fsync_pool() -> ThreadPoolExecutor:
    """The process's fsync threads, started on first use."""
    global _pool  # noqa: PLW0603 - one pool per process, made on first use
    with _pool_lock:
        if _pool is None:
            from concurrent.futures import ThreadPoolExecutor  # noqa: PLC0415 -- see sync_files

            _pool = ThreadPoolExecutor(_FSYNC_THREADS, "vsqs-fsync")
        return _pool


def _forget_pool() -> None:
    """In a forked child: the parent's threads (and maybe its lock holder, or a round's
    leader of a shared syncfs) are not here."""
    global _pool, _pool_lock, _shared, _shared_lock  # reset after fork
    _pool, _pool_lock = None, threading.Lock()
    _shared, _shared_lock = {}, threading.Lock()


os.register_at_fork(after_in_child=_forget_pool)


@contextlib.contextmanager
def flushing_published(ids: list[str]) -> Iterator[None]:
    """Around the flushes that follow the moment messages *ids* became visible (the
    directory fsync after the commit rename, a batch's final sync): their failure is a
    :class:`DurabilityError` naming *ids* (the list as it is then), not a bare ``OSError``,
    so that a caller who retries knows what may already be there."""
    try:
        yield
    except DurabilityError:
        raise
    except OSError as exc:
        raise DurabilityError(list(ids), exc.errno or 0, exc.strerror or str(exc)) from exc


def missing_dirs(path: str) -> list[str]:
    """The directories to make for *path*, innermost first (none if it exists)."""
    missing, ancestor = [], os.path.abspath(path)
    while not os.path.lexists(ancestor) and ancestor != os.path.dirname(ancestor):
        missing.append(ancestor)
        ancestor = os.path.dirname(ancestor)
    return missing


def flush_made(missing: list[str]) -> None:
    """Flush the parent of each directory made, top down: POSIX makes a new name durable
    only by flushing its directory, and a message flushed inside a directory whose own
    name is lost is lost with it (nothing on a memory filesystem, as each
    :func:`fsync_dir`)."""
    for made in reversed(missing):
        fsync_dir(os.path.dirname(made))
