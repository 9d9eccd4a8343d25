"""The message actions of the SQS API: receive, delete, change visibility (sending is
in :mod:`vsqs.serve._sending`).

Each maps onto one :class:`vsqs.Queue` operation and keeps its guarantee: a
``ReceiveMessage`` claims each message with one rename, so a message goes to one
receiver whichever server it asks; ``DeleteMessage`` unlinks exactly the held file;
``ChangeMessageVisibility`` is one rename of it.

**Receipt handles** are the vsqs receipt (``id.expiry``), ``~`` and the receive count
of that delivery, ``~`` and a tag binding the handle to its queue; on a partitioned
(FIFO) queue, ``p<index>-`` first, naming the partition. The tag is 16 hex digits of
the BLAKE2b digest of the queue's name and the rest of the handle (see :func:`_tag`):
a handle used on another queue's URL (or altered) is ``ReceiptHandleIsInvalid``
rather than a silent no-op. It is no secret, and need not be: a handle only ever
names a file inside the queue of the request's URL, so a forged tag reaches nothing
that queue's own receipts would not. Handles without a tag (minted before the tag, by
unreleased versions only) are refused alike: their message comes back when its
visibility timeout ends. As in SQS, a handle stays valid when
``ChangeMessageVisibility`` extends its message, through any server: the server that
extended it remembers the receipts it replaced, and any other follows the lease to its
current name (see :func:`_superseded`), never to a later delivery of the message: an
extended lease carries its delivery in its name (``id.expiry.delivery``), which no
later delivery does, whoever requeued the message and whatever it could record.

**System attributes.** ``SentTimestamp`` is the vsqs id's time;
``ApproximateReceiveCount`` vsqs's receive count; ``ApproximateFirstReceiveTimestamp``
the start of this receive for a first receive, and otherwise the earliest receive
vsqs remembers (its last counted one); ``SenderId`` the access key that signed the
receive (``AIDAVSQSSERVE`` without credentials: senders are not recorded);
``SequenceNumber`` the id as 20 digits; ``MessageDeduplicationId`` the explicit id, or
the SHA-256 of the body (content-based).

**ReceiveRequestAttemptId** (FIFO queues): the answer of a receive is kept by this
server for five minutes under its attempt id, and a retry with the same id gets the
same messages and handles. The cache is in memory: a retry through another server, or
after a restart, receives afresh (the messages of the first attempt come back when
their visibility timeout ends).
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from .. import (
    AnyQueue,
    InvalidId,
    LeaseLost,
    Message,
    partitions_of,
)
from . import _attributes, _longpoll, _queue_attrs
from ._attributes import DEDUP_KEY, TRACE_KEY, Attribute
from ._errors import SqsError, invalid, missing
from ._sending import (
    MAX_BATCH,
    PRINTABLE,
    entries,
    failure,
    integer,
    send_message,
    send_message_batch,
    sequence_number,
    uuid_of,
)

if TYPE_CHECKING:
    from ._context import Caller, Context

__all__ = ["ACTIONS"]

MAX_WAIT: Final = 20
_FOLLOW: Final = 3  # newer receipts of one lease followed before giving up
_PROBE: Final = 1.0  # seconds of an extension that cannot happen (see _superseded)
_HANDLE: Final = re.compile(
    r"((?:p([0-9]{1,4})-)?([0-9]{1,40}\.[0-9]{1,40})~([1-9][0-9]{0,9}))~([0-9a-f]{16})"
)
_SYSTEM: Final = (
    "SenderId", "SentTimestamp", "ApproximateReceiveCount", "ApproximateFirstReceiveTimestamp",
    "SequenceNumber", "MessageDeduplicationId", "MessageGroupId", "AWSTraceHeader",
    "DeadLetterQueueSourceArn",
)  # fmt: skip


# -- receiving --------------------------------------------------------------------------


def _names(params: dict[str, Any], key: str) -> list[str]:
    value = params.get(key) or []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise invalid(key, value, "must be a list of names.")
    return value


def _tag(queue: AnyQueue, handle: str) -> str:
    """The tag binding *handle* (without its tag) to *queue*: its name is the URL's."""
    name = os.path.basename(queue.path)
    return hashlib.blake2b(f"{name}\0{handle}".encode(), digest_size=8).hexdigest()


def _handle(queue: AnyQueue, message: Message) -> str:
    """``[p<partition>-]<receipt>~<receive count>~<tag>`` (see the module's docstring)."""
    partitions = partitions_of(queue)
    handle = f"{message.receipt}~{message.receive_count}"
    for index, partition in enumerate(partitions):
        if len(partitions) > 1 and partition.path == message.queue:
            handle = f"p{index}-{handle}"
    return f"{handle}~{_tag(queue, handle)}"


