"""How a blocked ``receive`` or ``publish`` waits for the queue directory to change.

Two strategies behind one small protocol:

* :class:`InotifyWaiter` (Linux): one inotify descriptor per *process*, created on the
  first wait (never in a constructor), with one watch per directory shared by every
  thread and every :class:`~vsqs.Queue` object on it. One waiting thread reads the
  descriptor (``poll(2)``, so a process with thousands of descriptors is fine); the
  others sleep on a condition it signals. No background thread. When inotify runs out
  (the per-user limits: 128 instances, 8192 watches by default), it polls instead and
  says so once through :mod:`logging`.
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
import logging
import os
import select
import struct
import sys
import threading
import time
import weakref
from typing import Final, Protocol

from ._clock import Clock
from ._mountinfo import filesystem_type, polls

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
_inotify_rm_watch = getattr(_libc, "inotify_rm_watch", None)
if _inotify_add_watch is not None:
    _inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
    _inotify_add_watch.restype = ctypes.c_int
if _inotify_rm_watch is not None:
    _inotify_rm_watch.argtypes = [ctypes.c_int, ctypes.c_int]
    _inotify_rm_watch.restype = ctypes.c_int
_EVENT: Final = struct.Struct("iIII")  # struct inotify_event: wd, mask, cookie, len
_IN_Q_OVERFLOW: Final = 0x00004000

HAVE_INOTIFY: Final = _inotify_init1 is not None and _inotify_add_watch is not None


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


class _Instance:
    """The one inotify descriptor of this process, with one watch per watched directory.

    Created on the first wait, closed when the last directory is let go of. One waiting
    thread at a time reads it (``poll(2)``, so any descriptor number works); the others
    sleep on a condition and wake only when their own directory changed or the reader's
    seat is free. Each watch has a generation, bumped by every event on its directory.
    """

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.fd = -1
        self.reader = False
        self.generations: dict[int, int] = {}
        self.users: dict[int, int] = {}  # watch -> hubs using it

    def add(self, path: str) -> int:
        """Watch *path*; its watch descriptor. Raises :class:`OSError` at a limit."""
        assert _inotify_init1 is not None
        assert _inotify_add_watch is not None
        if self.fd < 0:
            fd = _inotify_init1(_IN_NONBLOCK | _IN_CLOEXEC)
            if fd < 0:
                code = ctypes.get_errno()  # EMFILE: the per-user instance limit (128)
                raise OSError(code, f"inotify_init1: {os.strerror(code)}")
            self.fd = fd
        wd = int(_inotify_add_watch(self.fd, os.fsencode(path), _MASK))
        if wd < 0:
            code = ctypes.get_errno()  # ENOSPC: the per-user watch limit
            if not self.users:
                self._close()
            raise OSError(code, f"inotify_add_watch: {os.strerror(code)}", path)
        self.users[wd] = self.users.get(wd, 0) + 1
        self.generations.setdefault(wd, 0)
        return wd

    def remove(self, wd: int) -> None:
        """Let go of a watch; the descriptor closes with the last one."""
        left = self.users.get(wd, 0) - 1
        if left > 0:
            self.users[wd] = left
            return
        self.users.pop(wd, None)
        self.generations.pop(wd, None)
        if self.fd >= 0 and _inotify_rm_watch is not None:
            _inotify_rm_watch(self.fd, wd)  # EINVAL if the directory is gone: fine
        if not self.users:
            self._close()

    def _close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def wait(self, wd: int, token: int, seconds: float) -> None:
        """Return after an event on *wd* since *token*, or after *seconds*."""
        deadline = time.monotonic() + max(0.0, seconds)
        while True:
            with self.cond:
                while self.generations.get(wd, token + 1) == token:
                    if deadline <= time.monotonic():
                        return
                    if not self.reader:
                        break
                    self.cond.wait(deadline - time.monotonic())
                else:
                    return  # something happened since the caller looked
                self.reader = True
                fd = self.fd
            self._read(fd, deadline)

    def _read(self, fd: int, deadline: float) -> None:
        """As the reader: wait for events until *deadline*, then hand them out."""
        changed: set[int] = set()
        try:
            poller = select.poll()
            poller.register(fd, select.POLLIN)
            if poller.poll(max(0.0, deadline - time.monotonic()) * 1000):
                changed = _read_events(fd)
        finally:
            with self.cond:
                self.reader = False
                bump_all = -1 in changed  # the queue overflowed: anything may have changed
                for watched in self.generations:
                    if bump_all or watched in changed:
                        self.generations[watched] += 1
                self.cond.notify_all()


def _read_events(fd: int) -> set[int]:
    """Drain the descriptor; the watches that saw an event (-1: events were lost)."""
    changed: set[int] = set()
    try:
        while data := os.read(fd, 65536):
            offset = 0
            while offset + _EVENT.size <= len(data):
                wd, mask, _, length = _EVENT.unpack_from(data, offset)
                changed.add(-1 if mask & _IN_Q_OVERFLOW else wd)
                offset += _EVENT.size + length
    except BlockingIOError:
        pass  # drained
    return changed


_instances: dict[int, _Instance] = {}  # by process id: a forked child opens its own
_instances_lock = threading.Lock()


def _instance() -> _Instance:
    with _instances_lock:
        instance = _instances.get(os.getpid())
        if instance is None:
            _instances.clear()  # a forked child must not read its parent's events
            instance = _instances[os.getpid()] = _Instance()
        return instance


class InotifyHub:
    """One watched directory of this process, shared by every thread and queue object."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._instance = _instance()
        self._wd = -1

    def token(self) -> int:
        with self._instance.cond:
            return self._instance.generations.get(self._wd, 0)

    def wait(self, token: int, seconds: float) -> None:
        instance = self._instance
        with instance.cond:
            if self._wd < 0:
                self._wd = instance.add(self.path)
                self._finalizer = weakref.finalize(self, _release, instance, self._wd)
                # Events before the watch existed are lost: make the caller look again.
                return
        instance.wait(self._wd, token, seconds)

    def close(self) -> None:
        if self._wd >= 0:
            self._finalizer()  # lets go of the watch once, now
            self._wd = -1


