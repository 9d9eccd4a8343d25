"""Guarantees of vsqs._queue that the every-10th sample of ``make mutate`` found
unguarded by its selection (docs/reliability.rst, "Mutation testing"): each test fails on
the mutants named in its docstring. Real queues on the real filesystem, on a manual
clock; ``tests/mutation/test_queue.py`` holds the tests for the earlier, smaller sample.
"""

from __future__ import annotations

import errno
import os
import stat
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import vsqs
from vsqs import _fs
from vsqs._ids import is_hold
from vsqs.testing import ManualClock

from ..fixtures_core import patch_fs


def _queue(path: Path, clock: ManualClock, **options: object) -> vsqs.PlainQueue:
    return vsqs.PlainQueue(path, durable=False, clock=clock, **options)  # type: ignore[arg-type]


def test_a_redrive_limited_to_nothing_moves_nothing(tmp_path: Path) -> None:
    """``limit=0`` is a valid limit (SQS allows a move task of none): nothing moves and
    nothing is raised (mutant: ``redrive`` 5, ``limit <= 0`` refused)."""
    clock = ManualClock()
    dlq = _queue(tmp_path / "dlq", clock)
    dlq.publish(b"dead")
    target = _queue(tmp_path / "q", clock)
    assert dlq.redrive(to=target, limit=0) == 0
    assert (dlq.size(), target.size()) == (1, 0)
    assert dlq.redrive(to=target, limit=1) == 1
    with pytest.raises(ValueError, match=r"^limit must be an int >= 0 or None, not -1$"):
        dlq.redrive(to=target, limit=-1)


def test_a_bounded_queue_refuses_files_and_streams_in_plain_words(tmp_path: Path) -> None:
    """The refusal of ``publish_file`` on a bounded queue says exactly why (mutant:
    ``_check_extras`` 3, its message changed)."""
    queue = _queue(tmp_path / "q", ManualClock(), capacity=4)
    body = tmp_path / "body"
    body.write_bytes(b"x")
    with pytest.raises(ValueError) as refused:
        queue.publish_file(body)
    assert str(refused.value) == "publish_file and publish_stream do not support bounded queues"
    assert body.exists()  # the file is the caller's still: nothing lost


def test_a_lease_that_ended_and_came_back_ready_was_lost_by_expiry(tmp_path: Path) -> None:
    """A receipt whose lease ran out and whose message is ready again (requeued, not yet
    received) is refused with ``reason="expired"`` (mutant: ``_lease_lost`` 31, the
    reason left out: ``""``)."""
    clock = ManualClock()
    queue = _queue(tmp_path / "q", clock)
    queue.publish(b"m")
    clock.advance(1)
    held = queue.receive(visibility_timeout=5, timeout=0)
    assert held is not None
    clock.advance(6)
    assert _queue(tmp_path / "q", clock).requeue_expired() == 1
    with pytest.raises(vsqs.LeaseLost) as lost:
        queue.change_visibility(held, 10)
    assert lost.value.reason == "expired"
    assert lost.value.current == ""


def test_browse_shows_how_often_a_message_was_received(tmp_path: Path) -> None:
    """A message never received browses with ``receive_count == 0``, one received and
    returned twice with 2 (mutant: ``browse`` 29, the count left out: ``Message``'s
    default, 1)."""
    clock = ManualClock()
    queue = _queue(tmp_path / "q", clock)
    queue.publish(b"m")
    clock.advance(1)
    assert [m.receive_count for m in queue.browse()] == [0]
    for _ in range(2):
        held = queue.receive(timeout=0)
        assert held is not None
        queue.change_visibility(held, 0)  # returned: ready again
    assert [m.receive_count for m in _queue(tmp_path / "q", clock).browse()] == [2]


def test_a_queue_made_by_a_redrive_gets_the_handles_umask(tmp_path: Path) -> None:
    """A redrive to a path that is not a queue yet makes it with the redriving handle's
    ``umask``, as every directory that handle makes (mutant: ``_sibling`` 10, the umask
    left out: the process's is used)."""
    clock = ManualClock()
    dlq = _queue(tmp_path / "dlq", clock, umask=0o077)
    dlq.publish(b"dead")
    assert dlq.redrive(to=tmp_path / "new") == 1
    assert stat.S_IMODE(os.stat(tmp_path / "new").st_mode) == 0o700


