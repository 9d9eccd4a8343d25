"""The options of the ``vsqs`` Spark data source, parsed and checked once, and its schema."""

from __future__ import annotations

import enum
import errno
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Final, TypeVar

from .. import MAX_DURATION, Message, Storage, _userfiles

STATE: Final = "spark/streams"
# The default stateDir: this vsqs.Storage of the queue (its directory spark/streams).

SCHEMA: Final = (
    "id string, body binary, attributes map<string,string>, receive_count int, sent_at timestamp"
)
"""The rows the source reads (``sent_at`` is the publish time, as a UTC instant)."""

MessageRow = tuple[str, bytes, dict[str, str], int, datetime]

Planned = tuple[str, str, dict[str, str], int, float, str]
"""A claimed message without its body: id, receipt, attributes, receive count, sent at,
and where it is: the name of its partition directory inside the queue (``partition-3``),
``""`` for the queue directory itself (every message of an unpartitioned queue).

What the driver puts into a partition; the executor reads the body from the file."""

_T = TypeVar("_T")


class ReadMode(str, enum.Enum):
    """What a batch read through the data source does to the messages it returns."""

    BROWSE = "browse"
    """Read the ready messages and leave them in the queue (the only mode of the format)."""
    CONSUME = "consume"
    """Refused by the format: use :func:`vsqs.spark.consume`, which deletes on success."""


KNOWN: Final = (
    "batchSize",
    "durable",
    "failOnDataLoss",
    "groupColumn",
    "heartbeatInterval",
    "keyColumn",
    "lockTimeout",
    "maxBytesPerBatch",
    "maxMessagesPerBatch",
    "mode",
    "numPartitions",
    "path",
    "stateDir",
    "visibilityTimeout",
)
"""Every option the data source takes (Spark's own option names are case-insensitive)."""

_SPARK_OWN: Final = frozenset({"checkpointlocation"})
"""Options Spark itself reads that it also passes to the sink; accepted and unused."""

_REMOVED: Final = {
    "consumer": "the streaming state is now bound to the query's checkpoint (no name needed)",
    "maxmessages": "a batch consume takes max_messages in vsqs.spark.consume()",
}

_CONSUME_ADVICE: Final = (
    "option 'mode' 'consume' is not offered by spark.read.format('vsqs'): Spark never tells"
    " a batch reader whether the action succeeded, so it could delete messages that no"
    " result holds. Use `with vsqs.spark.consume(spark, path) as df: ...`, which deletes"
    " only when the block succeeds, or the streaming source"
)

DEFAULT_MAX_BYTES: Final = 256 * 1024 * 1024


def message_row(message: Message) -> MessageRow:
    """The row of a message, in :data:`SCHEMA` order."""
    return (
        message.id,
        message.body,
        dict(message.attributes),
        message.receive_count,
        datetime.fromtimestamp(message.sent_at, tz=timezone.utc),
    )


def planned(message: Message, queue: str) -> Planned:
    """What a partition carries for a message claimed from *queue* (everything but the
    body); its directory is named relative to *queue*."""
    return (
        message.id,
        message.receipt,
        dict(message.attributes),
        message.receive_count,
        message.sent_at,
        where(message.queue, queue),
    )


def where(directory: str, queue: str) -> str:
    """*directory* (a partition of *queue*, or *queue* itself) as :data:`Planned` names it."""
    if os.path.normpath(directory) == os.path.normpath(queue):
        return ""
    relative = os.path.relpath(directory, queue)
    if relative.startswith(".") or os.sep in relative:
        raise ValueError(f"{directory!r} is not a partition of the queue {queue!r}")
    return relative


def directory(queue: str, name: str) -> str:
    """The directory a :data:`Planned` message is in, from its *name* (the inverse of
    :func:`where`)."""
    return os.path.join(queue, name) if name else queue


def _parsed(raw: Mapping[str, str], key: str, convert: Callable[[str], _T], what: str) -> _T | None:
    text = raw.get(key.lower())
    if text is None:
        return None
    try:
        return convert(text)
    except ValueError:
        raise ValueError(f"option {key!r} must be {what}, not {text!r}") from None


