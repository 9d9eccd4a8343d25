"""Which partition of a partitioned queue a message goes to, or is in: the publishing
side's routing (group, dedup id, the sticky run) and the lease side's lookup. The
decisions are :mod:`vsqs._sets._spread`'s; this holds what they need."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext

from .. import _fs
from .._capacity import Capacity
from .._errors import InvalidId
from .._message import Message
from .._meta import validate_group
from .._options import validate_seconds
from .._queue import Queue as PlainQueue
from .._waiters import Waiter
from ._homes import Homes
from ._spread import PerThread, group_partition


class Router:
    """Routes one handle's messages over its partitions *parts* (*root*: the queue
    directory's own queue); each thread keeps its own sticky run, started at a
    publisher home taken on its first publish without a group or key."""

    def __init__(
        self,
        parts: tuple[PlainQueue, ...],
        root: PlainQueue,
        homes: Homes,
        capacity: Capacity | None,
        waiter: Callable[[], Waiter],
    ) -> None:
        self.parts = parts
        self.root = root
        self.homes = homes
        self.capacity = capacity
        self.waiter = waiter
        self.by_path = {part.path: part for part in parts}
        self.threads = PerThread(len(parts))

    def reset(self) -> None:
        """Give up the publisher homes; every thread starts afresh (the handle closed)."""
        self.homes.release()
        self.threads = PerThread(len(self.parts))

    def room(self, need: int, timeout: float | None) -> AbstractContextManager[None]:
        """Room for *need* messages in the whole queue (its bound, counting every
        partition), held while they are published; nothing to hold in an unbounded one."""
        if timeout is not None:
            validate_seconds(timeout, "timeout")
        if self.capacity is None or not need:
            return nullcontext()
        return self.capacity.room(need, timeout, None if timeout == 0 else self.waiter())

    def partition_for(self, group: str | None, key: str | None) -> PlainQueue:
        """The partition of a message of *group*, else of dedup *key*, else the sticky one."""
        parts = self.parts
        if group is not None:
            return parts[group_partition(validate_group(group), len(parts))]
        if isinstance(key, str):  # anything else is refused by the publish itself
            return parts[group_partition(key, len(parts))]
        return self.sticky(1)

    def sticky(self, count: int) -> PlainQueue:
        """This thread's sticky partition for *count* messages (one publish, or a whole
        batch: the run counts each of its messages; see Spread.sticky_partition)."""
        spread = self.threads.spread
        if not spread.sticky_settled:  # once per thread: a publisher home to start from
            spread.settle_sticky(self.homes.take(spread.sticky))
        return self.parts[spread.sticky_partition(count)]

    def by_key(self, keys: list[str | None]) -> dict[int, list[int]]:
        """The indices of a batch's messages by the partition of each one's dedup key
        (in order within each partition)."""
        routed: dict[int, list[int]] = {}
        for index, key in enumerate(keys):
            part = self.partition_for(None, key)
            routed.setdefault(self.parts.index(part), []).append(index)
        return routed

    def owner(self, message: Message | str, path: str) -> PlainQueue:
        """The partition (or the queue directory *path*'s own queue) holding *message*.

        :raises InvalidId: the message belongs to another queue, or is not a message.
        """
        if isinstance(message, Message) and message.queue:  # else: found by its receipt
            part = self.by_path.get(message.queue)
            if part is None:
                if message.queue == path:
                    return self.root
                raise InvalidId(message.receipt, f"the message belongs to {message.queue!r}")
            return part
        name = message.receipt if isinstance(message, Message) else message
        if not isinstance(name, str) or "/" in name or "\0" in name:
            raise InvalidId(name, "expected a Message, a receipt or an id")
        for part in self.parts:  # a bare receipt: the partition that has that name
            if _fs.exists(part.layout.message(name)):
                return part
        return self.root
