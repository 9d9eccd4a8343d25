"""The message actions of the SQS API: send, receive, delete, change visibility.

Each maps onto one :class:`vsqs.Queue` operation and keeps its guarantee: a
``SendMessage`` is one atomic publish (durable before the answer, if the queue is); a
``SendMessageBatch`` publishes each run of entries that share their options with one
:meth:`~vsqs.Queue.publish_batch` (one flush for the run); a ``ReceiveMessage`` claims
each message with one rename, so a message goes to one receiver whichever server it
asks; ``DeleteMessage`` unlinks exactly the held file.

**Receipt handles** are the vsqs receipts (``id.expiry``); on a partitioned (FIFO)
queue, ``p<index>-`` then the receipt, naming the partition. A handle extended by
``ChangeMessageVisibility`` keeps working on the server that extended it (the queue
handle remembers the receipts it replaced); through another server, only the handle
of the latest receive does, as in vsqs.

**ReceiveRequestAttemptId** (FIFO queues): the answer of a receive is kept by this
server for five minutes under its attempt id, and a retry with the same id gets the
same messages and handles. The cache is in memory: a retry through another server, or
after a restart, receives afresh (the messages of the first attempt come back when
their visibility timeout ends).
"""

from __future__ import annotations

import hashlib
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from .. import (
    InvalidAttributes,
    InvalidId,
    LeaseLost,
    Message,
    Queue,
    QueueClosed,
    QueueDrained,
    QueueFull,
)
from . import _attributes, _queue_attrs
from ._attributes import DEDUP_KEY, TRACE_KEY, Attribute
from ._errors import SqsError, invalid, missing

if TYPE_CHECKING:
    from ._service import Caller, Service

__all__ = ["ACTIONS", "AttemptCache"]

MAX_BATCH: Final = 10
MAX_WAIT: Final = 20
_SLICE: Final = 1.0  # a long poll re-checks the server's shutdown this often
_ENTRY_ID: Final = re.compile(r"[A-Za-z0-9_-]{1,80}")
_HANDLE: Final = re.compile(r"(?:p([0-9]{1,4})-)?([0-9]{1,40}\.[0-9]{1,40})")
_DEDUP_ID: Final = re.compile(r"[!-~]{1,128}")
_SYSTEM: Final = (
    "SenderId", "SentTimestamp", "ApproximateReceiveCount", "ApproximateFirstReceiveTimestamp",
    "SequenceNumber", "MessageDeduplicationId", "MessageGroupId", "AWSTraceHeader",
    "DeadLetterQueueSourceArn",
)  # fmt: skip


class AttemptCache:
    """ReceiveRequestAttemptId -> the answer it got, for five minutes (in memory)."""

    TTL: Final = 300.0
    SIZE: Final = 10_000

    def __init__(self) -> None:
        self._entries: OrderedDict[tuple[str, str], tuple[float, list[dict[str, Any]]]] = (
            OrderedDict()
        )
        self._lock = threading.Lock()

    def get(self, queue: str, attempt: str) -> list[dict[str, Any]] | None:
        now = time.monotonic()
        with self._lock:
            found = self._entries.get((queue, attempt))
            if found is None or now - found[0] > self.TTL:
                return None
            return found[1]

    def put(self, queue: str, attempt: str, messages: list[dict[str, Any]]) -> None:
        with self._lock:
            self._entries[(queue, attempt)] = (time.monotonic(), messages)
            while len(self._entries) > self.SIZE:
                self._entries.popitem(last=False)


# -- sending ---------------------------------------------------------------------------


def _integer(params: dict[str, Any], name: str, low: int, high: int) -> int | None:
    value = params.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise invalid(name, value, f"must be an integer from {low} to {high}.")
    return value


