"""Queue attributes: how each SQS attribute maps onto vsqs's stored settings.

========================================  =============================================
SQS attribute                             vsqs
========================================  =============================================
``VisibilityTimeout``                     the stored ``visibility_timeout``
``DelaySeconds``                          the stored ``delay``
``MessageRetentionPeriod``                the stored ``retention`` (a queue made here
                                          gets SQS's default, 4 days; one without a
                                          retention keeps messages forever and shows
                                          the longest SQS allows, 1209600)
``RedrivePolicy``                         the stored ``dead_letter`` (by name: a queue of
                                          the same root) and ``max_receives``
``FifoQueue``                             the stored ``fifo`` (partitions, see
                                          :data:`FIFO_PARTITIONS`); set at creation only
``Approximate...`` counts                 :meth:`vsqs.Queue.counts` (one listing)
``QueueArn``, ``CreatedTimestamp``,       made from the name, or kept in the queue's SQS
``LastModifiedTimestamp``                 record (:mod:`vsqs.serve._sidecar`)
the others                                kept in the SQS record; enforced by the server
                                          where it can (``MaximumMessageSize``,
                                          ``ReceiveMessageWaitTimeSeconds``,
                                          ``ContentBasedDeduplication``), recorded only
                                          otherwise (``Policy``, ``RedriveAllowPolicy``,
                                          the KMS ones, ``FifoThroughputLimit``);
                                          ``DeduplicationScope`` is honoured (``queue``,
                                          the default, or ``messageGroup``)
========================================  =============================================
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

from .. import AnyQueue, _userfiles
from . import _sidecar
from ._errors import SqsError, invalid, unknown_attribute

if TYPE_CHECKING:
    from ._context import Caller, Context

__all__ = ["FIFO_PARTITIONS", "apply", "check_same", "create", "get", "parse_set"]

FIFO_PARTITIONS: Final = 8
"""Partitions of a FIFO queue made through the API (a group is in one of them; it
waits only for its own message in flight, see :mod:`vsqs._groups`)."""
DEFAULT_RETENTION: Final = 345600
MAX_RETENTION: Final = 1209600
DEFAULT_MAX_SIZE: Final = 1048576
"""SQS's ``MaximumMessageSize`` of a new queue, and its largest (1 MiB, since 2025)."""
# name -> (lowest, highest) of the integer attributes.
_RANGES: Final = {
    "DelaySeconds": (0, 900),
    "MaximumMessageSize": (1024, DEFAULT_MAX_SIZE),
    "MessageRetentionPeriod": (60, MAX_RETENTION),
    "ReceiveMessageWaitTimeSeconds": (0, 20),
    "VisibilityTimeout": (0, 43200),
    "KmsDataKeyReusePeriodSeconds": (60, 86400),
}
_CHOICES: Final = {
    "FifoQueue": ("true", "false"),
    "ContentBasedDeduplication": ("true", "false"),
    "SqsManagedSseEnabled": ("true", "false"),
    "DeduplicationScope": ("messageGroup", "queue"),
    "FifoThroughputLimit": ("perQueue", "perMessageGroupId"),
}
_FIFO_ONLY: Final = ("ContentBasedDeduplication", "DeduplicationScope", "FifoThroughputLimit")
_FREE: Final = ("Policy", "RedrivePolicy", "RedriveAllowPolicy", "KmsMasterKeyId")
_SETTABLE: Final = (*_RANGES, *_CHOICES, *_FREE)
ALL: Final = (
    "Policy", "VisibilityTimeout", "MaximumMessageSize", "MessageRetentionPeriod",
    "ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible", "CreatedTimestamp",
    "LastModifiedTimestamp", "QueueArn", "ApproximateNumberOfMessagesDelayed", "DelaySeconds",
    "ReceiveMessageWaitTimeSeconds", "RedrivePolicy", "FifoQueue", "ContentBasedDeduplication",
    "KmsMasterKeyId", "KmsDataKeyReusePeriodSeconds", "DeduplicationScope",
    "FifoThroughputLimit", "RedriveAllowPolicy", "SqsManagedSseEnabled",
)  # fmt: skip
_STORED_AS: Final = {
    "VisibilityTimeout": "visibility_timeout",
    "DelaySeconds": "delay",
    "MessageRetentionPeriod": "retention",
}