def test_configure_stores_a_dead_letter_given_as_a_queue_a_name_or_a_path(
    tmp_path: Path,
) -> None:
    """``dead_letter`` as a queue object, a bare name or a path is stored by name, and
    ``max_receives`` under its own key; a wrong type names the option (mutants:
    ``configure`` 1, 19, 28 and 46)."""
    clock = ManualClock()
    queue = _queue(tmp_path / "q", clock)
    dlq = _queue(tmp_path / "dlq", clock)
    expected = {"dead_letter": "dlq", "max_receives": 3}
    assert queue.configure(dead_letter=dlq, max_receives=3) == expected
    assert queue.configure(dead_letter="dlq") == expected
    assert queue.configure(dead_letter=tmp_path / "dlq") == expected
    assert _queue(tmp_path / "q", clock).settings() == expected
    with pytest.raises(TypeError, match=r"^dead_letter must be a str or os.PathLike, not int$"):
        queue.configure(dead_letter=3)  # type: ignore[arg-type]


def test_try_receive_leases_for_the_time_asked_and_stops_at_a_lost_race(
    tmp_path: Path,
) -> None:
    """``try_receive`` leases for its ``visibility_timeout``, and gives up at the first
    message another consumer took since this handle listed (mutants: ``try_receive`` 7,
    no lease length, and 11, ``looking`` left out: it walks on to the next message)."""
    clock = ManualClock()
    publisher = _queue(tmp_path / "q", clock)
    ids = publisher.publish_batch([b"%d" % n for n in range(4)])
    clock.advance(1)
    mine, other = _queue(tmp_path / "q", clock), _queue(tmp_path / "q", clock)
    [first] = mine.try_receive(1, visibility_timeout=7)  # lists all four
    assert first.id == ids[0]
    assert first.expires_at == pytest.approx(clock.time_us() / 1e6 + 7)
    assert [m.id for m in other.receive_batch(1, timeout=0)] == [ids[1]]
    assert mine.try_receive(1) == []  # its view names ids[1]: taken, so it gives up


