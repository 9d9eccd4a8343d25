"""A partitioned queue's shape (how many partitions, ``fifo``): read, checked, stored when
a handle creates the queue, and the plain queues it is made of (:func:`build`)."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import NamedTuple

from .. import _fs, _stored
from .._capacity import Capacity
from .._dedup import Deduplicator
from .._options import FIFO_PARTITIONS, UNSET, HandleOptions, Unset, queue_path
from .._queue import MoveTarget
from .._queue import Queue as PlainQueue
from ._spread import partition_name


def shape_of(where: str, given: Mapping[str, object]) -> tuple[int, dict[str, object]]:
    """The partition count of the queue directory *where* opened with the shape options
    *given* (``partitions``, ``fifo``: only those given), and the shape to store there.

    A stored count is final; a ``fifo=True`` queue created without one gets
    :data:`~vsqs._options.FIFO_PARTITIONS`. One read of the stored settings.

    :raises ValueError: *given* contradicts the stored shape (naming both).
    """
    stored = _stored.load(where)
    adopt = _stored.shape(where, stored, given)
    if adopt.get("fifo") and "partitions" not in stored and "partitions" not in given:
        adopt["partitions"] = FIFO_PARTITIONS
    count = adopt.get("partitions", stored.get("partitions", 1))
    assert isinstance(count, int)  # checked by _stored.shape, or stored checked
    return count, adopt


def store_shape(where: str, adopt: dict[str, object], base: dict[str, object]) -> None:
    """Store the shape a handle creates the queue *where* with: refused if that would
    partition a queue that holds messages (their order, and their delays and leases,
    would be lost), then stored as a plain queue stores its shape."""
    with PlainQueue(where, **base) as probe:  # type: ignore[arg-type]
        if "partitions" in adopt:
            counts = probe.counts()
            if counts.total:
                raise ValueError(
                    f"queue {where!r} holds {counts.total} messages ({counts.ready} ready, "
                    f"{counts.held} received and not deleted, {counts.delayed} delayed) and "
                    f"is not partitioned: create a new queue with "
                    f"partitions={adopt['partitions']} and move them there "
                    "(``old.redrive(to=new)``; ``vsqs redrive OLD --to NEW``)"
                )
        _stored.adopt(probe.layout, probe.clock, adopt)


def open_target(
    where: str,
    given: MoveTarget | str | os.PathLike[str] | Unset | None,
    partitioned: Callable[..., MoveTarget],
    **options: object,
) -> MoveTarget | None:
    """The queue *given* (a queue object, or a path opened here by its stored shape:
    with *partitioned* if it has partitions); not given, the dead-letter queue stored by
    name beside *where* (``None``: none)."""
    if given is None or (given is not UNSET and not isinstance(given, (str, os.PathLike))):
        return given  # a queue object already
    if given is UNSET:
        name = _stored.load(where).get("dead_letter")
        if name is None:
            return None
        target = os.path.join(os.path.dirname(where), name)
    else:
        target = queue_path(given, "dead_letter")
    if shape_of(target, {})[0] > 1:
        return partitioned(target, **options)
    return PlainQueue(target, **options)  # type: ignore[arg-type]


class Built(NamedTuple):
    """The parts of a partitioned queue handle (see :func:`build`)."""

    root: PlainQueue
    parts: tuple[PlainQueue, ...]
    dead_letter: MoveTarget | None
    capacity: Capacity | None


def build(
    where: str,
    partitions: int | Unset,
    dead_letter: MoveTarget | str | os.PathLike[str] | Unset | None,
    options: HandleOptions,
    partitioned: Callable[..., MoveTarget],
) -> Built:
    """Open the partitioned queue *where*: check (and, creating it, store) its shape, open
    its dead-letter queue (with *partitioned* if that one has partitions), a plain queue
    on its directory and one on each partition, sharing one set of deduplication markers
    and one capacity bound (the whole queue's, counting every partition).

    :raises ValueError: the queue is not partitioned, holds messages and would be
        partitioned in place, or stores another shape.
    """
    given = {"partitions": partitions, "fifo": options.get("fifo", UNSET)}
    count, adopt = shape_of(where, {k: v for k, v in given.items() if v is not UNSET})
    if count <= 1:
        raise ValueError(
            f"queue {where!r} is not partitioned: open it with vsqs.Queue({where!r}), "
            "or create it with partitions=N"
        )
    keys = ("durable", "precision", "umask", "clock")
    base: dict[str, object] = {key: value for key, value in options.items() if key in keys}
    if adopt:
        store_shape(where, adopt, base)
    dlq = open_target(where, dead_letter, partitioned, **base)
    root = PlainQueue(where, dead_letter=dlq, **options)
    config = root.config
    shared = {**config.options(), "capacity": None, "dead_letter": dlq}
    if dlq is None:
        shared["max_receives"] = None
    parts = tuple(
        PlainQueue(os.path.join(where, partition_name(i)), **shared)  # type: ignore[arg-type]
        for i in range(count)
    )
    every = (*parts, root)
    dedup = Deduplicator(
        root.layout, root.clock, config.dedup_window,
        lambda name: any(_fs.exists(q.layout.message(name)) for q in every),
    )  # fmt: skip
    for queue in every:
        queue.use_deduplicator(dedup)
    capacity = None
    if config.capacity is not None:
        counted = tuple(part.path for part in parts)
        capacity = Capacity(root.layout, root.clock, config.capacity, counted)
    return Built(root, parts, dlq, capacity)
