"""asyncio: :class:`AsyncQueue`, the same queue for coroutines.

An :class:`AsyncQueue` takes the options of :class:`~vsqs.Queue` and keeps its
semantics (the same files, the same atomic transitions, at least once, FIFO); each
operation is a coroutine. What differs is how it waits and where the slow parts run:

* **Waiting uses no thread.** A ``receive`` with nothing to take awaits a change of
  the directory: the loop's :class:`~vsqs.MultiWaiter`, on the process's one inotify
  descriptor, is registered with the event loop (``loop.add_reader``), so a thousand
  tasks awaiting ``receive`` cost one descriptor, not a thousand threads; each change
  wakes one task, which wakes the next if it took a message. Where events cannot be
  seen (network filesystems, ``wait="poll"``, inotify limits) it polls with
  ``asyncio.sleep``.
* **Durable publishes do not block the loop.** Their fsyncs run in one thread per
  queue, which publishes whatever accumulated meanwhile as one batch (one filesystem
  sync for all of them). Publishes with ``durable=False``, claims, deletes and
  visibility changes are a few renames or unlinks and run on the loop itself.
* **Leases** renew in the queue handle's one renewal thread, as in the sync API.

It runs under any asyncio loop, anyio's asyncio backend included. Timeouts are real
seconds of the event loop's clock (a :class:`~vsqs.testing.ManualClock` does not
drive them).

>>> import asyncio, tempfile
>>> from vsqs.aio import AsyncQueue
>>> async def main() -> bytes:
...     async with AsyncQueue(tempfile.mkdtemp()) as q:
...         await q.publish(b"hello")
...         message = await q.receive(timeout=1)
...         await q.delete(message)
...         return message.body
>>> asyncio.run(main())
b'hello'
"""

from __future__ import annotations

import asyncio
import math
import os
import weakref
from collections.abc import AsyncIterator, Iterable, Mapping
from types import TracebackType
from typing import TYPE_CHECKING

from .. import (
    AnyQueue,
    Lease,
    Message,
    Queue,
    QueueDrained,
    QueueFull,
    Stats,
    Waiters,
    partitions_of,
    reactor,
    validate_seconds,
)
from ._publish import Publisher

if TYPE_CHECKING:
    from typing_extensions import Self, Unpack

    from .. import QueueOptions

__all__ = ["AsyncLease", "AsyncQueue"]