def _system_attributes(  # noqa: PLR0912 - one branch per system attribute
    service: Context, caller: Caller, queue: AnyQueue, message: Message, wanted: set[str]
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
    if want("MessageGroupId") and message.group is not None:
        values["MessageGroupId"] = message.group  # a standard queue's (fair queues) too
    if queue.fifo:
        if want("SequenceNumber"):
            values["SequenceNumber"] = sequence_number(message.id)
        if want("MessageDeduplicationId"):
            dedup = message.attributes.get(DEDUP_KEY)
            values["MessageDeduplicationId"] = dedup or hashlib.sha256(message.body).hexdigest()
    if want("AWSTraceHeader") and TRACE_KEY in message.attributes:
        values["AWSTraceHeader"] = message.attributes[TRACE_KEY]
    return values


def _outgoing_message(
    service: Context,
    caller: Caller,
    queue: AnyQueue,
    message: Message,
    *,
    system: set[str],
    names: list[str],
) -> dict[str, Any]:
    raw = message.body
    try:
        body = raw.decode("utf-8")
        exact = _attributes.allowed(body)
    except UnicodeDecodeError:
        body, exact = raw.decode("utf-8", errors="replace"), False
    if not exact:  # what SQS could not have stored is replaced: the digest is of what is sent
        body = _attributes.BAD_CHAR.sub("\ufffd", body)
    result: dict[str, Any] = {
        "MessageId": uuid_of(message.id),
        "ReceiptHandle": _handle(queue, message),
        "MD5OfBody": _attributes.md5_of_data(raw) if exact else _attributes.md5_of_body(body),
        "Body": body,
    }
    attributes = _system_attributes(service, caller, queue, message, system) if system else {}
    if attributes:
        result["Attributes"] = attributes
    chosen: dict[str, Attribute] = (
        _attributes.select(_attributes.decode(message.attributes), names) if names else {}
    )
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
    service: Context, caller: Caller, name: str, queue: AnyQueue, params: dict[str, Any]
) -> dict[str, Any]:
    count = integer(params, "MaxNumberOfMessages", 1, MAX_BATCH) or 1
    visibility = integer(params, "VisibilityTimeout", 0, 43200)
    wait = integer(
        params, "WaitTimeSeconds", 0, MAX_WAIT, f"Must be >= 0 and <= {MAX_WAIT}, if provided."
    )
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
        if not isinstance(attempt, str) or not PRINTABLE.fullmatch(attempt):
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
    service: Context, queue: AnyQueue, count: int, visibility: int | None, wait: int
) -> list[Message]:
    """Up to *count* messages, waiting up to *wait* seconds (without holding a thread
    under the server: :func:`vsqs.serve._longpoll.receive`)."""
    got = _longpoll.receive(service.stopping, queue, count, visibility, wait)
    if len(partitions_of(queue)) > 1:
        # Partitions (message groups) are claimed in turn; SQS answers a FIFO queue's
        # messages in the order they were sent: ids are send times.
        got.sort(key=lambda message: (len(message.id), message.id))
    return got


# -- deleting and changing visibility ---------------------------------------------------


def _target(queue: AnyQueue, handle: object) -> tuple[AnyQueue, str]:
    """The (partition) queue and vsqs receipt of a receipt handle of
    *queue*; a handle of another queue, or altered, is ``ReceiptHandleIsInvalid``."""
    match = _HANDLE.fullmatch(handle) if isinstance(handle, str) else None
    partitions = partitions_of(queue)
    index = int(match.group(2) or 0) if match else 0
    if (
        match is None
        or (match.group(2) is None) != (len(partitions) == 1)
        or index >= len(partitions)
    ):
        raise _invalid_handle(handle)
    if match.group(5) != _tag(queue, match.group(1)):  # no secret: a plain comparison
        raise SqsError(
            "ReceiptHandleIsInvalid",
            f"The input receipt handle is invalid: it is not a handle of queue "
            f"{os.path.basename(queue.path)} (another queue's, or altered).",
        )
    return partitions[index], match.group(3)


def _invalid_handle(handle: object) -> SqsError:
    return SqsError("ReceiptHandleIsInvalid", "The input receipt handle is invalid.")


def _invalid_entry_handle(handle: object) -> SqsError:
    """The same, as SQS words it for one entry of a batch."""
    return SqsError(
        "ReceiptHandleIsInvalid",
        f'The input receipt handle "{handle}" is not a valid receipt handle.',
    )


