"""Code the tests run in child processes.

Every function is top-level so that the ``spawn`` start method can import it. A child
reports failure through its exit status (an uncaught exception exits with 1) and its
findings through a small JSON file that the test reads after joining it.
"""

from __future__ import annotations

import json
import os
from typing import Any

import vsqs
from vsqs._ids import parse_name

from .users import run_as


def dump(path: str, data: object) -> None:
    """Write *data* as JSON, atomically (the reader never sees half a report)."""
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump(data, handle)
    os.replace(tmp, path)


def load(path: str) -> Any:
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def produce(path: str, producer: str, count: int, options: dict[str, Any]) -> None:
    """Publish ``<producer>:<n>`` for n in range(count); blocks on a full bounded queue."""
    queue = vsqs.PlainQueue(path, **options)
    for n in range(count):
        queue.publish(f"{producer}:{n}".encode())


def produce_sized(path: str, sizes: list[int]) -> None:
    """Publish one message of each size; leave the counters to the exit handlers."""
    queue = vsqs.PlainQueue(path, durable=False)
    for size in sizes:
        queue.publish(b"x" * size)


def consume_all(path: str, report: str, options: dict[str, Any]) -> None:
    """Receive and delete until the queue is shut down and drained; report bodies and counts."""
    queue = vsqs.PlainQueue(path, **options)
    seen = []
    for message in queue.consume():
        seen.append([message.body.decode(), message.receive_count])
        assert queue.delete(message), f"lost the lease of {message.receipt}"
    dump(report, seen)


def receive_one(path: str, report: str, options: dict[str, Any], timeout: float | None) -> None:
    """One blocking receive; report the message, ``None``, or that the queue drained."""
    queue = vsqs.PlainQueue(path, **options)
    try:
        message = queue.receive(timeout=timeout)
    except vsqs.QueueDrained:
        dump(report, "drained")
        return
    if message is None:
        dump(report, None)
        return
    dump(report, {"body": message.body.decode(), "receive_count": message.receive_count})
    queue.delete(message)


def consume_to_end(path: str, report: str, options: dict[str, Any]) -> None:
    """Iterate ``consume()`` until it stops by itself; report what it yielded."""
    queue = vsqs.PlainQueue(path, **options)
    bodies = []
    for message in queue.consume():
        bodies.append(message.body.decode())
        queue.delete(message)
    dump(report, {"ended": True, "bodies": bodies})


def receive_and_delete(path: str, count: int) -> None:
    """Receive and delete *count* messages, waiting as long as needed for each."""
    queue = vsqs.PlainQueue(path, durable=False)
    for _ in range(count):
        message = queue.receive(timeout=None)
        assert message is not None
        assert queue.delete(message)


def watch(path: str, stop: str, report: str) -> None:
    """List the queue directory until *stop* exists; report the most messages ever seen.

    A message is counted once per id whatever its state (ready, held or being written),
    so a rename seen under both names in one pass is not counted twice. A directory
    this small is read in one ``getdents`` call, which the kernel serialises with the
    renames and unlinks in it, so every listing is a true snapshot.
    """
    most = 0
    listings = 0
    while not os.path.exists(stop):
        ids = {entry.id for entry in map(parse_name, os.listdir(path)) if entry is not None}
        most = max(most, len(ids))
        listings += 1
    dump(report, {"most": most, "listings": listings})


def publish_when_closed(path: str, report: str) -> None:
    """Try to publish to a queue closed by another process; report what happened."""
    queue = vsqs.PlainQueue(path, durable=False)
    closed = queue.is_shutdown
    try:
        queue.publish(b"too late")
    except vsqs.QueueClosed as exc:
        dump(report, {"closed": closed, "error": type(exc).__name__, "path": exc.path})
        return
    dump(report, {"closed": closed, "error": None})


def close_queue(path: str, report: str) -> None:
    """Shut a queue down; report the error type if that raised."""
    queue = vsqs.PlainQueue(path, durable=False)
    try:
        queue.shutdown()
    except vsqs.QueueClosed as exc:
        dump(report, type(exc).__name__)
        return
    dump(report, None)


