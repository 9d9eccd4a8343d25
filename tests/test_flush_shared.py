"""Concurrent flushes of one filesystem share a ``syncfs`` (group commit, issue 36).

Real threads on a real filesystem where ``syncfs`` is a barrier (tmpfs). The C library's
``syncfs`` is replaced by a wrapper that calls the real one and records when each call
started and ended (and can hold the first call, or fail one, as a disk that cannot
write back would), the way ``tests/mutation/test_flush.py`` replaces it; the sharing
logic under test is the real one. Every event takes a number from one counter, so
"started after" is exact: a caller may return only after a ``syncfs`` that started after
it asked (after its writes) and ended before it returned, and a failure of that
``syncfs`` is raised in every caller it answered.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import itertools
import os
import select
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import vsqs
from vsqs import _flush, _libc

from .fixtures_core import CHILD_TIMEOUT, patch_fs, wait_until

THREADS = 4


@dataclass
class Events:
    """Numbered events of every ``syncfs`` and every caller, from one counter."""

    counter: Iterator[int] = field(default_factory=itertools.count)
    lock: threading.Lock = field(default_factory=threading.Lock)
    syncfs: list[tuple[int, int]] = field(default_factory=list)  # (started, ended)
    calls: list[tuple[int, int, bool]] = field(default_factory=list)  # (asked, returned, ok)

    def tick(self) -> int:
        with self.lock:
            return next(self.counter)

    def uncovered(self) -> list[tuple[int, int, bool]]:
        """The calls that returned without a ``syncfs`` that started after they asked and
        ended before they returned."""
        return [
            call
            for call in self.calls
            if not any(call[0] < start and end < call[1] for start, end in self.syncfs)
        ]


class Syncfs:
    """libc's ``syncfs`` wrapped: each call recorded in *events*; the first one held
    until :meth:`release` if *hold*; the calls numbered in *failing* (0: the first) fail
    with EIO after the real flush, as a write-back error would."""

    def __init__(
        self,
        monkeypatch: pytest.MonkeyPatch,
        events: Events,
        *,
        hold: bool = False,
        failing: frozenset[int] = frozenset(),
    ) -> None:
        self.real: Callable[[int], int] = _libc.syncfs()
        self.events = events
        self.held = threading.Event()  # the first call is inside
        self._release = threading.Event()
        if not hold:
            self._release.set()
        self.failing = failing
        self.count = 0
        monkeypatch.setattr(_libc, "syncfs", lambda: self)

    def release(self) -> None:
        self._release.set()

    def __call__(self, fd: int) -> int:
        started = self.events.tick()
        with self.events.lock:
            number, self.count = self.count, self.count + 1
        if number == 0:
            self.held.set()
            assert self._release.wait(CHILD_TIMEOUT), "the held syncfs was never released"
        result = self.real(fd)
        if number in self.failing:
            ctypes.set_errno(errno.EIO)
            result = -1
        with self.events.lock:
            self.events.syncfs.append((started, next(self.events.counter)))
        return int(result)


def record_callers(monkeypatch: pytest.MonkeyPatch, events: Events) -> None:
    """Record when each call of ``_fs.sync_filesystem`` asked and returned (around the
    real one; a batch calls it once its bodies are written)."""
    real = _flush.sync_filesystem

    def recorded(path: str) -> bool:
        asked = events.tick()
        ok = False
        try:
            done = real(path)
            ok = True
            return done
        finally:
            events.calls.append((asked, events.tick(), ok))

    patch_fs(monkeypatch, "sync_filesystem", recorded)


def blocked_in_shared_syncfs(threads: list[threading.Thread]) -> bool:
    """Whether every one of *threads* waits on the shared ``syncfs``'s condition (its
    innermost frame ``Condition.wait``, called from the shared flush)."""
    frames = sys._current_frames()
    for thread in threads:
        frame = frames.get(thread.ident or 0)
        if frame is None or frame.f_code is not threading.Condition.wait.__code__:
            return False
        caller = frame.f_back
        if caller is None or caller.f_code.co_filename != _flush.__file__:
            return False
    return True


@pytest.fixture
def barrier_dir(fast_tmp_path: Path) -> str:
    directory = str(fast_tmp_path)
    if not _flush.syncfs_is_barrier(directory):
        pytest.skip(f"syncfs is no barrier on {directory} (Linux before 5.8?)")
    return directory


def _run(calls: Sequence[Callable[[], Any]]) -> tuple[list[threading.Thread], list[object]]:
    """Start a thread for each of *calls*; their results (or exceptions) land in the list."""
    results: list[object] = [None] * len(calls)

    def run(index: int) -> None:
        try:
            results[index] = calls[index]()
        except Exception as exc:  # noqa: BLE001 - the test looks at each thread's outcome
            results[index] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for thread in threads:
        thread.start()
    return threads, results


def _join(threads: list[threading.Thread]) -> None:
    for thread in threads:
        thread.join(CHILD_TIMEOUT)
        assert not thread.is_alive(), "a caller never returned"


def _held_then_joined(
    syncfs: Syncfs, first: Callable[[], Any], others: Sequence[Callable[[], Any]]
) -> list[object]:
    """Run *first* until its ``syncfs`` is held, then *others* until each waits on the
    shared one; release; the results, *first*'s first."""
    leader, led = _run([first])
    assert syncfs.held.wait(CHILD_TIMEOUT), "the first caller never reached syncfs"
    threads, results = _run(others)
    wait_until(lambda: blocked_in_shared_syncfs(threads), "the others to wait on the shared syncfs")
    syncfs.release()
    _join(leader + threads)
    return led + results