def parse_set(  # noqa: PLR0912 - one check per SQS rule
    raw: object, *, creating: bool
) -> dict[str, str]:
    """Check the attributes of a CreateQueue or SetQueueAttributes; return them."""
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise invalid("Attributes", raw, "must be a map of name to value.")
    result: dict[str, str] = {}
    for name, given in raw.items():
        if name not in _SETTABLE:  # the read-only ones too, as SQS words it
            raise unknown_attribute(name)
        if not isinstance(given, str):
            raise SqsError("InvalidAttributeValue", f"Invalid value for the parameter {name}.")
        # SQS takes True, TRUE... for FifoQueue.
        value = given.lower() if name == "FifoQueue" else given
        if name == "FifoQueue" and not creating:
            pass  # SetQueueAttributes: its queue decides (see apply)
        elif name in _RANGES:
            low, high = _RANGES[name]
            try:
                number = int(value, 10)
            except ValueError:
                number = None
            if number is None or not low <= number <= high:
                raise SqsError(
                    "InvalidAttributeValue",
                    f"Invalid value for the parameter {name}: it must be an integer from "
                    f"{low} to {high}.",
                )
        elif name in _CHOICES and value not in _CHOICES[name]:
            raise SqsError(
                "InvalidAttributeValue",
                f"Invalid value for the parameter {name}: one of {', '.join(_CHOICES[name])}.",
            )
        elif name in ("RedriveAllowPolicy", "Policy") and value:
            try:
                document = json.loads(value)
            except ValueError:
                document = None
            if not isinstance(document, dict):
                raise SqsError("InvalidAttributeValue", f"Invalid value for the parameter {name}.")
        result[name] = value
    return result


def _redrive(service: Context, caller: Caller, name: str, fifo: bool, value: str) -> dict[str, Any]:
    """The vsqs settings of a RedrivePolicy (``""`` removes it)."""
    if not value:
        return {"dead_letter": None, "max_receives": None}
    try:
        policy = json.loads(value)
    except ValueError:
        policy = None
    if not isinstance(policy, dict) or "deadLetterTargetArn" not in policy:
        raise SqsError(
            "InvalidAttributeValue",
            "Value for parameter RedrivePolicy is invalid. Reason: Redrive policy is not a "
            "JSON object with deadLetterTargetArn and maxReceiveCount.",
        )
    target = service.name_of_arn(policy["deadLetterTargetArn"], "RedrivePolicy")
    count = policy.get("maxReceiveCount")
    if isinstance(count, str):
        try:
            count = int(count, 10)
        except ValueError:
            count = None
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= 1000:
        raise SqsError(
            "InvalidAttributeValue",
            "Value for parameter RedrivePolicy is invalid. Reason: maxReceiveCount must be "
            "an integer from 1 to 1000.",
        )
    if target == name:
        raise SqsError("InvalidAttributeValue", "A queue cannot be its own dead-letter queue.")
    service.allow(caller, target)  # no key sends its messages into another key's queue
    if target not in service.root:
        raise SqsError(
            "InvalidAttributeValue",
            "Value for parameter RedrivePolicy is invalid. Reason: Dead letter target does "
            "not exist.",
        )
    if service.open(target).fifo != fifo:
        raise SqsError(
            "InvalidAttributeValue",
            "Value for parameter RedrivePolicy is invalid. Reason: the dead-letter queue of a "
            "FIFO queue must be a FIFO queue, and of a standard queue a standard queue.",
        )
    return {"dead_letter": target, "max_receives": count}


def _split(
    service: Context, caller: Caller, name: str, fifo: bool, attributes: Mapping[str, str]
) -> tuple[dict[str, Any], dict[str, str]]:
    """(vsqs settings, attributes for the SQS record) of checked *attributes*."""
    settings: dict[str, Any] = {}
    extra: dict[str, str] = {}
    for key, value in attributes.items():
        if key in _FIFO_ONLY and not fifo:
            raise _not_fifo(key)
        if key in _STORED_AS:
            settings[_STORED_AS[key]] = int(value)
        elif key == "RedrivePolicy":
            settings.update(_redrive(service, caller, name, fifo, value))
        elif key != "FifoQueue":
            extra[key] = value
    return settings, extra


def _not_fifo(key: str) -> SqsError:
    """A FIFO-only attribute given for a standard queue, as SQS words it."""
    if key == "ContentBasedDeduplication":
        return unknown_attribute(key)
    return SqsError(
        "InvalidAttributeName", f"You can specify the {key} only when FifoQueue is set to true."
    )


