"""How a blocked ``receive`` or ``publish`` waits for queue directories to change.

One waiter, :class:`MultiWaiter`, public: on one directory (a queue's own,
:meth:`vsqs.Queue.waiter`) or several at once (a :class:`~vsqs.QueueSet`, each asyncio
loop of :mod:`vsqs.aio`, the kombu transport), with a descriptor and a non-blocking drain
for event loops. Under it, one inotify descriptor per *process*
(:mod:`vsqs._inotify_hub`), created with the first waiter (never by a queue's
constructor: a handle makes its waiter when it first waits), with one
watch per directory shared by every thread and every waiter on it. One waiting thread
reads the descriptor (``poll(2)``, so a process with thousands of descriptors is fine);
the others sleep on a condition it signals. No background thread. A directory whose
events cannot be seen is polled instead: off Linux, on network filesystems and FUSE
(where another host's writes raise no local event), on request, and when inotify runs
out (the per-user limits: 128 instances, 8192 watches by default; said once through
:mod:`logging`).

Waits are always bounded by the caller (the earliest known expiry or delay, the
timeout, and a periodic re-check), so a lost or invisible event delays a wake-up by at
most one re-check interval; it can never leave a message waiting forever.

Usage is ``token = waiter.token()`` *before* looking at the queue, then
``waiter.wait(token, seconds)`` if nothing was found: an event that arrives between
the look and the wait is never missed.

``token, made_ready = waiter.wait_ready(token, seconds)`` waits the same way, then gives
the token for the next look and, for a waiter on one watched directory, the messages
made ready there since the old token (published, released or returned: canonical ids
moved in, as packed ids, :func:`vsqs._ids.encode_ready`), in event order, with
:data:`vsqs._inotify.ANNOUNCEMENT` for each announcement (``Layout.announce``), taken
together under one lock; ``None`` if the waiter cannot be sure it saw every such event
(a watch made after the token, more than it keeps, an overflow of the kernel's event
queue, a polled directory, or several). A consumer whose look found nothing ready
claims those instead of listing the directory again: together they are everything that
can be ready.
"""

from __future__ import annotations

import functools
import os
import threading
import time
import weakref
from collections.abc import Callable, Iterable
from typing import Final, Protocol

from . import _host, _inotify
from ._clock import SYSTEM_CLOCK, Clock
from ._host import filesystem_type
from ._inotify_hub import InotifyHub, process_instance
from ._mountinfo import polls
from ._options import WAIT_MODES, validate_seconds

__all__ = ["MultiWaiter", "Waiter", "make_waiter"]

POLL_INTERVAL: Final = 0.05
"""Seconds between looks where no event can be seen (the default ``poll_interval``)."""
RECHECK: Final = 1.0
"""Seconds between looks under inotify, whatever the events (a lost or invisible one
costs at most this): the default ``poll_interval`` there."""


class Waiter(Protocol):
    """Something a blocked call can wait on."""

    def token(self) -> int:
        """A marker of 'now', taken before looking at the queue."""

    def wait(self, token: int, seconds: float) -> None:
        """Return after a change since *token*, or after *seconds*, whichever is first."""

    def wait_ready(self, token: int, seconds: float) -> tuple[int, list[int] | None]:
        """:meth:`wait`, then the token for the next look and the messages made ready
        in the directory since *token* (packed ids and announcements, in event order;
        ``None`` if this waiter cannot say), taken together: every event the new token
        counts is in them."""

    def close(self) -> None:
        """Release what the waiter holds."""


_hubs: weakref.WeakValueDictionary[tuple[int, int, int], InotifyHub] = weakref.WeakValueDictionary()
_hubs_lock = threading.Lock()
_warned = False


def shared_hub(path: str) -> InotifyHub:
    """The process's one watch of the directory *path* (by device and inode), shared
    by every waiter on it: made on first use, let go of with its last user."""
    info = _host.status(path)
    key = (os.getpid(), info.st_dev, info.st_ino)
    with _hubs_lock:
        hub = _hubs.get(key)
        if hub is None:
            hub = _hubs[key] = InotifyHub(path)
        return hub


def _warn_polling(exc: OSError, interval: float) -> None:
    global _warned  # noqa: PLW0603 - one warning per process
    if not _warned:
        _warned = True
        import logging  # noqa: PLC0415 -- 3 ms at import, for a warning that is rare

        logging.getLogger("vsqs").warning(
            "inotify is unavailable (%s): blocked calls poll every %s s instead; "
            "raise fs.inotify.max_user_instances / max_user_watches to avoid it",
            exc, interval,
        )  # fmt: skip


def should_poll(path: str, mode: str) -> bool:
    """Whether waits on the directory *path* poll rather than use inotify.

    :param mode: ``"auto"`` (inotify on local Linux filesystems, polling on network
        filesystems, on FUSE and off Linux), ``"inotify"`` or ``"poll"``.
    """
    if mode == "poll" or not _inotify.have_inotify():
        return True
    return mode == "auto" and polls(filesystem_type(path))


