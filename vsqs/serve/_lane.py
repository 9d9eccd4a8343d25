"""Durable sends to a queue on a disk, written one round at a time: a send lane per queue.

Pool threads that send to the same durable queue with the same options (delay, group,
attributes: what one :meth:`~vsqs.Queue.publish_batch` can carry) never write into its
directory at once: on a disk filesystem concurrent creates and renames in one
directory cost more kernel time than they save (measured, docs/benchmarks.rst), and
each concurrent batch would pay for its own flushes. The first send to find its lane
idle *leads a round*: it publishes the messages of every send waiting in the lane, its
own among them, with one ``publish_batch`` (so one flush of the bodies and one of the
directory for all of them). Sends that arrive meanwhile wait for the round to end; the
first of them to wake leads the next, for all that wait then. A lane has no thread of
its own: it is the sends waiting in it, and is forgotten when none is, so a shutdown
has nothing to stop (the server's pool drains its requests as always).

Guarantees: each send is answered as if it had been its own ``publish_batch``:

* it returns only after a flush that started after its messages were written (its
  round's, which covers every message of the round);
* a round keeps the order in which its sends joined the lane, and each send its own
  order: a FIFO group's messages keep theirs (the group is one of the lane's options);
* a failure reaches every send it touched and only says what is true of each: a flush
  that failed after messages became visible is, for a send with messages among them,
  a :class:`~vsqs.DurabilityError` naming those (its own) and, for a send none of whose
  messages became visible, the ``OSError`` itself (nothing of it was published); a
  refusal that a smaller batch might pass (:class:`~vsqs.QueueFull`, or a round larger
  than a bounded queue's capacity) sends each member again on its own; any other
  failure (a full disk, a shutdown) publishes nothing of the round and is raised, a copy
  each, in every member.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Hashable, Mapping
from typing import Final

from .. import AnyQueue, DurabilityError, QueueFull

__all__ = ["MAX_ROUND", "Lanes", "Send"]

ROUNDS_AT_ONCE: Final = 1
"""Rounds of one lane published at once (2 was measured too: no better, see the report)."""
MAX_ROUND: Final = 128
"""The most messages a round takes (more sends wait for the next): bounds what one
failure covers and how long a round's first send waits for its answer."""


class Send:
    """One send's messages and their options, waiting in a lane, then answered."""

    __slots__ = (
        "attributes", "bodies", "dedup_ids", "delay", "done", "error", "group", "ids", "queue",
    )  # fmt: skip

    def __init__(
        self,
        queue: AnyQueue,
        bodies: list[bytes],
        *,
        delay: float = 0.0,
        attributes: Mapping[str, str] | None = None,
        dedup_ids: list[str | None] | None = None,
        group: str | None = None,
    ) -> None:
        self.queue = queue
        self.bodies = bodies
        self.delay = delay
        self.attributes = attributes
        self.dedup_ids = dedup_ids
        self.group = group
        self.done = False
        self.ids: list[str] = []
        self.error: BaseException | None = None

    def publish(self, sends: list[Send]) -> list[str]:
        """Publish the bodies of *sends* (this one's options, this one's queue) with one
        ``publish_batch``; their ids, in order."""
        dedup_ids = (
            None if self.dedup_ids is None else [key for s in sends for key in s.dedup_ids or ()]
        )
        return self.queue.publish_batch(
            [body for send in sends for body in send.bodies],
            delay=self.delay,
            attributes=self.attributes,
            dedup_ids=dedup_ids,
            timeout=0,
            **({"group": self.group} if self.group is not None else {}),
        )


class _Lane:
    """The sends waiting in one lane, and whether a round of it runs."""

    __slots__ = ("changed", "running", "waiting")

    def __init__(self, lock: threading.Lock) -> None:
        self.changed = threading.Condition(lock)
        self.running = 0  # rounds
        self.waiting: list[Send] = []


