"""How a blocked ``receive`` or ``publish`` waits for the queue directory to change.

Two strategies behind one small protocol:

* :class:`InotifyHub` (Linux): one inotify descriptor per directory per *process*,
  created on the first wait, never in a constructor, and shared by every thread and
  every :class:`~vsqs.Queue` object on that directory. One waiting thread reads the
  descriptor; the others sleep on a condition it signals. No background thread.
* :class:`PollWaiter`: sleeps a fixed interval. Used off Linux, on network
  filesystems (where another host's writes raise no local event), or on request.

Waits are always bounded by the caller (the earliest known expiry or delay, the
timeout, and a periodic re-check), so a lost or invisible event delays a wake-up by at
most one re-check interval; it can never leave a message waiting forever.

Usage is ``token = waiter.token()`` *before* looking at the queue, then
``waiter.wait(token, seconds)`` if nothing was found: an event that arrives between
the look and the wait is never missed.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import select
import sys
import threading
import time
import weakref
from typing import Final, Protocol

from ._clock import Clock
from ._fs import filesystem_type

# inotify(7) event bits: a message became ready or held (moved in), or left (deleted,
# moved out). IN_CREATE is left out on purpose: a `.new` file appearing is not news.
_IN_MOVED_FROM: Final = 0x00000040
_IN_MOVED_TO: Final = 0x00000080
_IN_DELETE: Final = 0x00000200
_IN_DELETE_SELF: Final = 0x00000400
_IN_MOVE_SELF: Final = 0x00000800
_IN_NONBLOCK: Final = os.O_NONBLOCK
_IN_CLOEXEC: Final = getattr(os, "O_CLOEXEC", 0)
_MASK: Final = _IN_MOVED_FROM | _IN_MOVED_TO | _IN_DELETE | _IN_DELETE_SELF | _IN_MOVE_SELF

_libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
_inotify_init1 = getattr(_libc, "inotify_init1", None) if sys.platform.startswith("linux") else None
_inotify_add_watch = getattr(_libc, "inotify_add_watch", None)
if _inotify_add_watch is not None:
    _inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
    _inotify_add_watch.restype = ctypes.c_int

HAVE_INOTIFY: Final = _inotify_init1 is not None and _inotify_add_watch is not None

# Filesystems on which other hosts write: local events would miss their changes.
NETWORK_FILESYSTEMS: Final = frozenset(
    {"nfs", "nfs4", "cifs", "smb3", "smbfs", "ceph", "glusterfs", "fuse.glusterfs", "lustre",
     "gpfs", "9p", "fuse.sshfs", "afs", "beegfs", "fuse.s3fs", "fuse.gcsfuse"}
)  # fmt: skip


class Waiter(Protocol):
    """Something a blocked call can wait on."""

    def token(self) -> int:
        """A marker of 'now', taken before looking at the queue."""

    def wait(self, token: int, seconds: float) -> None:
        """Return after a change since *token*, or after *seconds*, whichever is first."""

    def close(self) -> None:
        """Release what the waiter holds."""


class PollWaiter:
    """Waits by sleeping: the fallback that works on every filesystem."""

    def __init__(self, clock: Clock, interval: float) -> None:
        self._clock = clock
        self.interval = interval

    def token(self) -> int:
        return 0

    def wait(self, token: int, seconds: float) -> None:
        # The interval bounds the *real* sleep; a manual clock skips the wait instead.
        interval = self.interval
        self._clock.wait(seconds, lambda real: time.sleep(min(real, interval)))

    def close(self) -> None:
        pass


class InotifyHub:
    """One inotify watch on one directory, shared by all threads of this process."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._cond = threading.Condition()
        self._generation = 0
        self._reader = False
        self._fd = -1

    def _open(self) -> bool:
        """Create the descriptor; ``True`` if this call created it."""
        if self._fd >= 0:
            return False
        assert _inotify_init1 is not None
        assert _inotify_add_watch is not None
        fd = _inotify_init1(_IN_NONBLOCK | _IN_CLOEXEC)
        if fd < 0:
            code = ctypes.get_errno()
            raise OSError(code, f"inotify_init1: {os.strerror(code)}")
        if _inotify_add_watch(fd, os.fsencode(self.path), _MASK) < 0:
            code = ctypes.get_errno()
            os.close(fd)
            raise OSError(code, os.strerror(code), self.path)
        self._fd = fd
        # Closes the descriptor when the last waiter drops the hub. It must not hold the
        # hub itself (finalize keeps its arguments alive), or the hub would never go.
        self._finalizer = weakref.finalize(self, os.close, fd)
        return True

    def token(self) -> int:
        with self._cond:
            return self._generation

    def wait(self, token: int, seconds: float) -> None:
        with self._cond:
            if self._generation != token:
                return  # something happened since the caller looked
            if self._open():
                # Events before the watch existed are lost: make the caller look again.
                self._generation += 1
                self._cond.notify_all()
                return
            if self._reader:
                self._cond.wait(seconds)
                return
            self._reader = True
            fd = self._fd
        try:
            readable, _, _ = select.select([fd], [], [], max(0.0, seconds))
            if readable:
                try:
                    while os.read(fd, 65536):
                        pass  # only "something changed" matters, not what
                except BlockingIOError:
                    pass  # drained
        finally:
            with self._cond:
                self._reader = False
                self._generation += 1
                self._cond.notify_all()

    def close(self) -> None:
        with self._cond:
            if self._fd >= 0:
                self._finalizer()  # closes the descriptor once, now
                self._fd = -1


