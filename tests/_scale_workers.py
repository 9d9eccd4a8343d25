"""Child-process bodies for tests/test_partitions_scale.py (top-level, so ``spawn`` can
import them). Each child writes what it saw to its own file; the parent reads the files."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import vsqs


def take_home(path: str, record: str, go: str, stop: str, before: int) -> None:
    """Open *before* other handles first (as a program does that opened queues before:
    a start spread by process id and handle count is then anyone's), then receive once
    on an empty queue (which takes this consumer's home), say so (``<record>.ready``),
    wait for *go*, receive one message and record its directory; stay (holding the
    home) until *stop* exists."""
    for _ in range(before):
        vsqs.Queue(path, durable=False).close()
    queue = vsqs.Queue(path, durable=False)
    assert queue.receive(timeout=0) is None
    Path(f"{record}.ready").touch()
    while not os.path.exists(go):
        time.sleep(0.005)
    message = queue.receive(timeout=10)
    assert message is not None, "no message came"
    assert queue.delete(message)
    Path(record).write_text(message.queue)
    while not os.path.exists(stop):
        time.sleep(0.005)


def produce_batches(path: str, producer: str, count: int, size: int) -> None:
    """Publish ``<producer>:<n>`` for n in range(count), in batches of *size*."""
    queue = vsqs.Queue(path, durable=False)
    for start in range(0, count, size):
        queue.publish_batch(
            [f"{producer}:{n}".encode() for n in range(start, min(start + size, count))]
        )


def consume_to(path: str, record: str, stop: str) -> None:
    """Receive and delete until *stop* exists, appending ``[body, directory, id]`` per
    message to *record* (one ``write`` per line on an ``O_APPEND`` descriptor)."""
    queue = vsqs.Queue(path, durable=False)
    fd = os.open(record, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    Path(f"{record}.ready").touch()
    while not os.path.exists(stop):
        got = queue.receive_batch(10, timeout=0.05)
        lines = []
        for message in got:
            assert queue.delete(message), f"lost the lease of {message.body!r}"
            lines.append(json.dumps([message.body.decode(), message.queue, message.id]) + "\n")
        if lines:
            os.write(fd, "".join(lines).encode())
    os.close(fd)
