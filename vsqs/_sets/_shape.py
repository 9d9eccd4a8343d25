"""A queue directory's shape (how many partitions, ``fifo``): read, checked and stored
when a handle creates the queue."""

from __future__ import annotations

from collections.abc import Mapping

from .. import _stored
from .._options import FIFO_PARTITIONS
from .._queue import Queue as PlainQueue


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