class _Outgoing:
    """One message to send, checked: what ``publish`` needs and what the answer says."""

    __slots__ = ("attributes", "body", "data", "dedup_id", "delay", "group", "stored", "system")

    def __init__(  # noqa: PLR0912 - one check per SQS rule, in SQS order
        self, queue: Queue, options: dict[str, str], params: dict[str, Any]
    ) -> None:
        body = params.get("MessageBody")
        if body is None:
            raise missing("MessageBody")
        if not isinstance(body, str):
            raise invalid("MessageBody", body, "must be a string.")
        _attributes.check_body(body)
        self.body = body
        self.data = body.encode()
        self.attributes = _attributes.parse_attributes(params.get("MessageAttributes"))
        self.system = _attributes.parse_attributes(
            params.get("MessageSystemAttributes"), system=True
        )
        limit = int(options["MaximumMessageSize"])
        if len(self.data) + _attributes.size(self.attributes) > limit:
            raise invalid(
                "MessageBody",
                f"{len(self.data)} bytes",
                f"Message must be shorter than {limit} bytes.",
            )
        fifo = queue.fifo
        delay = _integer(params, "DelaySeconds", 0, 900)
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
        if group is not None and (not isinstance(group, str) or not _DEDUP_ID.fullmatch(group)):
            raise invalid("MessageGroupId", group, "1 to 128 printable ASCII characters.")
        if dedup is not None and (not isinstance(dedup, str) or not _DEDUP_ID.fullmatch(dedup)):
            raise invalid("MessageDeduplicationId", dedup, "1 to 128 printable ASCII characters.")
        self.delay = float(delay or 0)
        self.group: str | None = group
        self.dedup_id: str | None = dedup_id
        stored = _attributes.encode(self.attributes)
        if dedup is not None:
            stored[DEDUP_KEY] = dedup
        if "AWSTraceHeader" in self.system:
            stored[TRACE_KEY] = str(self.system["AWSTraceHeader"][1])
        self.stored = stored

    def key(self) -> tuple[object, ...]:
        """Entries with equal keys may share one publish_batch."""
        return (self.delay, self.group, tuple(sorted(self.stored.items())))

    def answer(self, message_id: str, queue: Queue) -> dict[str, Any]:
        result: dict[str, Any] = {
            "MessageId": message_id,
            "MD5OfMessageBody": _attributes.md5_of_body(self.body),
        }
        digest = _attributes.md5_of_attributes(self.attributes)
        if digest:
            result["MD5OfMessageAttributes"] = digest
        system = _attributes.md5_of_attributes(self.system)
        if system:
            result["MD5OfMessageSystemAttributes"] = system
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
    service: Service, caller: Caller, name: str, queue: Queue, params: dict[str, Any]
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


def _entries(params: dict[str, Any]) -> list[dict[str, Any]]:
    entries = params.get("Entries")
    if entries is None:
        raise missing("Entries")
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise invalid("Entries", entries, "must be a list of entries.")
    if not entries:
        raise SqsError("EmptyBatchRequest", "There should be at least one entry in the request.")
    if len(entries) > MAX_BATCH:
        raise SqsError(
            "TooManyEntriesInBatchRequest",
            f"Maximum number of entries per request are {MAX_BATCH}. You have sent {len(entries)}.",
        )
    seen: set[str] = set()
    for entry in entries:
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
    return entries


def _failure(entry_id: str, error: SqsError) -> dict[str, Any]:
    return {
        "Id": entry_id,
        "SenderFault": error.sender,
        "Code": error.query_code,
        "Message": error.text,
    }


def send_message_batch(
    service: Service, caller: Caller, name: str, queue: Queue, params: dict[str, Any]
) -> dict[str, Any]:
    del service, caller, name
    entries = _entries(params)
    options = _queue_attrs.sqs_options(queue)
    total = sum(len(str(e.get("MessageBody", "")).encode()) for e in entries)
    limit = int(options["MaximumMessageSize"])
    if total > max(limit, _queue_attrs.DEFAULT_MAX_SIZE):
        raise SqsError(
            "BatchRequestTooLong", f"Batch requests cannot be longer than {limit} bytes."
        )
    checked: list[tuple[str, _Outgoing]] = []
    failed: list[dict[str, Any]] = []
    for entry in entries:
        try:
            checked.append((entry["Id"], _Outgoing(queue, options, entry)))
        except SqsError as exc:
            failed.append(_failure(entry["Id"], exc))
    successful: list[dict[str, Any]] = []
    start = 0
    while start < len(checked):
        end = start + 1
        while end < len(checked) and checked[end][1].key() == checked[start][1].key():
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
            failed.extend(_failure(entry_id, error) for entry_id, _ in run)
        else:
            for (entry_id, outgoing), message_id in zip(run, ids, strict=True):
                successful.append({"Id": entry_id, **outgoing.answer(message_id, queue)})
        start = end
    return {"Successful": successful, "Failed": failed}


# -- receiving --------------------------------------------------------------------------


def _names(params: dict[str, Any], key: str) -> list[str]:
    value = params.get(key) or []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise invalid(key, value, "must be a list of names.")
    return value


def _handle(queue: Queue, message: Message) -> str:
    partitions = queue.partition_queues
    if len(partitions) == 1:
        return message.receipt
    for index, partition in enumerate(partitions):
        if partition.path == message.queue:
            return f"p{index}-{message.receipt}"
    return message.receipt