def test_a_fifo_group_whose_message_a_peer_took_waits_for_it(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """``fifo=True``: when a peer that ignores the claim lock (vsqs 0.3, a purge) takes a
    group's first message between this handle's listing and its claim, the group's next
    message waits for that one; other groups go on (mutant: ``_claim_in_flight_one`` 52,
    ``gate.close(None)``: the next message was claimed, two of one group in flight)."""
    clock = ManualClock()
    queue = _queue(tmp_path / "q", clock, fifo=True)
    first = queue.publish(b"g1", group="g")
    queue.publish(b"g2", group="g")
    other = queue.publish(b"h1", group="h")
    clock.advance(1)
    rename = _fs.rename_noreplace
    taken: list[str] = []

    def peer_first(src: str, dst: str, *args: Any) -> None:
        if not taken and os.path.basename(src) == first:
            taken.append(dst)
            rename(src, dst)  # the peer's claim, with the same clock
        rename(src, dst, *args)

    patch_fs(monkeypatch, "rename_noreplace", peer_first)
    got = queue.receive_batch(10, timeout=0)
    assert taken
    assert [m.id for m in got] == [other]


def test_a_fifo_claim_lists_at_most_twice(tmp_path: Path, monkeypatch: Any) -> None:
    """``fifo=True`` on a clock that stands still: the first listing holds back the
    message published "now", the second confirms it; a message that appeared during
    that second listing waits for the next call rather than cost a third listing
    (mutant: ``_claim_in_flight_one`` 34, ``relisted = None``: it listed again)."""
    clock = ManualClock()
    queue = _queue(tmp_path / "q", clock, fifo=True)
    publisher = _queue(tmp_path / "q", clock)
    first = queue.publish(b"a", group="a")
    scandir = _fs.scandir
    listings: list[str] = []
    late: list[str] = []

    def listing(path: str) -> Any:
        listings.append(path)
        if len(listings) == 2:
            late.append(publisher.publish(b"b", group="b"))  # while it lists
        return scandir(path)

    patch_fs(monkeypatch, "scandir", listing)
    assert [m.id for m in queue.receive_batch(10, timeout=0)] == [first]
    assert len(listings) == 2
    assert [m.id for m in queue.receive_batch(10, timeout=0)] == late


def _failing_moves_into(dlq: Path, errno_: int, monkeypatch: Any) -> None:
    """Make every move of a message into the directory *dlq* (an absolute source renamed
    to a name in *dlq*'s descriptor, as ``_transfer`` moves one) fail with *errno_*:
    ``ENOSPC`` (no room for a directory entry) or ``EXDEV`` (another filesystem, which
    vsqs copies across instead)."""
    rename = _fs.rename_noreplace

    def failing(src: str, dst: str, *args: Any) -> None:
        moving = args and os.path.isabs(src)
        if moving and os.readlink(f"/proc/self/fd/{args[0]}") == str(dlq):
            raise OSError(errno_, os.strerror(errno_), dst)
        rename(src, dst, *args)

    patch_fs(monkeypatch, "rename_noreplace", failing)


def _poisoned(tmp_path: Path, clock: ManualClock) -> vsqs.PlainQueue:
    """A queue whose one message was received once and may be received once only."""
    queue = _queue(tmp_path / "q", clock, dead_letter=tmp_path / "dlq", max_receives=1)
    queue.publish(b"poison")
    clock.advance(1)
    assert queue.receive(timeout=0) is not None
    clock.advance(31)  # its lease has ended: the next look dead-letters it
    return queue


def test_a_dead_letter_move_that_finds_no_space_is_logged_and_kept(
    tmp_path: Path, monkeypatch: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """A full disk under the dead-letter queue: the message stays held here (tried again
    later, never lost), and the log says why in words (mutant: ``_kept_back`` 12, the
    log's words ``None``)."""
    clock = ManualClock()
    queue = _poisoned(tmp_path, clock)
    _failing_moves_into(tmp_path / "dlq", errno.ENOSPC, monkeypatch)
    assert queue.receive(timeout=0) is None
    assert f"queue {queue.path}: no space to dead-letter a message (" in caplog.text
    assert queue.counts().held == 1
    assert vsqs.PlainQueue(tmp_path / "dlq", durable=False).size() == 0


def test_a_copy_whose_claim_was_taken_back_is_withdrawn_unseen(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """A dead-letter move across filesystems (``EXDEV``) whose claim another process
    took back while it copied (the held message requeued): the copy is withdrawn from
    the dead-letter queue before anyone sees it, and the message stays in its queue
    (mutant: ``_copy_to`` 39, the staged copy not withdrawn: a ``TypeError``)."""
    clock = ManualClock()
    queue = _poisoned(tmp_path, clock)
    _failing_moves_into(tmp_path / "dlq", errno.EXDEV, monkeypatch)
    copy_fd = _fs.copy_fd
    path = Path(queue.path)

    def requeued_meanwhile(source: int, target: int, progress: Any) -> int:
        size = copy_fd(source, target, progress)
        [held] = [p for p in path.iterdir() if p.is_file() and "." in p.name]
        held.rename(path / held.name.split(".")[0])  # another process requeued it
        return size

    patch_fs(monkeypatch, "copy_fd", requeued_meanwhile)
    queue.receive(timeout=0)  # the move gives up; the message may be received again
    dlq = tmp_path / "dlq"
    assert sorted(p.name for p in dlq.iterdir()) == [".vsqs"]  # no copy, no debris
    assert queue.counts().ready + queue.counts().held == 1


def test_a_copy_reaches_a_shut_down_dead_letter_queue_and_a_lost_race_is_logged(
    tmp_path: Path, monkeypatch: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """A dead-letter move across filesystems into a dead-letter queue that was shut down
    still lands, as a rename would (a move is no publish); and when another process took
    the source back between the copy's commit and the source's delete, the log says so
    (mutants: ``_copy_to`` 48, ``moved=None``: refused as a publish, and 75, the log's
    words changed)."""
    clock = ManualClock()
    queue = _poisoned(tmp_path, clock)
    dlq = _queue(tmp_path / "dlq", clock)
    dlq.shutdown()
    _failing_moves_into(tmp_path / "dlq", errno.EXDEV, monkeypatch)
    commit = _fs.rename_noreplace_at
    path = Path(queue.path)

    def requeued_after_commit(src: str, dst: str, dir_fd: int) -> None:
        commit(src, dst, dir_fd)
        if src.endswith(".new"):  # the copy is visible: now another process requeues
            [held] = [p for p in path.iterdir() if p.is_file() and "." in p.name]
            held.rename(path / held.name.split(".")[0])

    patch_fs(monkeypatch, "rename_noreplace_at", requeued_after_commit)
    queue.receive(timeout=0)
    assert [m.body for m in dlq.browse()] == [b"poison"]
    assert f"queue {queue.path}: a moved message was taken back during its move (" in caplog.text


def test_a_bad_visibility_timeout_is_refused_by_name(tmp_path: Path) -> None:
    """A receive's own ``visibility_timeout`` that is not a number of seconds is
    refused naming it, and nothing is claimed (mutant: ``_lease_us`` 5, the name
    ``None``)."""
    queue = _queue(tmp_path / "q", ManualClock())
    queue.publish(b"m")
    with pytest.raises((TypeError, ValueError), match=r"^visibility_timeout "):
        queue.receive(visibility_timeout=-1, timeout=0)
    assert queue.counts().ready == 1


def test_refusals_of_what_is_not_a_receipt_or_a_message_carry_it_and_say_why(
    tmp_path: Path,
) -> None:
    """Each refusal carries the value refused and says why, in exact words (mutants:
    ``validate_receipt`` 14, the value ``None``; ``change_visibility`` 18 and ``lease``
    8, the words changed; ``_batch_keys`` 9, a bad ``dedup_ids`` entry not checked)."""
    queue = _queue(tmp_path / "q", ManualClock())
    message_id = queue.publish(b"m")
    with pytest.raises(vsqs.InvalidId) as refused:
        vsqs.validate_receipt("17.")
    assert refused.value.value == "17."
    with pytest.raises(vsqs.InvalidId) as refused:
        queue.change_visibility(message_id, 10)
    assert refused.value.reason == "a receipt (id.expiry) is needed, not a bare id"
    with pytest.raises(vsqs.InvalidId) as refused:
        queue.lease(message_id)  # type: ignore[arg-type]
    assert refused.value.reason == "lease() takes a received Message"
    with pytest.raises((TypeError, ValueError), match="dedup_id"):
        queue.publish_batch([b"a", b"b"], dedup_ids=["ok", 7])  # type: ignore[list-item]
    assert queue.size() == 1


def test_a_returned_message_expires_now_and_a_lease_renews_for_an_hour(
    tmp_path: Path,
) -> None:
    """``change_visibility(m, 0)`` returns a message whose ``expires_at`` is now, in
    seconds; ``lease()`` renews for one hour by default (mutants: ``change_visibility``
    63, µs times 1e6; ``lease`` 1, 3,601 seconds)."""
    clock = ManualClock()
    queue = _queue(tmp_path / "q", clock)
    queue.publish(b"m")
    clock.advance(1)
    held = queue.receive(timeout=0)
    assert held is not None
    returned = queue.change_visibility(held, 0)
    assert returned.expires_at == clock.time_us() / 1e6
    again = queue.receive(timeout=0)
    assert again is not None
    with queue.lease(again) as lease:
        assert lease.deadline == clock.time_us() / 1e6 + 3600


def test_purge_says_in_words_that_it_left_a_planted_entry(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A directory planted under a message's name survives a purge, and the log says so
    in exact words (mutant: ``purge`` 9, the words wrapped in ``XX``)."""
    queue = _queue(tmp_path / "q", ManualClock())
    queue.publish(b"m")
    planted = Path(queue.path, "1000000000000000")
    planted.mkdir()
    assert queue.purge() == 1
    assert planted.is_dir()
    assert f"queue {queue.path}: purge left entries that are not messages (" in caplog.text


def test_read_bodies_lists_again_for_a_name_moved_after_its_listing(tmp_path: Path) -> None:
    """Two handed-over receipts, both renewed: the first read lists the directory; the
    second lease is renewed again after that listing, so its listed name is gone too and
    the directory is listed once more (mutant: ``read_bodies`` 15, never again: ``None``
    for a message that exists)."""
    clock = ManualClock()
    queue = _queue(tmp_path / "q", clock)
    queue.publish_batch([b"one", b"two"])
    clock.advance(1)
    one, two = queue.receive_batch(2, timeout=0)
    queue.change_visibility(one, 60)
    listed = queue.change_visibility(two, 60)  # the name the first listing will see
    bodies = vsqs.read_bodies(queue.path, [one.receipt, two.receipt])
    assert next(bodies) == b"one"  # listed here
    clock.advance(1)
    queue.change_visibility(listed, 120)  # renamed after that listing
    assert next(bodies) == b"two"


@pytest.mark.parametrize("by", ["batch_dedup_id", "dedup_ids"])
def test_a_full_bounded_queue_answers_a_retried_batch_without_room(tmp_path: Path, by: str) -> None:
    """A bounded queue, full: a batch published again under its ``batch_dedup_id`` or
    its ``dedup_ids`` needs no room and returns the first publish's ids at once
    (mutants: ``_published_batch`` 1, 8 and 19, and ``publish_batch`` 23, the batch's
    key not looked up: each raised, or waited for room and found none)."""
    queue = _queue(tmp_path / "q", ManualClock(), capacity=2)
    keys: dict[str, Any] = (
        {"batch_dedup_id": "b-1"} if by == "batch_dedup_id" else {"dedup_ids": ["k-1", "k-2"]}
    )
    ids = queue.publish_batch([b"1", b"2"], **keys)
    assert queue.publish_batch([b"1", b"2"], timeout=0, **keys) == ids
    assert queue.size() == 2
    with pytest.raises(vsqs.QueueFull):
        queue.publish_batch([b"3"], timeout=0)


def test_a_durable_delayed_batch_is_delayed(tmp_path: Path) -> None:
    """A durable batch of several messages (the path that flushes them together) keeps
    its ``delay`` (mutant: ``publish_batch`` 78, the delay dropped: ready at once)."""
    clock = ManualClock()
    queue = vsqs.PlainQueue(tmp_path / "q", durable=True, clock=clock)
    queue.publish_batch([b"1", b"2"], delay=5, dedup_ids=["k-1", None])
    assert queue.counts().delayed == 2
    assert queue.receive(timeout=0) is None
    clock.advance(6)
    assert len(queue.receive_batch(2, timeout=0)) == 2


def test_a_durable_publish_file_flushes_the_queue_directory(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """``publish_file`` on a durable queue flushes the queue's directory once the file
    is published there (mutant: ``publish_file`` 15, the ids not given to the publish's
    guard: it took the publish for a duplicate and flushed nothing)."""
    queue = vsqs.PlainQueue(tmp_path / "q", durable=True, clock=ManualClock())
    body = tmp_path / "body"
    body.write_bytes(b"x")
    fsync_dir = _fs.fsync_dir
    flushed: list[str] = []

    def recorded(path: str) -> None:
        flushed.append(path)
        fsync_dir(path)

    patch_fs(monkeypatch, "fsync_dir", recorded)
    queue.publish_file(body)
    assert queue.path in flushed


def test_a_batch_published_by_another_process_meanwhile_is_answered_with_its_ids(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """Two publishers of one ``batch_dedup_id``: the other one records the batch after
    this one looked for it and before this one records its own. This one's copies are
    discarded unseen, and it returns the other's ids: the batch is in the queue once
    (mutant: ``_publish_chunk`` 59, the recorded batch finished without its entries:
    a ``TypeError``)."""
    clock = ManualClock()
    queue, other = _queue(tmp_path / "q", clock), _queue(tmp_path / "q", clock)
    open_queue_dir = _fs.open_queue_dir
    theirs: list[list[str]] = []

    def raced(path: str) -> int:
        # Once the publish looked for the batch and opens the directory to stage its
        # bodies (its metadata's layout opens the directory too, earlier).
        if not theirs and "_publish_chunk" in sys._getframe(1).f_code.co_name:
            theirs.append([])  # the other publish opens the directory too
            theirs[0] = other.publish_batch([b"1", b"2"], batch_dedup_id="b-1")
        return open_queue_dir(path)

    patch_fs(monkeypatch, "open_queue_dir", raced)
    assert queue.publish_batch([b"1", b"2"], batch_dedup_id="b-1") == theirs[0]
    assert queue.size() == 2
    assert not [p for p in Path(queue.path).iterdir() if p.name.endswith(".new")]


def test_a_dead_letter_moves_metadata_with_the_handles_file_mode(tmp_path: Path) -> None:
    """A handle with a ``umask``: the metadata that a dead-letter move writes into the
    dead-letter queue (through its open directory) gets the handle's file mode, as
    every file that handle makes (mutant: ``_pinned`` 3, the mode not passed on: the
    process's umask is used)."""
    clock = ManualClock()
    queue = _queue(tmp_path / "q", clock, dead_letter=tmp_path / "dlq", max_receives=1, umask=0o077)
    queue.publish(b"poison", attributes={"a": "1"})
    clock.advance(1)
    assert queue.receive(timeout=0) is not None
    clock.advance(31)
    assert queue.receive(timeout=0) is None  # dead-lettered
    made = [p for p in (tmp_path / "dlq" / ".vsqs").rglob("*") if p.is_file()]
    assert made
    assert {oct(stat.S_IMODE(p.stat().st_mode)) for p in made} == {"0o600"}


def _swap_for_a_link(queue_dir: Path, outside: Path) -> Path:
    """Another process renames the queue directory *queue_dir* away and plants a link
    to *outside* under its name; where the queue is now."""
    moved = queue_dir.with_name(queue_dir.name + "-moved")
    queue_dir.rename(moved)
    queue_dir.symlink_to(outside)
    return moved


def _copy_into_a_swapped_dead_letter_queue(
    tmp_path: Path, monkeypatch: Any, fault: OSError | None
) -> tuple[vsqs.PlainQueue, Path, Path]:
    """A dead-letter move across filesystems (``EXDEV``) during whose copy the
    dead-letter queue is renamed away and a link to ``outside`` takes its name; then the
    renewal of the move's claim, after the copy, meets *fault*, if any. The queue, the
    dead-letter queue's new place, outside."""
    clock = ManualClock()
    queue = _queue(tmp_path / "q", clock, dead_letter=tmp_path / "dlq", max_receives=1)
    queue.publish(b"poison", attributes={"a": "1"})
    clock.advance(1)
    assert queue.receive(timeout=0) is not None
    clock.advance(31)
    outside = tmp_path / "outside"
    outside.mkdir()
    _failing_moves_into(tmp_path / "dlq", errno.EXDEV, monkeypatch)
    copy_fd = _fs.copy_fd
    moved: list[Path] = []

    def swapped_meanwhile(source: int, target: int, progress: Any) -> int:
        size = copy_fd(source, target, progress)
        moved.append(_swap_for_a_link(tmp_path / "dlq", outside))
        return size

    rename = _fs.rename_noreplace

    def renewal_fails(src: str, dst: str, *args: Any) -> None:
        if moved and fault is not None and os.path.dirname(src) == queue.path:
            raise fault  # the claim's renewal: a rename in this queue
        rename(src, dst, *args)

    patch_fs(monkeypatch, "copy_fd", swapped_meanwhile)
    patch_fs(monkeypatch, "rename_noreplace", renewal_fails)
    assert queue.receive(timeout=0) is None  # dead-lettered, or kept back by *fault*
    return queue, moved[0], outside


def test_a_copy_lands_whole_in_the_dead_letter_queue_it_opened(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """The dead-letter queue swapped for a link while a message is copied into it: the
    copy and its metadata land in the directory the move opened, nothing where the link
    points (mutant: ``_copy_to`` 57, the copy committed without the opened directory's
    metadata store: its metadata written by path)."""
    _, dlq, outside = _copy_into_a_swapped_dead_letter_queue(tmp_path, monkeypatch, None)
    [dead] = vsqs.PlainQueue(dlq, durable=False).browse()
    assert (dead.body, dead.attributes) == (b"poison", {"a": "1"})
    assert list(outside.iterdir()) == []


def test_a_failed_copy_is_withdrawn_from_the_dead_letter_queue_it_opened(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """The dead-letter queue swapped for a link while a message is copied into it, and
    the move then fails (no space to renew its claim): the unseen copy is removed from
    the directory the move opened, and the message stays held here (mutant: ``_copy_to``
    66, the copy discarded by path: left behind as debris)."""
    no_space = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    queue, dlq, outside = _copy_into_a_swapped_dead_letter_queue(tmp_path, monkeypatch, no_space)
    assert sorted(p.name for p in dlq.iterdir()) == [".vsqs"]
    assert list(outside.iterdir()) == []
    assert queue.counts().held == 1


def test_a_batch_is_made_ready_in_the_directory_it_was_staged_in(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """A keyed batch whose queue directory is renamed away, and a link planted under its
    name, after the batch was recorded and before it is made ready: every message is
    made ready in the directory the batch opened, none left as ``.new``, nothing where
    the link points (mutants: ``_finish_chunk`` 14 and ``_publish_chunk`` 68, the
    messages renamed by path: not found, so taken for another finisher's)."""
    queue = _queue(tmp_path / "q", ManualClock())
    outside = tmp_path / "outside"
    outside.mkdir()
    moved: list[Path] = []

    def swapping(rename: Any) -> Any:
        def first_commit_swaps(src: str, *args: Any) -> None:
            if not moved and src.endswith(".new"):
                moved.append(_swap_for_a_link(tmp_path / "q", outside))
            rename(src, *args)

        return first_commit_swaps

    for name in ("rename_noreplace", "rename_noreplace_at"):
        patch_fs(monkeypatch, name, swapping(getattr(_fs, name)))
    ids = queue.publish_batch([b"1", b"2"], batch_dedup_id="b-1")
    assert moved
    names = sorted(p.name for p in moved[0].iterdir())
    assert names == sorted([*ids, ".vsqs"])
    assert list(outside.iterdir()) == []


def _purged_while_on_hold(queue: vsqs.PlainQueue, monkeypatch: Any) -> None:
    """Another process (a purge) deletes a message in the requeue hold this process just
    took, before this process makes it ready again."""
    rename = _fs.rename_noreplace

    def purged_first(src: str, dst: str, *args: Any) -> None:
        if os.path.dirname(src) == queue.path and is_hold(os.path.basename(src)):
            os.unlink(src)  # the purge
        rename(src, dst, *args)

    patch_fs(monkeypatch, "rename_noreplace", purged_first)


def test_a_message_purged_while_on_hold_is_not_counted_or_returned(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """A message purged during its requeue (after the hold was taken, before it was made
    ready) was not requeued: ``requeue_expired`` counts none, and a release of its lease
    is refused as lost (mutant: ``_return`` 104, ``None`` for "lost": counted as
    requeued, and the release answered with a message that no longer exists)."""
    clock = ManualClock()
    queue = _queue(tmp_path / "q", clock)
    queue.publish_batch([b"1", b"2"])
    clock.advance(1)
    _, released = queue.receive_batch(2, visibility_timeout=5, timeout=0)  # the other ends
    _purged_while_on_hold(queue, monkeypatch)
    with pytest.raises(vsqs.LeaseLost):
        queue.change_visibility(released, 0)
    clock.advance(6)
    assert _queue(tmp_path / "q", clock).requeue_expired() == 0
    assert queue.size() == 0


def test_a_redrive_cut_short_leaves_the_message_to_come_back(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """A redrive whose move fails (no space in the target) raises, and the message it
    claimed comes back to its queue when that claim ends: never lost (mutant:
    ``_claim_for_move`` 1, the claim named ``<id>.None``: a name no requeue recognises,
    so the message never came back)."""
    clock = ManualClock()
    dlq = _queue(tmp_path / "dlq", clock)
    dlq.publish(b"dead")
    clock.advance(1)
    _failing_moves_into(tmp_path / "q", errno.ENOSPC, monkeypatch)
    with pytest.raises(OSError, match="No space"):
        dlq.redrive(to=_queue(tmp_path / "q", clock))
    monkeypatch.undo()
    assert dlq.receive(timeout=0) is None  # claimed still
    clock.advance(31)
    back = dlq.receive(timeout=0)
    assert back is not None
    assert back.body == b"dead"


def _copies_find_no_space(
    dlq: Path, monkeypatch: Any, first: Callable[[], object] = lambda: None
) -> None:
    """Moves into the directory *dlq* cross filesystems (``EXDEV``: copied), and each
    copy, once made, fails as it is committed (``ENOSPC``), after calling *first*."""
    _failing_moves_into(dlq, errno.EXDEV, monkeypatch)
    commit = _fs.rename_noreplace_at

    def no_space(src: str, dst: str, dir_fd: int) -> None:
        if src.endswith(".new"):
            first()
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), dst)
        commit(src, dst, dir_fd)

    patch_fs(monkeypatch, "rename_noreplace_at", no_space)


def test_a_dead_letter_copy_that_failed_is_held_back(
    tmp_path: Path, monkeypatch: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """A dead-letter move across filesystems that fails as its copy is committed (no
    space): the claim on the message, renewed before the commit, is still a requeue
    hold, which ``stats()`` counts held back for want of room; the message stays out of
    delivery and is dead-lettered once the hold ends (mutant: ``_Claim.__init__`` 5, the
    hold renewed as a plain lease: a consumer's lease to every observer, not held back)."""
    clock = ManualClock()
    queue = _poisoned(tmp_path, clock)
    seen: list[int] = []

    def a_peer_looks() -> None:
        seen.append(_queue(tmp_path / "q", clock).stats().held_back)

    _copies_find_no_space(tmp_path / "dlq", monkeypatch, a_peer_looks)
    assert queue.receive(timeout=0) is None
    assert "no space to dead-letter a message" in caplog.text
    monkeypatch.undo()
    assert seen == [1]
    assert queue.stats().held_back == 1
    assert list((tmp_path / "dlq").iterdir()) == [tmp_path / "dlq" / ".vsqs"]  # no debris
    clock.advance(3600)
    assert queue.receive(timeout=0) is None  # dead-lettered now
    assert [m.body for m in _queue(tmp_path / "dlq", clock).browse()] == [b"poison"]


@pytest.mark.parametrize("across", [False, True], ids=["renamed", "copied"])
def test_a_dead_letter_move_tried_again_counts_the_receive_once(
    tmp_path: Path, monkeypatch: Any, across: bool
) -> None:
    """A message received once whose dead-letter move failed (no space) is kept in its
    requeue hold and moved when that ends, its receive counted once, whether the move
    renames it or copies it across filesystems (a bug this found: a copy's claim,
    renewed, left the message under a hold that its metadata did not name, so its
    receive was counted again)."""
    clock = ManualClock()
    queue = _poisoned(tmp_path, clock)
    if across:
        _copies_find_no_space(tmp_path / "dlq", monkeypatch)
    else:
        _failing_moves_into(tmp_path / "dlq", errno.ENOSPC, monkeypatch)
    assert queue.receive(timeout=0) is None
    monkeypatch.undo()
    assert queue.stats().held_back == 1
    clock.advance(3600)
    assert queue.receive(timeout=0) is None  # dead-lettered now
    dlq = _queue(tmp_path / "dlq", clock)
    [dead] = dlq.browse()
    assert dlq.history(dead).receive_count == 1


def test_a_failed_copy_whose_claim_was_taken_meanwhile_reports_the_failure(
    tmp_path: Path, monkeypatch: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """A dead-letter copy that fails as it is committed (no space) after another process
    took its renewed claim back (requeued it): undoing the renewal finds nothing, which
    is that process's doing; the failure is what is reported, and the receive goes on to
    the message, ready again (mutant: ``_copy_to`` 68, ``suppress(None)``: the receive
    raised ``FileNotFoundError``)."""
    clock = ManualClock()
    queue = _poisoned(tmp_path, clock)
    path = Path(queue.path)

    def requeued() -> None:
        [held] = [p for p in path.iterdir() if p.is_file() and "." in p.name]
        held.rename(path / held.name.split(".")[0])  # another process requeued it

    _copies_find_no_space(tmp_path / "dlq", monkeypatch, requeued)
    got = queue.receive(timeout=0)
    assert got is not None
    assert got.body == b"poison"
    assert "no space to dead-letter a message" in caplog.text
    assert list((tmp_path / "dlq").iterdir()) == [tmp_path / "dlq" / ".vsqs"]  # no debris


def test_a_retention_copy_that_failed_is_held_back_and_moved_later(
    tmp_path: Path, monkeypatch: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """Retention into a dead-letter queue on another filesystem, whose copy fails as it
    is committed (no space): the expired message is turned into a requeue hold, held
    back out of delivery, and moved once that ends, never received (the bug fixed with
    the test above: the claim's renewal left it under a name the hold-back did not know,
    a plain lease, not held back, that came back as a message received once)."""
    clock = ManualClock()
    dlq = _queue(tmp_path / "dlq", clock)
    queue = _queue(tmp_path / "q", clock, retention=10, dead_letter=dlq)
    stale = queue.publish(b"stale")
    clock.advance(11)
    _copies_find_no_space(tmp_path / "dlq", monkeypatch)
    copy_fd = _fs.copy_fd

    def slow(source: int, target: int, progress: Any) -> int:
        clock.advance(1)  # a copy takes time: the claim's renewal gives it a new name
        return copy_fd(source, target, progress)

    patch_fs(monkeypatch, "copy_fd", slow)
    queue.clean()
    assert "no space to dead-letter a message" in caplog.text
    monkeypatch.undo()
    assert queue.stats().held_back == 1
    clock.advance(3600)
    assert queue.requeue_expired() == 1  # the hold ended: ready, and expired
    queue.clean()
    [dead] = dlq.browse()
    assert (dead.body, dlq.history(dead).reason) == (b"stale", "retention")
    assert (dlq.history(dead).source_id, dlq.history(dead).receive_count) == (stale, 0)
    assert queue.size() == 0
