"""One queue handle shared by many threads (a handle is thread-safe by construction).

Every compound update of a handle's state is made under a lock (its receive bookkeeping
is one :class:`vsqs._consumer.Consumer`); these tests share one handle between 16 threads
that publish, receive, delete, extend, release and lease at once, and check what the
API promises: every message delivered and deleted exactly once, nothing lost, and
leases ending in expiry order.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path

import pytest

import vsqs
from vsqs.testing import ManualClock

THREADS = 16
PUBLISHERS = 4
PER_PUBLISHER = 300


def _run_all(calls: Sequence[Callable[[], object]], stop: threading.Event | None = None) -> None:
    """Run *calls* in threads at once; a failure in any of them fails the test (and sets
    *stop*, which the others watch, so that none is left running)."""
    with ThreadPoolExecutor(max_workers=len(calls)) as pool:
        futures = [pool.submit(call) for call in calls]
        try:
            for future in futures:
                future.result(timeout=120)
        finally:
            if stop is not None:
                stop.set()


def test_sixteen_threads_on_one_handle_deliver_each_message_exactly_once(tmp_path: Path) -> None:
    """4 publishers and 12 consumers on one handle: each consumer deletes, extends then
    deletes, releases (the message comes back), or holds it in a self-renewing lease.
    Every message is deleted exactly once and none is lost; the handle's own bookkeeping
    ends empty (no lease left behind, nothing left to deliver)."""
    q = vsqs.PlainQueue(tmp_path / "q", durable=False, visibility_timeout=30)
    total = PUBLISHERS * PER_PUBLISHER
    deleted: Counter[bytes] = Counter()
    released: Counter[bytes] = Counter()
    lock = threading.Lock()
    stop = threading.Event()

    def publisher(index: int) -> None:
        for i in range(PER_PUBLISHER):
            body = f"{index}:{i}".encode()
            if i % 3 == 0:
                q.publish_batch([body])
            else:
                q.publish(body)

    def consumer(seed: int) -> None:
        rng = random.Random(seed)
        while not stop.is_set():
            with lock:
                if sum(deleted.values()) >= total:
                    return
            message = q.receive(timeout=0.05)
            if message is None:
                continue
            action = rng.random()
            if action < 0.1 and released[message.body] < 2:
                with lock:
                    released[message.body] += 1
                q.change_visibility(message, 0)  # back to the queue: delivered again
                continue
            if action < 0.3:
                message = q.change_visibility(message, 60)  # a heartbeat, then delete
                ok = q.delete(message)
            elif action < 0.4:
                with q.lease(message, visibility_timeout=30) as lease:
                    assert lease.message.body == message.body
                ok = True  # leaving the block deleted it (or raised LeaseLost)
            else:
                ok = q.delete(message)
            with lock:
                deleted[message.body] += ok

    _run_all(
        [partial(publisher, p) for p in range(PUBLISHERS)]
        + [partial(consumer, c) for c in range(THREADS - PUBLISHERS)],
        stop,
    )
    expected = {f"{p}:{i}".encode() for p in range(PUBLISHERS) for i in range(PER_PUBLISHER)}
    assert set(deleted) == expected
    assert set(deleted.values()) == {1}, "each message deleted exactly once"
    assert sum(released.values()) > 0  # the release path ran
    assert q.counts() == vsqs.Counts(ready=0, held=0, delayed=0, new=0)
    assert q.receive(timeout=0) is None
    q.close()


def test_leases_taken_by_sixteen_threads_end_in_expiry_order(tmp_path: Path) -> None:
    """16 threads claim at once, each with its own visibility timeout; none deletes. The
    handle knows when the next of its leases ends (a blocked receive sleeps no later),
    and as the clock passes each expiry exactly that message comes back."""
    clock = ManualClock(start=1_700_000_000.0)
    q = vsqs.PlainQueue(tmp_path / "q", durable=False, clock=clock)
    for i in range(THREADS):
        q.publish(str(i).encode())
    clock.advance(1)  # past the listing's deferral of messages published "now"
    timeouts = list(range(10, 10 + 5 * THREADS, 5))
    random.Random(7).shuffle(timeouts)
    taken: dict[bytes, float] = {}
    barrier = threading.Barrier(THREADS)

    def take(seconds: int) -> None:
        barrier.wait(timeout=30)
        message = q.receive(visibility_timeout=seconds, timeout=0)
        assert message is not None
        taken[message.body] = message.expires_at

    _run_all([partial(take, seconds) for seconds in timeouts])
    assert len(taken) == THREADS
    for body, expires_at in sorted(taken.items(), key=lambda item: item[1]):
        # The handle's earliest known expiry is this lease's (its heap of leases is whole).
        now = clock.time_us() / 1e6
        assert q.next_look() == pytest.approx(expires_at - now + 0.0005, abs=1e-3)
        assert q.receive(timeout=0) is None  # not yet
        clock.advance(expires_at + 0.001 - now)
        again = q.receive(timeout=0, visibility_timeout=3600)
        assert again is not None
        assert again.body == body, "leases end in expiry order"
        assert again.receive_count == 2
    q.close()


def _race(
    q: vsqs.PlainQueue, message: vsqs.Message, barrier: threading.Barrier, index: int
) -> bool:
    """One of many threads given the same message: maybe extend it, then delete it."""
    barrier.wait(timeout=30)
    if index % 2:
        try:
            q.change_visibility(message, 120)
        except vsqs.LeaseLost:
            pass  # another thread deleted or extended it first
    return q.delete(message)


def test_threads_racing_to_delete_and_extend_one_message_agree(tmp_path: Path) -> None:
    """Many threads given one received message: exactly one delete wins; every extend
    either moves the lease or raises LeaseLost; the message never comes back."""
    q = vsqs.PlainQueue(tmp_path / "q", durable=False)
    for round_ in range(50):
        q.publish(str(round_).encode())
        message = q.receive(timeout=0)
        assert message is not None
        barrier = threading.Barrier(THREADS)
        with ThreadPoolExecutor(max_workers=THREADS) as pool:
            wins = list(pool.map(partial(_race, q, message, barrier), range(THREADS)))
        assert wins.count(True) == 1
        assert q.counts().total == 0
    q.close()


def test_threads_asking_for_the_waiter_at_once_share_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A handle makes one waiter, however many threads ask for it at the same moment
    (a second one would hold a watch that nobody closes)."""
    from vsqs import _queue, _waiters

    made: list[object] = []
    real = _waiters.make_waiter

    def slow_make_waiter(*args: object, **kwargs: object) -> object:
        time.sleep(0.05)  # widen the window between "none yet" and "made"
        waiter = real(*args, **kwargs)  # type: ignore[arg-type]
        made.append(waiter)
        return waiter

    monkeypatch.setattr(_queue, "make_waiter", slow_make_waiter)
    q = vsqs.PlainQueue(tmp_path / "q")
    barrier = threading.Barrier(THREADS)

    def ask() -> object:
        barrier.wait(timeout=30)
        return q.waiter()

    with ThreadPoolExecutor(max_workers=THREADS) as pool:
        waiters = list(pool.map(lambda _: ask(), range(THREADS)))
    assert len(made) == 1
    assert all(waiter is made[0] for waiter in waiters)
    q.close()
