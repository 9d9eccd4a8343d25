"""How a blocked ``receive`` or ``publish`` waits for the queue directory to change.

Two strategies behind one small protocol:

* :class:`InotifyWaiter` (Linux): one inotify descriptor per *process*
  (:mod:`vsqs._inotify_hub`), created on the first wait (never in a constructor), with one watch
  per directory shared by every thread and every :class:`~vsqs.Queue` object on it.
  One waiting thread reads the descriptor (``poll(2)``, so a process with thousands of
  descriptors is fine); the others sleep on a condition it signals. No background
  thread. When inotify runs out (the per-user limits: 128 instances, 8192 watches by
  default), it polls instead and says so once through :mod:`logging`.
* :class:`PollWaiter`: sleeps a fixed interval. Used off Linux, on network
  filesystems (where another host's writes raise no local event), or on request.

Waits are always bounded by the caller (the earliest known expiry or delay, the
timeout, and a periodic re-check), so a lost or invisible event delays a wake-up by at
most one re-check interval; it can never leave a message waiting forever.

Usage is ``token = waiter.token()`` *before* looking at the queue, then
``waiter.wait(token, seconds)`` if nothing was found: an event that arrives between
the look and the wait is never missed.

``token, made_ready = waiter.wait_ready(token, seconds)`` waits the same way, then gives
the token for the next look and the messages made ready in the directory since the old
token (published, released or returned: canonical ids moved in, as packed ids,
:func:`vsqs._ids.encode_ready`), in event order, with :data:`vsqs._inotify.ANNOUNCEMENT`
for each announcement (``Layout.announce``), taken together under one lock; ``None`` if
the waiter cannot be sure it saw every such event (a watch made after the token, more
than it keeps, an overflow of the kernel's event queue, or a polling waiter). A consumer
whose look found nothing ready claims those instead of listing the directory again:
together they are everything that can be ready.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
import time
import weakref
from typing import Final, Protocol

from . import _host, _inotify
from ._clock import Clock
from ._host import filesystem_type
from ._inotify_hub import InotifyHub
from ._mountinfo import polls

__all__ = ["HAVE_INOTIFY", "InotifyHub", "InotifyWaiter", "PollWaiter", "Waiter", "make_waiter"]

HAVE_INOTIFY: Final = _inotify.HAVE_INOTIFY


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

    def wait_ready(self, token: int, seconds: float) -> tuple[int, list[int] | None]:
        self.wait(token, seconds)
        return 0, None  # a sleep sees no events

    def close(self) -> None:
        pass


_hubs: weakref.WeakValueDictionary[tuple[int, int, int], InotifyHub] = weakref.WeakValueDictionary()
_hubs_lock = threading.Lock()
_log = logging.getLogger("vsqs")
_warned = False


class _Detached:
    """Stands in for the hub after :meth:`InotifyWaiter.close`."""

    def token(self) -> int:
        return 0

    def wait_ready(self, token: int, seconds: float) -> tuple[int, list[int] | None]:
        raise RuntimeError("this queue was detached; create a new Queue object to wait on it")


_DETACHED: Final = _Detached()


class _Polling:
    """Stands in for the hub when inotify ran out (instances or watches): sleeps."""

    def token(self) -> int:
        return 0

    def wait_ready(self, token: int, seconds: float) -> tuple[int, list[int] | None]:
        time.sleep(max(0.0, seconds))
        return 0, None


class InotifyWaiter:
    """A queue's handle on the process-wide watch of its directory.

    If inotify runs out (the per-user limits on instances and watches), it falls back to
    polling at its re-check interval, and says so once through :mod:`logging`.
    """

    def __init__(self, path: str, clock: Clock, recheck: float) -> None:
        info = _host.status(path)
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
        self.wait_ready(token, seconds)

    def wait_ready(self, token: int, seconds: float) -> tuple[int, list[int] | None]:
        # The re-check interval bounds the *real* wait (a lost event costs at most one);
        # a manual clock skips the wait and only collects events that already came.
        return self._clock.wait(seconds, functools.partial(self._block, token))

    def _block(self, token: int, real: float) -> tuple[int, list[int] | None]:
        seconds = min(real, self.interval)
        try:
            return self._hub.wait_ready(token, seconds)
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
            return self._hub.wait_ready(token, seconds)

    def close(self) -> None:
        # The watch is shared; it is removed when the last waiter lets go of it.
        self._hub = _DETACHED

    @property
    def hub(self) -> InotifyHub | None:
        """The shared watch of the directory; ``None`` once closed or polling."""
        return self._hub if isinstance(self._hub, InotifyHub) else None


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
