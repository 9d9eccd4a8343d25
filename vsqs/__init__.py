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

import typing

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
from ._ids import MAX_DURATION, Precision
from ._lock import FileLock
from ._message import Counts, Message
from ._meta import validate_group
from ._options import QueueOptions, validate_seconds
from ._protocol import QueueLike, Receiver
from ._queue import Queue as PlainQueue
from ._queue import read_bodies, validate_receipt
from ._renewal import Lease
from ._sets import AnyQueue, PartitionedQueue, Queue, QueueSet, partitions_of
from ._stored import reset_settings, settings_stamp
from ._waiters import MultiWaiter

if typing.TYPE_CHECKING:
    from ._null import NullQueue
    from ._reactor import Reactor, Waiters, reactor
    from ._reports import History, Stats
    from ._root import QueueRoot, foreign_entry, validate_name
    from ._storage import Storage

# Names imported on first use (PEP 562), each from its module: ``import vsqs`` stays
# light for a process that never uses them (a report's dataclass is compiled when it
# is made). ``from vsqs import Stats``, ``vsqs.Stats``, ``dir()`` and ``help()`` work as
# for the others; mypy sees the imports above.
_LAZY: typing.Final = {
    "History": "_reports",
    "NullQueue": "_null",
    "QueueRoot": "_root",
    "Reactor": "_reactor",
    "Stats": "_reports",
    "Storage": "_storage",
    "Waiters": "_reactor",
    "foreign_entry": "_root",
    "reactor": "_reactor",
    "validate_name": "_root",
}


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib import import_module  # noqa: PLC0415 -- only for a lazy name's first use

    value = getattr(import_module(f"{__name__}.{module}"), name)
    globals()[name] = value  # the next use finds it without this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


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
