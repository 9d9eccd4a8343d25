"""The sending actions of the SQS API: SendMessage and SendMessageBatch.

A ``SendMessage`` is one atomic :meth:`vsqs.Queue.publish` (durable before the answer,
if the queue is); a ``SendMessageBatch`` publishes each run of consecutive entries that
share their options (delay, group, attributes) with one :meth:`~vsqs.Queue.publish_batch`
(one flush for the run), so a batch keeps its order. Entries that fail their checks are
answered in ``Failed`` and the others are sent.

**FIFO queues.** ``MessageGroupId`` is vsqs's ``group``; the vsqs ``dedup_id`` is the
``MessageDeduplicationId`` (or, with content-based deduplication, the SHA-256 of the
body in hex), which vsqs keeps unique across the whole queue: SQS's default
``DeduplicationScope=queue``. With ``DeduplicationScope=messageGroup`` it is the group,
a newline and that id, so each group deduplicates on its own. A library publisher that
wants its messages deduplicated against the API's uses the same ``dedup_id``.
"""

from __future__ import annotations

import hashlib
import re
from typing import TYPE_CHECKING, Any, Final

from .. import AnyQueue, DurabilityError, InvalidAttributes, QueueClosed, QueueFull
from . import _attributes, _queue_attrs
from ._attributes import DEDUP_KEY, TRACE_KEY, Attribute
from ._errors import SqsError, invalid, missing

if TYPE_CHECKING:
    from ._context import Caller, Context

__all__ = [
    "entries",
    "failure",
    "integer",
    "send_message",
    "send_message_batch",
    "sequence_number",
]

MAX_BATCH: Final = 10
_ENTRY_ID: Final = re.compile(r"[A-Za-z0-9_-]{1,80}")
PRINTABLE: Final = re.compile(r"[!-~]{1,128}")
"""A group id, deduplication id or receive attempt id: 1-128 printable ASCII characters."""


def integer(params: dict[str, Any], name: str, low: int, high: int, reason: str = "") -> int | None:
    """The integer parameter *name*, if given, checked to be from *low* to *high*."""
    value = params.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise invalid(name, value, reason or f"Must be between {low} and {high}, if provided.")
    return value


_PLAIN: Final = frozenset({"Id", "MessageBody", "QueueUrl"})
_PLAIN_KEY: Final = (0.0, None, ())


_IMMEDIATE: Final = 1e-6
"""The delay sent for an explicit ``DelaySeconds=0`` on a queue with a delay of its own:
vsqs reads a delay of 0 as "the queue's", SQS as "none"; one microsecond is due at once."""
_NO_DEDUP: Final = (
    "The queue should either have ContentBasedDeduplication enabled or "
    "MessageDeduplicationId provided explicitly"
)
_NO_GROUP: Final = "The request must contain the parameter MessageGroupId."
_BATCH_LIMIT: Final = 1048576
"""The most bytes of bodies one SendMessageBatch may carry (SQS's, whatever the queue)."""


def _too_long(limit: int) -> SqsError:
    return SqsError(
        "InvalidParameterValue",
        f"One or more parameters are invalid. Reason: Message must be shorter than {limit} bytes.",
    )


def _printable(name: str, value: object) -> None:
    if value is not None and (not isinstance(value, str) or not PRINTABLE.fullmatch(value)):
        raise invalid(
            name,
            value,
            f"{name} can only include alphanumeric and punctuation characters. 1 to 128 in length.",
        )


