"""Guarantees of vsqs._dedup that ``make mutate`` found unguarded in its sample
(docs/reliability.rst, "Mutation testing"): each test fails on the mutant named in its
docstring."""

from __future__ import annotations

import errno
import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

import vsqs
from vsqs import _dedup, _fs, _layout
from vsqs.testing import ManualClock

from ..fixtures_core import patch_fs

START = 1_700_000_000.0
WINDOW = 60.0


def test_a_batch_recorded_exactly_a_window_ago_meanwhile_is_still_a_duplicate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Publisher A looks for the batch id (none), writes its bodies; meanwhile B, on a
    host whose clock is exactly ``dedup_window`` behind A's, publishes the same batch
    id. When A records its batch, B's record is exactly a window old by A's clock:
    still within the window, as the look before found it would be, so A publishes
    nothing, returns B's ids and leaves only B's record in ``.vsqs/dedup`` (mutants:
    ``claim_chunk`` 56, ``>=`` for ``>``, which expires B's record and publishes the
    batch twice; ``claim_chunk`` 40, which looks for A's temporary record in
    ``.vsqs/None`` and leaves it behind)."""
    path = tmp_path / "q"
    a_clock = ManualClock(START)
    b_clock = ManualClock(START - WINDOW)
    a = vsqs.PlainQueue(path, clock=a_clock, durable=True, dedup_window=WINDOW)
    b = vsqs.PlainQueue(path, clock=b_clock, durable=True, dedup_window=WINDOW)
    real_sync_files = _fs.sync_files
    b_ids: list[str] = []
    calls: list[str] = []

    def sync_files(directory: str, names: list[str]) -> None:
        calls.append(directory)
        real_sync_files(directory, names)
        if len(calls) == 1:  # A's bodies are written: B publishes the same batch now
            b_ids.extend(b.publish_batch([b"b1", b"b2"], batch_dedup_id="job-1"))

    patch_fs(monkeypatch, "sync_files", sync_files)
    assert a.publish_batch([b"a1", b"a2"], batch_dedup_id="job-1") == b_ids
    monkeypatch.undo()
    assert len(b_ids) == 2
    assert sorted(m.body for m in a.receive_batch(10)) == [b"b1", b"b2"]
    assert not [name for name in path.iterdir() if name.name.endswith(".new")]
    assert len(list((path / ".vsqs" / "dedup").iterdir())) == 1  # B's record alone
    a.close()
    b.close()


def _publish_failing_one_rename(
    q: vsqs.PlainQueue, monkeypatch: pytest.MonkeyPatch, which: Callable[[str], bool]
) -> None:
    """Publish ``[a, b]`` under ``job-1`` with the first rename in ``.vsqs/dedup`` or the
    queue whose source *which* picks failing with EIO: the publish raises it."""
    real = _fs.rename_noreplace_at
    failed: list[str] = []

    def rename(src: str, dst: str, fd: int) -> None:
        if which(src) and not failed:
            failed.append(src)
            raise OSError(errno.EIO, "Input/output error", src)
        real(src, dst, fd)

    patch_fs(monkeypatch, "rename_noreplace_at", rename)
    with pytest.raises(OSError, match="Input/output"):
        q.publish_batch([b"a", b"b"], batch_dedup_id="job-1")
    monkeypatch.undo()
    assert failed


def test_a_failed_record_rename_leaves_no_temporary_record_and_the_retry_publishes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rename that makes a ``batch_dedup_id`` record (its commit point) fails once
    with EIO: the publish raises that error, leaves nothing in ``.vsqs/dedup`` and no
    body behind, and the retry publishes the batch once (mutant: ``claim_chunk`` 45,
    which removes ``None`` instead of the temporary record: a ``TypeError`` in place of
    the EIO, and the record's temporary file left behind)."""
    path = tmp_path / "q"
    q = vsqs.PlainQueue(path, durable=False)
    # The record's temporary name, not a body's: the commit point's rename fails.
    _publish_failing_one_rename(q, monkeypatch, lambda src: ".new-" in src)
    assert list((path / ".vsqs" / "dedup").iterdir()) == []
    assert [name.name for name in path.iterdir() if not name.name.startswith(".")] == []
    ids = q.publish_batch([b"a", b"b"], batch_dedup_id="job-1")
    assert q.publish_batch([b"a", b"b"], batch_dedup_id="job-1") == ids
    assert [m.body for m in q.receive_batch(10)] == [b"a", b"b"]
    q.close()


