"""Guarantees of vsqs._queue that ``make mutate`` found unguarded in its sample
(docs/reliability.rst, "Mutation testing"): each test fails on the mutant named in its
docstring."""

from __future__ import annotations

import logging
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import pytest

import vsqs
from vsqs import _fs
from vsqs.testing import ManualClock

from ..fixtures_core import patch_fs


def test_publish_file_to_a_partitioned_queue_deduplicates(tmp_path: Path) -> None:
    """A file published twice with one ``dedup_id`` to a partitioned queue is published
    once, and the duplicate file is consumed (mutant: the partition told no dedup id)."""
    queue = vsqs.Queue(tmp_path / "q", partitions=4, durable=False, clock=ManualClock())
    first, second = tmp_path / "a", tmp_path / "b"
    first.write_bytes(b"1")
    second.write_bytes(b"1")
    message_id = queue.publish_file(first, dedup_id="file-1")
    assert queue.publish_file(second, dedup_id="file-1") == message_id
    assert not second.exists()
    assert queue.size() == 1


class _Poisoned(NamedTuple):
    """A message received once from *source*, whose dead-letter queue *dlq* is on
    another filesystem: the next receive, two seconds on, moves it there by a copy."""

    clock: ManualClock
    source: vsqs.PlainQueue
    dlq: vsqs.PlainQueue
    message_id: str


@pytest.fixture
def other_filesystem(tmp_path: Path) -> Iterator[Path]:
    """A directory on tmpfs, which is not the filesystem of *tmp_path*."""
    shm = Path("/dev/shm")
    if not shm.is_dir() or os.stat(shm).st_dev == os.stat(tmp_path).st_dev:
        pytest.skip("needs /dev/shm on another filesystem than the test directory")
    with tempfile.TemporaryDirectory(dir=shm) as other:
        yield Path(other)


def _poisoned(tmp_path: Path, other: Path, *, durable: bool) -> _Poisoned:
    clock = ManualClock()
    dlq = vsqs.PlainQueue(other / "dlq", clock=clock, durable=durable)
    source = vsqs.PlainQueue(
        tmp_path / "q", clock=clock, durable=False, visibility_timeout=1,
        dead_letter=dlq, max_receives=1,
    )  # fmt: skip
    message_id = source.publish(b"poison")
    assert source.receive(timeout=0) is not None
    return _Poisoned(clock, source, dlq, message_id)


def test_a_copy_into_a_durable_queue_is_flushed_before_it_is_committed(
    tmp_path: Path, other_filesystem: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A message dead-lettered across filesystems (a copy, not a rename) into a durable
    queue has its copy's body fsynced while it is still a ``.new``, before the commit
    makes it ready there: a power loss never leaves a ready message without its body
    (mutant: ``_copy_to`` 22, the copy staged with ``sync=None``, never flushed)."""
    clock, source, dlq, _ = _poisoned(tmp_path, other_filesystem, durable=True)
    flushed: list[str] = []  # each fsynced file, as its path was then
    real_fsync = _fs.fsync

    def fsync(fd: int, directory: str) -> None:
        flushed.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd, directory)

    patch_fs(monkeypatch, "fsync", fsync)
    clock.advance(2)
    assert source.receive(timeout=0) is None  # dead-lettered, by a copy
    monkeypatch.undo()
    copies = [path for path in flushed if path.endswith(".new")]
    assert [os.path.dirname(path) for path in copies] == [dlq.path], flushed
    assert [m.body for m in dlq.receive_batch(10)] == [b"poison"]
    dlq.close()
    source.close()


def test_a_message_taken_back_during_its_copy_is_reported_and_kept_in_both(
    tmp_path: Path,
    other_filesystem: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A copy across filesystems outlives its claim: right after the copy is committed
    in the dead-letter queue, another handle finds the lease ended (the clock jumps an
    hour) and requeues the original. The mover cannot delete it, so the message is in
    both queues (at least once, never lost) and a warning names the source queue, what
    happened and the copy's id (mutants: ``_copy_to`` 69 to 76, that warning's
    arguments and its text)."""
    clock, source, dlq, message_id = _poisoned(tmp_path, other_filesystem, durable=False)
    rival = vsqs.PlainQueue(tmp_path / "q", clock=clock, durable=False)
    real_rename = _fs.rename_noreplace_at

    def rename_noreplace_at(old: str, new: str, dir_fd: int) -> None:
        real_rename(old, new, dir_fd)
        if old.endswith(".new"):  # the copy's commit: the source's lease ends now
            clock.advance(3600)
            assert rival.requeue_expired() == 1

    patch_fs(monkeypatch, "rename_noreplace_at", rename_noreplace_at)
    clock.advance(2)
    with caplog.at_level(logging.WARNING, logger="vsqs"):
        source.receive(timeout=0)  # dead-lettered by a copy; maybe received again
    monkeypatch.undo()
    copied = dlq.receive(timeout=0)
    assert copied is not None and copied.body == b"poison"
    assert source.counts().total == 1
    clock.advance(3600)
    assert [m.id for m in rival.receive_batch(10)] == [message_id]
    assert [record.getMessage() for record in caplog.records] == [
        f"queue {source.path}: a moved message was taken back during its move"
        f" ({copied.id}); delivery goes on without it"
    ]
    for queue in (dlq, source, rival):
        queue.close()