def _superseded(target: AnyQueue, receipt: str) -> str | None:
    """The receipt a lease lives on under, if *receipt* (which names no file now) was
    extended through another handle: another server, or this one before a restart.

    In SQS a receipt handle stays valid when ChangeMessageVisibility extends its
    message; in vsqs the extension renames the held file. vsqs's diagnosis of a lost
    lease (:class:`~vsqs.LeaseLost` ``superseded``, with the current receipt) is asked
    for by an extension that cannot succeed (the name is gone, and no rename ever makes a
    name again), so the probe changes nothing. It says ``superseded`` only for a lease
    whose name carries this receipt's delivery (an extension of it), never for a later
    delivery: a handle can only act on its own delivery.
    """
    try:
        target.change_visibility(receipt, _PROBE)
    except LeaseLost as lost:
        return lost.current if lost.reason == "superseded" and lost.current else None
    return None  # RACE: unreachable unless the name came back (then it was extended now)


def _delete(queue: AnyQueue, handle: object) -> None:
    target, receipt = _target(queue, handle)
    try:
        for _ in range(_FOLLOW):
            if target.delete(receipt):
                return
            # Deleting a receipt whose lease has ended is no error (as in SQS); one whose
            # lease lives on under a newer receipt deletes the message.
            current = _superseded(target, receipt)
            if current is None:
                return
            receipt = current  # RACE: extended again meanwhile: follow it, a few times
    except InvalidId:
        raise _invalid_handle(handle) from None


def _change(queue: AnyQueue, handle: object, seconds: object) -> None:
    if seconds is None:
        raise missing("VisibilityTimeout")
    if isinstance(seconds, bool) or not isinstance(seconds, int) or not 0 <= seconds <= 43200:
        raise invalid("VisibilityTimeout", seconds, "must be an integer from 0 to 43200.")
    target, receipt = _target(queue, handle)
    for attempt in range(_FOLLOW):
        try:
            target.change_visibility(receipt, seconds)
        except InvalidId:
            raise _invalid_handle(handle) from None
        except LeaseLost as exc:
            current = _superseded(target, receipt) if attempt + 1 < _FOLLOW else None
            if current is not None:
                receipt = current  # extended through another server: the lease lives on
                continue
            raise invalid(
                "ReceiptHandle",
                handle,
                "Message does not exist or is not available for visibility timeout change.",
            ) from exc
        return


def delete_message(
    service: Context, caller: Caller, name: str, queue: AnyQueue, params: dict[str, Any]
) -> dict[str, Any]:
    del service, caller, name
    if "ReceiptHandle" not in params:
        raise missing("ReceiptHandle")
    _delete(queue, params["ReceiptHandle"])
    return {}


def change_message_visibility(
    service: Context, caller: Caller, name: str, queue: AnyQueue, params: dict[str, Any]
) -> dict[str, Any]:
    del service, caller, name
    if "ReceiptHandle" not in params:
        raise missing("ReceiptHandle")
    _change(queue, params["ReceiptHandle"], params.get("VisibilityTimeout"))
    return {}


def _batch(
    queue: AnyQueue, params: dict[str, Any], kind: str, one: Callable[[dict[str, Any]], None]
) -> dict[str, Any]:
    successful: list[dict[str, Any]] = []
    failed: list[dict[str, Any]] = []
    for entry in entries(params, kind):
        try:
            if "ReceiptHandle" not in entry:
                raise missing("ReceiptHandle")
            one(entry)
        except SqsError as exc:
            if exc.code == "ReceiptHandleIsInvalid":
                exc = _invalid_entry_handle(entry["ReceiptHandle"])
            failed.append(failure(entry["Id"], exc))
        else:
            successful.append({"Id": entry["Id"]})
    del queue
    return {"Successful": successful, "Failed": failed}


def delete_message_batch(
    service: Context, caller: Caller, name: str, queue: AnyQueue, params: dict[str, Any]
) -> dict[str, Any]:
    del service, caller, name
    return _batch(
        queue,
        params,
        "DeleteMessageBatchRequestEntry",
        lambda entry: _delete(queue, entry["ReceiptHandle"]),
    )


def change_message_visibility_batch(
    service: Context, caller: Caller, name: str, queue: AnyQueue, params: dict[str, Any]
) -> dict[str, Any]:
    del service, caller, name
    return _batch(
        queue,
        params,
        "ChangeMessageVisibilityBatchRequestEntry",
        lambda entry: _change(queue, entry["ReceiptHandle"], entry.get("VisibilityTimeout")),
    )


ACTIONS: Final[
    dict[str, Callable[[Context, Caller, str, AnyQueue, dict[str, Any]], dict[str, Any]]]
] = {
    "SendMessage": send_message,
    "SendMessageBatch": send_message_batch,
    "ReceiveMessage": receive_message,
    "DeleteMessage": delete_message,
    "DeleteMessageBatch": delete_message_batch,
    "ChangeMessageVisibility": change_message_visibility,
    "ChangeMessageVisibilityBatch": change_message_visibility_batch,
}
