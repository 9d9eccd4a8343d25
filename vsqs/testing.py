"""Helpers for testing code that uses vsqs (also used by the pytest plugin).

>>> import tempfile, vsqs
>>> from vsqs.testing import ManualClock, drain
>>> clock = ManualClock()
>>> q = vsqs.Queue(tempfile.mkdtemp(), visibility_timeout=30, clock=clock)
>>> _ = q.publish(b"job")
>>> q.receive(timeout=0).body           # received, not deleted...
b'job'
>>> q.receive(timeout=0) is None         # ...so hidden
True
>>> clock.advance(31)                     # the lease runs out without sleeping
>>> [m.body for m in drain(q)]
[b'job']
"""

from __future__ import annotations

import contextlib
import math
import threading
import warnings
from collections.abc import Callable, Iterator
from typing import Final, TypeVar

from . import Message, PartitionedQueue, PlainQueue, QueueLike
from ._ids import IDS, source_for

_T = TypeVar("_T")

__all__ = ["ManualClock", "assert_consistent", "assert_empty", "drain", "fresh_ids"]

_REAL_SLICE: Final = 0.05  # real seconds an endless wait on a manual clock sleeps per look


class ManualClock:
    """A clock that moves only when told to (thread-safe).

    ``sleep`` advances it instantly, so a blocking ``receive(timeout=5)`` on an empty
    queue returns after five *manual* seconds and no real ones.

    :param start: the initial wall-clock time in seconds since the epoch.
    """

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self._lock = threading.Lock()
        self._us = round(start * 1e6)
        self._mono = 0.0
        self._warned = False

    def time_us(self) -> int:
        with self._lock:
            return self._us

    def monotonic(self) -> float:
        with self._lock:
            return self._mono

    def sleep(self, seconds: float) -> None:
        self.advance(max(0.0, seconds))

    def wait(self, seconds: float, block: Callable[[float], _T]) -> _T:
        """Move the clock by *seconds* instead of waiting for them.

        Events that already happened are still collected (``block(0)``). A wait with no
        end (``receive()`` without a timeout, nothing held) cannot be skipped: time does
        not pass by itself, so only another thread can end it. It then waits in real
        time, in short slices (never a busy loop), and warns once that it does.
        """
        if math.isinf(seconds):
            if not self._warned:
                self._warned = True
                warnings.warn(
                    "a call without a timeout is waiting on a ManualClock: it waits in real "
                    "time until another thread publishes (the manual clock does not move by "
                    "itself); pass a timeout, or advance() the clock from another thread",
                    RuntimeWarning,
                    stacklevel=4,
                )
            return block(_REAL_SLICE)
        self.advance(max(0.0, seconds))
        return block(0.0)

    def advance(self, seconds: float) -> None:
        """Move both clocks forward by *seconds*."""
        if seconds < 0:
            raise ValueError("a ManualClock only moves forward; use set() to step it back")
        with self._lock:
            self._us += round(seconds * 1e6)
            self._mono += seconds

    def set(self, wall_seconds: float) -> None:
        """Step the wall clock to *wall_seconds* (backwards too, like an NTP step)."""
        with self._lock:
            self._us = round(wall_seconds * 1e6)

    @property
    def is_real(self) -> bool:
        return False


@contextlib.contextmanager
def fresh_ids(clock: object | None = None) -> Iterator[None]:
    """Within the block, this process draws message ids as a new process would (ids
    never go back within a process otherwise), on *clock* (a :class:`ManualClock`; by
    default the system clock); as it was after.

    For tests that play two processes in one, or that compare ids across tests. Not
    thread-safe against publishes running in other threads as the block opens or closes.

    >>> import tempfile, vsqs
    >>> from vsqs.testing import fresh_ids
    >>> path = tempfile.mkdtemp()
    >>> first = vsqs.Queue(path).publish(b"a")
    >>> with fresh_ids():  # as a second process would: its first id may be the same
    ...     second = vsqs.Queue(path).publish(b"b")
    >>> second != first  # the publisher saw the collision and drew again
    True
    """
    source = IDS if clock is None else source_for(clock)
    before = source.restart()
    try:
        yield
    finally:
        source.restart(before)


def drain(queue: QueueLike, *, delete: bool = True, limit: int | None = None) -> list[Message]:
    """Receive every message that is ready now, oldest first (deleting each by default)."""
    out: list[Message] = []
    while limit is None or len(out) < limit:
        message = queue.receive(timeout=0)
        if message is None:
            break
        if delete:
            queue.delete(message)
        out.append(message)
    return out


def assert_empty(queue: QueueLike) -> None:
    """Fail unless the queue holds no message in any state."""
    counts = queue.counts()
    assert counts.total == 0, f"queue {queue.path!r} is not empty: {counts}"


def assert_consistent(queue: QueueLike, *, allow_new: bool = False) -> None:
    """Fail if the directory holds anything vsqs should not have left there: the
    problems :meth:`PlainQueue.check <vsqs.PlainQueue.check>` finds (a ``.new`` file left,
    unless *allow_new*; an entry named by the grammar that is not a regular file;
    metadata of a message that no longer exists). A partitioned queue is checked
    partition by partition, and its own directory too.
    """
    if not isinstance(queue, (PlainQueue, PartitionedQueue)):
        raise TypeError(f"expected a queue stored in a directory, not {queue!r}")
    problems = queue.check(allow_new=allow_new)
    assert not problems, f"queue {queue.path!r} is inconsistent: " + "; ".join(problems)
