"""The receiving side of a partitioned queue: where each thread of a handle claims next
(its home first, then the others), carried out over the partitions' plain queues. The
decisions are :class:`~vsqs._sets._spread.Spread`'s; this does the claims."""

from __future__ import annotations

from .._errors import QueueDrained
from .._message import Message
from .._queue import Queue as PlainQueue
from ._homes import Homes
from ._spread import PerThread, Spread


class Gatherer:
    """Claims from the partitions *parts* of one handle, home first (then *root*, the
    queue directory's own queue, for strays); each thread has its own :class:`Spread`.
    """

    def __init__(self, parts: tuple[PlainQueue, ...], root: PlainQueue, homes: Homes) -> None:
        self.parts = parts
        self.root = root
        self.homes = homes
        self.threads = PerThread(len(parts))

    def reset(self) -> None:
        """Forget every thread's place and give up the homes (the handle was closed)."""
        self.homes.release()
        self.threads = PerThread(len(self.parts))

    def spread(self) -> Spread:
        """This thread's :class:`Spread`, with a home looked for on its first receive
        (one non-blocking lock per partition tried, once)."""
        spread = self.threads.spread
        if not spread.settled:
            spread.settle(self.homes.take(spread.home))
        return spread

    def poll_one(self) -> tuple[Message | None, bool]:
        """``receive(timeout=0)``: one message, from the current partition unless this
        call looks elsewhere; and whether the whole queue is drained."""
        spread = self.spread()
        if spread.calls + 1 < spread.next_visit:  # not a visit: the current one first
            tried = spread.current
            try:
                message = self.parts[tried].receive(timeout=0)
            except QueueDrained:  # the others may not be: the full pass below decides
                message, tried = None, -1
            if message is not None:
                spread.calls += 1
                return message, False
            got, drained = self.gather(1, None, tried=tried)
        else:
            got, drained = self.gather(1, None)
        return (got[0] if got else None), drained

    def gather(
        self, limit: int, visibility_timeout: float | None, *, tried: int = -1
    ) -> tuple[list[Message], bool]:
        """One pass without waiting: the messages, and whether the whole queue is drained
        (*tried*: a partition the caller has just found empty, not looked at again)."""
        parts = self.parts
        spread = self.spread()
        order = spread.order()
        visit = spread.visit
        got: list[Message] = []
        drained = 0
        for index in order:
            if index == tried:
                continue
            if index not in (spread.current, visit):  # moving on: list afresh, not walk
                parts[index].refresh()
            if index == visit:
                claimed, done = self._look(index, limit - len(got), visibility_timeout)
                drained += done
            else:
                try:
                    claimed = parts[index].receive_batch(
                        limit - len(got), visibility_timeout=visibility_timeout, timeout=0
                    )
                except QueueDrained:
                    drained += 1
                    claimed = []
                if claimed and index != spread.current:  # the current one was empty: move
                    spread.move(index, parts[index].claim_misses)
            got += claimed
            if len(got) >= limit:
                return got, False
        if not got:  # strays in the queue directory itself (a vsqs 0.3 producer's)
            try:
                got = self.root.receive_batch(limit, visibility_timeout=visibility_timeout)
            except QueueDrained:
                return [], drained == len(parts)
        return got, False

    def _look(
        self, index: int, limit: int, visibility_timeout: float | None
    ) -> tuple[list[Message], bool]:
        """A look at partition *index* outside the current one (see Spread.visited): its
        claims, none once it loses a race there, and whether that partition is drained.
        A thread without a home looks for a free one first (its holder may have left)."""
        parts, spread = self.parts, self.threads.spread
        if not spread.homed:
            spread.settle(self.homes.take(index))
        part = parts[index]
        lost = part.claim_misses
        try:
            claimed = part.try_receive(limit, visibility_timeout=visibility_timeout)
        except QueueDrained:
            claimed, drained = [], True
        else:
            drained = False
        current = parts[spread.current].claim_misses
        spread.visited(
            index, claimed=bool(claimed), lost_race=part.claim_misses > lost, current_misses=current
        )
        spread.mark = parts[spread.current].claim_misses
        return claimed, drained

    def try_receive(self, limit: int, visibility_timeout: float | None) -> list[Message]:
        """Each partition looked at as by :meth:`PlainQueue.try_receive
        <vsqs.PlainQueue.try_receive>`, the current one first, until *limit* are claimed.

        :raises QueueDrained: the queue is shut down and every partition is empty.
        """
        got: list[Message] = []
        drained = 0
        current = self.spread().current
        count = len(self.parts)
        for index in (current, *(i for i in range(count) if i != current)):
            try:
                got += self.parts[index].try_receive(
                    limit - len(got), visibility_timeout=visibility_timeout
                )
            except QueueDrained:
                drained += 1
            if len(got) >= limit:
                return got
        if not got and drained == count:
            return self.root.try_receive(limit, visibility_timeout=visibility_timeout)
        return got