class Lanes:
    """The send lanes of one server, by queue and options (see the module's docstring).
    Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # every lane's condition uses it
        self._lanes: dict[Hashable, _Lane] = {}

    def publish(self, key: Hashable, send: Send) -> list[str]:
        """Publish *send* in the lane *key* (sends that share it must share their queue's
        path and their options); its ids, or its failure raised (see the module's
        docstring). Waits for the round running in the lane, if any, then for its own
        (which this thread may lead)."""
        with self._lock:
            lane = self._lanes.get(key)
            if lane is None:
                lane = self._lanes[key] = _Lane(self._lock)
            lane.waiting.append(send)
            while not send.done:
                if lane.running >= ROUNDS_AT_ONCE or not lane.waiting:
                    # Bounded by the rounds that run: their publish never waits for room.
                    lane.changed.wait()
                    continue
                lane.running, round_ = lane.running + 1, _take(lane.waiting)
                self._lock.release()
                try:
                    _run(round_)
                finally:
                    self._lock.acquire()
                    lane.running -= 1
                    lane.changed.notify_all()
            if not lane.waiting and not lane.running and self._lanes.get(key) is lane:
                del self._lanes[key]  # nothing waits: the next send makes it again
        if send.error is not None:
            raise send.error
        return send.ids

    def __len__(self) -> int:
        """Lanes in use (with sends waiting or a round running)."""
        with self._lock:
            return len(self._lanes)

    def waiting(self) -> int:
        """Sends waiting in every lane, not yet in a round."""
        with self._lock:
            return sum(len(lane.waiting) for lane in self._lanes.values())


def _take(waiting: list[Send]) -> list[Send]:
    """The first sends of *waiting* (removed from it) that fit in a round: at least one,
    at most :data:`MAX_ROUND` messages."""
    count, total = 0, 0
    for send in waiting:
        if count and total + len(send.bodies) > MAX_ROUND:
            break
        count, total = count + 1, total + len(send.bodies)
    taken = waiting[:count]
    del waiting[:count]
    return taken


def _run(round_: list[Send]) -> None:
    """Publish a round: each run of sends through one handle with one ``publish_batch``;
    every send of it answered (``done``), whatever happens."""
    try:
        start = 0
        while start < len(round_):
            end = start + 1
            while end < len(round_) and round_[end].queue is round_[start].queue:
                end += 1
            _publish(round_[start:end])
            start = end
    except BaseException as exc:  # an interruption (Ctrl-C in a test's server): never silent
        for send in round_:
            if not send.done:
                send.error = copy.copy(exc) if isinstance(exc, Exception) else _interrupted()
                send.done = True
        raise


def _publish(sends: list[Send]) -> None:
    """Publish *sends* together; answer each (``ids`` or ``error``, and ``done``)."""
    try:
        ids = sends[0].publish(sends)
    except (QueueFull, ValueError) as exc:
        if len(sends) == 1:
            _fail(sends, exc)
            return
        for send in sends:  # nothing was published: each, as it would have been alone
            _publish([send])
        return
    except DurabilityError as exc:
        visible = list(exc.ids)  # the first messages of the round; the rest unpublished
        for send in sends:
            mine, visible = visible[: len(send.bodies)], visible[len(send.bodies) :]
            send.error = (
                DurabilityError(mine, exc.errno or 0, exc.strerror or "")
                if mine
                else OSError(exc.errno or 0, exc.strerror or str(exc))
            )
            send.done = True
        return
    except Exception as exc:  # noqa: BLE001 - each member raises it (nothing was published)
        _fail(sends, exc)
        return
    for send in sends:
        send.ids, ids = ids[: len(send.bodies)], ids[len(send.bodies) :]
        send.done = True


def _fail(sends: list[Send], exc: Exception) -> None:
    for send in sends:
        send.error = exc if len(sends) == 1 else copy.copy(exc)
        send.done = True


def _interrupted() -> RuntimeError:
    return RuntimeError("the send was interrupted in its lane (its server is stopping)")
