"""Child-process bodies for the lifecycle tests (importable, so forkserver can run them).

Each reports failure through its exit status (an uncaught exception exits with 1) and
results through files or a multiprocessing queue, never through shared memory.
"""

from __future__ import annotations

import io
import multiprocessing
import os
import resource
import sys
import time
from multiprocessing.context import ForkServerContext
from multiprocessing.synchronize import Barrier

import vsqs

from .users import run_as

CHUNK = 1 << 20
_PATTERN = bytes(range(256)) * (CHUNK // 256)


def forkserver() -> ForkServerContext:
    """Children forked from a clean single-threaded server with vsqs imported."""
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["vsqs", __name__])
    return ctx


def poison_consumer(qdir: str, dlq: str, max_receives: int, stop: str, log: str) -> None:
    """Receive and never delete, logging ``<id> <receive_count>`` per delivery."""
    queue = vsqs.Queue(qdir, visibility_timeout=0.1, dead_letter=dlq, max_receives=max_receives)
    with open(log, "a", encoding="ascii") as out:
        while not os.path.exists(stop):
            message = queue.receive(timeout=0.2)
            if message is not None:
                out.write(f"{message.id} {message.receive_count}\n")
                out.flush()


def dedup_publisher(qdir: str, key: str, barrier: Barrier, out: str) -> None:
    """Publish the same dedup id as every sibling, at the same moment."""
    queue = vsqs.Queue(qdir)
    barrier.wait(timeout=60)
    message_id = queue.publish(f"from {os.getpid()}".encode(), dedup_id=key)
    with open(out, "w", encoding="ascii") as handle:
        handle.write(message_id)


def interleaved_producer(paths: list[str], count: int, tag: str, barrier: Barrier) -> None:
    """Publish *count* messages, cycling over the queues of *paths*."""
    queues = [vsqs.Queue(path) for path in paths]
    barrier.wait(timeout=60)
    for n in range(count):
        queues[n % len(queues)].publish(f"{tag}:{n}".encode())


def late_publisher(path: str, delay: float) -> None:
    """Publish one message after *delay* seconds (to wake a blocked set receive)."""
    time.sleep(delay)
    vsqs.Queue(path).publish(b"late")


def as_user(uid: int, gid: int, action: str, path: str, umask: int | None) -> None:
    """Become *uid*/*gid* (no other group), then create, publish to or consume a queue.

    Exit status: 0 done, 13 PermissionError (its text on stderr); anything else is a bug.
    """

    def act() -> int:
        os.umask(0o077)  # the most restrictive process umask: the queue's own must win
        try:
            queue = vsqs.Queue(path, umask=umask)
            if action == "create":
                queue.publish(b"from the creator", attributes={"by": str(uid)})
            elif action == "publish":
                queue.publish(b"from another user", attributes={"by": str(uid)})
            elif action == "consume":
                got = [queue.receive(timeout=0) for _ in range(2)]
                assert all(m is not None for m in got), got
                for message in got:
                    assert message is not None
                    assert queue.delete(message)
            else:
                raise AssertionError(action)
        except PermissionError as exc:
            sys.stderr.write(f"PermissionError: {exc}\n")
            return 13
        return 0

    run_as(uid, gid, act)


class PatternStream(io.RawIOBase):
    """*size* bytes of a repeating pattern, produced on demand (never held whole)."""

    def __init__(self, size: int) -> None:
        self.left = size

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        count = min(len(buffer), self.left, CHUNK)
        buffer[:count] = _PATTERN[:count]
        self.left -= count
        return count


def stream_publisher(path: str, size: int, out: str) -> None:
    """Publish *size* bytes with publish_stream; write ``<id> <peak RSS growth in KiB>``."""
    queue = vsqs.Queue(path, durable=False)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    message_id = queue.publish_stream(PatternStream(size))
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with open(out, "w", encoding="ascii") as handle:
        handle.write(f"{message_id} {after - before}")


def dedup_publisher_dying_before_rename(qdir: str, key: str) -> None:
    """Publish with *key* and die (``os._exit``, as a SIGKILL would) right before the
    rename that would make the message ready: after its dedup marker was created."""
    from vsqs import _fs  # only this child patches it

    real = _fs.rename_noreplace

    def dying(src: str, dst: str) -> None:
        if src.endswith(".new") and not dst.endswith(".new"):
            os._exit(137)
        real(src, dst)

    _fs.rename_noreplace = dying  # type: ignore[assignment]
    vsqs.Queue(qdir).publish(b"lost?", dedup_id=key)


def killed_after_publishing(qdir: str, count: int) -> None:
    """Publish *count* messages in quick succession, then die as a SIGKILL would."""
    queue = vsqs.Queue(qdir, durable=False)
    for n in range(count):
        queue.publish(b"%d" % n)
    os._exit(137)
