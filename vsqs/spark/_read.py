"""Executors read the bodies of messages the driver claimed, from the queue's files.

The driver puts :data:`~vsqs.spark._options.Planned` tuples (id, receipt, attributes,
receive count, publish time) into the partitions, never bodies. A body is the content of
the message's file (see :doc:`/concepts`), and a message's content never changes while it
exists: only its name does. So an executor reads them with :func:`vsqs.read_bodies`,
which opens ``<queue>/<receipt>``; when the driver has renewed the lease since planning
(a heartbeat renames ``<id>.<expiry>`` to ``<id>.<later>``), that name is gone and the
directory is listed once to find whichever file now carries the id. A renewal therefore
never makes a planned message unreadable; only a message deleted by someone else is,
and ``failOnDataLoss`` decides.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime, timezone
from typing import Any, Final

import pyarrow as pa

from .. import AnyQueue, PartitionedQueue, VsqsError, read_bodies
from ._options import MessageRow, Planned, where

log = logging.getLogger("vsqs.spark")


class MessageGone(VsqsError, LookupError):
    """A planned message no longer exists: it was deleted by someone else."""

    def __init__(self, queue: str, message_id: str) -> None:
        super().__init__(queue, message_id)
        self.queue = queue
        self.message_id = message_id

    def _pickle_args(self) -> dict[str, Any]:
        return {"queue": self.queue, "message_id": self.message_id}

    def __str__(self) -> str:
        return (
            f"message {self.message_id} of {self.queue} was deleted before Spark read it"
            " (its lease had ended and another consumer took it, or it was purged); set"
            " failOnDataLoss=false to skip such messages"
        )


def read_planned(
    queue: str, messages: Iterable[Planned], *, fail_on_data_loss: bool = True
) -> Iterator[MessageRow]:
    """The rows of *messages*, bodies read here; in the planned order.

    :raises MessageGone: a message was deleted meanwhile (unless *fail_on_data_loss* is
        false: then it is skipped and logged).
    """
    planned = list(messages)
    bodies = read_bodies(queue, [receipt for _, receipt, *_ in planned])
    for (message_id, _, attributes, receive_count, sent_at, _), body in zip(
        planned, bodies, strict=True
    ):
        if body is None:
            if fail_on_data_loss:
                raise MessageGone(queue, message_id)
            log.warning("%s: message %s was deleted before Spark read it", queue, message_id)
            continue
        yield (
            message_id,
            body,
            attributes,
            receive_count,
            datetime.fromtimestamp(sent_at, tz=timezone.utc),
        )


def split(messages: list[Planned], parts: int) -> list[list[Planned]]:
    """*messages* cut into at most *parts* consecutive slices; the same cut every time."""
    if not messages:
        return []
    parts = max(1, min(parts, len(messages)))
    size = -(-len(messages) // parts)
    return [messages[i : i + size] for i in range(0, len(messages), size)]


Slice = tuple[str, list[Planned]]
"""What one Spark input partition reads: a directory (``""``, the queue's own, or a
partition's name, as :data:`Planned` names it) and messages planned in it, in order."""


def plan_slices(messages: list[Planned], parts: int, directories: Sequence[str]) -> list[Slice]:
    """*messages* cut into the input partitions of one read, the same cut every time.

    An unpartitioned queue (*directories* ``[""]``) gives at most *parts* consecutive
    slices, none empty. A partitioned queue gives each of its *directories* (partition
    names, in order) its own slices, so every task reads one directory: one slice each,
    or ``parts // len(directories)`` when *parts* asks for more, empty ones included
    (the count does not depend on where the messages are); messages of the queue's own
    directory (left there by a vsqs 0.3 producer) come last, in slices of their own.
    Each slice keeps the planned order, so a partition's FIFO order and each group's.
    """
    if list(directories) == [""]:
        return [("", part) for part in split(messages, parts)]
    by_dir: dict[str, list[Planned]] = {name: [] for name in directories}
    for message in messages:
        by_dir.setdefault(message[5], []).append(message)
    each = max(1, parts // max(1, len(directories)))
    slices: list[Slice] = []
    for name, planned in by_dir.items():
        if name in directories:
            slices.extend((name, part) for part in split(planned, each) or [[]])
        else:
            slices.extend((name, part) for part in split(planned, each))
    return slices


def partition_names(queue: AnyQueue) -> list[str]:
    """The directories of *queue* as :func:`plan_slices` takes them: ``[""]`` for an
    unpartitioned queue, else the names of its partition directories in order."""
    if not isinstance(queue, PartitionedQueue):
        return [""]
    return [where(part.path, queue.path) for part in queue.partition_queues]


ARROW_ROWS: Final = 1000
"""Rows per Arrow record batch an executor hands to Spark."""


def arrow_batches(rows: Iterable[MessageRow], size: int = ARROW_ROWS) -> Iterator[pa.RecordBatch]:
    """*rows* as ``pyarrow.RecordBatch`` objects of up to *size* rows, in :data:`SCHEMA`.

    Spark takes them without converting each row through Python tuples.
    """
    schema = pa.schema(
        [
            ("id", pa.string()),
            ("body", pa.binary()),
            ("attributes", pa.map_(pa.string(), pa.string())),
            ("receive_count", pa.int32()),
            ("sent_at", pa.timestamp("us", tz="UTC")),
        ]
    )
    chunk: list[MessageRow] = []
    for row in rows:
        chunk.append(row)
        if len(chunk) >= size:
            yield _record_batch(schema, chunk)
            chunk = []
    if chunk:
        yield _record_batch(schema, chunk)


def _record_batch(schema: Any, chunk: list[MessageRow]) -> Any:
    columns = list(zip(*chunk, strict=True))
    return pa.RecordBatch.from_arrays(
        [
            pa.array(columns[0], pa.string()),
            pa.array(columns[1], pa.binary()),
            pa.array([list(a.items()) for a in columns[2]], schema.field("attributes").type),
            pa.array(columns[3], pa.int32()),
            pa.array(columns[4], schema.field("sent_at").type),
        ],
        schema=schema,
    )