def _record_attributes(document: dict[str, Any], extra: Mapping[str, str]) -> None:
    """Keep *extra* in the SQS record; an empty ``Policy`` removes the policy."""
    kept = document.setdefault("attributes", {})
    for key, value in extra.items():
        if key == "Policy" and not value:
            kept.pop(key, None)
        else:
            kept[key] = value


def create(
    service: Context,
    caller: Caller,
    name: str,
    attributes: Mapping[str, str],
    tags: Mapping[str, str],
) -> AnyQueue:
    """Make the queue *name* with *attributes* and *tags*."""
    fifo = attributes.get("FifoQueue") == "true"
    settings, extra = _split(service, caller, name, fifo, attributes)
    settings.setdefault("retention", DEFAULT_RETENTION)
    settings = {k: v for k, v in settings.items() if v is not None}
    if fifo:
        settings.update(partitions=FIFO_PARTITIONS, fifo=True)
    queue = service.root.create(name, **settings)

    def record(document: dict[str, Any]) -> None:
        _record_attributes(document, extra)
        document.setdefault("tags", {}).update(tags)

    _sidecar.update(queue.path, record, touch=True)
    return queue


def apply(
    service: Context, caller: Caller, name: str, queue: AnyQueue, attributes: Mapping[str, str]
) -> None:
    """Store *attributes* (SetQueueAttributes).

    ``FifoQueue`` is refused on a standard queue as an unknown attribute, and on a FIFO
    queue taken as it is when ``true`` and refused otherwise, as SQS answers (a queue's
    type is set when it is made)."""
    fifo = queue.fifo
    if "FifoQueue" in attributes:
        if not fifo:
            raise unknown_attribute("FifoQueue")
        if attributes["FifoQueue"] != "true":
            raise SqsError(
                "InvalidAttributeValue",
                "Invalid value for the parameter FifoQueue. Reason: Modifying queue type is "
                "not supported.",
            )
    settings, extra = _split(service, caller, name, fifo, attributes)
    if settings:
        try:
            queue.configure(**settings)
        except (TypeError, ValueError) as exc:
            raise SqsError("InvalidAttributeValue", str(exc)) from None

    def record(document: dict[str, Any]) -> None:
        _record_attributes(document, extra)

    _sidecar.update(queue.path, record, touch=True)


def dead_letter_of(service: Context, name: str) -> str | None:
    """The dead-letter queue stored for the queue *name*, if any."""
    try:
        return service.root.get(name).settings().get("dead_letter")
    except (OSError, ValueError, LookupError):
        return None  # RACE: deleted meanwhile, or settings we cannot read: not a source


def get(  # noqa: PLR0912 - one branch per attribute, as in the table above
    service: Context, caller: Caller, name: str, queue: AnyQueue, wanted: list[str]
) -> dict[str, str]:
    """The attribute values GetQueueAttributes asks for (``All`` for every one)."""
    if not isinstance(wanted, list) or not all(isinstance(w, str) for w in wanted):
        raise invalid("AttributeNames", wanted, "must be a list of attribute names.")
    for attribute in wanted:
        if attribute != "All" and attribute not in ALL:
            raise SqsError("InvalidAttributeName", f"Unknown Attribute {attribute}.")
    names = list(ALL) if "All" in wanted else list(dict.fromkeys(wanted))
    if not names:
        return {}
    fifo = queue.fifo
    record = _sidecar.read(queue.path)
    extra = record.get("attributes") or {}
    settings = queue.settings()
    values: dict[str, str] = {}
    counts = None
    if any(n.startswith("Approximate") for n in names):
        counts = queue.counts()
    created = record.get("created")
    if created is None:
        created = _userfiles.status(queue.path).st_mtime
    for attribute in names:
        if attribute in (*_FIFO_ONLY, "FifoQueue") and not fifo:
            continue
        value: str | None
        if attribute == "VisibilityTimeout":
            value = _integral(settings.get("visibility_timeout", 30))
        elif attribute == "DelaySeconds":
            value = _integral(settings.get("delay", 0))
        elif attribute == "MessageRetentionPeriod":
            value = _integral(settings.get("retention", MAX_RETENTION))
        elif attribute == "RedrivePolicy":
            target = settings.get("dead_letter")
            value = None if target is None else json.dumps({
                "deadLetterTargetArn": service.arn(caller, target),
                "maxReceiveCount": settings.get("max_receives", 1),
            }, separators=(",", ":"))  # fmt: skip
        elif attribute == "FifoQueue":
            value = "true"
        elif attribute == "ApproximateNumberOfMessages":
            value = str(counts.ready) if counts else None
        elif attribute == "ApproximateNumberOfMessagesNotVisible":
            value = str(counts.held) if counts else None
        elif attribute == "ApproximateNumberOfMessagesDelayed":
            value = str(counts.delayed) if counts else None
        elif attribute == "CreatedTimestamp":
            value = str(int(created))
        elif attribute == "LastModifiedTimestamp":
            value = str(int(record.get("modified", created)))
        elif attribute == "QueueArn":
            value = service.arn(caller, name)
        elif attribute == "Policy":
            value = _policy(service.arn(caller, name), extra.get("Policy"), record)
        else:
            value = extra.get(attribute, _DEFAULTS.get(attribute))
        if value is not None:
            values[attribute] = value
    return values


