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

* **Which** ``.new`` **files may a drain ignore?** Only a dead publisher's: one whose id
  is over ``NEW_GRACE_US`` old (by this clock) *and* whose mtime is too (by this clock
  or the filesystem's, whichever is behind), as :meth:`Queue.clean` judges debris. So a
  publisher whose clock runs minutes behind (its ids look old, its file is fresh) is
  still waited for; one that stalled that long before its rename finds the queue shut
  down when it resumes, and withdraws its ``.new``.

The marker is probed by path (the hot path of every publish); a marker found is
confirmed through the layout, which never follows a planted ``.vsqs`` link and raises
:class:`~vsqs._layout.UnsafeEntry` naming it, rather than reporting a shutdown that
is another directory's.

A manual clock runs the same code: it changes what time it is, never which rule applies.
"""

from __future__ import annotations

import threading
import weakref
from typing import Final

from . import _fs, _scan
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

    def _marker_exists(self) -> bool:
        """Whether ``.vsqs/closed`` exists: one ``access`` by path, and, only when that
        finds it, a look through the layout, which refuses a planted ``.vsqs`` link.

        :raises UnsafeEntry: ``.vsqs`` is a symlink or not a directory.
        """
        return _fs.exists(self._marker) and self._layout.exists(ROOT, CLOSED)

    def is_shut_down(self) -> bool:
        """Whether the queue was shut down, by any process (one ``access`` unless seen)."""
        if not self.seen and self._marker_exists():
            self.seen = True
        return self.seen

    def is_drained(self) -> bool:
        """Whether the queue is shut down and provably empty: past the grace, nothing
        ready or held, and no ``.new`` that a live publisher may still rename (see the
        module doc). One listing; the filesystem's clock is read only if a ``.new``
        looks dead by this clock."""
        if not self.is_shut_down() or self.in_grace():
            return False
        listing = _scan.scan(self._layout.path)
        return not (listing.ready or listing.held) and self._all_dead(listing.new)

    def _all_dead(self, new: list[tuple[int, str]]) -> bool:
        """Whether every ``.new`` of a listing is a dead publisher's (see the module doc)."""
        if not new:
            return True
        stale_before = self._clock.time_us() - _scan.NEW_GRACE_US
        if any(created > stale_before for created, _ in new):
            return False  # a publisher may be writing it
        layout = self._layout
        # Infinity for one renamed or removed meanwhile: not drained yet, look again.
        newest = max(_fs.mtime(layout.message(name)) for _, name in new) * 1e6
        if newest > stale_before:
            return False  # an old id, a fresh file: a publisher whose clock runs behind
        try:
            fs_now_us = layout.now_us()  # in case this clock runs ahead of the files'
        except OSError:
            return True  # e.g. read-only: nobody can publish, so nothing can appear
        return newest <= fs_now_us - _scan.NEW_GRACE_US

    def check_open(self) -> None:
        """Raise :class:`QueueClosed` if the queue was shut down (see the module doc)."""
        if self.seen:
            raise QueueClosed(self._layout.path)
        path = self._layout.path
        now = self._clock.monotonic()
        if now < self._trusted.get(path, -1.0):
            return
        if self._marker_exists():
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