class _Outgoing:
    """One message to send, checked: what ``publish`` needs and what the answer says."""

    __slots__ = (
        "attributes", "body", "data", "dedup_id", "delay", "group", "key", "stored", "system",
    )  # fmt: skip
    attributes: dict[str, Attribute]
    system: dict[str, Attribute]
    delay: float
    group: str | None
    dedup_id: str | None
    stored: dict[str, str]
    key: tuple[object, ...]
    """Entries with equal keys may share one publish_batch."""

    def __init__(
        self, fifo: bool, limit: int, options: dict[str, str], params: dict[str, Any]
    ) -> None:
        """*fifo*: the queue's kind; *limit*: its ``MaximumMessageSize`` (both asked once
        a request, not once an entry)."""
        body = params.get("MessageBody")
        if body is None or body == "":
            raise missing("MessageBody")
        if not isinstance(body, str):
            raise invalid("MessageBody", body, "must be a string.")
        _attributes.check_body(body)
        self.body = body
        self.data = body.encode()
        if not fifo and params.keys() <= _PLAIN:
            # A body alone on a standard queue (the common case): nothing else to check,
            # the outcome of the checks below without their steps.
            if len(self.data) > limit:
                raise _too_long(limit)
            self.attributes, self.system, self.stored = {}, {}, {}
            self.delay, self.group, self.dedup_id = 0.0, None, None
            self.key = _PLAIN_KEY
            return
        self._check(fifo, options, params, limit)

    def _check(
        self, fifo: bool, options: dict[str, str], params: dict[str, Any], limit: int
    ) -> None:
        self.attributes = _attributes.parse_attributes(params.get("MessageAttributes"))
        self.system = _attributes.parse_attributes(
            params.get("MessageSystemAttributes"), system=True
        )
        if len(self.data) + _attributes.size(self.attributes) > limit:
            raise _too_long(limit)
        delay = params.get("DelaySeconds")
        if delay is not None and (
            isinstance(delay, bool) or not isinstance(delay, int) or not 0 <= delay <= 900
        ):
            raise invalid("DelaySeconds", delay, "DelaySeconds must be >= 0 and <= 900.")
        group = params.get("MessageGroupId")
        dedup = params.get("MessageDeduplicationId")
        if fifo:
            if delay:
                raise invalid(
                    "DelaySeconds",
                    delay,
                    "The request include parameter that is not valid for this queue type.",
                )
            if group is None:
                raise missing("MessageGroupId")
            if dedup is None:
                if options.get("ContentBasedDeduplication") != "true":
                    raise SqsError("InvalidParameterValue", _NO_DEDUP)
                dedup_id = hashlib.sha256(self.data).hexdigest()
            else:
                dedup_id = dedup
        elif dedup is not None:
            raise invalid(
                "MessageDeduplicationId",
                dedup,
                "The request include parameter that is not valid for this queue type.",
            )
        else:
            dedup_id = None
        _printable("MessageGroupId", group)
        _printable("MessageDeduplicationId", dedup)
        # SQS: an explicit 0 overrides the queue's delay (see _IMMEDIATE); none takes it.
        self.delay = float(delay) if delay else (_IMMEDIATE if delay == 0 else 0.0)
        self.group = group
        # SQS's DeduplicationScope: the whole queue (the default; vsqs keeps a dedup id
        # unique across every partition), or each message group (the group is part of it).
        per_group = options.get("DeduplicationScope") == "messageGroup"
        self.dedup_id = (
            None if dedup_id is None else f"{group}\n{dedup_id}" if per_group else dedup_id
        )
        stored = _attributes.encode(self.attributes)
        if dedup is not None:
            stored[DEDUP_KEY] = dedup
        if "AWSTraceHeader" in self.system:
            stored[TRACE_KEY] = str(self.system["AWSTraceHeader"][1])
        self.stored = stored
        self.key = (
            self.delay,
            self.group,
            tuple(sorted(stored.items())) if stored else (),
        )

    def answer(self, message_id: str, fifo: bool, entry_id: str | None = None) -> dict[str, Any]:
        """The result of this message's send (a batch's entry: with its ``Id`` first)."""
        result: dict[str, Any] = {} if entry_id is None else {"Id": entry_id}
        result["MessageId"] = uuid_of(message_id)
        result["MD5OfMessageBody"] = _attributes.md5_of_data(self.data)
        if self.attributes:
            result["MD5OfMessageAttributes"] = _attributes.md5_of_attributes(self.attributes)
        if self.system:
            result["MD5OfMessageSystemAttributes"] = _attributes.md5_of_attributes(self.system)
        if fifo:
            result["SequenceNumber"] = sequence_number(message_id)
        return result


