"""The receiving side of a partitioned queue: where each thread of a handle claims next
(its home first, then the others), carried out over the partitions' plain queues. The
decisions are :class:`~vsqs._sets._spread.Spread`'s; this does the claims."""

from __future__ import annotations

import threading

from .._errors import QueueDrained
from .._message import Message
from .._options import batch_size, validate_seconds
from .._queue import Queue as PlainQueue
from .._waiters import RECHECK, MultiWaiter
from ._homes import Homes
from ._spread import PerThread, Spread
from ._wait import receive_until


class Gatherer:
    """Claims from the partitions *parts* of one handle, home first (then *root*, the
    queue directory's own queue, for strays); each thread has its own :class:`Spread`.
    """

    def __init__(self, parts: tuple[PlainQueue, ...], root: PlainQueue, homes: Homes) -> None:
        self.parts = parts
        self.root = root
        self.homes = homes
        self.threads = PerThread(len(parts))
        self._waiter: MultiWaiter | None = None
        self._lock = threading.Lock()  # guards _waiter, made on first use

    def reset(self) -> None:
        """Forget every thread's place, give up the homes and drop the waiter (the
        handle was closed; it may be used again)."""
        self.homes.release()
        self.threads = PerThread(len(self.parts))
        with self._lock:
            waiter, self._waiter = self._waiter, None
        if waiter is not None:
            waiter.close()

    def waiter(self) -> MultiWaiter:
        """What a blocked receive waits on: every partition's directory and the queue's
        own (made on first use, once, whatever the threads)."""
        waiter = self._waiter
        if waiter is None:
            with self._lock:
                waiter = self._waiter
                if waiter is None:
                    config = self.root.config
                    waiter = MultiWaiter(
                        poll_interval=config.poll_interval or RECHECK,
                        recheck=min(RECHECK, config.poll_interval or RECHECK),
                        clock=self.root.clock,
                    )
                    for queue in (self.root, *self.parts):
                        waiter.add(queue.path, wait=config.wait)
                    self._waiter = waiter
        return waiter

    def next_look(self, deadline: float | None = None) -> float:
        """Seconds until a lease or delay this handle knows of ends in any directory."""
        return min(part.next_look(deadline) for part in (self.root, *self.parts))

    def claim_misses(self) -> int:
        """Claims lost to another consumer, in every directory."""
        return sum(part.claim_misses for part in (self.root, *self.parts))

    def receive_batch(
        self, limit: int, visibility_timeout: float | None, timeout: float | None
    ) -> list[Message]:
        """Claim up to *limit*, waiting up to *timeout* on every directory while none is
        there (checked arguments).

        :raises QueueDrained: the queue is shut down and every partition is empty.
        """
        batch_size(limit)
        if visibility_timeout is not None:
            validate_seconds(visibility_timeout, "visibility_timeout")
        root = self.root
        return receive_until(
            lambda: self.gather(limit, visibility_timeout),
            self.waiter,
            clock=root.clock,
            timeout=None if timeout is None else validate_seconds(timeout, "timeout"),
            next_look=self.next_look,
            drained=lambda: QueueDrained(root.path),
        )

    def spread(self) -> Spread:
        """This thread's :class:`Spread`, with a home looked for on its first receive
        (one non-blocking lock per partition tried, once)."""
        spread = self.threads.spread
        if not spread.settled:
            spread.settle(self.homes.take(spread.home))
        return spread

    def poll_one(self) -> Message | None:
        """``receive(timeout=0)``: one message, from the current partition unless this
        call looks elsewhere, or ``None``.

        The hot path of a polling consumer: one thread-local lookup and one plain
        queue's receive per message, nothing allocated here.

        :raises QueueDrained: the queue is shut down and every partition is empty.
        """
        spread = self.threads.spread
        # Not a visit (and a home looked for already): the current partition first.
        if spread.settled and spread.calls + 1 < spread.next_visit:
            tried = spread.current
            try:
                message = self.parts[tried].receive(timeout=0)
            except QueueDrained:  # the others may not be: the full pass below decides
                tried = -1
            else:
                if message is not None:
                    spread.calls += 1
                    return message
            got, drained = self._pass(spread, 1, None, tried)
        else:
            got, drained = self._pass(self.spread(), 1, None, -1)
        if got:
            return got[0]
        if drained:
            raise QueueDrained(self.root.path)
        return None

    def gather(
        self, limit: int, visibility_timeout: float | None, *, tried: int = -1
    ) -> tuple[list[Message], bool]:
        """One pass without waiting: the messages, and whether the whole queue is drained
        (*tried*: a partition the caller has just found empty, not looked at again)."""
        return self._pass(self.spread(), limit, visibility_timeout, tried)

    def _pass(
        self, spread: Spread, limit: int, visibility_timeout: float | None, tried: int
    ) -> tuple[list[Message], bool]:
        """:meth:`gather` for this thread's *spread* (its home looked for already)."""
        parts = self.parts
        order = spread.order()
        visit = spread.visit
        got: list[Message] = []
        drained = 0
        for index in order:
            if index == tried:
                continue
            if index == visit:
                claimed, done = self._look(spread, index, limit - len(got), visibility_timeout)
                drained += done
            else:
                part = parts[index]
                try:
                    if index == spread.current:
                        claimed = part.receive_batch(
                            limit - len(got), visibility_timeout=visibility_timeout, timeout=0
                        )
                    else:
                        claimed = self._arrive(part, limit - len(got), visibility_timeout)
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

    @staticmethod
    def _arrive(part: PlainQueue, limit: int, visibility_timeout: float | None) -> list[Message]:
        """Claims in *part*, a partition other than the current one (which was empty):
        from this handle's view of it first, giving up at the first lost race, as a look
        does; only after one, listed afresh and claimed from as by a receive.

        The view may be old: other consumers may have taken many of its names since, and
        walking past those would cost a failed rename each; one lost race shows that, and
        a listing then costs less. Where none was lost (nobody else claims there, the
        common case of one consumer moving on from its empty home), the partition is not
        listed again (about a microsecond per name, some 5% of what claiming them costs).

        :raises QueueDrained: *part* is shut down and empty.
        """
        lost = part.claim_misses
        claimed = part.try_receive(limit, visibility_timeout=visibility_timeout)
        if len(claimed) < limit and part.claim_misses > lost:
            part.refresh()
            try:
                claimed += part.receive_batch(
                    limit - len(claimed), visibility_timeout=visibility_timeout, timeout=0
                )
            except QueueDrained:
                if not claimed:
                    raise
        return claimed

    def _look(
        self, spread: Spread, index: int, limit: int, visibility_timeout: float | None
    ) -> tuple[list[Message], bool]:
        """A look at partition *index* outside the current one (see Spread.visited): its
        claims, none once it loses a race there, and whether that partition is drained.
        A thread without a home looks for a free one first (its holder may have left)."""
        parts = self.parts
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
        after, current = part.claim_misses, parts[spread.current].claim_misses
        spread.visited(index, claimed=bool(claimed), lost_race=after > lost, current_misses=current)
        # The current partition's lost races now: visited() keeps it, or moves to *index*.
        spread.mark = after if spread.current == index else current
        return claimed, drained

    def try_receive(self, limit: int, visibility_timeout: float | None) -> list[Message]:
        """Each partition looked at as by :meth:`PlainQueue.try_receive
        <vsqs.PlainQueue.try_receive>`, the current one first, until *limit* are claimed.

        :raises QueueDrained: the queue is shut down and every partition is empty.
        """
        batch_size(limit)
        if visibility_timeout is not None:
            validate_seconds(visibility_timeout, "visibility_timeout")
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
        if not got:  # strays in the queue directory itself (a vsqs 0.3 producer's)
            try:
                return self.root.try_receive(limit, visibility_timeout=visibility_timeout)
            except QueueDrained:
                if drained == count:
                    raise
        return got
