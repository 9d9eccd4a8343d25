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

import importlib
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
    NotAQueue,
    QueueClosed,
    QueueDrained,
    QueueFull,
    QueueNotFound,
    VsqsError,
)
from ._history import History
from ._ids import Precision
from ._message import Counts, Message
from ._protocol import QueueLike, Receiver
from ._queue import Queue
from ._renewal import Lease
from ._root import QueueRoot, validate_name
from ._stats import Stats
from ._waiters import MultiWaiter

if typing.TYPE_CHECKING:
    from ._null import NullQueue
    from ._sets import PartitionedQueue, QueueSet

__version__ = "1.0.0.dev0"

# Imported on first use (PEP 562): composites a plain queue's user never pays for.
_LATER: typing.Final = {"NullQueue": "._null", "PartitionedQueue": "._sets", "QueueSet": "._sets"}


def __getattr__(name: str) -> object:
    """``vsqs.QueueSet`` and the other names of :data:`_LATER`, imported when first asked
    for (thread-safe: the import lock serialises the import itself)."""
    module = _LATER.get(name)
    if module is None:
        raise AttributeError(f"module 'vsqs' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LATER})


__all__ = [
    "Clock",
    "Counts",
    "DurabilityError",
    "History",
    "InvalidAttributes",
    "InvalidId",
    "InvalidName",
    "InvalidPayload",
    "InvalidSettings",
    "Lease",
    "LeaseLost",
    "Message",
    "MultiWaiter",
    "NotAQueue",
    "NullQueue",
    "PartitionedQueue",
    "Precision",
    "Queue",
    "QueueClosed",
    "QueueDrained",
    "QueueFull",
    "QueueLike",
    "QueueNotFound",
    "QueueRoot",
    "QueueSet",
    "Receiver",
    "Stats",
    "SystemClock",
    "VsqsError",
    "__version__",
    "validate_name",
]