def make_waiter(path: str, clock: Clock, mode: str, interval: float | None) -> MultiWaiter:
    """A queue's own waiter: a :class:`MultiWaiter` on its one directory.

    :param mode: ``"auto"`` (inotify on local Linux filesystems, polling on network
        filesystems, on FUSE and off Linux), ``"inotify"`` or ``"poll"``.
    :param interval: the polling interval, or the periodic re-check under inotify.
    """
    return MultiWaiter(
        [path],
        wait=mode,
        poll_interval=POLL_INTERVAL if interval is None else interval,
        recheck=RECHECK if interval is None else interval,
        clock=clock,
    )


class MultiWaiter:
    """Waits for a change in any of several queue directories: what a
    :class:`~vsqs.QueueSet`, an event loop (:mod:`vsqs.aio`) or a Celery worker
    (:mod:`vsqs.kombu`) waits on.

    Each directory is watched on the process's one inotify descriptor, with the one
    watch of that directory that every waiter of the process shares (a queue's own
    :meth:`~vsqs.Queue.waiter` included). A directory where events cannot be seen is
    polled instead: on a network filesystem or FUSE (another host's writes raise no
    local event), with ``wait="poll"``, off Linux, and where inotify's per-user limits
    are reached (said once through :mod:`logging`).

    Blocking use: ``token = waiter.token()`` *before* looking at the queues, then
    ``waiter.wait(token, seconds)`` if nothing was found; a change in any of them in
    between is never missed. Event-loop use: watch :meth:`fileno` for reading and call
    :meth:`drain` when it is readable: it reads the events without blocking and names
    the directories that changed. Either way, look at every queue again at least every
    :attr:`interval` seconds: that is how a polled directory is seen at all, and what a
    lost or invisible event costs at most. Where nothing is watched with inotify,
    :meth:`fileno` is -1 and :meth:`drain` names nothing: the caller polls every
    :attr:`interval` (or by :meth:`Queue.next_look <vsqs.Queue.next_look>`).

    Thread safety: every method may be called from any thread; :meth:`drain` and
    :meth:`changed` report each change once, to whichever caller asks first.

    :param paths: the directories to watch (more with :meth:`add`).
    :param wait: ``"auto"``, ``"inotify"`` or ``"poll"``, as the queue option.
    :param poll_interval: seconds between looks where a directory is polled.
    :param recheck: seconds between looks where every directory is watched.
    :param clock: a :class:`~vsqs.testing.ManualClock` moves its time instead of waiting.

    >>> import tempfile, vsqs
    >>> first, second = vsqs.Queue(tempfile.mkdtemp()), vsqs.Queue(tempfile.mkdtemp())
    >>> with vsqs.MultiWaiter([first.path, second.path]) as waiter:
    ...     token = waiter.token()
    ...     _ = second.publish(b"hello")
    ...     waiter.wait(token, 5.0)  # returns at once: the second queue changed
    ...     first.receive(timeout=0), second.receive(timeout=0).body
    (None, b'hello')
    """

    DEFAULT_POLL_INTERVAL: Final = POLL_INTERVAL
    """The default *poll_interval* (seconds): a short positive pause between two looks,
    for a caller that has none of its own (kombu's ``polling_interval=0``)."""

    def __init__(
        self,
        paths: Iterable[str | os.PathLike[str]] = (),
        *,
        wait: str = "auto",
        poll_interval: float = POLL_INTERVAL,
        recheck: float = RECHECK,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        if wait not in WAIT_MODES:
            raise ValueError(f"wait must be one of {WAIT_MODES}, not {wait!r}")
        self._mode = wait
        self.poll_interval = validate_seconds(poll_interval, "poll_interval", positive=True)
        self.recheck = validate_seconds(recheck, "recheck", positive=True)
        self._clock = clock
        self._lock = threading.Lock()
        self._hubs: dict[str, InotifyHub] = {}
        self._polled: dict[str, None] = {}  # an ordered set
        self._seen: dict[str, int] = {}  # the generation last reported by changed()
        self._wds: tuple[int, ...] = ()
        self._pid = os.getpid()
        self._instance = process_instance()
        self._closed = False  # closed with no directory left: a wait is a mistake
        for path in paths:
            self.add(path)

    def __repr__(self) -> str:
        return f"MultiWaiter({self.paths!r})"

    def __enter__(self) -> MultiWaiter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def paths(self) -> list[str]:
        """The directories waited on, watched ones first."""
        with self._lock:
            return [*self._hubs, *self._polled]

    @property
    def interval(self) -> float:
        """The longest a caller should go without looking at every queue: the polling
        interval if a directory is polled (or none is watched), else the re-check."""
        return self.recheck if self._hubs and not self._polled else self.poll_interval

    def add(self, path: str | os.PathLike[str], *, wait: str | None = None) -> bool:
        """Wait on the directory *path* too (again: nothing changes); whether it is
        watched (``True``) or polled. Changes made before this call are not seen: look
        at the queue after it.

        :param wait: this directory's waiting mode, if not the waiter's.
        :raises FileNotFoundError: no such directory.
        """
        path = os.fspath(path)
        mode = self._mode if wait is None else wait
        self._forked()
        self._closed = False
        with self._lock:
            if path in self._hubs or path in self._polled:
                return path in self._hubs
            if not should_poll(path, mode):
                hub = shared_hub(path)
                try:
                    hub.watch()
                except OSError as exc:  # inotify's per-user limits
                    _warn_polling(exc, self.poll_interval)
                else:
                    self._hubs[path] = hub
                    self._seen[path] = hub.token()
                    self._wds = tuple(hub.wd for hub in self._hubs.values())
                    return True
            self._polled[path] = None
            return False

    def remove(self, path: str | os.PathLike[str]) -> None:
        """Stop waiting on *path* (its watch goes with its last user in the process)."""
        path = os.fspath(path)
        with self._lock:
            self._polled.pop(path, None)
            if self._hubs.pop(path, None) is not None:
                self._seen.pop(path, None)
                self._wds = tuple(hub.wd for hub in self._hubs.values())

    def close(self) -> None:
        """Stop waiting on every directory. Unregister :meth:`fileno` from an event loop
        first: the descriptor closes with the process's last watch."""
        for path in self.paths:
            self.remove(path)
        self._closed = True

    def token(self) -> int:
        """A marker of 'now', taken before looking at the queues (no lock, no I/O)."""
        if self._pid != os.getpid():
            self._forked()
        wds = self._wds
        return self._instance.newest(wds) if wds else 0

    def wait(self, token: int, seconds: float) -> None:
        """Return after a change in any watched directory since *token*, or after
        *seconds*, or after :attr:`interval`, whichever is first. Never reads more than
        the events: the caller looks at the queues itself."""
        self._clock.wait(seconds, functools.partial(self._block, token))

    def wait_ready(self, token: int, seconds: float) -> tuple[int, list[int] | None]:
        """:meth:`wait`, then the token for the next look and the messages made ready
        since *token*, taken together: what a woken receive claims without listing (see
        the module docstring). The messages are named only where this waiter watches
        exactly one directory (a queue's own waiter); ``None`` otherwise, or where it
        cannot be sure it saw every event (a watch made after the token, lost events)."""
        return self._clock.wait(seconds, functools.partial(self._block_ready, token))

    def _block_ready(self, token: int, real: float) -> tuple[int, list[int] | None]:
        hubs = self._hubs
        if len(hubs) == 1 and not self._polled and self._pid == os.getpid():
            (hub,) = hubs.values()  # the one watch of a queue's own waiter: the fast path
            return hub.wait_ready(token, min(real, self.recheck))
        self._block(token, real)
        return self.token(), None

    def _block(self, token: int, real: float) -> None:
        if self._closed:
            raise RuntimeError(
                "this waiter was closed (its queue handle detached); create a new Queue "
                "object, or add() a directory, to wait again"
            )
        if self._pid != os.getpid():
            self._forked()
        real = min(real, self.interval)
        wds = self._wds
        if wds:
            self._instance.wait_any(wds, token, real)
        else:
            time.sleep(real)

    def fileno(self) -> int:
        """The descriptor that becomes readable when a watched directory changes (the
        process's inotify descriptor, shared: never close it); -1 if none is watched."""
        return self._instance.fd if self._hubs else -1

    def drain(self) -> list[str] | None:
        """Read the events already queued, without blocking: the watched directories
        that changed since the last :meth:`drain` or :meth:`changed` (or since they were
        added). ``None`` when a thread of this process is reading the descriptor (a
        blocked ``receive``): it counts the events and calls the :meth:`subscribe`\\ d
        listeners; stop watching the descriptor until then (it stays readable)."""
        if self._hubs and not self._instance.drain():
            return None
        return self.changed()

    def changed(self) -> list[str]:
        """The watched directories whose events were counted since the last report,
        whoever read them; no I/O."""
        changed = []
        with self._lock:
            for path, hub in self._hubs.items():
                generation = hub.token()
                if generation != self._seen[path]:
                    self._seen[path] = generation
                    changed.append(path)
        return changed

    def subscribe(self, listener: Callable[[], None]) -> None:
        """Call *listener* whenever events are counted, whoever read them (from any
        thread, holding a lock: it must only schedule work, e.g. with
        ``loop.call_soon_threadsafe``)."""
        with self._instance.cond:
            self._instance.listeners.add(listener)

    def unsubscribe(self, listener: Callable[[], None]) -> None:
        """Stop calling *listener*."""
        with self._instance.cond:
            self._instance.listeners.discard(listener)

    def _forked(self) -> None:
        """In a forked child: watch again on the child's own descriptor."""
        if self._pid == os.getpid():
            return
        with self._lock:
            paths = [*self._hubs, *self._polled]
            self._hubs, self._polled, self._seen, self._wds = {}, {}, {}, ()
            self._pid = os.getpid()
            self._instance = process_instance()
        for path in paths:
            self.add(path)
