"""The value types a queue hands out."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Final

NO_ATTRIBUTES: Final[Mapping[str, str]] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class Message:
    """A received (or browsed) message.

    ``receipt`` is the exact file name the message is held under: pass the message (or
    the receipt) to :meth:`Queue.delete` or :meth:`Queue.change_visibility`. A browsed
    message is not held; its receipt is its id.
    """

    id: str
    body: bytes = field(repr=False)
    receipt: str
    expires_at: float
    """Unix time (seconds) when the lease ends and the message returns to the queue."""
    receive_count: int = 1
    """How many times the message has been received, this delivery included."""
    attributes: Mapping[str, str] = field(
        default_factory=lambda: NO_ATTRIBUTES, hash=False, compare=False
    )
    sent_at: float = 0.0
    """Unix time (seconds) of the publish, taken from the id."""
    queue: str = field(default="", compare=False)
    """The directory of the queue the message came from (of a partitioned queue: the
    partition's directory)."""
    group: str | None = None
    """The message group it was published with (``publish(..., group=...)``), if any."""

    @property
    def text(self) -> str:
        """The body decoded as UTF-8."""
        return self.body.decode()

    def __reduce__(self) -> tuple[Callable[..., Message], tuple[object, ...]]:
        """Pickle by value (to hand a message to a worker process): the attributes as a
        plain dict, since a read-only ``MappingProxyType`` does not pickle. The copy
        deletes and extends the lease through its receipt like the original."""
        return _unpickle, (
            self.id, self.body, self.receipt, self.expires_at, self.receive_count,
            dict(self.attributes), self.sent_at, self.queue, self.group,
        )  # fmt: skip


_new = object.__new__
(
    _SET_ID, _SET_BODY, _SET_RECEIPT, _SET_EXPIRES, _SET_COUNT, _SET_ATTRS, _SET_SENT,
    _SET_QUEUE, _SET_GROUP,
) = (
    Message.__dict__[name].__set__
    for name in (
        "id", "body", "receipt", "expires_at", "receive_count", "attributes", "sent_at", "queue",
        "group",
    )
)  # fmt: skip


def received(  # noqa: PLR0917 - positional, as the receive path calls it
    message_id: str,
    body: bytes,
    receipt: str,
    expires_at: float,
    receive_count: int,
    attributes: Mapping[str, str],
    sent_at: float,
    queue: str,
    group: str | None = None,
) -> Message:
    """A :class:`Message` with every field given: the receive path's constructor.

    The same object as ``Message(...)`` makes, a third cheaper: it sets the slots
    directly instead of through the frozen class's ``object.__setattr__`` (this runs
    once per received message, often on a cold cache right after a wake-up).
    """
    message = _new(Message)
    _SET_ID(message, message_id)
    _SET_BODY(message, body)
    _SET_RECEIPT(message, receipt)
    _SET_EXPIRES(message, expires_at)
    _SET_COUNT(message, receive_count)
    _SET_ATTRS(message, attributes)
    _SET_SENT(message, sent_at)
    _SET_QUEUE(message, queue)
    _SET_GROUP(message, group)
    return message


def _unpickle(  # noqa: PLR0917 - the fields of a Message, in order
    message_id: str,
    body: bytes,
    receipt: str,
    expires_at: float,
    receive_count: int,
    attributes: dict[str, str],
    sent_at: float,
    queue: str,
    group: str | None = None,
) -> Message:
    """A :class:`Message` from its pickled fields (see :meth:`Message.__reduce__`)."""
    attrs = attributes or NO_ATTRIBUTES  # as received: a dict, or the shared empty one
    return received(
        message_id, body, receipt, expires_at, receive_count, attrs, sent_at, queue, group
    )


@dataclass(frozen=True, slots=True)
class Counts:
    """How many messages are in each state (one listing; a snapshot)."""

    ready: int
    held: int
    """Received and not yet deleted; back to ``ready`` when the lease ends."""
    delayed: int
    """Published with a delay that has not passed yet."""
    new: int
    """Being written by a publisher (or left behind by one that crashed)."""

    @property
    def total(self) -> int:
        return self.ready + self.held + self.delayed + self.new
