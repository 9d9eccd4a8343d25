"""Guarantees that were false, or that no test would have noticed breaking (issue 37).

Each test here failed on the code before its fix, or on the one-line mutant that breaks
the guarantee it guards (its docstring says which); ``docs/reliability.rst`` names
them in its table. Races are forced by wrapping ``_fs`` functions, as in
``tests/test_races.py``; every ``Queue`` object stands for a separate process.
"""

from __future__ import annotations

import errno
import os
import shutil
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import vsqs
from vsqs import _fs
from vsqs.testing import ManualClock, drain

from .fixtures_core import patch_fs


def _tree(root: Path) -> list[str]:
    """Every path under *root*, relative, sorted (what a swapped target may not gain)."""
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def _dead_lettering(tmp_path: Path, **dlq_options: Any) -> tuple[vsqs.AnyQueue, ManualClock, Path]:
    """A queue whose one message (with attributes) is due to be dead-lettered into
    ``dlq`` at its next requeue; the queue, its clock and the dead-letter directory."""
    clock = ManualClock()
    dlq_dir = tmp_path / "dlq"
    dlq = vsqs.Queue(dlq_dir, durable=False, clock=clock, **dlq_options)
    q = vsqs.Queue(
        tmp_path / "q", durable=False, clock=clock, dead_letter=dlq, max_receives=1,
        visibility_timeout=1,
    )  # fmt: skip
    q.publish(b"poison", attributes={"k": "v"})
    assert q.receive(timeout=0) is not None
    clock.advance(2)
    return q, clock, dlq_dir


def _swap_for_link(directory: Path, outside: Path) -> Path:
    """Move *directory* aside and plant a symlink to *outside* in its place; where it went."""
    aside = directory.with_name(directory.name + "-real")
    directory.rename(aside)
    directory.symlink_to(outside)
    return aside


# -- 1. a bounded dead-letter queue swapped for a link: nothing outside ----------------


def test_a_bounded_dead_letter_queue_swapped_for_a_link_gets_nothing_outside(
    tmp_path: Path,
) -> None:
    """The move opens its target without following a link before it takes the target's
    capacity lock: the lock and counter are never created through the link (before
    issue 37 ``outside/.vsqs/capacity.lock`` and ``capacity.count`` were)."""
    outside = tmp_path / "outside"
    outside.mkdir()
    q, _, dlq_dir = _dead_lettering(tmp_path, capacity=5)
    _swap_for_link(dlq_dir, outside)
    q.requeue_expired()  # the move is refused (UnsafeEntry, logged); the message stays
    assert _tree(outside) == []
    assert q.counts().total == 1  # held back here, never lost


# -- 2. swapped just after the move opened it: everything through the descriptor -----


@pytest.mark.parametrize("capacity", [None, 5])
def test_a_dead_letter_queue_swapped_after_it_was_opened_gets_everything_inside(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capacity: int | None
) -> None:
    """Swapped for a link right after the move opened it, the target still gets the
    message *and* its metadata record (and, bounded, its capacity files), all through
    the descriptor: nothing lands outside (before issue 37 the record went to
    ``outside/.vsqs/meta/<id>``; renaming by path would put the message there too)."""
    outside = tmp_path / "outside"
    outside.mkdir()
    q, _, dlq_dir = _dead_lettering(tmp_path, capacity=capacity)
    real_open_dir = _fs.open_dir
    swapped: list[Path] = []

    def open_dir(name: str, dir_fd: int | None = None) -> int:
        fd = real_open_dir(name, dir_fd)
        if name == "dlq" and not swapped:  # the move just opened its target: swap it now
            swapped.append(_swap_for_link(dlq_dir, outside))
        return fd

    patch_fs(monkeypatch, "open_dir", open_dir)
    q.requeue_expired()
    monkeypatch.undo()
    assert swapped, "the move never opened its target"
    assert _tree(outside) == []
    moved = vsqs.Queue(swapped[0], durable=False).receive(timeout=0)
    assert moved is not None and moved.body == b"poison"
    assert dict(moved.attributes) == {"k": "v"}
    assert q.counts().total == 0


# -- 4. a dedup retry on a full bounded queue --------------------------------------------


