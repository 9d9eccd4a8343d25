"""Whether a queue was shut down, and when a consumer may call it drained.

A shutdown is one exclusive create of ``.vsqs/closed``, which records the time it was
made. Two questions follow, answered here and nowhere else:

* **May a publisher still publish?** It looks for the marker after its ``.new`` exists
  and before the rename that makes it ready. A look that found none is trusted for
  ``CLOSE_GRACE`` seconds (by the queue's clock), by every queue object of this process
  on that directory and clock: this spares a syscall on all but one publish per
  ``CLOSE_GRACE``.
* **When does an empty listing prove a shut-down queue drained?** Only once no
  publisher can still be trusting an old look: ``CLOSE_GRACE`` after the shutdown. The
  marker says when that was, by the clock of the process that shut the queue down;
  when this clock says it was more than ``CLOSE_GRACE + DRAIN_SKEW`` ago, the grace is
  over already. Otherwise it is counted from when this handle first saw the marker,
  which needs no clock agreement at all. ``DRAIN_SKEW`` is the clock difference between
  hosts that this tolerates.

A manual clock runs the same code: it changes what time it is, never which rule applies.
"""

from __future__ import annotations

import threading
import weakref
from typing import Final

from . import _fs
from ._clock import Clock
from ._errors import QueueClosed
from ._ids import parse_decimal
from ._layout import CLOSED, ROOT, Layout

CLOSE_GRACE: Final = 0.1
"""Seconds a publisher trusts that the queue is open, and consumers wait after a shutdown."""
DRAIN_SKEW: Final = 1.0
"""Seconds of clock difference between hosts that the drain rule tolerates."""
_PROVEN_OVER_US: Final = round((CLOSE_GRACE + DRAIN_SKEW) * 1e6)

# Until when (by each clock's monotonic time) this process trusts that a directory is
# open; shared by all queue objects on it, so a shutdown here is seen by all at once.
_open_until: weakref.WeakKeyDictionary[Clock, dict[str, float]] = weakref.WeakKeyDictionary()
_open_lock = threading.Lock()


def _trusted(clock: Clock) -> dict[str, float]:
    with _open_lock:
        table = _open_until.get(clock)
        if table is None:
            table = _open_until[clock] = {}
        return table


class ShutdownWatch:
    """What one queue object knows about its queue's shutdown."""

    def __init__(self, layout: Layout, clock: Clock) -> None:
        self._layout = layout
        self._clock = clock
        self._trusted = _trusted(clock)
        self._marker = layout.closed_path  # the hot existence probe of every publish
        self.seen = False
        """Whether this object has seen the marker (a shutdown is never undone by vsqs)."""
        self.grace_ends: float | None = None
        """When (monotonic) an empty listing proves the queue drained, once known."""

    def is_shut_down(self) -> bool:
        """Whether the queue was shut down, by any process (one ``access`` unless seen)."""
        if not self.seen and _fs.exists(self._marker):
            self.seen = True
        return self.seen

    def check_open(self) -> None:
        """Raise :class:`QueueClosed` if the queue was shut down (see the module doc)."""
        if self.seen:
            raise QueueClosed(self._layout.path)
        path = self._layout.path
        now = self._clock.monotonic()
        if now < self._trusted.get(path, -1.0):
            return
        if _fs.exists(self._marker):
            self.seen = True
            raise QueueClosed(path)
        self._trusted[path] = now + CLOSE_GRACE

    def mark(self, *, durable: bool) -> bool:
        """Shut the queue down: create the marker with this clock's time in it.

        Atomic (one exclusive create) and idempotent: ``False`` if the queue was shut
        down already, by this or another process.
        """
        layout = self._layout
        stamp = str(self._clock.time_us()).encode()
        if not layout.create(ROOT, CLOSED, stamp, durable=durable):
            self.seen = True
            return False  # RACE: shut down already (by us or another process)
        if durable:
            layout.fsync(ROOT)
        self.seen = True
        self._trusted.pop(layout.path, None)
        return True

    def in_grace(self) -> bool:
        """Whether a shut-down queue may still receive a publish (the drain must wait)."""
        now = self._clock.monotonic()
        if self.grace_ends is None:
            self.grace_ends = self._grace_ends(now)
        return now < self.grace_ends

    def _grace_ends(self, now: float) -> float:
        shut_us = self._marker_time_us()
        if shut_us is not None and self._clock.time_us() - shut_us > _PROVEN_OVER_US:
            return now
        return now + CLOSE_GRACE

    def _marker_time_us(self) -> int | None:
        """When the queue was shut down (µs), as its marker records it; ``None`` if unknown.

        A marker without a time (written by hand, or by vsqs before 1.0) is dated by its
        modification time.
        """
        try:
            raw = self._layout.read(ROOT, CLOSED)
        except OSError:
            return None  # not a regular file (planted), or .vsqs is not a directory
        if raw is None:
            return None  # RACE: removed by hand meanwhile
        when = parse_decimal(raw.strip().decode("ascii", "replace"))
        if when is not None:
            return when
        try:
            return self._layout.mtime_us(ROOT, CLOSED)
        except OSError:
            return None  # RACE: removed by hand meanwhile