def release_later(path: str, ready: Any, go: Any) -> None:
    """Receive a message with a long lease, signal *ready*, wait for *go*, then release it."""
    queue = vsqs.PlainQueue(path, durable=False, visibility_timeout=3600)
    message = queue.receive(timeout=0)
    assert message is not None
    ready.set()
    assert go.wait(60)
    queue.change_visibility(message, 0)


def _outcome(call: Any) -> dict[str, Any]:
    try:
        call()
    except Exception as exc:  # noqa: BLE001 - the report names whatever was raised
        return {
            "type": type(exc).__name__,
            "vsqs": isinstance(exc, vsqs.VsqsError),
            "errno": getattr(exc, "errno", None),
            "filename": getattr(exc, "filename", None),
            "text": str(exc),
        }
    return {"type": None}


def permission_probe(locked: str, report: str) -> None:
    """As user ``nobody``, use queues in a directory owned by root; report each error.

    Root bypasses permission checks, so a test running as root needs a child that gives
    up its privileges to see a real ``EACCES``.
    """

    def probe() -> None:
        existing = vsqs.PlainQueue(f"{locked}/q", durable=False)
        dump(
            report,
            {
                "create": _outcome(lambda: vsqs.PlainQueue(f"{locked}/new-queue")),
                "publish": _outcome(lambda: existing.publish(b"x")),
                "receive": _outcome(lambda: existing.receive(timeout=0)),
                "delete": _outcome(lambda: existing.delete("1700000000000000")),
            },
        )

    run_as(65534, 65534, probe)


def bounded_produce(path: str, producer: str, count: int, capacity: int) -> None:
    """Publish *count* messages to a bounded queue, blocking while it is full."""
    produce(path, producer, count, {"durable": False, "capacity": capacity})


def bounded_publish_one(path: str, report: str) -> None:
    """Block on a full capacity-1 queue (re-check an hour away) until room appears."""
    queue = vsqs.PlainQueue(path, durable=False, capacity=1, wait="inotify", poll_interval=3600)
    dump(report, queue.publish(b"waited", timeout=None))


def report_closed(path: str, report: str) -> None:
    dump(report, vsqs.PlainQueue(path, durable=False).is_shutdown)


def consume_some(path: str, count: int, report: str) -> None:
    """Receive and delete *count* messages; report their total size."""
    queue = vsqs.PlainQueue(path, durable=False)
    total = 0
    for _ in range(count):
        message = queue.receive(timeout=60)
        assert message is not None
        total += len(message.body)
        assert queue.delete(message)
    dump(report, total)


def publish_with(queue: vsqs.PlainQueue, count: int) -> None:
    """Publish through a Queue object inherited from the parent (fork only)."""
    for _ in range(count):
        queue.publish(b"child")


def consume_in_order(path: str, report: str) -> None:
    """Receive and delete until the queue is empty; report the bodies as ints, in order."""
    queue = vsqs.PlainQueue(path, durable=False)
    got = []
    while (message := queue.receive(timeout=0)) is not None:
        got.append(int(message.body))
        queue.delete(message)
    dump(report, got)


def publish_after(path: str, delay: float) -> None:
    """Publish one message to *path* after *delay* seconds (to wake a blocked waiter)."""
    import time

    time.sleep(delay)
    vsqs.PlainQueue(path, durable=False).publish(b"late")


def multi_waiter_child(waiter: vsqs.MultiWaiter, path: str) -> None:
    """In a forked child: *waiter* (made by the parent) wakes for a publish to *path*."""
    import threading

    before = waiter.token()
    threading.Timer(0.3, publish_after, (path, 0.0)).start()
    waiter.wait(before, 60)
    assert waiter.token() != before, "not woken"
    assert waiter.changed() == [path]
    assert waiter.fileno() >= 0 and waiter.paths[-1] == path
