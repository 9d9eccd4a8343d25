"""What every part of a queue shares, declared once for the type checker.

:class:`~vsqs.Queue` is assembled from the producer side (``_publish``) and the consumer
side (``_consume``) on top of this class; ``Queue.__init__`` sets every attribute
declared here. Nothing here has behaviour beyond naming files and making the waiter.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import TYPE_CHECKING, cast

from ._clock import Clock
from ._ids import IdSource, Precision
from ._wait import Waiter, make_waiter

if TYPE_CHECKING:
    from ._capacity import Capacity
    from ._dedup import Deduplicator
    from ._meta import MetaStore
    from ._queue import Queue
    from ._stats import Counters
    from ._view import ReadyView


class QueueState:
    """The configuration and per-process state of one :class:`~vsqs.Queue` object."""

    path: str
    clock: Clock
    durable: bool
    precision: Precision
    visibility_timeout: float
    retention: float | None
    dedup_window: float
    max_receives: int | None
    dead_letter: Queue | None
    _options: dict[str, object]
    _ids: IdSource
    _ms: bool
    _vt_us: int
    _dir_mode: int
    _file_mode: int | None
    _meta: MetaStore
    _counters: Counters
    _capacity: Capacity | None
    _dedup: Deduplicator
    _wait_mode: str
    _poll_interval: float | None
    _waiter: Waiter | None
    _lock: threading.Lock
    _view: ReadyView
    _meta_possible: bool
    _receipts: OrderedDict[str, str]
    _superseded: OrderedDict[str, str]
    _own_leases: list[tuple[int, str, str]]
    _ignored: set[str]
    _closed_seen: bool
    _closed_marker: str
    _trust_open: bool
    _grace: bool
    _grace_ends: float | None
    _defer_recent: bool
    _deferred: set[int]

    def _as_queue(self) -> Queue:
        """This object as the :class:`~vsqs.Queue` it is part of (for the helpers' types)."""
        return cast("Queue", self)

    def _file(self, name: str) -> str:
        return f"{self.path}/{name}"

    def _get_waiter(self) -> Waiter:
        if self._waiter is None:
            self._waiter = make_waiter(self.path, self.clock, self._wait_mode, self._poll_interval)
        return self._waiter