def _number(raw: Mapping[str, str], key: str, default: float, *, minimum: float = 0.0) -> float:
    value = _parsed(raw, key, float, "a number")
    if value is None:
        return default
    if not value >= minimum:  # also rejects NaN
        raise ValueError(f"option {key!r} must be >= {minimum}, not {raw[key.lower()]!r}")
    if value > MAX_DURATION:  # every number here is seconds: bounded like the API's
        raise ValueError(
            f"option {key!r} must be at most {MAX_DURATION:.0e} seconds, not {raw[key.lower()]!r}"
        )
    return value


def _integer(raw: Mapping[str, str], key: str, default: int, *, minimum: int = 1) -> int:
    value = _parsed(raw, key, int, "an integer")
    if value is None:
        return default
    if value < minimum:
        raise ValueError(f"option {key!r} must be >= {minimum}, not {raw[key.lower()]!r}")
    return value


def _flag(raw: Mapping[str, str], key: str, default: bool) -> bool:
    text = raw.get(key.lower())
    if text is None:
        return default
    if text.lower() not in ("true", "false"):
        raise ValueError(f"option {key!r} must be true or false, not {text!r}")
    return text.lower() == "true"


def check_names(options: Mapping[str, Any]) -> dict[str, str]:
    """The options by lower-case name; :class:`ValueError` for a name the source lacks."""
    raw = {str(k).lower(): str(v) for k, v in options.items()}
    known = {name.lower() for name in KNOWN} | _SPARK_OWN
    for name in raw:
        if name in _REMOVED:
            raise ValueError(f"option {name!r} was removed: {_REMOVED[name]}")
        if name not in known:
            raise ValueError(
                f"unknown option {name!r} for the vsqs data source; known: {', '.join(KNOWN)}"
            )
    return raw


def existing_queue(path: str) -> str:
    """*path*, if a queue directory is there: a reader never creates a queue.

    ``spark.read.format("vsqs").load("/mistyped")`` once returned no rows and left an
    empty queue at the typo; ``vsqs stats /mistyped`` refuses the same mistake.

    :raises FileNotFoundError: nothing at *path* (naming it).
    """
    if not _userfiles.names_anything(path):
        raise FileNotFoundError(
            errno.ENOENT,
            f"no queue at {path} (a reader never creates one: check the path, or create"
            " the queue first, e.g. by publishing to it)",
            path,
        )
    return path


@dataclass(frozen=True)
class SourceOptions:
    """Every option of the data source (names are case-insensitive, as in Spark)."""

    path: str
    visibility_timeout: float = 300.0
    heartbeat_interval: float = 60.0
    num_partitions: int = 2
    max_messages_per_batch: int = 10_000
    max_bytes_per_batch: int = DEFAULT_MAX_BYTES
    state_dir: str = ""
    durable: bool = True
    batch_size: int = 500
    key_column: str | None = None
    group_column: str | None = None
    lock_timeout: float = 60.0
    fail_on_data_loss: bool = True

    @classmethod
    def parse(cls, options: Mapping[str, Any]) -> SourceOptions:
        """Check the user's options; raise :class:`ValueError` naming the bad one."""
        raw = check_names(options)
        path = raw.get("path")
        if not path:
            raise ValueError("the vsqs data source needs a queue path: .load(path) / .save(path)")
        mode_text = raw.get("mode", ReadMode.BROWSE.value).lower()
        if mode_text == ReadMode.CONSUME.value:
            raise ValueError(_CONSUME_ADVICE)
        if mode_text != ReadMode.BROWSE.value:
            raise ValueError(f"option 'mode' must be browse, not {mode_text!r}")
        vt = _number(raw, "visibilityTimeout", 300.0, minimum=1.0)
        return cls(
            path=os.path.abspath(path),
            visibility_timeout=vt,
            heartbeat_interval=_number(raw, "heartbeatInterval", vt / 5, minimum=0.05),
            num_partitions=_integer(raw, "numPartitions", 2),
            max_messages_per_batch=_integer(raw, "maxMessagesPerBatch", 10_000),
            max_bytes_per_batch=_integer(raw, "maxBytesPerBatch", DEFAULT_MAX_BYTES),
            state_dir=raw.get("statedir") or Storage(os.path.abspath(path), STATE).path,
            durable=_flag(raw, "durable", True),
            batch_size=_integer(raw, "batchSize", 500),
            key_column=raw.get("keycolumn"),
            group_column=raw.get("groupcolumn"),
            lock_timeout=_number(raw, "lockTimeout", 60.0),
            fail_on_data_loss=_flag(raw, "failOnDataLoss", True),
        )
