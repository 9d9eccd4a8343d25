"""How many messages of a queue came back after a receive, and how often: the
dashboard's "redelivered" column and its receive-count histogram, read from what vsqs
records (:meth:`vsqs.Queue.history`), within a budget."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from .. import AnyQueue, VsqsError, partitions_of

REDELIVERED_BUDGET: Final = 1000
"""At most this many messages' metadata read per queue and count."""
_FAULTS: Final = (VsqsError, OSError, ValueError)


BUCKETS: Final = ("1", "2", "3", "4", "5+")
"""The receive-count histogram's buckets: receives before the current delivery."""


@dataclass(frozen=True, slots=True)
class Receives:
    """How many messages of a queue came back after a receive, and how often."""

    redelivered: int
    """Messages with a receive count of 1 or more."""
    capped: bool
    """Whether the count stopped at the budget (then it is a lower bound)."""
    histogram: tuple[int, ...]
    """Of those, how many have each receive count of :data:`BUCKETS`."""


def count_redelivered(queue: AnyQueue, budget: int = REDELIVERED_BUDGET) -> Receives:
    """How many messages of *queue* were received before without a delete, by receive
    count, reading at most *budget* messages' metadata.

    Only messages that have metadata (``meta/<id>`` under the queue's metadata
    directory: the on-disk format of ``docs/concepts``) can have a receive count, so
    only those are read, through :meth:`vsqs.Queue.history`: a queue of plain messages
    none of which came back costs one listing of that directory.
    """
    histogram = [0] * len(BUCKETS)
    examined = 0
    capped = False
    for part in partitions_of(queue):
        for message_id in part.layout.names("meta"):
            if message_id.startswith("."):
                continue  # a writer's temporary file
            if examined >= budget:
                capped = True
                break
            examined += 1
            try:
                count = part.history(message_id).receive_count
            except _FAULTS:
                continue  # RACE: deleted meanwhile (or a planted name): not a message of ours
            if count >= 1:
                histogram[min(count, len(BUCKETS)) - 1] += 1
    return Receives(sum(histogram), capped, tuple(histogram))