def test_a_dedup_retry_on_a_full_bounded_queue_returns_the_first_id(tmp_path: Path) -> None:
    """The message is already there: a retry adds nothing, so it needs no room. With
    ``timeout=0`` it returns the first id (before issue 37: QueueFull); with
    ``timeout=None`` it returns at once (before: it blocked until room appeared)."""
    q = vsqs.Queue(tmp_path / "q", durable=False, capacity=1)
    first = q.publish(b"order", dedup_id="order-1")
    assert q.publish(b"order", dedup_id="order-1", timeout=0) == first
    assert q.publish(b"order", dedup_id="order-1", timeout=None) == first
    batch = vsqs.Queue(tmp_path / "b", durable=False, capacity=2)
    ids = batch.publish_batch([b"a", b"b"], batch_dedup_id="job-7")
    assert batch.publish_batch([b"a", b"b"], batch_dedup_id="job-7", timeout=0) == ids
    keyed = vsqs.Queue(tmp_path / "k", durable=False, capacity=2)
    ids = keyed.publish_batch([b"a", b"b"], dedup_ids=["a", "b"])
    assert keyed.publish_batch([b"a", b"b"], dedup_ids=["a", "b"], timeout=None) == ids
    with pytest.raises(vsqs.QueueFull):
        q.publish(b"other", dedup_id="order-2", timeout=0)  # a new one still needs room
    assert [queue.counts().total for queue in (q, batch, keyed)] == [1, 2, 2]


# -- 3. a stale receipt is never taken for an extension -----------------------------------


def test_a_lease_requeued_without_a_record_and_received_again_is_expired_not_superseded(
    tmp_path: Path,
) -> None:
    """A vsqs 0.3 peer requeues an expired lease with one rename and records nothing:
    the next delivery's lease is not an extension of the first (it carries another
    delivery), so the first receipt's LeaseLost says ``expired`` and names no lease to
    follow; an extension made through another handle is still ``superseded``."""
    clock = ManualClock()
    path = tmp_path / "q"
    a = vsqs.Queue(path, durable=False, clock=clock, visibility_timeout=5)
    b = vsqs.Queue(path, durable=False, clock=clock, visibility_timeout=5)
    a.publish(b"job")
    first = a.receive(timeout=0)
    assert first is not None
    extended = b.change_visibility(first.receipt, 10)  # another handle extends it
    with pytest.raises(vsqs.LeaseLost) as lost:
        a.change_visibility(first.receipt, 5)
    assert (lost.value.reason, lost.value.current) == ("superseded", extended.receipt)
    clock.advance(20)
    (path / extended.receipt).rename(path / first.id)  # the 0.3 peer's requeue
    second = b.receive(timeout=0)
    assert second is not None and second.receive_count == 1  # nothing was recorded
    for receipt in (first.receipt, extended.receipt):
        with pytest.raises(vsqs.LeaseLost) as lost:
            a.change_visibility(receipt, 5)
        assert (lost.value.reason, lost.value.current) == ("expired", "")
    assert b.delete(second)


# -- the guarantees no test guarded (each killed a mutant that survived before) ---------


def test_held_messages_count_against_the_capacity(tmp_path: Path) -> None:
    """Bounded queues: a held message takes room until it is deleted (the mutant that
    counted only ready messages let a third one in)."""
    q = vsqs.Queue(tmp_path / "q", durable=False, capacity=2)
    q.publish_batch([b"a", b"b"])
    held = q.receive(timeout=0)
    assert held is not None
    with pytest.raises(vsqs.QueueFull):
        q.publish(b"c", timeout=0)
    other = vsqs.Queue(tmp_path / "q", durable=False, capacity=2)  # a fresh count
    with pytest.raises(vsqs.QueueFull):
        other.publish(b"c", timeout=0)
    assert q.delete(held)
    other.publish(b"c", timeout=0)
    assert q.counts().total == 2


