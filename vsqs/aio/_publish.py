"""The publishing thread of an :class:`~vsqs.aio.AsyncQueue`: durable publishes, batched.

A durable publish syncs each body before it becomes visible, which may take
milliseconds and must not stall the event loop. Coroutines hand their bodies to one
thread per queue handle and await a future; the thread takes every job that waits
(up to :data:`MAX_BATCH` bodies) and publishes those with the same options in one
:meth:`Queue.publish_batch`: one filesystem sync for all of them, each message still
atomic. Results go back through ``call_soon_threadsafe``.

Errors: a batch checks every argument before it writes anything, so a bad argument
(``TypeError``/``ValueError``) is retried job by job and reaches only the coroutine
that gave it. A :class:`~vsqs.DurabilityError` (a prefix of the batch became visible,
then a flush or a commit failed) reaches each coroutine with its own ids only (a plain
``OSError`` where none of its messages became visible). Any other error (a shutdown in
the middle) reaches every coroutine of that batch, of which a prefix may have been
published: at least once, as a failed sync ``publish_batch``. A publish whose coroutine
was cancelled may still be published. Bounded queues are published one job at a time (each with
``timeout=0``; the coroutine awaits room itself).
"""

from __future__ import annotations

import asyncio
import queue as stdlib_queue
import threading
from dataclasses import dataclass
from typing import Final

from .. import AnyQueue, DurabilityError

MAX_BATCH: Final = 1000
"""The most bodies one sync covers."""


@dataclass
class _Job:
    bodies: list[bytes | bytearray | memoryview]
    keys: list[str | None] | None
    options: dict[str, object]
    future: asyncio.Future[list[str]]
    loop: asyncio.AbstractEventLoop

    def group_key(self) -> tuple[object, ...]:
        """Jobs with equal keys may share one ``publish_batch``."""
        attributes = self.options.get("attributes")
        shown: object = None
        if attributes is not None:
            try:
                shown = tuple(sorted(dict(attributes).items()))  # type: ignore[call-overload]
            except (TypeError, ValueError):
                shown = ("alone", id(self))  # not a plain mapping: the batch will say why
        return (self.options.get("delay"), shown, self.options.get("group"))

    def settle(self, result: list[str] | BaseException) -> None:
        try:
            self.loop.call_soon_threadsafe(_settle, self.future, result)
        except RuntimeError:
            pass  # the loop is closed: nobody awaits the result any more


def _settle(future: asyncio.Future[list[str]], result: list[str] | BaseException) -> None:
    if future.done():
        return  # cancelled meanwhile
    if isinstance(result, BaseException):
        future.set_exception(result)
    else:
        future.set_result(result)


def _settle_durability(group: list[_Job], error: DurabilityError) -> None:
    """A batch failed after a prefix of it became visible (``error.ids``, in batch
    order): each coroutine is told about its own messages only, as a
    :class:`~vsqs.DurabilityError` if some of them may be visible, else as the failure."""
    cause = error.__cause__ if isinstance(error.__cause__, OSError) else error
    offset = 0
    for job in group:
        mine = error.ids[offset : offset + len(job.bodies)]
        offset += len(job.bodies)
        if mine:
            own = DurabilityError(mine, error.errno or 0, error.strerror or "")
            own.__cause__ = error.__cause__
            job.settle(own)
        else:
            job.settle(cause)


class Publisher:
    """One thread publishing for one queue handle (started with the first job)."""

    def __init__(self, queue: AnyQueue) -> None:
        self._queue = queue
        self._jobs: stdlib_queue.SimpleQueue[_Job | None] = stdlib_queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._grouped = queue.config.capacity is None

    async def submit(
        self,
        bodies: list[bytes | bytearray | memoryview],
        keys: list[str | None] | None,
        options: dict[str, object],
    ) -> list[str]:
        """Publish through the thread; the ids once durable."""
        loop = asyncio.get_running_loop()
        job = _Job(bodies, keys, options, loop.create_future(), loop)
        self._jobs.put(job)
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._run, name=f"vsqs-aio-publisher {self._queue.path}", daemon=True
            )
            self._thread.start()
        return await job.future

    async def close(self) -> None:
        """Finish the jobs already handed over, then stop the thread."""
        thread, self._thread = self._thread, None
        if thread is not None:
            self._jobs.put(None)
            await asyncio.to_thread(thread.join)
        self._queue.close()

    def _run(self) -> None:
        stop = False
        while not stop:
            first = self._jobs.get()
            if first is None:
                return
            batch, size = [first], len(first.bodies)
            while size < MAX_BATCH:
                try:
                    job = self._jobs.get_nowait()
                except stdlib_queue.Empty:
                    break
                if job is None:
                    stop = True
                    break
                batch.append(job)
                size += len(job.bodies)
            for group in self._groups(batch):
                self._publish(group)

    def _groups(self, batch: list[_Job]) -> list[list[_Job]]:
        """Consecutive jobs with the same options (order kept); one each if bounded."""
        groups: list[list[_Job]] = []
        for job in batch:
            if groups and self._grouped and groups[-1][0].group_key() == job.group_key():
                groups[-1].append(job)
            else:
                groups.append([job])
        return groups

    def _publish(self, group: list[_Job]) -> None:
        bodies = [body for job in group for body in job.bodies]
        keys: list[str | None] | None = None
        if any(job.keys is not None for job in group):
            keys = [k for job in group for k in (job.keys or [None] * len(job.bodies))]
        try:
            ids = self._queue.publish_batch(
                bodies,
                dedup_ids=keys,
                timeout=0,
                **group[0].options,  # type: ignore[arg-type]  # delay, attributes, group
            )
        except (TypeError, ValueError) as exc:
            # Checked before anything was written: find whose argument it was.
            if len(group) > 1:
                for job in group:
                    self._publish([job])
            else:
                group[0].settle(exc)
            return
        except DurabilityError as exc:
            _settle_durability(group, exc)
            return
        except BaseException as exc:  # noqa: BLE001 - handed to the coroutines that wait
            for job in group:
                job.settle(exc)
            return
        offset = 0
        for job in group:
            job.settle(ids[offset : offset + len(job.bodies)])
            offset += len(job.bodies)
