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


class _Unfrozen:
    """:class:`Message`'s slots, in its order, without the frozen ``__setattr__``: the
    receive path fills one of these and makes it a :class:`Message` (the same layout, so
    Python allows the ``__class__`` assignment; ``tests/test_public_api.py`` checks that the
    result is a :class:`Message` in every respect)."""

    __slots__ = Message.__slots__
    id: str
    body: bytes
    receipt: str
    expires_at: float
    receive_count: int
    attributes: Mapping[str, str]
    sent_at: float
    queue: str
    group: str | None


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

    The same object as ``Message(...)`` makes, for less: it fills the slots of an
    unfrozen twin by plain attribute stores, then gives the object its class, instead of
    going through the frozen class's ``object.__setattr__`` (this runs once per received
    message, often on a cold cache right after a wake-up).
    """
    message = _new(_Unfrozen)
    message.id = message_id
    message.body = body
    message.receipt = receipt
    message.expires_at = expires_at
    message.receive_count = receive_count
    message.attributes = attributes
    message.sent_at = sent_at
    message.queue = queue
    message.group = group
    message.__class__ = Message  # type: ignore[assignment]
    return message  # type: ignore[return-value]


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
