"""Child-process bodies for the lease tests (top-level, so ``spawn`` can import them).

Each reports failure through its exit status and its findings through a JSON file
(:func:`tests.procs.dump`), never through shared memory.
"""

from __future__ import annotations

import os
import time

import vsqs

from .procs import dump


def poll_until_stopped(path: str, started: str, go: str, stop: str, report: str) -> None:
    """From when *go* exists, poll the queue without waiting (each poll returns expired
    leases) until *stop* exists; report every body received."""
    queue = vsqs.Queue(path, visibility_timeout=0.5, durable=False)
    got: list[str] = []
    dump(started, True)
    while not os.path.exists(go):
        time.sleep(0.01)
    while not os.path.exists(stop):
        message = queue.receive(timeout=0)
        if message is not None:
            got.append(message.body.decode())
        time.sleep(0.01)
    dump(report, got)


def lease_and_hang(path: str, holding: str) -> None:
    """Take a self-renewing lease, say so, then work forever (until SIGKILL)."""
    queue = vsqs.Queue(path, visibility_timeout=0.5, durable=False)
    for lease in queue.consume_leases(timeout=30):
        with lease:
            dump(holding, lease.message.receipt)
            time.sleep(120)


def lease_through_a_pause(path: str, holding: str, report: str) -> None:
    """Work 4 s under a 0.5 s lease (the test stops this process meanwhile); report how
    leaving the block ended."""
    queue = vsqs.Queue(path, visibility_timeout=0.5, durable=False)
    message = queue.receive(timeout=30)
    assert message is not None
    outcome: dict[str, object] = {"raised": None}
    try:
        with queue.lease(message) as lease:
            dump(holding, message.receipt)
            time.sleep(4)
    except vsqs.LeaseLost as exc:
        outcome = {"raised": "LeaseLost", "reason": exc.reason, "renewals": lease.renewals}
    dump(report, outcome)
