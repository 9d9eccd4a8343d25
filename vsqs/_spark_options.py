"""The options of the ``vsqs`` Spark data source, parsed and checked once, and its schema."""

from __future__ import annotations

import enum
import os
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Final

from ._layout import Layout
from ._message import Message

SCHEMA: Final = (
    "id string, body binary, attributes map<string,string>, receive_count int, sent_at timestamp"
)
"""The rows the source reads (``sent_at`` is the publish time, as a UTC instant)."""

MessageRow = tuple[str, bytes, dict[str, str], int, datetime]


class ReadMode(str, enum.Enum):
    """What a batch read does to the messages it returns."""

    BROWSE = "browse"
    """Read the ready messages and leave them in the queue."""
    CONSUME = "consume"
    """Claim the messages and delete each partition's messages once it has been read."""


def message_row(message: Message) -> MessageRow:
    """The row of a message, in :data:`SCHEMA` order."""
    return (
        message.id,
        message.body,
        dict(message.attributes),
        message.receive_count,
        datetime.fromtimestamp(message.sent_at, tz=timezone.utc),
    )


def _number(raw: Mapping[str, str], key: str, default: float, *, minimum: float = 0.0) -> float:
    text = raw.get(key.lower())
    value = default if text is None else float(text)
    if not value >= minimum:  # also rejects NaN
        raise ValueError(f"option {key!r} must be >= {minimum}, not {text!r}")
    return value


def _integer(raw: Mapping[str, str], key: str, default: int, *, minimum: int = 1) -> int:
    text = raw.get(key.lower())
    value = default if text is None else int(text)
    if value < minimum:
        raise ValueError(f"option {key!r} must be >= {minimum}, not {text!r}")
    return value


def _flag(raw: Mapping[str, str], key: str, default: bool) -> bool:
    text = raw.get(key.lower())
    if text is None:
        return default
    if text.lower() not in ("true", "false"):
        raise ValueError(f"option {key!r} must be true or false, not {text!r}")
    return text.lower() == "true"


@dataclass(frozen=True)
class SourceOptions:
    """Every option of the data source (names are case-insensitive, as in Spark)."""

    path: str
    mode: ReadMode = ReadMode.BROWSE
    visibility_timeout: float = 300.0
    heartbeat_interval: float = 60.0
    num_partitions: int = 2
    max_messages: int | None = None
    max_messages_per_batch: int = 10_000
    consumer: str = "default"
    state_dir: str = ""
    durable: bool = True
    batch_size: int = 500
    key_column: str | None = None
    lock_timeout: float = 60.0

    @classmethod
    def parse(cls, options: Mapping[str, Any]) -> SourceOptions:
        """Check the user's options; raise :class:`ValueError` naming the bad one."""
        raw = {str(k).lower(): str(v) for k, v in options.items()}
        path = raw.get("path")
        if not path:
            raise ValueError("the vsqs data source needs a queue path: .load(path) / .save(path)")
        mode_text = raw.get("mode", ReadMode.BROWSE.value).lower()
        try:
            mode = ReadMode(mode_text)
        except ValueError:
            raise ValueError(
                f"option 'mode' must be browse or consume, not {mode_text!r}"
            ) from None
        vt = _number(raw, "visibilityTimeout", 300.0, minimum=1.0)
        consumer = raw.get("consumer", "default")
        if not consumer or consumer.startswith(".") or "/" in consumer or "\0" in consumer:
            raise ValueError(f"option 'consumer' must be a plain file name, not {consumer!r}")
        max_messages = raw.get("maxmessages")
        return cls(
            path=os.path.abspath(path),
            mode=mode,
            visibility_timeout=vt,
            heartbeat_interval=_number(raw, "heartbeatInterval", vt / 5, minimum=0.05),
            num_partitions=_integer(raw, "numPartitions", 2),
            max_messages=None if max_messages is None else _integer(raw, "maxMessages", 1),
            max_messages_per_batch=_integer(raw, "maxMessagesPerBatch", 10_000),
            consumer=consumer,
            state_dir=raw.get("statedir") or Layout(os.path.abspath(path)).spark_dir(consumer),
            durable=_flag(raw, "durable", True),
            batch_size=_integer(raw, "batchSize", 500),
            key_column=raw.get("keycolumn"),
            lock_timeout=_number(raw, "lockTimeout", 60.0),
        )
