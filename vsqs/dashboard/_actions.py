"""What the queue pages read and the actions need, apart from the HTTP: the peek at the
oldest messages (never claimed), each dead letter's source, and a setting's value
parsed from a form."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Mapping
from itertools import islice
from typing import Any, Final

from .. import AnyQueue, VsqsError, partitions_of
from ._guard import Refused

PEEK: Final = 20
"""Messages shown on a queue page (the oldest ready ones)."""
WHOLE: Final = re.compile(r"[0-9]{1,18}")
SETTINGS: Final = {
    "visibility_timeout": float,
    "delay": float,
    "capacity": int,
    "dead_letter": str,
    "max_receives": int,
    "retention": float,
    "dedup_window": float,
}


def plan_configure(
    queue: AnyQueue,
    name: str,
    form: Mapping[str, str],
    may_use: Callable[[str], bool],
    is_queue: Callable[[str], bool],
) -> tuple[str, Callable[[], str]]:
    """What changing a setting from *form* will do, and a function doing it.

    :param may_use: whether the signed-in key may use a queue (by name): a dead-letter
        queue is one its messages will be written into, so, as ``SetQueueAttributes``'
        ``RedrivePolicy`` through the SQS API, it must be one the key may use.
    :param is_queue: whether a queue of that name exists beside it: a dead-letter queue
        must (as in SQS; a file under that name would make the queue unusable).
    """
    key = form.get("key", "")
    if key not in SETTINGS:
        raise Refused(400, f"unknown setting {key!r}; known: {', '.join(SETTINGS)}")
    raw = form.get("value", "").strip()
    value: object = None
    if raw:
        try:
            value = SETTINGS[key](raw)
        except ValueError:
            kind = "a whole number" if SETTINGS[key] is int else "a number of seconds"
            raise Refused(400, f"{key} must be {kind}, not {raw!r}") from None
    if key == "dead_letter" and value is not None and not may_use(str(value)):
        raise Refused(403, f"this access key may not use the queue {value!r} (its dead letters)")
    if key == "dead_letter" and value is not None and not is_queue(str(value)):
        raise Refused(400, f"no queue {value!r} under this root to take the dead letters")
    shown = "the default (removed)" if value is None else repr(value)
    what = f"Store {key} = {shown} with {name}; handles opened from now on use it."

    def configure() -> str:
        stored = queue.configure(**{key: value})  # type: ignore[arg-type]  # checked above
        return f"{name}: {key} is now {shown}. Stored settings: {json.dumps(stored)}"

    return what, configure


def peek(queue: AnyQueue) -> list[dict[str, Any]]:
    """The oldest ready messages (never claimed), with their dead-letter history."""
    out = []
    for message in islice(queue.browse(), PEEK):
        entry: dict[str, Any] = {
            "id": message.id,
            "sent_at": message.sent_at,
            "receive_count": message.receive_count,
            "attributes": dict(message.attributes),
            "body": message.body,
        }
        part = partition_of(queue, message.queue)
        try:
            history = part.history(message.id)
        except (VsqsError, OSError):
            history = None  # RACE: received and deleted since the browse
        if history is not None and history.source is not None:
            entry.update(
                source=source_name(queue, history.source),
                source_id=history.source_id,
                reason=history.reason,
                dead_lettered=history.dead_lettered,
                receive_count=max(message.receive_count, history.receive_count),
            )
        out.append(entry)
    return out


def partition_of(queue: AnyQueue, directory: str) -> AnyQueue:
    """The partition of *queue* whose directory is *directory* (the queue itself if it
    is not partitioned)."""
    for part in partitions_of(queue):
        if part.path == directory:
            return part
    return queue


def source_name(queue: AnyQueue, source: str) -> str:
    """The name of the queue a dead letter came from: its directory's name when it is
    beside *queue* (or a partition of a queue beside it); the path as recorded otherwise."""
    root = os.path.dirname(queue.path)
    if source.startswith(root + os.sep):
        return source[len(root) + 1 :].partition(os.sep)[0]
    return source