def test_a_full_queue_answers_a_batch_retry_exactly_a_window_after_its_record(
    tmp_path: Path,
) -> None:
    """A bounded queue, full with a ``batch_dedup_id`` batch; exactly ``dedup_window``
    later (still within it, as everywhere else in ``_dedup``) the retry with
    ``timeout=0`` is answered with the first ids and needs no room (mutant:
    ``find_chunk`` 8, ``>=`` for ``>``, which missed the record at the boundary and
    raised QueueFull)."""
    clock = ManualClock(START)
    q = vsqs.PlainQueue(tmp_path / "q", clock=clock, durable=False, capacity=1,
                        dedup_window=WINDOW)  # fmt: skip
    ids = q.publish_batch([b"a"], batch_dedup_id="job-1")
    clock.advance(WINDOW)
    assert q.publish_batch([b"a"], batch_dedup_id="job-1", timeout=0) == ids
    clock.advance(0.000_001)  # past the window: a new batch, which needs room
    with pytest.raises(vsqs.QueueFull):
        q.publish_batch([b"a"], batch_dedup_id="job-1", timeout=0)
    assert q.counts().total == 1
    q.close()


def test_a_bounded_retry_is_never_told_the_id_of_a_message_still_being_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Publisher A of a bounded queue has made its ``dedup_id`` marker, and its body is
    still ``<id>.new``; a retry on another handle with ``timeout=0`` must not return A's
    id (a message not yet receivable, lost if A dies now): it waits for room like any
    publish, and so raises QueueFull here (mutant: ``published`` 13, which looked for
    ``None`` instead of ``<id>.new``, never found it staged, and returned A's id)."""
    path = tmp_path / "q"
    a = vsqs.PlainQueue(path, durable=False, capacity=1)
    b = vsqs.PlainQueue(path, durable=False, capacity=1)
    real = _fs.rename_noreplace
    answers: list[object] = []

    def rename(src: str, dst: str, *dir_fd: int) -> None:
        if src.endswith(".new") and not answers:  # A's commit: its marker is made
            try:
                answers.append(b.publish(b"order", dedup_id="order-1", timeout=0))
            except vsqs.QueueFull as exc:
                answers.append(exc)
        real(src, dst, *dir_fd)

    patch_fs(monkeypatch, "rename_noreplace", rename)
    first = a.publish(b"order", dedup_id="order-1")
    monkeypatch.undo()
    assert len(answers) == 1 and isinstance(answers[0], vsqs.QueueFull), answers
    assert b.publish(b"order", dedup_id="order-1", timeout=0) == first  # now published
    got = b.receive(timeout=0)
    assert got is not None and (got.id, got.body) == (first, b"order")
    b.delete(got)
    a.close()
    b.close()


def test_a_batch_whose_record_would_be_unreadable_is_refused_by_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ``batch_dedup_id`` batch whose record would exceed the read bound of
    ``.vsqs/dedup`` (lowered here, as a batch of millions would meet it) is refused
    with a ValueError that says so and what to do, and leaves nothing behind (mutant:
    ``claim_chunk`` 22, the error's message replaced by ``None``)."""
    path = tmp_path / "q"
    q = vsqs.PlainQueue(path, durable=False)
    monkeypatch.setitem(_layout.READ_LIMITS, _layout.DEDUP, 1024)
    with pytest.raises(ValueError, match=r"100 messages is too large .* split it"):
        q.publish_batch([b"x"] * 100, batch_dedup_id="job-1")
    assert [name.name for name in path.iterdir() if not name.name.startswith(".")] == []
    dedup = path / ".vsqs" / "dedup"
    assert not dedup.exists() or list(dedup.iterdir()) == []
    ids = q.publish_batch([b"x"] * 10, batch_dedup_id="job-1")  # a smaller one fits
    assert len(ids) == 10
    q.close()


def test_a_retry_exactly_a_window_after_its_publish_needs_no_room(tmp_path: Path) -> None:
    """The single-message counterpart of the test above: exactly ``dedup_window`` after
    a ``dedup_id`` publish filled a bounded queue, the retry with ``timeout=0`` returns
    the first id (mutant: ``published`` 10, ``>=`` for ``>``: QueueFull)."""
    clock = ManualClock(START)
    q = vsqs.PlainQueue(tmp_path / "q", clock=clock, durable=False, capacity=1,
                        dedup_window=WINDOW)  # fmt: skip
    first = q.publish(b"order", dedup_id="order-1")
    clock.advance(WINDOW)
    assert q.publish(b"order", dedup_id="order-1", timeout=0) == first
    assert q.counts().total == 1
    q.close()


def test_the_batch_record_is_named_from_the_documented_digest(tmp_path: Path) -> None:
    """The record of a ``batch_dedup_id`` is ``.vsqs/dedup/<sha256 of "chunk\\0" and the
    id>``, the name every vsqs sharing the queue (another host, another version) looks
    up (mutant: ``_chunk_marker`` 4, ``"CHUNK\\0"``: a peer would publish the batch
    again)."""
    path = tmp_path / "q"
    q = vsqs.PlainQueue(path, durable=False)
    ids = q.publish_batch([b"a", b"b"], batch_dedup_id="job-1")
    name = hashlib.sha256(b"chunk\0job-1").hexdigest()
    assert [entry.name for entry in (path / ".vsqs" / "dedup").iterdir()] == [name]
    assert json.loads((path / ".vsqs" / "dedup" / name).read_bytes())["ids"] == ids
    q.close()


def _crash_after_the_record(q: vsqs.PlainQueue, monkeypatch: pytest.MonkeyPatch) -> None:
    """Publish ``[a, b]`` under ``job-1`` with the first rename past the record failing
    (EIO), as a writer that died there: the record stays, with both ``.new`` files."""
    _publish_failing_one_rename(q, monkeypatch, lambda src: src.endswith(".new"))
    assert len([n for n in os.listdir(q.path) if n.endswith(".new")]) == 2


def _retry_after_a_crash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, before: float, after: float
) -> float:
    """The writer of a batch dies past its record (the clock moved *before* seconds
    first), *after* seconds pass, then a retry: check that it completes the batch, whole
    and once; return how long it waited (manual monotonic seconds)."""
    clock = ManualClock(START)
    clock.advance(before)
    q = vsqs.PlainQueue(tmp_path / "q", clock=clock, durable=False, dedup_window=3600)
    _crash_after_the_record(q, monkeypatch)
    clock.advance(after)
    began = clock.monotonic()
    ids = q.publish_batch([b"a", b"b"], batch_dedup_id="job-1")
    waited = clock.monotonic() - began
    got = [(m.id, m.body) for m in q.receive_batch(10)]
    assert got == list(zip(ids, [b"a", b"b"], strict=True))
    q.close()
    return waited


def test_a_retry_gives_a_writer_that_may_be_alive_its_time_then_completes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch's record is fresh and its ``.new`` files are still there: the retry waits
    ``IN_PROGRESS_LIMIT`` (manual) seconds for the writer before rolling the batch
    forward itself, whatever the monotonic clock read when it began (mutant:
    ``await_chunk`` 10, ``+ since``, which took over at once from a clock already 40 s
    on)."""
    assert _retry_after_a_crash(tmp_path, monkeypatch, before=40, after=0) >= (
        _dedup.IN_PROGRESS_LIMIT
    )


def test_a_retry_takes_over_at_once_from_a_batch_writer_dead_by_the_records_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The record is older than ``IN_PROGRESS_LIMIT`` by its own time and its ``.new``
    files are still there: its writer is dead, and the retry completes the batch without
    waiting (mutants: ``await_chunk`` 4, ``stale = None``, and 9, ``and`` for ``or``,
    which both waited another ``IN_PROGRESS_LIMIT``)."""
    assert (
        _retry_after_a_crash(tmp_path, monkeypatch, before=0, after=_dedup.IN_PROGRESS_LIMIT + 1)
        == 0
    )


def test_a_durable_batch_record_is_flushed_before_and_after_its_rename(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A durable ``batch_dedup_id`` batch: its record's content is flushed before the
    rename that makes it the commit point, and ``.vsqs/dedup`` after it, or a power loss
    could keep the batch and lose (or empty) its record, and a retry would publish the
    batch again (mutants: ``claim_chunk`` 29, the record written unflushed, and
    ``_flush_marker`` 1, the directory of ``None`` flushed instead of ``.vsqs/dedup``)."""
    path = tmp_path / "q"
    q = vsqs.PlainQueue(path, durable=True)
    dedup = str(path / ".vsqs" / "dedup")
    real_fsync, real_rename = _fs.fsync, _fs.rename_noreplace_at
    calls: list[str] = []

    def fsync(fd: int, directory: str) -> None:
        calls.append("fsync:" + os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd, directory)

    def rename(src: str, dst: str, fd: int) -> None:
        calls.append(f"rename:{os.readlink(f'/proc/self/fd/{fd}')}/{src}")
        real_rename(src, dst, fd)

    patch_fs(monkeypatch, "fsync", fsync)
    patch_fs(monkeypatch, "rename_noreplace_at", rename)
    q.publish_batch([b"a", b"b"], batch_dedup_id="job-1")
    monkeypatch.undo()
    commit = next(i for i, c in enumerate(calls) if c.startswith(f"rename:{dedup}/"))
    tmp = calls[commit].removeprefix("rename:")
    assert f"fsync:{tmp}" in calls[:commit], calls
    assert f"fsync:{dedup}" in calls[commit:], calls
    q.close()


def test_a_new_dedup_id_on_a_full_queue_near_the_epoch_still_needs_room(tmp_path: Path) -> None:
    """A bounded queue whose clock reads less than a window after the epoch (a
    ManualClock started at 0): a ``dedup_id`` never published finds no marker and waits
    for room like any publish (mutant: ``published`` 5, which read a missing marker as
    id ``XXXX`` made at time 0, still within the window, and returned that id for a
    message never published)."""
    q = vsqs.PlainQueue(tmp_path / "q", clock=ManualClock(0.0), durable=False, capacity=1,
                        dedup_window=WINDOW)  # fmt: skip
    q.publish(b"first")
    with pytest.raises(vsqs.QueueFull):
        q.publish(b"order", dedup_id="order-1", timeout=0)
    assert q.counts().total == 1
    q.close()
