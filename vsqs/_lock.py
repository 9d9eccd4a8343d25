"""The one cross-process lock: its policy (timeout, poll interval, the clock) written once.

Every lock vsqs takes across processes is a :class:`FileLock` on one small file: the
settings lock, a bounded queue's capacity lock, a ``fifo=True`` directory's claim lock,
``vsqs serve``'s record lock and a Spark query's epoch lock. As in ``filelock``'s
``BaseFileLock._acquire``, the waiting is written here and nowhere else: poll a
non-blocking ``flock`` (the OS calls are :mod:`vsqs._fs`'s) every :data:`POLL` seconds
on the lock's clock until it is taken or the timeout ends, so a stopped holder (SIGSTOP,
a debugger, a paused VM) costs a waiter its timeout, never more, and a manual clock runs
the same code. ``filelock`` itself is not used: it opens its file by path, so a symlink
planted there would be followed (and its target truncated); each lock here is opened by
an *opener* that never follows a link and stays inside its directory (a queue's
locks: :meth:`FileLock.in_queue`, through its layout).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from typing import Final, Protocol

from . import _fs
from ._clock import Clock
from ._errors import LockTimeout

POLL: Final = 0.002
"""Seconds between two tries of a held lock (``filelock`` polls too: ``flock`` has no
timeout of its own, and a blocking one could not be interrupted by a deadline)."""


class _Locks(Protocol):
    """What opens a queue's lock files: its :class:`~vsqs._layout.Layout`."""

    @property
    def root(self) -> str: ...

    def open_lock(self, name: str) -> int: ...


class FileLock:
    """An exclusive lock on one file, across processes and hosts (``flock``) and across
    the threads sharing this object.

    Not reentrant. The file is opened by each acquisition and closed by its release (as
    ``filelock`` does), so a forked child never shares its parent's lock through a shared
    descriptor, and a holder that dies releases it with its descriptors. A thread lock
    is taken first, by the same poll: ``flock`` over NFS is emulated with POSIX locks,
    which two threads of one process would both get.

    Used as a context manager it waits up to its *timeout* and raises
    :class:`~vsqs.LockTimeout`; :meth:`acquire` says ``False`` instead.
    """

    def __init__(
        self,
        opener: Callable[[], int],
        clock: Clock,
        path: str,
        *,
        timeout: float | None = None,
        threads: threading.Lock | None = None,
    ) -> None:
        """*opener* returns a new descriptor of the lock file (created if need be, never
        through a link); *path* names it in errors; *timeout* is the context manager's
        wait (``None``: forever); *threads* the thread lock, where several objects lock
        one file in a process (its own otherwise)."""
        self.path = path
        self.timeout = timeout
        self._open = opener
        self._clock = clock
        self._threads = threading.Lock() if threads is None else threads
        self._fd = -1  # the holder's descriptor; only the thread holding _threads sets it

    @classmethod
    def in_queue(
        cls,
        layout: _Locks,
        name: str,
        clock: Clock,
        *,
        timeout: float | None = None,
        threads: threading.Lock | None = None,
    ) -> FileLock:
        """The lock on ``.vsqs/<name>`` of the queue whose layout is *layout* (opened by
        ``layout.open_lock``: created, never through a link); no I/O until acquired."""
        path = f"{layout.root}/{name}"
        return cls(lambda: layout.open_lock(name), clock, path, timeout=timeout, threads=threads)

    def acquire(self, timeout: float | None) -> bool:
        """Take the lock within *timeout* seconds (``None``: wait forever; ``0``: one try);
        ``False`` if another thread or process held it all that time.

        :raises OSError: the lock file cannot be opened (permissions, a planted entry).
        """
        clock = self._clock
        deadline = math.inf if timeout is None else clock.monotonic() + timeout
        threads = self._threads
        fd = -1
        while True:
            if fd >= 0 or threads.acquire(blocking=False):
                if fd < 0:
                    try:
                        fd = self._open()
                    except BaseException:
                        threads.release()
                        raise
                if _fs.try_lock(fd):
                    self._fd = fd
                    return True
            if clock.monotonic() >= deadline:
                if fd >= 0:
                    _fs.close(fd)
                    threads.release()
                return False
            clock.sleep(min(POLL, max(0.0, deadline - clock.monotonic())))

    def release(self) -> None:
        """Release the lock this thread holds (closing its descriptor releases ``flock``)."""
        fd, self._fd = self._fd, -1
        try:
            _fs.unlock(fd)
        finally:
            _fs.close(fd)
            self._threads.release()

    def __enter__(self) -> FileLock:
        if not self.acquire(self.timeout):
            raise LockTimeout(self.path, math.inf if self.timeout is None else self.timeout)
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()