class AsyncQueue:
    """A :class:`~vsqs.Queue` for coroutines; see the module docstring.

    :param path: the queue directory.
    :param options: the options of :class:`~vsqs.Queue` (stored settings apply as
        there).
    """

    def __init__(self, path: str | os.PathLike[str], **options: Unpack[QueueOptions]) -> None:
        self.queue = Queue(path, **options)
        """The sync handle this one drives (for anything not offered here)."""
        self.path = self.queue.path
        self._receivers = Waiters()
        self._room = Waiters(broadcast=True)
        self._watched = False
        self._polls = False  # the directory cannot be watched: found once, kept
        self._publisher: Publisher | None = None
        # Leases handed out, so that closing the handle releases those never entered.
        self._leases: weakref.WeakSet[Lease] = weakref.WeakSet()

    @classmethod
    def wrap(cls, queue: AnyQueue) -> AsyncQueue:
        """An async handle with *queue*'s options (a new handle on its directory)."""
        return cls(queue.path, **queue.config.options())

    def __repr__(self) -> str:
        return f"AsyncQueue({self.path!r})"

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Release this handle (as :meth:`Queue.close`): pending publishes finish first,
        the loop stops watching the directory for it. The queue on disk is untouched."""
        if self._publisher is not None:
            await self._publisher.close()
            self._publisher = None
        if self._watched:
            hub = reactor()
            for path in self._watched_paths():
                hub.detach(path, self._receivers, self._room)
            self._watched = False
        for lease in list(self._leases):
            lease.abandon()  # never entered (a loop left by a break): back at once
        self.queue.close()

    # -- waiting ---------------------------------------------------------------------

    def _watched_paths(self) -> tuple[str, ...]:
        """The directories a change of which may let a call go on: the queue's own and,
        partitioned, every partition's (a message may arrive, or room appear, in any)."""
        parts = partitions_of(self.queue)
        return (self.path, *(part.path for part in parts if part is not self.queue))

    def _watch(self) -> bool:
        """Make sure the loop watches the directories; ``False`` where it cannot (poll)."""
        if self._watched or self._polls:
            return self._watched
        # Where a directory cannot be watched (a network filesystem, wait="poll",
        # inotify's limits: said once in the log), the caller polls, from now on.
        hub, wait = reactor(), self.queue.config.wait
        attached: list[str] = []
        for path in self._watched_paths():
            if not hub.attach(path, wait, self._receivers, self._room):
                for done in attached:  # one partition unwatched: poll them all
                    hub.detach(done, self._receivers, self._room)
                self._polls = True
                return False
            attached.append(path)
        self._watched = True
        return True

    async def _wait(self, waiters: Waiters, pause: float) -> bool:
        """Wait for a change or *pause* seconds; under polling, at most one interval."""
        config = self.queue.config
        if not self._watch():
            interval = 0.05 if config.poll_interval is None else config.poll_interval
            await asyncio.sleep(min(pause, interval))
            return False
        # Under inotify, re-check at least every poll_interval (as the sync waiter does):
        # a lost or invisible event costs at most one interval.
        recheck = 1.0 if config.poll_interval is None else config.poll_interval
        return await waiters.wait(min(pause, recheck))

    # -- publishing ------------------------------------------------------------------

    async def publish(
        self,
        data: bytes | bytearray | memoryview,
        *,
        delay: float = 0.0,
        attributes: Mapping[str, str] | None = None,
        dedup_id: str | None = None,
        timeout: float | None = None,
        group: str | None = None,
    ) -> str:
        """:meth:`Queue.publish`, awaited: atomic, and durable (if the queue is) when it
        returns; a full bounded queue is awaited without a thread. A *group*'s messages
        keep their order (one partition of a partitioned queue; ``Message.group``)."""
        ids = await self.publish_batch(
            (data,),
            delay=delay,
            attributes=attributes,
            dedup_ids=None if dedup_id is None else (dedup_id,),
            timeout=timeout,
            group=group,
        )
        return ids[0]

    async def publish_batch(
        self,
        bodies: Iterable[bytes | bytearray | memoryview],
        *,
        delay: float = 0.0,
        attributes: Mapping[str, str] | None = None,
        dedup_ids: Iterable[str | None] | None = None,
        timeout: float | None = None,
        group: str | None = None,
    ) -> list[str]:
        """:meth:`Queue.publish_batch`, awaited. Each message is atomic; durable ones
        are synced in the publishing thread, with whatever other publishes of this
        handle are waiting, before the coroutine resumes. *group*: the message group of
        every message (see :meth:`Queue.publish`); the publishes of one coroutine (and
        of one group) keep their order.

        :raises QueueFull: a bounded queue stayed full for *timeout* seconds.
        """
        batch = list(bodies)
        keys = None if dedup_ids is None else list(dedup_ids)
        if keys is not None and len(keys) != len(batch):
            raise ValueError(f"{len(keys)} dedup_ids for {len(batch)} bodies")
        options: dict[str, object] = {"delay": delay, "attributes": attributes}
        if group is not None:
            options["group"] = group
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + validate_seconds(timeout, "timeout")
        while True:
            try:
                return await self._publish_now(batch, keys, options)
            except QueueFull:
                now = loop.time()
                if deadline is not None and now >= deadline:
                    raise
                pause = math.inf if deadline is None else deadline - now
                await self._wait(self._room, pause)  # a delete or requeue makes room

    async def _publish_now(
        self, bodies: list[bytes | bytearray | memoryview], keys: list[str | None] | None,
        options: dict[str, object],
    ) -> list[str]:  # fmt: skip
        """Publish without waiting for room (``timeout=0``): on the loop, or, durable,
        through the publishing thread."""
        queue = self.queue
        if not queue.durable:
            return queue.publish_batch(bodies, dedup_ids=keys, timeout=0, **options)  # type: ignore[arg-type]
        if self._publisher is None:
            self._publisher = Publisher(Queue(self.path, **queue.config.options()))
        return await self._publisher.submit(bodies, keys, options)

    # -- receiving -------------------------------------------------------------------

    async def receive(
        self, *, visibility_timeout: float | None = None, timeout: float | None = None
    ) -> Message | None:
        """:meth:`Queue.receive`, awaited: claim the oldest ready message, awaiting one
        up to *timeout* seconds (``None``: forever) without a thread.

        :raises QueueDrained: the queue is shut down and empty.
        """
        got = await self.receive_batch(1, visibility_timeout=visibility_timeout, timeout=timeout)
        return got[0] if got else None

    async def receive_batch(
        self,
        max_messages: int,
        *,
        visibility_timeout: float | None = None,
        timeout: float | None = 0,
    ) -> list[Message]:
        """:meth:`Queue.receive_batch`, awaited: each message claimed atomically (one
        rename, on the loop), exactly one consumer per message.

        :raises QueueDrained: the queue is shut down and empty.
        """
        queue = self.queue
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + validate_seconds(timeout, "timeout")
        clock_deadline = None if timeout is None else queue.clock.monotonic() + timeout
        while True:
            if timeout != 0:
                self._watch()  # before looking, so that no change is missed
            try:
                got = queue.receive_batch(
                    max_messages, visibility_timeout=visibility_timeout, timeout=0
                )
            except QueueDrained:
                self._receivers.wake_one()  # the next waiter sees it too
                raise
            if got:
                self._receivers.wake_one()  # there may be more: pass the baton
                return got
            if deadline is not None and loop.time() >= deadline:
                return []
            await self._wait(self._receivers, queue.next_look(clock_deadline))

    async def consume(
        self, *, visibility_timeout: float | None = None, timeout: float | None = None
    ) -> AsyncIterator[Message]:
        """Yield messages as they come (``async for``); stop when the queue is shut down
        and drained, or after *timeout* seconds without one. The caller deletes each."""
        while True:
            try:
                message = await self.receive(visibility_timeout=visibility_timeout, timeout=timeout)
            except QueueDrained:
                return
            if message is None:
                return
            yield message

    # -- ending a lease ----------------------------------------------------------------

    async def delete(self, message: Message | str) -> bool:
        """:meth:`Queue.delete` (one unlink, on the loop); ``False`` if already gone."""
        deleted = self.queue.delete(message)
        self._room.notify()  # a publisher of this handle waiting for room may go on
        return deleted

    async def change_visibility(self, message: Message | str, seconds: float) -> Message:
        """:meth:`Queue.change_visibility` (one rename, on the loop).

        :raises LeaseLost: the lease has ended.
        """
        return self.queue.change_visibility(message, seconds)

    def lease(
        self,
        message: Message,
        *,
        max_duration: float = 3600.0,
        visibility_timeout: float | None = None,
    ) -> AsyncLease:
        """:meth:`Queue.lease` as an async context manager: renewed by the handle's
        renewal thread while the block runs (not before: *max_duration* counts from
        entering it), and released if its event loop closes meanwhile; deleted when it
        ends normally, released when it raises; :class:`~vsqs.LeaseLost` if it was
        lost."""
        lease = self.queue.lease(
            message, max_duration=max_duration, visibility_timeout=visibility_timeout
        )
        lease.defer()
        self._leases.add(lease)
        return AsyncLease(lease)

    async def consume_leases(
        self,
        *,
        visibility_timeout: float | None = None,
        timeout: float | None = None,
        max_duration: float = 3600.0,
    ) -> AsyncIterator[AsyncLease]:
        """Yield a self-renewing :class:`AsyncLease` per message (``async for``), as
        :meth:`Queue.consume_leases`: renewed only inside its block; one left unentered
        when the loop ends (a ``break``) is released."""
        async for message in self.consume(visibility_timeout=visibility_timeout, timeout=timeout):
            lease = self.lease(
                message, max_duration=max_duration, visibility_timeout=visibility_timeout
            )
            try:
                yield lease
            except GeneratorExit:  # the loop ended (aclose, or the loop's shutdown)
                lease.lease.abandon()
                raise

    async def stats(self) -> Stats:
        """:meth:`Queue.stats`: the counters of every process (this handle's flushed
        first) and the counts, off the loop (a thread: one listing, whatever the depth)."""
        return await asyncio.to_thread(self.queue.stats)

    async def shutdown(self) -> None:
        """:meth:`Queue.shutdown`, its durable write off the loop (a thread)."""
        await asyncio.to_thread(self.queue.shutdown)


class AsyncLease:
    """A :class:`~vsqs.Lease` for ``async with`` (see :meth:`AsyncQueue.lease`)."""

    def __init__(self, lease: Lease) -> None:
        self.lease = lease

    @property
    def message(self) -> Message:
        """The message with its newest receipt."""
        return self.lease.message

    async def __aenter__(self) -> AsyncLease:
        # Renewed while this loop runs: once it is closed nobody can leave the block.
        self.lease.tie(asyncio.get_running_loop().is_closed)
        self.lease.__enter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.lease.__exit__(exc_type, exc, traceback)

    async def delete(self) -> None:
        """End the lease by deleting the message (:meth:`Lease.delete`)."""
        self.lease.delete()

    async def release(self, delay: float = 0.0) -> None:
        """End the lease by releasing the message (:meth:`Lease.release`)."""
        self.lease.release(delay)
