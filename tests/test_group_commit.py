"""Group commit: threads flushing one directory (or one filesystem) at once share flushes.

A directory ``fsync`` and a ``syncfs`` make durable what was done before they began, so a
caller is covered by any such flush that began after it called. These tests wrap the
real flush (the files and directories are real) to count the flushes made and to hold
one open while other threads arrive, and check both halves of the promise: fewer
flushes than callers, and no caller returning before a flush that began after its call
succeeded.
"""

from __future__ import annotations

import errno
import itertools
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

import vsqs
from vsqs import _flush

THREADS = 8


def _wrap(
    monkeypatch: pytest.MonkeyPatch, name: str, before: Callable[[int], None]
) -> list[tuple[str, int]]:
    """Wrap ``_flush.<name>`` (the flush itself, under the sharing): call *before* with
    the flush's number, then flush for real; log ("begin"/"end", number)."""
    real = getattr(_flush, name)
    log: list[tuple[str, int]] = []
    numbers = itertools.count()

    def flush(path: str) -> None:
        number = next(numbers)
        log.append(("begin", number))
        before(number)
        real(path)
        log.append(("end", number))

    monkeypatch.setattr(_flush, name, flush)
    return log


def _together(call: Callable[[], None]) -> list[BaseException | None]:
    """Run *call* on THREADS threads at once; each thread's exception (or None)."""
    outcomes: list[BaseException | None] = [None] * THREADS
    start = threading.Barrier(THREADS)

    def run(index: int) -> None:
        start.wait()
        try:
            call()
        except BaseException as exc:  # noqa: BLE001 - the test inspects it
            outcomes[index] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return outcomes


def test_threads_flushing_one_directory_share_the_flushes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first flush is held until every thread has called: all of them then wait for
    one more flush (the round they joined), not one each."""
    arrived = threading.Semaphore(0)
    log = _wrap(monkeypatch, "_fsync_dir", lambda n: _hold_first(n, arrived))

    def call() -> None:
        arrived.release()
        _flush.fsync_dir(str(tmp_path))

    assert _together(call) == [None] * THREADS
    begun = [n for kind, n in log if kind == "begin"]
    # One flush held open while the others arrived, then one round for all who waited
    # (a thread that arrived late on a busy machine may make a third).
    assert 2 <= len(begun) <= 3 < THREADS, log


def _hold_first(number: int, arrived: threading.Semaphore) -> None:
    """Flush 0 waits until every thread has called (and a little more, for them to
    reach the wait)."""
    if number == 0:
        for _ in range(THREADS):
            assert arrived.acquire(timeout=30)
        time.sleep(0.2)


def test_no_caller_returns_before_a_flush_that_began_after_its_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Over many rounds: each caller's return follows the end of a flush whose beginning
    followed its call."""
    events: list[tuple[str, int]] = []
    lock = threading.Lock()
    numbers = itertools.count()
    real = _flush._fsync_dir

    def flush(path: str) -> None:
        number = next(numbers)
        with lock:
            events.append(("begin", number))
        time.sleep(0.002)  # long enough for others to arrive meanwhile
        real(path)
        with lock:
            events.append(("end", number))

    monkeypatch.setattr(_flush, "_fsync_dir", flush)
    callers = itertools.count()

    def call() -> None:
        for _ in range(20):
            me = next(callers)
            with lock:
                events.append(("call", me))
            _flush.fsync_dir(str(tmp_path))
            with lock:
                events.append(("return", me))

    assert _together(call) == [None] * THREADS
    position = {event: i for i, event in enumerate(events)}
    flushes = [n for kind, n in events if kind == "begin"]
    for me in range(THREADS * 20):
        called, returned = position[("call", me)], position[("return", me)]
        assert any(
            called < position[("begin", n)] and position[("end", n)] < returned for n in flushes
        ), f"caller {me} returned without a flush that began after its call"
    assert len(flushes) < THREADS * 20  # shared: fewer flushes than calls


def test_a_failed_flush_fails_every_caller_of_its_round_and_is_not_retried(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    arrived = threading.Semaphore(0)

    def before(number: int) -> None:
        if number == 1:  # the round everyone joined while flush 0 was held
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        _hold_first(number, arrived)

    log = _wrap(monkeypatch, "_fsync_dir", before)

    def call() -> None:
        arrived.release()
        _flush.fsync_dir(str(tmp_path))

    outcomes = _together(call)
    failed = [exc for exc in outcomes if exc is not None]
    begun = [n for kind, n in log if kind == "begin"]
    assert failed and all(isinstance(e, OSError) and e.errno == errno.EIO for e in failed)
    # Only the callers of the first flush (which began before the others called) passed.
    assert len(failed) >= THREADS - 2, outcomes
    assert begun.count(1) == 1  # the failed flush was made once, never again for them
    _flush.fsync_dir(str(tmp_path))  # a new caller: a new round, a new flush
    assert [n for kind, n in log if kind == "begin"][-1] == len(begun)


def test_concurrent_durable_batches_share_their_flushes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A queue's producer threads publishing durable batches at once: every message is
    there and readable, with fewer directory flushes than batches."""
    queue = vsqs.Queue(tmp_path / "q", durable=True)
    flushes = [0]
    real = _flush._fsync_dir

    def counted(path: str) -> None:
        flushes[0] += 1
        time.sleep(0.005)  # a slow disk: others arrive meanwhile
        real(path)

    monkeypatch.setattr(_flush, "_fsync_dir", counted)
    batches = 5

    def call() -> None:
        for b in range(batches):
            queue.publish_batch([b"%d-%d" % (threading.get_ident(), b)] * 3)

    assert _together(call) == [None] * THREADS
    assert queue.counts().ready == THREADS * batches * 3
    assert flushes[0] < THREADS * batches