def uuid_of(message_id: str) -> str:
    """The ``MessageId`` SQS clients see: a version 4 UUID that holds the vsqs id's
    digits (at most 19) in its last 30 hex digits, so it maps back (:func:`vsqs_id_of`).

    >>> uuid_of("1795838349487182")
    '00000000-0000-4001-8795-838349487182'
    """
    digits = message_id.rjust(_ID_NIBBLES, "0")
    return f"{digits[:8]}-{digits[8:12]}-4{digits[12:15]}-8{digits[15:18]}-{digits[18:]}"


def vsqs_id_of(message_id: str) -> str:
    """The vsqs id in a ``MessageId`` made by :func:`uuid_of` (``ValueError`` otherwise)."""
    match = _UUID.fullmatch(message_id)
    if match is None:
        raise ValueError(f"{message_id!r} is not a MessageId of vsqs serve")
    digits = "".join(match.groups()).lstrip("0")
    if not digits:
        raise ValueError(f"{message_id!r} is not a MessageId of vsqs serve")
    return digits


_ID_NIBBLES: Final = 30
_UUID: Final = re.compile(r"([0-9]{8})-([0-9]{4})-4([0-9]{3})-8([0-9]{3})-([0-9]{12})")


def sequence_number(message_id: str) -> str:
    """A FIFO message's ``SequenceNumber``: its vsqs id (a time), as 20 digits."""
    return f"{int(message_id):020d}"


def _publish_error(exc: Exception) -> SqsError:
    if isinstance(exc, QueueFull):
        return SqsError("OverLimit", f"The queue is full (its vsqs capacity is {exc.capacity}).")
    if isinstance(exc, QueueClosed):
        return SqsError("UnsupportedOperation", "The queue was shut down (vsqs shutdown).")
    if isinstance(exc, InvalidAttributes):
        return invalid("MessageAttributes", "", f"vsqs refuses them: {exc}")
    raise exc


def _storage_error(exc: OSError) -> SqsError:
    """A batch entry the server could not store (its fault, not the sender's)."""
    return SqsError(
        "InternalError",
        f"The message could not be stored: {exc.strerror or exc}. It was not sent.",
        sender=False,
        status=500,
    )


def _unflushed_error(exc: OSError) -> SqsError:
    """A batch entry stored and visible whose flush failed (the server's fault)."""
    return SqsError(
        "InternalError",
        f"The message was stored and may be delivered, but the flush that makes it durable "
        f"failed: {exc.strerror or exc}. Sending it again may deliver it twice.",
        sender=False,
        status=500,
    )


def send_message(
    service: Context, caller: Caller, name: str, queue: AnyQueue, params: dict[str, Any]
) -> dict[str, Any]:
    del service, caller, name
    options = _queue_attrs.sqs_options(queue)
    fifo = queue.fifo
    outgoing = _Outgoing(fifo, int(options["MaximumMessageSize"]), options, params)
    try:
        message_id = queue.publish(
            outgoing.data,
            delay=outgoing.delay,
            attributes=outgoing.stored or None,
            dedup_id=outgoing.dedup_id,
            timeout=0,
            **({"group": outgoing.group} if outgoing.group is not None else {}),
        )
    except (QueueFull, QueueClosed, InvalidAttributes) as exc:
        raise _publish_error(exc) from None
    return outgoing.answer(message_id, fifo)