def _system_attributes(  # noqa: PLR0912 - one branch per system attribute
    service: Service, caller: Caller, queue: Queue, message: Message, wanted: set[str]
) -> dict[str, str]:
    every = "All" in wanted
    values: dict[str, str] = {}

    def want(name: str) -> bool:
        return every or name in wanted

    if want("SenderId"):
        values["SenderId"] = caller.key.access_key if caller.key else "AIDAVSQSSERVE"
    if want("SentTimestamp"):
        values["SentTimestamp"] = str(int(message.sent_at * 1000))
    if want("ApproximateReceiveCount"):
        values["ApproximateReceiveCount"] = str(message.receive_count)
    history = None
    if want("ApproximateFirstReceiveTimestamp") or want("DeadLetterQueueSourceArn"):
        try:
            history = queue.history(message)
        except (InvalidId, OSError):
            history = None  # RACE: deleted meanwhile; the fields are approximate anyway
    if want("ApproximateFirstReceiveTimestamp"):
        first = message.expires_at - queue.visibility_timeout
        if history is not None and history.last_received is not None and message.receive_count > 1:
            first = min(first, history.last_received)
        values["ApproximateFirstReceiveTimestamp"] = str(int(first * 1000))
    if want("DeadLetterQueueSourceArn") and history is not None and history.source:
        values["DeadLetterQueueSourceArn"] = service.arn(caller, history.source.rsplit("/", 1)[-1])
    if queue.fifo:
        if want("SequenceNumber"):
            values["SequenceNumber"] = sequence_number(message.id)
        if want("MessageGroupId") and message.group is not None:
            values["MessageGroupId"] = message.group
        if want("MessageDeduplicationId"):
            dedup = message.attributes.get(DEDUP_KEY)
            values["MessageDeduplicationId"] = dedup or hashlib.sha256(message.body).hexdigest()
    if want("AWSTraceHeader") and TRACE_KEY in message.attributes:
        values["AWSTraceHeader"] = message.attributes[TRACE_KEY]
    return values


def _outgoing_message(
    service: Service,
    caller: Caller,
    queue: Queue,
    message: Message,
    *,
    system: set[str],
    names: list[str],
) -> dict[str, Any]:
    body = message.body.decode("utf-8", errors="replace")
    body = _attributes.BAD_CHAR.sub("\ufffd", body)
    result: dict[str, Any] = {
        "MessageId": message.id,
        "ReceiptHandle": _handle(queue, message),
        "MD5OfBody": _attributes.md5_of_body(body),
        "Body": body,
    }
    attributes = _system_attributes(service, caller, queue, message, system) if system else {}
    if attributes:
        result["Attributes"] = attributes
    chosen: dict[str, Attribute] = _attributes.select(_attributes.decode(message.attributes), names)
    if chosen:
        result["MD5OfMessageAttributes"] = _attributes.md5_of_attributes(chosen)
        result["MessageAttributes"] = {
            name: _attribute_value(kind, value) for name, (kind, value) in chosen.items()
        }
    return result


def _attribute_value(kind: str, value: str | bytes) -> dict[str, str]:
    if isinstance(value, bytes):
        import base64  # noqa: PLC0415 - only binary attributes need it

        return {"DataType": kind, "BinaryValue": base64.b64encode(value).decode()}
    return {"DataType": kind, "StringValue": value}


def receive_message(
    service: Service, caller: Caller, name: str, queue: Queue, params: dict[str, Any]
) -> dict[str, Any]:
    count = _integer(params, "MaxNumberOfMessages", 1, MAX_BATCH) or 1
    visibility = _integer(params, "VisibilityTimeout", 0, 43200)
    wait = _integer(params, "WaitTimeSeconds", 0, MAX_WAIT)
    if wait is None:
        wait = int(_queue_attrs.sqs_options(queue)["ReceiveMessageWaitTimeSeconds"])
    system = set(_names(params, "AttributeNames")) | set(
        _names(params, "MessageSystemAttributeNames")
    )
    for attribute in system:
        if attribute != "All" and attribute not in _SYSTEM and attribute not in _queue_attrs.ALL:
            raise SqsError("InvalidAttributeName", f"Unknown Attribute {attribute}.")
    names = _names(params, "MessageAttributeNames")
    attempt = params.get("ReceiveRequestAttemptId")
    if attempt is not None:
        if not isinstance(attempt, str) or not _DEDUP_ID.fullmatch(attempt):
            raise invalid("ReceiveRequestAttemptId", attempt, "1 to 128 printable characters.")
        if queue.fifo:
            again = service.attempts.get(name, attempt)
            if again is not None:
                return {"Messages": again} if again else {}
    messages = _receive(service, queue, count, visibility, wait)
    answer = [
        _outgoing_message(service, caller, queue, m, system=system, names=names) for m in messages
    ]
    if attempt is not None and queue.fifo:
        service.attempts.put(name, attempt, answer)
    return {"Messages": answer} if answer else {}