_DEFAULTS: Final = {
    "MaximumMessageSize": str(DEFAULT_MAX_SIZE),
    "ReceiveMessageWaitTimeSeconds": "0",
    "ContentBasedDeduplication": "false",
    "DeduplicationScope": "queue",  # as SQS; honoured when a message is sent
    "FifoThroughputLimit": "perQueue",
    "SqsManagedSseEnabled": "true",  # as SQS: a new queue is encrypted at rest by SQS
}


def _policy(arn: str, given: str | None, record: Mapping[str, Any]) -> str | None:
    """The ``Policy`` attribute: the one set, with a statement for each permission added
    by AddPermission (as SQS shows them), or ``None`` when there is neither."""
    permissions = record.get("permissions") or {}
    if not permissions:
        return given or None
    try:
        document = json.loads(given) if given else None
    except ValueError:
        document = None  # a policy stored before vsqs checked them: shown as made anew
    if not isinstance(document, dict):
        document = {"Version": "2012-10-17", "Id": f"{arn}/SQSDefaultPolicy", "Statement": []}
    statements = document.setdefault("Statement", [])
    for label, permission in permissions.items():
        accounts = [f"arn:aws:iam::{a}:root" for a in permission.get("accounts", [])]
        actions = [f"SQS:{a}" for a in permission.get("actions", [])]
        statements.append({
            "Sid": label,
            "Effect": "Allow",
            "Principal": {"AWS": accounts[0] if len(accounts) == 1 else accounts},
            "Action": actions[0] if len(actions) == 1 else actions,
            "Resource": arn,
        })  # fmt: skip
    return json.dumps(document, separators=(",", ":"))


def sqs_options(queue: AnyQueue) -> dict[str, str]:
    """The SQS-only attributes of a queue, defaults included (one ``lstat`` while the
    queue's SQS record is unchanged, one read when it changed)."""
    stored = _sidecar.read_cached(queue.path).get("attributes") or {}
    return {**_DEFAULTS, **stored}


def _integral(value: float) -> str:
    return str(math.ceil(value)) if value != int(value) else str(int(value))


def check_same(
    service: Context, caller: Caller, name: str, queue: AnyQueue, attributes: Mapping[str, str]
) -> None:
    """CreateQueue of an existing queue: refuse attributes that differ from its own."""
    if not attributes:
        return
    current = get(service, caller, name, queue, list(attributes))
    if attributes.get("FifoQueue", "false") == "false" and queue.fifo:
        current.setdefault("FifoQueue", "true")
    for key, value in attributes.items():
        have = current.get(key, "false" if key == "FifoQueue" else None)
        if key == "RedrivePolicy" and value and have:
            same = _same_policy(service, value, have)
        else:
            same = have == value
        if not same:
            raise SqsError(
                "QueueNameExists",
                f"A queue already exists with the same name and a different value for "
                f"attribute {key}",
            )


def _same_policy(service: Context, given: str, have: str) -> bool:
    """Whether two redrive policies name the same queue (any ARN prefix) and count."""
    try:
        a, b = json.loads(given), json.loads(have)
        targets = [
            service.name_of_arn(p.get("deadLetterTargetArn"), "RedrivePolicy") for p in (a, b)
        ]
    except (ValueError, AttributeError, SqsError):
        return False
    return targets[0] == targets[1] and str(a.get("maxReceiveCount")) == str(
        b.get("maxReceiveCount")
    )
