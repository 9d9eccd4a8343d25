"""Opening a queue by its stored shape: :func:`Queue`, which returns a plain queue or a
partitioned one, and :func:`shape_of`, which decides which."""

from __future__ import annotations

import os

from .. import _fs, _stored
from .._clock import Clock
from .._ids import Precision
from .._options import UNSET, Unset, queue_path
from .._queue import MoveTarget
from .._queue import Queue as PlainQueue
from ._partitioned import PartitionedQueue
from ._shape import open_target, shape_of

__all__ = ["Queue", "partitions_of", "shape_of"]


def Queue(  # noqa: N802 - the constructor users know, with every option named
    path: str | os.PathLike[str],
    *,
    partitions: int | Unset = UNSET,
    fifo: bool | Unset = UNSET,
    visibility_timeout: float | Unset = UNSET,
    durable: bool = True,
    delay: float | Unset = UNSET,
    precision: str | Precision = Precision.US,
    capacity: int | Unset | None = UNSET,
    dead_letter: MoveTarget | str | os.PathLike[str] | Unset | None = UNSET,
    max_receives: int | Unset | None = UNSET,
    retention: float | Unset | None = UNSET,
    dedup_window: float | Unset = UNSET,
    wait: str = "auto",
    poll_interval: float | None = None,
    refresh_interval: float = 1.0,
    umask: int | None = None,
    clock: Clock | None = None,
) -> PlainQueue | PartitionedQueue:
    """Open (or create) the queue stored in the directory *path*: a
    :class:`~vsqs.PlainQueue` (one directory), or a :class:`~vsqs.PartitionedQueue`
    when the queue stores more than one partition or is created with ``partitions=N``
    (``N > 1``), or with ``fifo=True`` and no count (:data:`~vsqs._options.FIFO_PARTITIONS`).

    One read of the stored settings decides; everything else is the class's. Both
    classes satisfy :class:`~vsqs.QueueLike`, with the same guarantees: each message is
    published, claimed, extended and deleted atomically in one directory, and claimed
    by exactly one consumer. ``isinstance(q, vsqs.PartitionedQueue)`` tells them apart;
    ``isinstance(q, vsqs.QueueLike)`` accepts either (and a :class:`~vsqs.NullQueue`).

    :param partitions: *stored when the queue is created*: how many directories hold
        its messages (1 to 1,024). Fixed afterwards: a handle that gives another count
        is refused, naming both, and so is partitioning a plain queue that holds
        messages (the error says how to move them: ``old.redrive(to=new)``).
    :param fifo: *stored when the queue is created*: one message in flight per
        message group (SQS FIFO).

    Every other parameter is :class:`~vsqs.PlainQueue`'s, with the same meaning.

    :raises ValueError: a shape that contradicts the stored one, or any bad option.

    >>> import tempfile, vsqs
    >>> type(vsqs.Queue(tempfile.mkdtemp())).__name__
    'Queue'
    >>> type(vsqs.Queue(tempfile.mkdtemp(), partitions=4)).__name__
    'PartitionedQueue'
    """
    where = queue_path(path)
    given = {"partitions": partitions, "fifo": fifo}
    count, _ = shape_of(where, {k: v for k, v in given.items() if v is not UNSET})  # may raise
    options = {
        "visibility_timeout": visibility_timeout, "delay": delay, "capacity": capacity,
        "max_receives": max_receives, "retention": retention, "dedup_window": dedup_window,
    }  # fmt: skip
    stored_options = {key: value for key, value in options.items() if value is not UNSET}
    if count > 1:
        shape = {} if fifo is UNSET else {"fifo": fifo}
        return PartitionedQueue(
            where, partitions=partitions, dead_letter=dead_letter, durable=durable, **shape,
            precision=precision, wait=wait, poll_interval=poll_interval,
            refresh_interval=refresh_interval, umask=umask, clock=clock,
            **stored_options,  # type: ignore[arg-type]
        )  # fmt: skip
    return PlainQueue(
        where, fifo=fifo, durable=durable, precision=precision, wait=wait,
        dead_letter=_plain_dead_letter(where, dead_letter, durable, precision, umask, clock),
        poll_interval=poll_interval, refresh_interval=refresh_interval, umask=umask,
        clock=clock, **stored_options,  # type: ignore[arg-type]
    )  # fmt: skip


def partitions_of(queue: PlainQueue | PartitionedQueue) -> tuple[PlainQueue, ...]:
    """The plain queues that hold *queue*'s messages: a partitioned queue's partitions,
    in order, or the plain queue itself (for integrations that watch or read each
    directory: a Spark task, an event loop, a dashboard)."""
    if isinstance(queue, PartitionedQueue):
        return queue.partition_queues
    return (queue,)


def _plain_dead_letter(  # noqa: PLR0917 - the options it passes on, in order
    where: str,
    given: MoveTarget | str | os.PathLike[str] | Unset | None,
    durable: bool,
    precision: str | Precision,
    umask: int | None,
    clock: Clock | None,
) -> MoveTarget | str | os.PathLike[str] | Unset | None:
    """A plain queue's dead-letter queue as the plain class takes it: a partitioned one
    opened here (the plain class opens a plain one itself, from a path or its name)."""
    if given is None or (given is not UNSET and not isinstance(given, (str, os.PathLike))):
        return given
    name = _stored.load(where).get("dead_letter") if given is UNSET else os.fspath(given)
    target = None if not name else os.path.join(os.path.dirname(where), name)
    if target is None or not _fs.is_plain_dir(target) or shape_of(target, {})[0] <= 1:
        return given
    return open_target(
        where,
        given,
        PartitionedQueue,
        durable=durable,
        precision=precision,
        umask=umask,
        clock=clock,
    )
