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

from .. import AnyQueue, InvalidAttributes, QueueClosed, QueueFull
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


def integer(params: dict[str, Any], name: str, low: int, high: int) -> int | None:
    value = params.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise invalid(name, value, f"must be an integer from {low} to {high}.")
    return value


_PLAIN: Final = frozenset({"Id", "MessageBody", "QueueUrl"})
_PLAIN_KEY: Final = (0.0, None, ())


def _too_long(size: int, limit: int) -> SqsError:
    return invalid("MessageBody", f"{size} bytes", f"Message must be shorter than {limit} bytes.")


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

    def __init__(self, queue: AnyQueue, options: dict[str, str], params: dict[str, Any]) -> None:
        body = params.get("MessageBody")
        if body is None:
            raise missing("MessageBody")
        if not isinstance(body, str):
            raise invalid("MessageBody", body, "must be a string.")
        _attributes.check_body(body)
        self.body = body
        self.data = body.encode()
        limit = int(options["MaximumMessageSize"])
        fifo = queue.fifo
        if not fifo and params.keys() <= _PLAIN:
            # A body alone on a standard queue (the common case): nothing else to check,
            # the outcome of the checks below without their steps.
            if len(self.data) > limit:
                raise _too_long(len(self.data), limit)
            self.attributes, self.system, self.stored = {}, {}, {}
            self.delay, self.group, self.dedup_id = 0.0, None, None
            self.key = _PLAIN_KEY
            return
        self._check(fifo, options, params, limit)

    def _check(  # noqa: PLR0912 - one check per SQS rule, in SQS order
        self, fifo: bool, options: dict[str, str], params: dict[str, Any], limit: int
    ) -> None:
        self.attributes = _attributes.parse_attributes(params.get("MessageAttributes"))
        self.system = _attributes.parse_attributes(
            params.get("MessageSystemAttributes"), system=True
        )
        if len(self.data) + _attributes.size(self.attributes) > limit:
            raise _too_long(len(self.data), limit)
        delay = integer(params, "DelaySeconds", 0, 900)
        group = params.get("MessageGroupId")
        dedup = params.get("MessageDeduplicationId")
        if fifo:
            if delay:
                raise invalid(
                    "DelaySeconds",
                    delay,
                    "The request include parameter that is not valid "
                    "for this queue type (per-message delays on a FIFO queue).",
                )
            if group is None:
                raise missing("MessageGroupId")
            if dedup is None:
                if options.get("ContentBasedDeduplication") != "true":
                    raise invalid(
                        "MessageDeduplicationId",
                        "",
                        "The queue should either have "
                        "ContentBasedDeduplication enabled or MessageDeduplicationId provided "
                        "explicitly",
                    )
                dedup_id = hashlib.sha256(self.data).hexdigest()
            else:
                dedup_id = dedup
        elif dedup is not None:
            raise invalid(
                "MessageDeduplicationId",
                dedup,
                "The request include parameter that is not valid for this queue type",
            )
        else:
            dedup_id = None
        if group is not None and (not isinstance(group, str) or not PRINTABLE.fullmatch(group)):
            raise invalid("MessageGroupId", group, "1 to 128 printable ASCII characters.")
        if dedup is not None and (not isinstance(dedup, str) or not PRINTABLE.fullmatch(dedup)):
            raise invalid("MessageDeduplicationId", dedup, "1 to 128 printable ASCII characters.")
        self.delay = float(delay or 0)
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

    def answer(self, message_id: str, queue: AnyQueue) -> dict[str, Any]:
        result: dict[str, Any] = {
            "MessageId": message_id,
            "MD5OfMessageBody": _attributes.md5_of_data(self.data),
        }
        if self.attributes:
            result["MD5OfMessageAttributes"] = _attributes.md5_of_attributes(self.attributes)
        if self.system:
            result["MD5OfMessageSystemAttributes"] = _attributes.md5_of_attributes(self.system)
        if queue.fifo:
            result["SequenceNumber"] = sequence_number(message_id)
        return result


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


def send_message(
    service: Context, caller: Caller, name: str, queue: AnyQueue, params: dict[str, Any]
) -> dict[str, Any]:
    del service, caller, name
    outgoing = _Outgoing(queue, _queue_attrs.sqs_options(queue), params)
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
    return outgoing.answer(message_id, queue)


def entries(params: dict[str, Any]) -> list[dict[str, Any]]:
    """The checked ``Entries`` of a batch request (1 to 10, ids valid and distinct)."""
    given = params.get("Entries")
    if given is None:
        raise missing("Entries")
    if not isinstance(given, list) or not all(isinstance(e, dict) for e in given):
        raise invalid("Entries", given, "must be a list of entries.")
    if not given:
        raise SqsError("EmptyBatchRequest", "There should be at least one entry in the request.")
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


def send_message_batch(
    service: Context, caller: Caller, name: str, queue: AnyQueue, params: dict[str, Any]
) -> dict[str, Any]:
    del service, caller, name
    given = entries(params)
    options = _queue_attrs.sqs_options(queue)
    total = sum(len(str(e.get("MessageBody", "")).encode()) for e in given)
    limit = int(options["MaximumMessageSize"])
    if total > max(limit, _queue_attrs.DEFAULT_MAX_SIZE):
        raise SqsError(
            "BatchRequestTooLong", f"Batch requests cannot be longer than {limit} bytes."
        )
    checked: list[tuple[str, _Outgoing]] = []
    failed: list[dict[str, Any]] = []
    for entry in given:
        try:
            checked.append((entry["Id"], _Outgoing(queue, options, entry)))
        except SqsError as exc:
            failed.append(failure(entry["Id"], exc))
    successful: list[dict[str, Any]] = []
    start = 0
    while start < len(checked):
        end = start + 1
        while end < len(checked) and checked[end][1].key == checked[start][1].key:
            end += 1
        run = checked[start:end]
        first = run[0][1]
        try:
            ids = queue.publish_batch(
                [outgoing.data for _, outgoing in run],
                delay=first.delay,
                attributes=first.stored or None,
                dedup_ids=[outgoing.dedup_id for _, outgoing in run] if queue.fifo else None,
                timeout=0,
                **({"group": first.group} if first.group is not None else {}),
            )
        except (QueueFull, QueueClosed, InvalidAttributes) as exc:
            error = _publish_error(exc)
            failed.extend(failure(entry_id, error) for entry_id, _ in run)
        else:
            for (entry_id, outgoing), message_id in zip(run, ids, strict=True):
                successful.append({"Id": entry_id, **outgoing.answer(message_id, queue)})
        start = end
    return {"Successful": successful, "Failed": failed}