def _release(instance: _Instance, wd: int) -> None:
    with instance.cond:
        instance.remove(wd)


_hubs: weakref.WeakValueDictionary[tuple[int, int, int], InotifyHub] = weakref.WeakValueDictionary()
_hubs_lock = threading.Lock()
_log = logging.getLogger("vsqs")
_warned = False


class _Detached:
    """Stands in for the hub after :meth:`InotifyWaiter.close`."""

    def token(self) -> int:
        return 0

    def wait(self, token: int, seconds: float) -> None:
        raise RuntimeError("this queue was detached; create a new Queue object to wait on it")

    def close(self) -> None:
        pass


_DETACHED: Final = _Detached()


class _Polling:
    """Stands in for the hub when inotify ran out (instances or watches): sleeps."""

    def token(self) -> int:
        return 0

    def wait(self, token: int, seconds: float) -> None:
        time.sleep(max(0.0, seconds))

    def close(self) -> None:
        pass


class InotifyWaiter:
    """A queue's handle on the process-wide watch of its directory.

    If inotify runs out (the per-user limits on instances and watches), it falls back to
    polling at its re-check interval, and says so once through :mod:`logging`.
    """

    def __init__(self, path: str, clock: Clock, recheck: float) -> None:
        info = os.stat(path)
        key = (os.getpid(), info.st_dev, info.st_ino)
        with _hubs_lock:
            hub = _hubs.get(key)
            if hub is None:
                hub = InotifyHub(path)
                _hubs[key] = hub
        self._hub: InotifyHub | _Detached | _Polling = hub
        self._clock = clock
        self.interval = recheck

    def token(self) -> int:
        return self._hub.token()

    def wait(self, token: int, seconds: float) -> None:
        # The re-check interval bounds the *real* wait (a lost event costs at most one);
        # a manual clock skips the wait and only collects events that already came.
        self._clock.wait(seconds, lambda real: self._block(token, min(real, self.interval)))

    def _block(self, token: int, seconds: float) -> None:
        try:
            self._hub.wait(token, seconds)
        except OSError as exc:
            global _warned  # noqa: PLW0603 - one warning per process
            if not _warned:
                _warned = True
                _log.warning(
                    "inotify is unavailable (%s): blocked calls poll every %s s instead; "
                    "raise fs.inotify.max_user_instances / max_user_watches to avoid it",
                    exc, self.interval,
                )  # fmt: skip
            self._hub = _Polling()
            self._hub.wait(token, seconds)

    def close(self) -> None:
        # The watch is shared; it is removed when the last waiter lets go of it.
        self._hub = _DETACHED


def make_waiter(path: str, clock: Clock, mode: str, interval: float | None) -> Waiter:
    """Pick the waiting strategy for a queue directory.

    :param mode: ``"auto"`` (inotify on local Linux filesystems, polling on those of
        :data:`NETWORK_FILESYSTEMS`, on FUSE and off Linux),
        ``"inotify"`` or ``"poll"``.
    :param interval: the polling interval, or the periodic re-check under inotify.
    """
    use_inotify = HAVE_INOTIFY and mode != "poll"
    if use_inotify and mode == "auto" and polls(filesystem_type(path)):
        use_inotify = False
    if use_inotify:
        return InotifyWaiter(path, clock, 1.0 if interval is None else interval)
    return PollWaiter(clock, 0.05 if interval is None else interval)