def entries(params: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    """The checked ``Entries`` of a batch request (1 to 10, ids valid and distinct).

    :param kind: the entries' name in SQS's words (``SendMessageBatchRequestEntry``).
    """
    given = params.get("Entries")
    if given is None:
        raise missing("Entries")
    if not isinstance(given, list) or not all(isinstance(e, dict) for e in given):
        raise invalid("Entries", given, "must be a list of entries.")
    if not given:
        raise SqsError("EmptyBatchRequest", f"There should be at least one {kind} in the request.")
    if len(given) > MAX_BATCH:
        raise SqsError(
            "TooManyEntriesInBatchRequest",
            f"Maximum number of entries per request are {MAX_BATCH}. You have sent {len(given)}.",
        )
    seen: set[str] = set()
    for entry in given:
        entry_id = entry.get("Id")
        if not isinstance(entry_id, str) or not _ENTRY_ID.fullmatch(entry_id):
            raise SqsError(
                "InvalidBatchEntryId",
                "A batch entry id can only contain alphanumeric characters, hyphens and "
                "underscores. It can be at most 80 letters long.",
            )
        if entry_id in seen:
            raise SqsError("BatchEntryIdsNotDistinct", f"Id {entry_id} repeated.")
        seen.add(entry_id)
    return given


def failure(entry_id: str, error: SqsError) -> dict[str, Any]:
    return {
        "Id": entry_id,
        "SenderFault": error.sender,
        "Code": error.query_code,
        "Message": error.text,
    }


def _publish_run(
    queue: AnyQueue,
    run: list[tuple[str, _Outgoing]],
    successful: list[dict[str, Any]],
    failed: list[dict[str, Any]],
) -> None:
    """Publish *run* (entries that share their options) with one ``publish_batch``;
    answer each entry in *successful* or *failed*, whatever happens to the storage."""
    first = run[0][1]
    fifo = queue.fifo
    try:
        ids = queue.publish_batch(
            [outgoing.data for _, outgoing in run],
            delay=first.delay,
            attributes=first.stored or None,
            dedup_ids=[outgoing.dedup_id for _, outgoing in run] if fifo else None,
            timeout=0,
            **({"group": first.group} if first.group is not None else {}),
        )
    except (QueueFull, QueueClosed, InvalidAttributes) as exc:
        error = _publish_error(exc)
        failed.extend(failure(entry_id, error) for entry_id, _ in run)
    except DurabilityError as exc:
        # The first len(exc.ids) of the run are visible but unflushed: they may be
        # delivered, and may not survive a power loss. "Successful" would promise what the
        # flush did not give; an SQS error already means "may have been stored", so they
        # are answered Failed, saying so (a FIFO queue's retry is deduplicated). The rest
        # were not published: retried safely.
        visible = len(exc.ids)
        unflushed = _unflushed_error(exc)
        failed.extend(failure(entry_id, unflushed) for entry_id, _ in run[:visible])
        error = _storage_error(exc)
        failed.extend(failure(entry_id, error) for entry_id, _ in run[visible:])
    except OSError as exc:
        # A full disk (ENOSPC, EDQUOT), an I/O error: nothing of the run was published; the
        # runs before it were, so the answer is per entry, never a 500.
        error = _storage_error(exc)
        failed.extend(failure(entry_id, error) for entry_id, _ in run)
    else:
        for (entry_id, outgoing), message_id in zip(run, ids, strict=True):
            successful.append(outgoing.answer(message_id, fifo, entry_id))


def send_message_batch(
    service: Context, caller: Caller, name: str, queue: AnyQueue, params: dict[str, Any]
) -> dict[str, Any]:
    del service, caller, name
    given = entries(params, "SendMessageBatchRequestEntry")
    options = _queue_attrs.sqs_options(queue)
    total = sum(len(str(e.get("MessageBody", "")).encode()) for e in given)
    if total > _BATCH_LIMIT:
        raise SqsError(
            "BatchRequestTooLong",
            f"Batch requests cannot be longer than {_BATCH_LIMIT} bytes. You have sent "
            f"{total} bytes.",
        )
    fifo = queue.fifo
    if fifo:
        # SQS refuses the whole batch, not the entry, for these two.
        if any(e.get("MessageGroupId") is None for e in given):
            raise SqsError("InvalidParameterValue", _NO_GROUP)
        if options.get("ContentBasedDeduplication") != "true" and any(
            e.get("MessageDeduplicationId") is None for e in given
        ):
            raise SqsError("InvalidParameterValue", _NO_DEDUP)
    checked: list[tuple[str, _Outgoing]] = []
    failed: list[dict[str, Any]] = []
    limit = int(options["MaximumMessageSize"])
    for entry in given:
        try:
            checked.append((entry["Id"], _Outgoing(fifo, limit, options, entry)))
        except SqsError as exc:
            failed.append(failure(entry["Id"], exc))
    successful: list[dict[str, Any]] = []
    start = 0
    while start < len(checked):
        end = start + 1
        while end < len(checked) and checked[end][1].key == checked[start][1].key:
            end += 1
        _publish_run(queue, checked[start:end], successful, failed)
        start = end
    return {"Successful": successful, "Failed": failed}