def test_callers_arriving_during_a_syncfs_share_the_next_one(
    barrier_dir: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Callers that ask while a ``syncfs`` runs are not answered by it (it may have
    started before their writes): they wait for its end, and then all share one more."""
    events = Events()
    syncfs = Syncfs(monkeypatch, events, hold=True)
    record_callers(monkeypatch, events)
    flush = [lambda: _flush.sync_filesystem(barrier_dir)] * (THREADS + 1)
    results = _held_then_joined(syncfs, flush[0], flush[1:])
    assert results == [True] * (THREADS + 1)
    assert len(events.syncfs) == 2  # one held, one for everyone who came meanwhile
    assert events.uncovered() == []


def test_concurrent_durable_batches_return_after_a_syncfs_that_followed_their_writes(
    barrier_dir: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Publishers of durable batches into one queue, all at once: each batch's bodies
    are flushed by a ``syncfs`` that started after they were written, shared; every
    message is there."""
    queue = vsqs.Queue(f"{barrier_dir}/q", durable=True)
    events = Events()
    syncfs = Syncfs(monkeypatch, events, hold=True)
    record_callers(monkeypatch, events)

    def publish(tag: int) -> list[str]:
        return queue.publish_batch([b"%d-%d" % (tag, n) for n in range(5)])

    batches = [functools.partial(publish, tag) for tag in range(THREADS)]
    results = _held_then_joined(syncfs, batches[0], batches[1:])
    assert all(isinstance(ids, list) and len(ids) == 5 for ids in results), results
    assert len(events.syncfs) == 2
    assert events.uncovered() == []

    # And free-running: many rounds, whoever leads; the rule holds for every batch.
    def publish_many(tag: int) -> list[list[str]]:
        return [publish(tag) for _ in range(20)]

    threads, results = _run([functools.partial(publish_many, tag) for tag in range(THREADS)])
    _join(threads)
    assert not [r for r in results if isinstance(r, BaseException)], results
    assert len(events.calls) == THREADS * 21
    assert events.uncovered() == []
    assert queue.counts().ready == THREADS * 21 * 5
    queue.close()


@pytest.mark.parametrize("failing", ["held", "shared"])
def test_a_failed_shared_syncfs_fails_every_batch_it_answered(
    barrier_dir: str, monkeypatch: pytest.MonkeyPatch, failing: str
) -> None:
    """The shared ``syncfs`` fails (EIO): every batch it answered raises the error and
    publishes nothing; none reports success. ``held``: the first ``syncfs`` fails, so
    the batches that arrived while it ran fail too (it may have written their bodies
    back, and the kernel reports a write-back error once), though the next succeeds."""
    queue = vsqs.Queue(f"{barrier_dir}/q", durable=True)
    events = Events()
    syncfs = Syncfs(
        monkeypatch, events, hold=True, failing=frozenset({0 if failing == "held" else 1})
    )
    record_callers(monkeypatch, events)
    batches = [lambda: queue.publish_batch([b"a", b"b", b"c"])] * THREADS
    results = _held_then_joined(syncfs, batches[0], batches[1:])
    assert len(events.syncfs) == 2
    failed = results if failing == "held" else results[1:]
    for result in failed:
        assert isinstance(result, OSError) and result.errno == errno.EIO, results
        assert not isinstance(result, vsqs.DurabilityError)  # nothing was visible yet
    published = 0 if failing == "held" else 3
    if failing == "shared":
        assert isinstance(results[0], list) and len(results[0]) == 3
    assert queue.counts().ready == published
    assert len([n for n in os.listdir(queue.path) if not n.startswith(".")]) == published
    queue.close()


def test_a_failed_syncfs_fails_every_caller_it_answered(
    barrier_dir: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The mechanism alone: the shared ``syncfs`` fails; each caller it answered raises
    its own ``OSError`` (errno, message, its directory), and the next callers, who came
    after, are answered by a new ``syncfs``, not by the failed one."""
    events = Events()
    syncfs = Syncfs(monkeypatch, events, hold=True, failing=frozenset({1}))
    flush = [lambda: _flush.sync_filesystem(barrier_dir)] * (THREADS + 1)
    results = _held_then_joined(syncfs, flush[0], flush[1:])
    assert results[0] is True
    for result in results[1:]:
        assert isinstance(result, OSError), results
        assert (result.errno, result.strerror, result.filename) == (
            errno.EIO,
            os.strerror(errno.EIO),
            barrier_dir,
        )
    assert _flush.sync_filesystem(barrier_dir) is True  # a new syncfs, which succeeds
    assert len(events.syncfs) == 3


def test_a_forked_child_flushes_without_the_parents_syncfs_in_flight(
    barrier_dir: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A child forked while a thread of its parent is inside the shared ``syncfs`` has
    no such thread: its own flush does not wait for that one to end."""
    syncfs = Syncfs(monkeypatch, Events(), hold=True)
    threads, _ = _run([lambda: _flush.sync_filesystem(barrier_dir)])
    try:
        assert syncfs.held.wait(CHILD_TIMEOUT)
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child; its exit status says how it went
            try:
                os._exit(0 if _flush.sync_filesystem(barrier_dir) else 1)
            finally:
                os._exit(2)
        pidfd = os.pidfd_open(pid)
        try:
            exited, _, _ = select.select([pidfd], [], [], CHILD_TIMEOUT)
            if not exited:
                os.kill(pid, 9)
            _, status = os.waitpid(pid, 0)
        finally:
            os.close(pidfd)
        assert exited, "the child waited for its parent's syncfs"
        assert os.waitstatus_to_exitcode(status) == 0
    finally:
        syncfs.release()
        _join(threads)
