"""Children of the ``fifo=True`` tests (tests/test_fifo_groups.py, tests/serve/test_fifo.py,
tests/test_fifo_kept_listing.py).

Top-level functions, so that the ``spawn`` start method can import them. A child reports
what it holds through a small JSON file (see :func:`tests.procs.dump`); the stalled ones
then stop themselves (SIGSTOP) and are killed by the test's ``children()`` context.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import random
import signal
import time
from pathlib import Path

import vsqs

from .fixtures_core import wait_until
from .procs import dump


def same_partition(queue: vsqs.PartitionedQueue, count: int) -> list[str]:
    """*count* group names that hash to one partition of *queue*."""
    by_path: dict[str, list[str]] = {}
    for n in range(1000):
        names = by_path.setdefault(queue.partition_for(f"group-{n}").path, [])
        names.append(f"group-{n}")
        if len(names) == count:
            return names
    raise AssertionError("no partition got enough groups")


def stopped(pid: int) -> bool:
    """Whether process *pid* is stopped (SIGSTOP), from ``/proc/<pid>/stat``."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
        return handle.read().rpartition(")")[2].split()[0] == "T"


def receive_some(path: str, report: str, count: int, start: str) -> None:
    """Once *start* exists, *count* receives that do not wait, nothing deleted; report
    ``[body, group, receipt]`` of each (``None`` for a receive that found nothing)."""
    queue = vsqs.Queue(path)
    dump(f"{report}.ready", True)
    wait_until(Path(start).exists, "the start signal")
    got = []
    for _ in range(count):
        message = queue.receive(visibility_timeout=60, timeout=0)
        got.append(
            None if message is None else [message.body.decode(), message.group, message.receipt]
        )
    dump(report, got)


def hold_and_stop(path: str, report: str, visibility_timeout: float) -> None:
    """Receive one message, report ``[body, group]``, then stop while holding it."""
    queue = vsqs.Queue(path)
    message = queue.receive(visibility_timeout=visibility_timeout, timeout=10)
    assert message is not None
    dump(report, [message.body.decode(), message.group])
    os.kill(os.getpid(), signal.SIGSTOP)


def lock_and_stop(directory: str, report: str, name: str = "fifo.lock") -> None:
    """Take the lock ``.vsqs/<name>`` of the queue directory *directory* (by default the
    claim lock, as a ``fifo`` consumer does for its claim step), then stop holding it.

    The lock is taken with ``flock`` directly, so that the test runs the same on a vsqs
    that would wait for it forever."""
    os.makedirs(f"{directory}/.vsqs", exist_ok=True)
    fd = os.open(f"{directory}/.vsqs/{name}", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    dump(report, True)
    os.kill(os.getpid(), signal.SIGSTOP)


def publish_delayed(path: str, groups: list[str], stop: str) -> None:
    """Publish delayed messages (``delay=1``) to each of *groups* in turn, and ungrouped
    ones, until *stop* exists."""
    queue = vsqs.Queue(path, durable=False)
    n = 0
    while not os.path.exists(stop):
        group = groups[n % len(groups)]
        queue.publish(f"{group}:late".encode(), group=group, delay=1)
        queue.publish(b"ungrouped:late", delay=1)
        n += 1
        time.sleep(0.002)


def hold_then_act(path: str, report: str, groups: list[str], act: str, go: str) -> None:
    """Receive the first message of each of *groups* (``visibility_timeout=1.5``) and
    report ``[[body, receipt]...]``; once *go* exists, *act* on them: ``"delete"`` the
    first, or ``"extend"`` it to 30 s (the others are left to expire); then report
    ``<report>.done``."""
    queue = vsqs.Queue(path)
    held = []
    for _ in groups:
        message = queue.receive(visibility_timeout=1.5, timeout=5)
        assert message is not None
        held.append(message)
    dump(report, [[m.body.decode(), m.receipt] for m in held])
    wait_until(Path(go).exists, "the go signal")
    if act == "delete":
        assert queue.delete(held[0])
    else:
        queue.change_visibility(held[0], 30)
    dump(f"{report}.done", True)


def serve_groups(path: str, report: str, inflight: str, start: str) -> None:
    """Once *start* exists, receive batches of 10 until the queue stays empty for 0.5 s;
    for each group of a batch, create ``<inflight>/<group>`` exclusively (an existing
    one means another consumer has that group in flight: a broken promise), hold it a
    moment, remove it, then delete the batch. Report ``[[group, index, violation]...]``
    in delivery order (bodies are ``<group>:<index>``)."""
    queue = vsqs.Queue(path)
    wait_until(Path(start).exists, "the start signal")
    seen: list[list[object]] = []
    idle_since = time.monotonic()
    while time.monotonic() - idle_since < 0.5:
        batch = queue.receive_batch(10, visibility_timeout=60, timeout=0)
        if not batch:
            time.sleep(0.001)
            continue
        idle_since = time.monotonic()
        groups: list[str] = []
        for message in batch:
            group, _, index = message.body.decode().partition(":")
            violation = False
            if group not in groups:
                groups.append(group)
                try:
                    os.close(os.open(f"{inflight}/{group}", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
                except FileExistsError:
                    violation = True
            seen.append([group, int(index), violation, time.monotonic()])
        time.sleep(random.uniform(0, 0.01))  # a window in which a second delivery shows
        for group in groups:
            # RACE: a wrongly delivered group's marker may be removed by its other holder.
            with contextlib.suppress(FileNotFoundError):
                os.unlink(f"{inflight}/{group}")
        for message in batch:
            assert queue.delete(message)
    dump(report, seen)
