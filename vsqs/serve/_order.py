"""The order a FIFO queue's receive takes its partitions in: the messages' own, not the
serving thread's (so the same requests get the same answers on every run)."""

from __future__ import annotations

from .. import AnyQueue, Message, QueueDrained, partitions_of

__all__ = ["in_order"]


def in_order(queue: AnyQueue, count: int, visibility: int | None) -> list[Message]:
    """Up to *count* messages of a partitioned queue, not waiting: its partitions taken
    in the order of their oldest ready message (then by index; one with none ready
    once its ended leases are back), each a receive of its own (``fifo=True``: a group
    in order, one in flight).

    Not the queue's own receive, which starts at the serving thread's home partition:
    this order depends on the messages alone. Each partition's oldest is the one its
    handle knows of (``peek_oldest_key(known=True)``): a listing only for a partition
    whose view is used up (and that listing returns its ended leases), none per
    partition per receive, so the cost does not grow with the backlog.
    """
    parts = partitions_of(queue)
    oldest: list[tuple[int, int]] = []
    for index, part in enumerate(parts):
        # RACE: another server or consumer may have taken that message since this
        # handle listed it: that partition's receive then gives its next, or none, and
        # the partitions after it are tried.
        key = part.peek_oldest_key(known=True)
        if key is not None:
            oldest.append((key, index))
    got: list[Message] = []
    for _, index in sorted(oldest):
        try:
            got += parts[index].receive_batch(
                count - len(got), visibility_timeout=visibility, timeout=0
            )
        except QueueDrained:
            continue  # this partition is shut down and empty; the others may not be
        if len(got) == count:
            break
    return got
