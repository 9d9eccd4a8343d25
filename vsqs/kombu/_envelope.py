"""What the kombu transport checks in a stored message before delivering it (see
:mod:`vsqs.kombu`): that it is kombu's envelope, and that it has not expired.

A message of a kombu queue is kombu's envelope as JSON: an object with a ``body`` (a
string, base64 unless ``properties["body_encoding"]`` says otherwise) and
``properties`` (an object), and optionally ``headers`` (an object), ``content-type``
and ``content-encoding`` (strings). Anything else under the root (``garbage``,
``[1,2]``, ``{"a": 1}``, bytes that are not UTF-8) is *poison*: delivering it would
raise inside ``drain_events`` and stop the worker, so :func:`parse` refuses it and the
channel sets it aside, undelivered.

kombu's per-message ``expiration`` (milliseconds after the publish, a string property:
Celery's ``expires=`` becomes one) is made absolute when kombu publishes and stored in
the vsqs message's attribute :data:`EXPIRES` (Unix time, seconds), so a receive decides
without parsing the body, and a requeue or a move keeps it.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping
from typing import Any, Final

from kombu.utils.json import loads

from .. import AnyQueue, InvalidAttributes, Message

_log = logging.getLogger("vsqs.kombu")
EXPIRES: Final = "kombu-expires"
"""The vsqs attribute holding a message's expiry: Unix time, seconds (``repr`` of a float)."""
_MAX_REASON: Final = 200  # characters of a parser's complaint kept in logs and attributes
# The optional fields of kombu's envelope, and the types each may have.
_OPTIONAL: Final[tuple[tuple[str, tuple[type, ...]], ...]] = (
    ("headers", (dict, type(None))),
    ("content-type", (str, type(None))),
    ("content-encoding", (str, type(None))),
)


class NotKombu(ValueError):
    """A stored message that is not kombu's envelope; ``reason`` says why.

    Internal to the transport: the channel sets the message aside and never raises it.
    """

    def __init__(self, reason: str) -> None:
        self.reason = reason[:_MAX_REASON]
        super().__init__(self.reason)  # args == (reason,): it pickles as it is


def parse(body: bytes, decode_body: Callable[[Any, Any], Any]) -> dict[str, Any]:
    """kombu's envelope from a stored *body*, checked as kombu's virtual ``Message`` and
    its ``decode_body`` (the channel's, given as *decode_body*) will read it.

    The payload itself (``body`` after decoding) is not deserialised: that is the
    consumer's, whose own ``on_decode_error`` handles it (Celery's does).

    :raises NotKombu: the body is not kombu's envelope; its ``reason`` says why.
    """
    try:
        payload = loads(body)
    except Exception as exc:  # noqa: BLE001 -- kombu's object hook raises what a "__type__" makes it
        raise NotKombu(f"unreadable JSON: {type(exc).__name__}: {exc}") from None
    if not isinstance(payload, dict):
        raise NotKombu(f"JSON {type(payload).__name__}, not kombu's envelope (an object)")
    properties = payload.get("properties")
    if not isinstance(payload.get("body"), str) or not isinstance(properties, dict):
        raise NotKombu("a JSON object without kombu's 'body' (a string) and 'properties'")
    for key, types in _OPTIONAL:
        if not isinstance(payload.get(key), types):
            raise NotKombu(f"kombu's {key!r} is a {type(payload[key]).__name__}")
    if not isinstance(properties.get("delivery_info", {}), dict):
        raise NotKombu("kombu's 'delivery_info' is not an object")
    encoding = properties.get("body_encoding")
    if payload["body"] and encoding is not None:
        try:
            decode_body(payload["body"], encoding)
        except Exception as exc:  # noqa: BLE001 -- an unknown codec, bad base64: the message's fault
            raise NotKombu(f"the body does not decode as {encoding!r}: {exc!r}") from None
    return payload


def expiry_attributes(properties: Mapping[str, Any], now: float) -> dict[str, str] | None:
    """The attributes to store with a message published at *now* (Unix time, seconds):
    its expiry, from kombu's ``expiration`` property, or ``None`` if it has none.

    :raises ValueError: ``expiration`` is not a number of milliseconds >= 0 (as AMQP
        brokers refuse it).
    """
    raw = properties.get("expiration")
    if raw is None:
        return None
    try:
        milliseconds = float(raw)
    except (TypeError, ValueError):
        milliseconds = math.nan
    if not milliseconds >= 0 or math.isinf(milliseconds):  # NaN compares false
        raise ValueError(f"kombu's expiration must be a number of milliseconds >= 0, not {raw!r}")
    return {EXPIRES: repr(now + milliseconds / 1000)}


def overdue(attributes: Mapping[str, str], now: float) -> float | None:
    """Seconds since the message with *attributes* expired, at *now*; ``None`` if it has
    no expiry or it is still due (a message expires *at* its expiry: kombu's ``0`` is
    expired by the time any consumer looks)."""
    raw = attributes.get(EXPIRES)
    if raw is None:
        return None
    try:
        expires = float(raw)
    except ValueError:
        return None  # not one vsqs wrote: deliver it (an expiry never loses a message)
    return now - expires if now >= expires else None


def move(
    source: AnyQueue, message: Message, target: AnyQueue, *, queue: str, reason: str, level: int
) -> str:
    """Publish a claimed *message* of kombu queue *queue* to *target*, then delete it
    from *source*; log one line at *level* naming where it went; its id in *target*.

    Its attributes are kept, with ``source`` (the kombu queue) and ``reason`` added. Not
    atomic: a crash between the publish and the delete leaves it in both queues (at
    least once, never lost).
    """
    attributes = {**message.attributes, "source": queue, "reason": reason}
    try:
        moved = target.publish(message.body, attributes=attributes)
    except InvalidAttributes:  # its own took all the room: ours say why it is there
        moved = target.publish(message.body, attributes={"source": queue, "reason": reason})
    if not source.delete(message):
        # RACE: its lease ran out before the delete (a paused worker) and another
        # consumer holds it now: it is in both queues (at least once, never lost).
        _log.warning("vsqs: message %s of %r was taken back while moved", message.id, queue)
    _log.log(
        level, "vsqs: message %s of %r %s: moved to %s as %s", message.id, queue, reason,
        target.path, moved,
    )  # fmt: skip
    return moved
