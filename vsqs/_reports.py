"""What a queue reports when asked: its :class:`Stats` and a message's :class:`History`.

Frozen dataclasses, in a module of their own that the queue imports only when a report
is asked for (``Queue.stats``, ``Queue.history``) and ``vsqs`` only when the name is
first used: a dataclass compiles its methods when it is created, and ``import vsqs``
need not pay for reports a process may never ask for.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Stats:
    """A snapshot of a queue's counters and contents (pressure's stats, and more).

    The counters of other processes are at most about one second late: each process
    writes its counts within a second of making them, even if it then goes idle.
    """

    produced_messages: int
    produced_bytes: int
    consumed_messages: int
    """Messages deleted after being received (acknowledged)."""
    consumed_bytes: int
    ready: int
    held: int
    delayed: int
    new: int
    oldest_ready_age: float | None
    """Seconds since the oldest ready message was published, ``None`` if none is ready."""
    is_shutdown: bool
    """Whether the queue was shut down (:meth:`vsqs.Queue.shutdown`)."""
    oldest_ready_id: str | None = None
    """The id of the oldest ready message (pass it to :meth:`vsqs.Queue.history`)."""
    held_back: int = 0
    """Of the held messages, those kept back from delivery because their dead-letter
    queue had no room (it is at its capacity, or the disk is full), or whose requeuer
    died: each is tried again when its hold ends (``max(visibility_timeout, 30 s)``)."""
    partitions: tuple[Stats, ...] = ()
    """Of a partitioned queue, each partition's own (the fields above are their totals,
    with what lies in the queue directory itself); empty for an unpartitioned queue."""


@dataclass(frozen=True, slots=True)
class History:
    """What vsqs knows about a message's past (see :meth:`Queue.history`).

    Times are unix seconds. In a dead-letter queue, ``source`` and the fields after it
    say where the message came from and why it was moved; elsewhere they are ``None``.
    """

    receive_count: int
    """Receives that ended without a delete (the current delivery, if any, excluded)."""
    first_sent: float
    """When the message was first published (its id, or its id in the source queue)."""
    last_received: float | None
    """When the last counted receive began (estimated from its lease), if any."""
    source: str | None = None
    """The queue it was dead-lettered from."""
    source_id: str | None = None
    """Its id in that queue."""
    dead_lettered: float | None = None
    reason: str | None = None
    """``"max_receives"`` or ``"retention"``."""
