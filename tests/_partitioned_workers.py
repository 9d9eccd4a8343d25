"""Child-process bodies for the partitioned-queue tests (top-level, so ``spawn`` can import them).

A consumer appends one line per message it finished (deleted) to its own record file
with a single ``write`` on an ``O_APPEND`` descriptor, so what it did before a SIGKILL is
on record; the parent reads the records, never shared memory.
"""

from __future__ import annotations

import json
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import vsqs

GROUPS = tuple(f"group-{g}" for g in range(5))


def body(producer: str, group: str, n: int) -> str:
    return f"{producer}:{group}:{n}"


def produce_groups(path: str, producer: str, per_group: int, options: dict[str, Any]) -> None:
    """Publish ``<producer>:<group>:<n>`` for n in range(per_group), the groups interleaved."""
    queue = vsqs.Queue(path, **options)
    for n in range(per_group):
        for group in GROUPS:
            queue.publish(body(producer, group, n).encode(), group=group)


@dataclass(frozen=True)
class Behaviour:
    """How a consumer treats each message."""

    hold_s: float = 0.0
    """Seconds between receiving a message and deleting it."""
    die_at: int = 0
    """If > 0, SIGKILL itself while it holds its *die_at*-th message."""


def consume_recording(
    path: str, record: str, stop: str, options: dict[str, Any], how: Behaviour
) -> None:
    """Say it is ready (``<record>.ready``), then receive, hold, delete, record, until
    *stop* exists.

    A record line is ``[body, message.group, receive_count, start_ns, end_ns]``: the hold
    as this process saw it, from just after ``receive`` returned to just before
    ``delete`` was called (inside the real hold, which begins at the claim's rename and
    ends at the delete's unlink).
    """
    queue = vsqs.Queue(path, **options)
    fd = os.open(record, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)  # APPEND: whole lines
    Path(f"{record}.ready").touch()
    done = 0
    while not os.path.exists(stop):
        message = queue.receive(timeout=0.05)
        if message is None:
            continue
        start = time.monotonic_ns()  # CLOCK_MONOTONIC: one clock for every process
        if how.hold_s:
            time.sleep(how.hold_s)
        if how.die_at and done + 1 == how.die_at:
            os.kill(os.getpid(), signal.SIGKILL)
        end = time.monotonic_ns()
        assert queue.delete(message), f"lost the lease of {message.body!r}"
        line = [message.body.decode(), message.group, message.receive_count, start, end]
        os.write(fd, (json.dumps(line) + "\n").encode())
        done += 1
    os.close(fd)
