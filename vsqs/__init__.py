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
from ._ids import Precision
from ._lock import FileLock
from ._message import Counts, Message
from ._options import QueueOptions
from ._protocol import QueueLike, Receiver
from ._queue import Queue as PlainQueue
from ._renewal import Lease
from ._sets import AnyQueue, PartitionedQueue, Queue, QueueSet, partitions_of
from ._waiters import MultiWaiter

if typing.TYPE_CHECKING:
    from ._null import NullQueue
    from ._reactor import Reactor, Waiters, reactor
    from ._reports import History, Stats
    from ._root import QueueRoot, validate_name
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

__all__ = [
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
    "partitions_of",
    "reactor",
    "validate_name",
]