def _receive(
    service: Service, queue: Queue, count: int, visibility: int | None, wait: int
) -> list[Message]:
    """Up to *count* messages, waiting up to *wait* seconds on the queue's own waiting,
    in slices so that a shutdown of the server ends the wait within :data:`_SLICE`."""
    deadline = time.monotonic() + wait
    while True:
        remaining = deadline - time.monotonic()
        timeout = 0.0 if service.stopping.is_set() else max(0.0, min(remaining, _SLICE))
        try:
            got = queue.receive_batch(count, visibility_timeout=visibility, timeout=timeout)
        except QueueDrained:
            return []
        if got or timeout == 0 or remaining <= _SLICE:
            return got


# -- deleting and changing visibility ---------------------------------------------------


def _target(queue: Queue, handle: object) -> tuple[Queue, str]:
    """The (partition) queue and vsqs receipt of a receipt handle."""
    match = _HANDLE.fullmatch(handle) if isinstance(handle, str) else None
    if match is None:
        raise SqsError(
            "ReceiptHandleIsInvalid", f'The input receipt handle "{handle}" is not valid.'
        )
    partitions = queue.partition_queues
    index = int(match.group(1) or 0)
    if (match.group(1) is None) != (len(partitions) == 1) or index >= len(partitions):
        raise SqsError(
            "ReceiptHandleIsInvalid", f'The input receipt handle "{handle}" is not valid.'
        )
    return partitions[index], match.group(2)


def _delete(queue: Queue, handle: object) -> None:
    target, receipt = _target(queue, handle)
    try:
        target.delete(receipt)
    except InvalidId:
        raise SqsError(
            "ReceiptHandleIsInvalid", f'The input receipt handle "{handle}" is not valid.'
        ) from None


def _change(queue: Queue, handle: object, seconds: object) -> None:
    if seconds is None:
        raise missing("VisibilityTimeout")
    if isinstance(seconds, bool) or not isinstance(seconds, int) or not 0 <= seconds <= 43200:
        raise invalid("VisibilityTimeout", seconds, "must be an integer from 0 to 43200.")
    target, receipt = _target(queue, handle)
    try:
        target.change_visibility(receipt, seconds)
    except InvalidId:
        raise SqsError(
            "ReceiptHandleIsInvalid", f'The input receipt handle "{handle}" is not valid.'
        ) from None
    except LeaseLost as exc:
        raise SqsError(
            "MessageNotInflight",
            f"Message does not exist or is not available for visibility timeout change "
            f"({exc.reason}).",
        ) from None


def delete_message(
    service: Service, caller: Caller, name: str, queue: Queue, params: dict[str, Any]
) -> dict[str, Any]:
    del service, caller, name
    if "ReceiptHandle" not in params:
        raise missing("ReceiptHandle")
    _delete(queue, params["ReceiptHandle"])
    return {}


def change_message_visibility(
    service: Service, caller: Caller, name: str, queue: Queue, params: dict[str, Any]
) -> dict[str, Any]:
    del service, caller, name
    if "ReceiptHandle" not in params:
        raise missing("ReceiptHandle")
    _change(queue, params["ReceiptHandle"], params.get("VisibilityTimeout"))
    return {}


def _batch(
    queue: Queue, params: dict[str, Any], one: Callable[[dict[str, Any]], None]
) -> dict[str, Any]:
    successful: list[dict[str, Any]] = []
    failed: list[dict[str, Any]] = []
    for entry in _entries(params):
        try:
            if "ReceiptHandle" not in entry:
                raise missing("ReceiptHandle")
            one(entry)
        except SqsError as exc:
            failed.append(_failure(entry["Id"], exc))
        else:
            successful.append({"Id": entry["Id"]})
    del queue
    return {"Successful": successful, "Failed": failed}


def delete_message_batch(
    service: Service, caller: Caller, name: str, queue: Queue, params: dict[str, Any]
) -> dict[str, Any]:
    del service, caller, name
    return _batch(queue, params, lambda entry: _delete(queue, entry["ReceiptHandle"]))


def change_message_visibility_batch(
    service: Service, caller: Caller, name: str, queue: Queue, params: dict[str, Any]
) -> dict[str, Any]:
    del service, caller, name
    return _batch(
        queue,
        params,
        lambda entry: _change(queue, entry["ReceiptHandle"], entry.get("VisibilityTimeout")),
    )


ACTIONS: Final[
    dict[str, Callable[[Service, Caller, str, Queue, dict[str, Any]], dict[str, Any]]]
] = {
    "SendMessage": send_message,
    "SendMessageBatch": send_message_batch,
    "ReceiveMessage": receive_message,
    "DeleteMessage": delete_message,
    "DeleteMessageBatch": delete_message_batch,
    "ChangeMessageVisibility": change_message_visibility,
    "ChangeMessageVisibilityBatch": change_message_visibility_batch,
}
