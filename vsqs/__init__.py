"""vsqs: a brokerless, SQS-like message queue stored in a directory.

>>> import vsqs, tempfile
>>> q = vsqs.Queue(tempfile.mkdtemp())
>>> message_id = q.publish(b"hello")
>>> m = q.receive(timeout=0)
>>> m.body, m.id == message_id
(b'hello', True)
>>> q.delete(m)
True
"""

from __future__ import annotations

from ._clock import Clock, SystemClock
from ._errors import (
    DurabilityError,
    InvalidAttributes,
    InvalidId,
    InvalidName,
    InvalidPayload,
    InvalidSettings,
    LeaseLost,
    LockTimeout,
    NotAQueue,
    QueueClosed,
    QueueDrained,
    QueueFull,
    QueueNotFound,
    UnsafeEntry,
    VsqsError,
)
from ._history import History
from ._ids import MAX_DURATION, Precision
from ._lock import FileLock
from ._message import Counts, Message
from ._meta import validate_group
from ._null import NullQueue
from ._options import QueueOptions, validate_seconds
from ._protocol import QueueLike, Receiver
from ._queue import Queue as PlainQueue
from ._queue import read_bodies, validate_receipt
from ._reactor import Reactor, Waiters, reactor
from ._renewal import Lease
from ._root import QueueRoot, foreign_entry, validate_name
from ._sets import AnyQueue, PartitionedQueue, Queue, QueueSet, partitions_of
from ._stats import Stats
from ._storage import Storage
from ._stored import reset_settings, settings_stamp
from ._waiters import MultiWaiter

__version__ = "1.0.0.dev0"

__all__ = [  # noqa: RUF022 -- in sorted() order, as tests/test_public_api.py checks
    "AnyQueue",
    "Clock",
    "Counts",
    "DurabilityError",
    "FileLock",
    "History",
    "InvalidAttributes",
    "InvalidId",
    "InvalidName",
    "InvalidPayload",
    "InvalidSettings",
    "Lease",
    "LeaseLost",
    "LockTimeout",
    "MAX_DURATION",
    "Message",
    "MultiWaiter",
    "NotAQueue",
    "NullQueue",
    "PartitionedQueue",
    "PlainQueue",
    "Precision",
    "Queue",
    "QueueClosed",
    "QueueDrained",
    "QueueFull",
    "QueueLike",
    "QueueNotFound",
    "QueueOptions",
    "QueueRoot",
    "QueueSet",
    "Reactor",
    "Receiver",
    "Stats",
    "Storage",
    "SystemClock",
    "UnsafeEntry",
    "VsqsError",
    "Waiters",
    "__version__",
    "foreign_entry",
    "partitions_of",
    "reactor",
    "read_bodies",
    "reset_settings",
    "settings_stamp",
    "validate_group",
    "validate_name",
    "validate_receipt",
    "validate_seconds",
]
