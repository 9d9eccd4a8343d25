"""Concurrent flushes of one filesystem share a ``syncfs`` (group commit, issue 36).

Real threads on a real filesystem where ``syncfs`` is a barrier (a disk: on tmpfs vsqs
makes no flush at all, so there is nothing to share). The C library's
``syncfs`` is replaced by a wrapper that calls the real one and records when each call
started and ended (and can hold the first call, or fail one, as a disk that cannot
write back would: ``tests/flushes.py``); the sharing logic under test is the real one.
A caller may return only after a ``syncfs`` that started after it asked (after its
writes) and ended before it returned, and a failure of that ``syncfs`` is raised in
every caller it answered. ``tests/serve/test_shared_flush.py``: the same through
``vsqs serve``.
"""

from __future__ import annotations

import errno
import functools
import os
import signal
from pathlib import Path

import pytest

import vsqs
from vsqs import _flush

from .fixtures_core import CHILD_TIMEOUT
from .flushes import (
    Events,
    Interrupted,
    Syncfs,
    held_then_joined,
    join_threads,
    record_callers,
    run_threads,
)

THREADS = 4


@pytest.fixture
def barrier_dir(disk_tmp_path: Path) -> str:
    directory = str(disk_tmp_path)
    if not _flush.syncfs_is_barrier(directory):
        pytest.skip(f"syncfs is no barrier on {directory} (Linux before 5.8?)")
    return directory


def test_callers_arriving_during_a_syncfs_share_the_next_one(
    barrier_dir: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Callers that ask while a ``syncfs`` runs are not answered by it (it may have
    started before their writes): they wait for its end, and then all share one more."""
    events = Events()
    syncfs = Syncfs(monkeypatch, events, hold=True)
    record_callers(monkeypatch, events)
    flush = [lambda: _flush.sync_filesystem(barrier_dir)] * (THREADS + 1)
    results = held_then_joined(syncfs, flush[0], flush[1:])
    assert results == [True] * (THREADS + 1)
    assert events.uncovered() == []
    assert len(events.syncfs) == 2  # one held, one for everyone who came meanwhile


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
    results = held_then_joined(syncfs, batches[0], batches[1:])
    assert all(isinstance(ids, list) and len(ids) == 5 for ids in results), results
    assert events.uncovered() == []
    assert len(events.syncfs) == 2

    # And free-running: many rounds, whoever leads; the rule holds for every batch.
    def publish_many(tag: int) -> list[list[str]]:
        return [publish(tag) for _ in range(20)]

    threads, results = run_threads([functools.partial(publish_many, tag) for tag in range(THREADS)])
    join_threads(threads)
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
    results = held_then_joined(syncfs, batches[0], batches[1:])
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
    results = held_then_joined(syncfs, flush[0], flush[1:])
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


def test_a_syncfs_whose_result_nobody_saw_fails_every_caller_it_answered(
    barrier_dir: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The caller that runs the shared ``syncfs`` is interrupted as it returns (an
    exception from a signal handler): it raises that, and every other caller of that
    ``syncfs`` raises EIO; none is told that the flush succeeded."""
    events = Events()
    syncfs = Syncfs(monkeypatch, events, hold=True, interrupted=frozenset({1}))
    flush = [lambda: _flush.sync_filesystem(barrier_dir)] * (THREADS + 1)
    results = held_then_joined(syncfs, flush[0], flush[1:])
    assert results[0] is True
    shared = results[1:]
    assert sum(isinstance(result, Interrupted) for result in shared) == 1, results
    others = [result for result in shared if not isinstance(result, Interrupted)]
    assert all(isinstance(r, OSError) and r.errno == errno.EIO for r in others), results
    assert _flush.sync_filesystem(barrier_dir) is True  # the next syncfs is a new one


@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_a_forked_child_flushes_without_the_parents_syncfs_in_flight(
    barrier_dir: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A child forked while a thread of its parent is inside the shared ``syncfs`` has
    no such thread: its own flush does not wait for that one to end (mutant: the state
    kept across the fork, and the child waits for ever)."""
    syncfs = Syncfs(monkeypatch, Events(), hold=True)
    threads, _ = run_threads([lambda: _flush.sync_filesystem(barrier_dir)])
    try:
        assert syncfs.held.wait(CHILD_TIMEOUT)
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child reports through its exit status
            status = 1
            try:
                signal.alarm(20)  # a child that hangs ends (SIGALRM) rather than block
                status = 0 if _flush.sync_filesystem(barrier_dir) else 2
            finally:
                os._exit(status)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
    finally:
        syncfs.release()
        join_threads(threads)