_hubs: weakref.WeakValueDictionary[tuple[int, int], InotifyHub] = weakref.WeakValueDictionary()
_hubs_lock = threading.Lock()


class _Detached:
    """Stands in for the hub after :meth:`InotifyWaiter.close`."""

    def token(self) -> int:
        return 0

    def wait(self, token: int, seconds: float) -> None:
        raise RuntimeError("this queue was detached; create a new Queue object to wait on it")

    def close(self) -> None:
        pass


_DETACHED: Final = _Detached()


class InotifyWaiter:
    """A queue's handle on the process-wide hub of its directory."""

    def __init__(self, path: str, clock: Clock, recheck: float) -> None:
        info = os.stat(path)
        key = (info.st_dev, info.st_ino)
        with _hubs_lock:
            hub = _hubs.get(key)
            if hub is None:
                hub = InotifyHub(path)
                _hubs[key] = hub
        self._hub: InotifyHub | _Detached = hub
        self._clock = clock
        self.interval = recheck

    def token(self) -> int:
        return self._hub.token()

    def wait(self, token: int, seconds: float) -> None:
        # The re-check interval bounds the *real* wait (a lost event costs at most one);
        # a manual clock skips the wait and only collects events that already came.
        hub, interval = self._hub, self.interval
        self._clock.wait(seconds, lambda real: hub.wait(token, min(real, interval)))

    def close(self) -> None:
        # The hub is shared; it closes its descriptor when the last waiter lets go of it.
        self._hub = _DETACHED


def make_waiter(path: str, clock: Clock, mode: str, interval: float | None) -> Waiter:
    """Pick the waiting strategy for a queue directory.

    :param mode: ``"auto"`` (inotify on local Linux filesystems, polling elsewhere),
        ``"inotify"`` or ``"poll"``.
    :param interval: the polling interval, or the periodic re-check under inotify.
    """
    use_inotify = HAVE_INOTIFY and mode != "poll"
    if use_inotify and mode == "auto" and filesystem_type(path) in NETWORK_FILESYSTEMS:
        use_inotify = False
    if use_inotify:
        return InotifyWaiter(path, clock, 1.0 if interval is None else interval)
    return PollWaiter(clock, 0.05 if interval is None else interval)