def test_a_capacity_counter_that_cannot_be_rewritten_is_removed_not_left_low(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full disk fails the counter's rewrite after a publish: the counter is removed
    (an unlink needs no space), so a producer that trusts its recent check recounts
    instead of reading a bound one too low (the mutant that kept it overfilled the
    queue: three messages in a queue of capacity 2)."""
    clock = ManualClock()
    a = vsqs.Queue(tmp_path / "q", durable=False, clock=clock, capacity=2)
    b = vsqs.Queue(tmp_path / "q", durable=False, clock=clock, capacity=2)
    b.publish(b"1", timeout=0)  # the counter says 1; b checked it just now
    real = _fs.create_at

    def full(name: str, mode: int = 0o666, dir_fd: int | None = None) -> int:
        if name.startswith(".tmp-capacity.count-"):
            raise OSError(errno.ENOSPC, "No space left on device", name)
        return real(name, mode, dir_fd)

    patch_fs(monkeypatch, "create_at", full)
    a.publish(b"2", timeout=0)  # published; its count could not be written
    monkeypatch.undo()
    with pytest.raises(vsqs.QueueFull):
        b.publish(b"3", timeout=0)
    assert a.counts().total == 2


def test_a_dedup_publish_whose_commit_failed_can_be_retried(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The commit rename fails once (EIO): the publish raises, and its marker goes with
    it, so the retry publishes the body (the mutant that kept the marker answered the
    retry with the id of a message never published: a lost message)."""
    q = vsqs.Queue(tmp_path / "q", durable=False)
    real = _fs.rename_noreplace
    failed: list[str] = []

    def rename(src: str, dst: str, *dir_fd: int) -> None:
        if src.endswith(".new") and not failed:
            failed.append(src)
            raise OSError(errno.EIO, "Input/output error", src)
        real(src, dst, *dir_fd)

    patch_fs(monkeypatch, "rename_noreplace", rename)
    with pytest.raises(OSError, match="Input/output"):
        q.publish(b"order", dedup_id="order-1")
    assert failed
    message_id = q.publish(b"order", dedup_id="order-1")
    got = q.receive(timeout=0)
    assert got is not None and (got.id, got.body) == (message_id, b"order")
    assert q.publish(b"order", dedup_id="order-1") == message_id  # now a duplicate


def test_an_expired_record_of_an_unfinished_batch_is_completed_not_replaced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The writer of a ``batch_dedup_id`` batch dies after its first rename; 120 s later
    (past the 60 s window) the batch is published again and the queue cleaned: the
    first batch is completed, not replaced, so exactly ``[a, b, c]`` arrive, once (the
    mutant that expired the unfinished record published the batch twice over)."""
    clock = ManualClock()
    q = vsqs.Queue(tmp_path / "q", durable=False, clock=clock, dedup_window=60)
    real = _fs.rename_noreplace_at
    renamed: list[str] = []

    def dies(src: str, dst: str, dir_fd: int) -> None:
        if src.endswith(".new"):
            if renamed:
                raise KeyboardInterrupt  # killed past the commit point
            renamed.append(dst)
        real(src, dst, dir_fd)

    patch_fs(monkeypatch, "rename_noreplace_at", dies)
    with pytest.raises(KeyboardInterrupt):
        q.publish_batch([b"a", b"b", b"c"], batch_dedup_id="job-7")
    monkeypatch.undo()
    assert q.counts().ready == 1 and q.counts().new == 2
    clock.advance(120)
    again = vsqs.Queue(tmp_path / "q", durable=False, clock=clock, dedup_window=60)
    ids = again.publish_batch([b"a", b"b", b"c"], batch_dedup_id="job-7")
    again.clean(older_than=0)
    got = drain(again)
    assert [m.body for m in got] == [b"a", b"b", b"c"]
    assert [m.id for m in got] == ids


def test_deleting_an_old_message_keeps_a_newer_same_id_messages_metadata(
    tmp_path: Path,
) -> None:
    """As ``test_deleting_an_old_message_keeps_the_metadata_of_a_newer_one_with_its_id``,
    on a handle that has seen ``.vsqs/meta`` (another message has attributes), so the
    delete reads the record it must leave alone (the documented test never reached that
    line; the mutant that removed any record of the id survived it)."""
    path = tmp_path / "q"
    start = 1_700_000_000.0
    consumer = vsqs.Queue(path, durable=False, clock=ManualClock(start))
    consumer.publish(b"other", attributes={"k": "other"}, delay=60)  # makes .vsqs/meta
    old_id = consumer.publish(b"old")
    held = consumer.receive(timeout=0)
    assert held is not None and held.id == old_id
    late = vsqs.Queue(path, durable=False, clock=ManualClock(start + 0.000001))
    new_id = late.publish(b"new", attributes={"owner": "newcomer"})
    assert new_id == old_id  # two messages, one id, as the concepts page allows
    assert consumer.delete(held)
    newcomer = consumer.receive(timeout=0)
    assert newcomer is not None and newcomer.body == b"new"
    assert dict(newcomer.attributes) == {"owner": "newcomer"}


@pytest.fixture
def other_filesystem(tmp_path: Path) -> Iterator[Path]:
    """A fresh directory on another filesystem than *tmp_path* (``/dev/shm``)."""
    shm = Path("/dev/shm")
    if not shm.is_dir() or os.stat(shm).st_dev == os.stat(tmp_path).st_dev:
        pytest.skip("needs /dev/shm on another filesystem than the test directory")
    where = shm / f"vsqs-guarded-{os.getpid()}-{os.urandom(4).hex()}"
    where.mkdir()
    try:
        yield where
    finally:
        shutil.rmtree(where)


def test_a_cross_filesystem_copy_whose_claim_was_lost_is_withdrawn(
    tmp_path: Path, other_filesystem: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The mover stalls after copying, past its claim; another process requeues the
    message and moves it itself. The stalled copy is withdrawn before it becomes
    visible: the dead letter arrives once (the mutant that committed it anyway
    delivered it twice)."""
    clock = ManualClock()
    dlq = vsqs.Queue(other_filesystem / "dlq", durable=False, clock=clock)
    options: dict[str, Any] = {"dead_letter": dlq, "max_receives": 1, "visibility_timeout": 1}
    mover = vsqs.Queue(tmp_path / "q", durable=False, clock=clock, **options)
    rival = vsqs.Queue(tmp_path / "q", durable=False, clock=clock, **options)
    mover.publish(b"poison")
    assert mover.receive(timeout=0) is not None
    clock.advance(2)
    copied, resume = threading.Event(), threading.Event()
    real = _fs.copy_fd

    def stalls(source: int, target: int, progress: Callable[[], object]) -> int:
        size = real(source, target, progress)
        if threading.current_thread().name == "mover":
            copied.set()
            assert resume.wait(30), "never resumed"
        return size

    patch_fs(monkeypatch, "copy_fd", stalls)
    thread = threading.Thread(target=mover.requeue_expired, name="mover")
    thread.start()
    try:
        assert copied.wait(30), "the mover never copied"
        clock.advance(3600)  # the mover's claim (its requeue hold) has long ended
        rival.requeue_expired()  # takes the message over and moves it
        assert dlq.counts().ready == 1  # beside the mover's copy, still being written
    finally:
        resume.set()
        thread.join(30)
    assert [m.body for m in drain(dlq)] == [b"poison"]
    assert dlq.counts().total == 0  # the withdrawn copy left nothing
    assert mover.counts().total == 0


def test_fifo_holds_one_message_of_a_group_across_processes_during_a_requeue(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``fifo=True``: three handles (three processes). A's lease on the group's first
    message ends; B lists, finds it expired and is paused before requeueing it; C
    receives meanwhile. The directory's lock makes C wait for B, so C finds B's new
    lease and takes nothing: at most one message of the group is in flight (the mutant
    without the cross-process lock let C requeue and take the first message while B,
    having listed no live lease, took the second)."""
    clock = ManualClock()
    path = tmp_path / "q"
    a, b, c = (
        vsqs.Queue(path, durable=False, clock=clock, fifo=True, partitions=1, visibility_timeout=5)
        for _ in range(3)
    )
    a.publish_batch([b"1", b"2"], group="g")
    assert a.receive(timeout=0) is not None
    clock.advance(10)  # A's lease has ended
    paused, resume, c_waits, b_done = (threading.Event() for _ in range(4))
    real_rename, real_try_lock = _fs.rename_noreplace, _fs.try_lock

    def rename(src: str, dst: str, *dir_fd: int) -> None:
        if threading.current_thread().name == "B" and dst.endswith(".0") and not paused.is_set():
            paused.set()  # about to take the expired lease into its requeue hold
            assert resume.wait(30), "B was never resumed"
        real_rename(src, dst, *dir_fd)

    def try_lock(fd: int) -> bool:
        if real_try_lock(fd):
            return True
        if threading.current_thread().name == "C":
            c_waits.set()
            b_done.wait(30)  # instead of spinning the manual clock while B is paused
        return False

    patch_fs(monkeypatch, "rename_noreplace", rename)
    patch_fs(monkeypatch, "try_lock", try_lock)
    got: dict[str, list[vsqs.Message]] = {}

    def receive(name: str, queue: vsqs.AnyQueue, done: threading.Event | None) -> None:
        try:
            got[name] = queue.receive_batch(1, timeout=0)
        finally:
            if done is not None:
                done.set()

    b_thread = threading.Thread(target=receive, args=("B", b, b_done), name="B")
    b_thread.start()
    assert paused.wait(30), "B never requeued the expired lease"
    c_thread = threading.Thread(target=receive, args=("C", c, c_waits), name="C")
    c_thread.start()
    c_waits.wait(30)  # C waits for the lock (or, without one, has received already)
    resume.set()
    b_thread.join(30)
    c_thread.join(30)
    in_flight = [m.body for m in got["B"] + got["C"]]
    assert in_flight == [b"1"], in_flight
