"""The blocking receive of several directories read as one (a set, a partitioned queue)."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator

from .._clock import Clock
from .._errors import QueueDrained
from .._message import Message
from .._waiters import Waiter


def receive_until(
    claim: Callable[[], tuple[list[Message], bool]],
    waiter: Callable[[], Waiter],
    *,
    clock: Clock,
    timeout: float | None,
    next_look: Callable[[], float],
    drained: Callable[[], QueueDrained],
) -> list[Message]:
    """Call *claim* (one pass over every directory, no waiting: the messages, and whether
    the whole is drained) until it gives messages, waiting on *waiter* in between.

    The waiter's token is taken before each pass, so a message that arrives in any
    directory during a pass wakes the wait that follows it. Waits at most *timeout*
    seconds in all (``None``: forever, ``0``: not at all), and never past *next_look*
    (when a lease, delay or grace known to the handles ends, with no file event).

    :raises QueueDrained: *drained()*, once a pass says everything is drained.
    """
    deadline = None if timeout is None else clock.monotonic() + timeout
    watch = None if timeout == 0 else waiter()
    while True:
        token = watch.token() if watch is not None else 0
        got, done = claim()
        if got:
            return got
        if done:
            raise drained()
        remaining = math.inf if deadline is None else deadline - clock.monotonic()
        if watch is None or remaining <= 0:
            return []
        watch.wait(token, min(remaining, next_look()))


def consuming(
    receive: Callable[..., Message | None], visibility_timeout: float | None, timeout: float | None
) -> Iterator[Message]:
    """Yield what *receive* gives until it gives nothing for *timeout* seconds or raises
    :class:`QueueDrained` (a queue's ``consume()``)."""
    while True:
        try:
            message = receive(visibility_timeout=visibility_timeout, timeout=timeout)
        except QueueDrained:
            return
        if message is None:
            return
        yield message
