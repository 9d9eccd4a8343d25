"""Guarantees of vsqs._consumer that ``make mutate`` found unguarded (docs/reliability.rst,
"Mutation testing"): each test fails on the mutants named in its docstring."""

from __future__ import annotations

import dis
import linecache
import math
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

import vsqs
from vsqs import _fs, _scan
from vsqs._consumer import _OWN_SLACK, RECEIPT_CACHE, Consumer
from vsqs.testing import ManualClock

from ..fixtures_core import (
    CHILD_TIMEOUT,
    children,
    patch_fs,
    wait_blocked_in_inotify,
    wait_until,
)


def _queue(path: Path, clock: ManualClock) -> vsqs.PlainQueue:
    return vsqs.PlainQueue(path, durable=False, clock=clock)


def _holding_one(path: Path, visibility_timeout: float) -> tuple[vsqs.PlainQueue, vsqs.Message]:
    """A handle (on a manual clock) that published one message and holds it."""
    clock = ManualClock()
    queue = _queue(path, clock)
    queue.publish(b"m")
    clock.advance(1)
    message = queue.receive(visibility_timeout=visibility_timeout, timeout=0)
    assert message is not None
    return queue, message


def test_claim_misses_counts_each_claim_lost_to_another_consumer(tmp_path: Path) -> None:
    """``claim_misses`` rises by exactly one per message another consumer took from
    this handle's view (mutants: ``= 1``, ``-= 1``, ``+= 2`` in ``Consumer.miss``)."""
    clock = ManualClock()
    publisher = _queue(tmp_path / "q", clock)
    ids = publisher.publish_batch([b"%d" % n for n in range(4)])
    clock.advance(1)  # published in the past: the first listing serves them all
    mine, other = _queue(tmp_path / "q", clock), _queue(tmp_path / "q", clock)
    first = mine.receive(timeout=0)  # lists all four, claims the oldest
    assert first is not None and first.id == ids[0]
    assert mine.claim_misses == 0
    taken = other.receive_batch(2, timeout=0)  # the next two, behind this handle's back
    assert [m.id for m in taken] == ids[1:3]
    last = mine.receive(timeout=0)  # its view still names them: two lost claims
    assert last is not None and last.id == ids[3]
    assert mine.claim_misses == 2
    assert other.claim_misses == 0


def test_a_handle_looks_again_when_its_own_lease_ends_first(tmp_path: Path) -> None:
    """A blocked receive's pause ends with the earliest lease it knows of: its own one
    (5 s) before another consumer's that it saw listed (10 s) (mutants in
    ``Consumer.next_expiry``: its own leases skipped, ``and`` for ``or``, ``is not None``)."""
    clock = ManualClock()
    mine, other = _queue(tmp_path / "q", clock), _queue(tmp_path / "q", clock)
    mine.publish_batch([b"a", b"b"])
    clock.advance(1)
    assert other.receive(visibility_timeout=10, timeout=0) is not None
    assert mine.receive(visibility_timeout=5, timeout=0) is not None  # lists the other's
    assert mine.next_look() == pytest.approx(5, abs=0.01)


def test_a_handle_looks_again_when_a_listed_lease_ends_first(tmp_path: Path) -> None:
    """As above, the other way round: another consumer's listed lease (5 s) ends before
    this handle's own (10 s) (mutants in ``Consumer.next_expiry``: the listed leases
    ignored, ``and`` for ``or``, ``is not None``)."""
    clock = ManualClock()
    mine, other = _queue(tmp_path / "q", clock), _queue(tmp_path / "q", clock)
    mine.publish_batch([b"a", b"b"])
    clock.advance(1)
    assert other.receive(visibility_timeout=5, timeout=0) is not None
    assert mine.receive(visibility_timeout=10, timeout=0) is not None
    assert mine.next_look() == pytest.approx(5, abs=0.01)
    assert other.next_look() == pytest.approx(5, abs=0.01)  # its own; it listed before


@pytest.mark.parametrize("how", ["delete by receipt", "delete by id", "release"])
def test_a_lease_ended_through_the_handle_no_longer_wakes_it(tmp_path: Path, how: str) -> None:
    """Once a lease is deleted or released through this handle, a blocked receive no
    longer plans to look again when it would have ended (mutant: ``Consumer.ended``
    forgetting nothing)."""
    queue, message = _holding_one(tmp_path / "q", visibility_timeout=5)
    assert queue.next_look() == pytest.approx(5, abs=0.01)
    if how == "release":
        queue.change_visibility(message.receipt, 0)
    else:
        assert queue.delete(message.receipt if how == "delete by receipt" else message.id)
    assert queue.next_look() == math.inf


def _count_lookups(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Record each listing for one id's held names (a delete by bare id makes one when
    the handle does not know the message's receipt)."""
    looked: list[str] = []
    real = _scan.held_names_for

    def counted(path: str, message_id: str) -> list[str]:
        looked.append(message_id)
        return real(path, message_id)

    monkeypatch.setattr(_scan, "held_names_for", counted)
    return looked


def test_a_bare_id_of_a_lease_this_handle_holds_is_found_without_a_listing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Deleting by bare id a message this handle received looks it up in the handle's
    own receipts, not in the directory (mutant: ``Consumer.receipt`` finding nothing)."""
    queue, message = _holding_one(tmp_path / "q", visibility_timeout=60)
    looked = _count_lookups(monkeypatch)
    assert queue.delete(message.id)
    assert looked == []
    assert queue.size() == 0


def _shm_queue_dir(tmp_path: Path) -> Path:
    """A queue directory on tmpfs where there is one: a filesystem that renames
    atomically, so a woken receive trusts the names its events give."""
    base = Path("/dev/shm") if Path("/dev/shm").is_dir() else tmp_path
    return Path(tempfile.mkdtemp(dir=base)) / "q"


def test_a_planted_name_moved_in_is_tried_once_and_the_next_message_claimed_unlisted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A directory moved in under a message name while a receive sleeps wakes it; it
    claims the name, finds no message, puts it back and ignores it for good: its own
    put-back, which wakes it again, is not tried a second time, and the publish that
    follows is claimed from its event alone, without a listing; a later listing still
    serves what else it lists (mutants: ``Consumer.ignore`` remembering ``None``; in
    ``Consumer.named`` and ``Consumer.without_ignored``, the planted names' filter
    dropping every name, keeping only the planted ones, or failing)."""
    qdir = _shm_queue_dir(tmp_path)
    try:
        consumer = vsqs.PlainQueue(qdir, durable=False, poll_interval=3600)
        publisher = vsqs.PlainQueue(qdir, durable=False)
        assert consumer.receive(timeout=0.01) is None  # looked; the watch exists
        planted = qdir.parent / "1600000000000000"
        planted.mkdir()
        renamed: list[str] = []
        listings: list[bool] = []  # one per listing: whether the name was planted yet
        real_rename, real_scan = _fs.rename_noreplace, _scan.scan

        def recorded(src: str, dst: str) -> None:
            renamed.append(Path(src).name)
            real_rename(src, dst)

        def counted(path: str) -> _scan.Listing:
            listings.append(not planted.exists())
            return real_scan(path)

        def plant_then_publish() -> None:
            os.rename(planted, qdir / planted.name)
            time.sleep(0.3)
            publisher.publish(b"after")

        patch_fs(monkeypatch, "rename_noreplace", recorded)
        monkeypatch.setattr(_scan, "scan", counted)
        timer = threading.Timer(0.2, plant_then_publish)
        timer.start()
        try:
            message = consumer.receive(timeout=10)
        finally:
            timer.join()
        assert message is not None and message.body == b"after"
        assert renamed.count(planted.name) == 1
        assert (qdir / planted.name).is_dir()
        assert listings == [False]  # the look before it slept; woken twice, by events alone
        consumer.refresh()
        publisher.publish(b"listed")
        listed = consumer.receive(timeout=0)  # a listing, the planted name still there
        assert listed is not None and listed.body == b"listed"
    finally:
        shutil.rmtree(qdir.parent)


def test_a_listed_lease_is_returned_at_the_very_microsecond_it_ends(tmp_path: Path) -> None:
    """Of two leases another consumer holds (5 and 7 s), seen in this handle's listing,
    the first comes back at its expiry exactly, before the newer message still in the
    view (mutants: ``<`` for ``<=`` in ``Consumer.due`` and ``Consumer.lease_due``, the
    listed leases' second entry or none looked at in ``lease_due``)."""
    clock = ManualClock()
    other = _queue(tmp_path / "q", clock)
    mine = vsqs.PlainQueue(tmp_path / "q", durable=False, clock=clock, refresh_interval=3600)
    first, _second, third, _fourth = mine.publish_batch([b"a", b"b", b"c", b"d"])
    clock.advance(1)
    held = [other.receive(visibility_timeout=vt, timeout=0) for vt in (5, 7)]
    assert held[0] is not None and held[0].id == first
    taken = mine.receive(visibility_timeout=60, timeout=0)  # lists; the fourth stays in view
    assert taken is not None and taken.id == third
    clock.advance(5)  # now == the first lease's expiry, to the microsecond
    back = mine.receive(timeout=0)
    assert back is not None and back.id == first and back.receive_count == 2


def _holding_more_than_the_cache(path: Path) -> tuple[vsqs.PlainQueue, list[vsqs.Message]]:
    """A handle (on a manual clock) holding ``RECEIPT_CACHE + 1`` leases, oldest first."""
    clock = ManualClock()
    queue = _queue(path, clock)
    queue.publish_batch([b"m"] * (RECEIPT_CACHE + 1))
    clock.advance(1)
    got = queue.receive_batch(RECEIPT_CACHE + 1, visibility_timeout=60, timeout=0)
    assert len(got) == RECEIPT_CACHE + 1
    return queue, got


def test_a_handle_remembers_its_newest_superseded_receipts_up_to_the_cache_size(
    tmp_path: Path,
) -> None:
    """Of the receipts this handle superseded by extending leases, it keeps the newest
    ``RECEIPT_CACHE``: the oldest one beyond that deletes nothing through it, the next
    oldest and the newest still delete (mutants: ``>`` for ``>=`` and ``last=True`` in
    ``Consumer.extended``)."""
    queue, got = _holding_more_than_the_cache(tmp_path / "q")
    for message in got:  # each lease extended once, oldest first: one superseded each
        queue.change_visibility(message, 120)
    oldest, second, newest = got[0], got[1], got[-1]
    assert not queue.delete(oldest.receipt)  # forgotten: a receipt of someone else's
    assert queue.delete(second.receipt)
    assert queue.delete(newest.receipt)


def _hold_then_wait(path: str, out: Any) -> None:
    """Hold the oldest message for 3 s, say until when, then block for the next one."""
    queue = vsqs.PlainQueue(path, durable=False, poll_interval=3600)
    held = queue.receive(visibility_timeout=3, timeout=0)
    assert held is not None
    out.put(held.expires_at)
    got = queue.receive(timeout=CHILD_TIMEOUT)
    assert got is not None
    out.put((held.id, got.id, got.receive_count))


def test_a_woken_receive_serves_its_own_ended_lease_before_the_newer_named_message(
    tmp_path: Path,
) -> None:
    """A receive that wakes after its own lease ended, with a newer publish named by the
    event, returns the older message (the lease it put back) first: the named messages
    are merged with what the handle put back, not served ahead of it (mutants in
    ``Consumer.named``: ``and`` for ``or``; the merge pushing onto nothing, or pushing
    nothing)."""
    qdir = _shm_queue_dir(tmp_path)
    try:
        publisher = vsqs.PlainQueue(qdir, durable=False)
        first = publisher.publish(b"old")
        with children() as kids:
            out = kids.context.Queue()
            child = kids.start(_hold_then_wait, str(qdir), out)
            expires_at = out.get(timeout=CHILD_TIMEOUT)
            wait_blocked_in_inotify(child)
            assert child.pid is not None
            os.kill(child.pid, signal.SIGSTOP)  # so it wakes once, with both to handle
            time.sleep(max(0.0, expires_at - time.time()) + 0.2)
            publisher.publish(b"new")
            os.kill(child.pid, signal.SIGCONT)
            held, got, receive_count = out.get(timeout=CHILD_TIMEOUT)
            kids.join(child)
        assert held == first
        assert (got, receive_count) == (first, 2)
    finally:
        shutil.rmtree(qdir.parent)


def test_a_handle_remembers_its_newest_live_receipts_up_to_the_cache_size(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Of the leases it holds, a handle remembers the receipts of the newest
    ``RECEIPT_CACHE``: a bare id of an older one is looked up in the directory, the
    others are not (mutants: ``>`` for ``>=`` and ``last=True`` in ``Consumer.claimed``)."""
    queue, got = _holding_more_than_the_cache(tmp_path / "q")
    looked = _count_lookups(monkeypatch)
    for message in (got[1], got[-2], got[-1]):
        assert queue.delete(message.id)
    assert looked == []
    assert queue.delete(got[0].id)  # forgotten here, found by a listing
    assert looked == [got[0].id]


def test_a_new_lease_that_reuses_an_old_receipt_is_not_redirected_to_its_extension(
    tmp_path: Path,
) -> None:
    """A lease extended, released and received again at the same instant gets its first
    receipt back; that receipt then names the live lease, not the extension it once led
    to, so deleting by it deletes the message (mutant: ``Consumer.claimed`` not dropping
    the receipt from the superseded ones)."""
    queue, first = _holding_one(tmp_path / "q", visibility_timeout=10)
    extended = queue.change_visibility(first, 20)
    queue.change_visibility(extended, 0)  # released: ready again
    again = queue.receive(visibility_timeout=10, timeout=0)
    assert again is not None and again.receipt == first.receipt
    assert queue.delete(again.receipt)  # the string: the path that follows extensions
    assert queue.size() == 0


def test_a_held_lease_survives_the_pruning_of_deleted_ones(tmp_path: Path) -> None:
    """A handle that deletes many messages while it holds one keeps that one's lease
    when it prunes the deleted ones (after ``_OWN_SLACK`` of them): a blocked receive
    still plans to look again when it ends (mutants in ``Consumer.claimed``: the pruning
    keeping no lease)."""
    clock = ManualClock()
    queue = _queue(tmp_path / "q", clock)
    queue.publish_batch([b"m"] * 1200)
    clock.advance(1)
    kept = queue.receive(visibility_timeout=5, timeout=0)
    assert kept is not None
    for _ in range(1199):  # from the one listing, which saw no lease: only its own know
        message = queue.receive(visibility_timeout=60, timeout=0)
        assert message is not None and queue.delete(message)
    assert queue.next_look() == pytest.approx(5, abs=0.01)


def test_a_view_is_trusted_for_exactly_the_refresh_interval(tmp_path: Path) -> None:
    """For ``refresh_interval`` seconds after its listing, inclusive, a handle serves its
    view without listing again, so a message another consumer released meanwhile (an
    older id) waits; just past it, the handle lists and serves that one first (mutant:
    ``>=`` for ``>`` in ``Consumer.stale``)."""
    clock = ManualClock()
    other = _queue(tmp_path / "q", clock)
    mine = vsqs.PlainQueue(tmp_path / "q", durable=False, clock=clock, refresh_interval=2)
    first, second, third, _fourth = mine.publish_batch([b"a", b"b", b"c", b"d"])
    clock.advance(1)
    released = other.receive(visibility_timeout=60, timeout=0)
    assert released is not None and released.id == first
    got = mine.receive(timeout=0)  # lists: the first is held by the other
    assert got is not None and got.id == second
    other.change_visibility(released, 0)  # ready again, older than the view's next
    clock.advance(2)  # exactly the refresh interval since the listing
    got = mine.receive(timeout=0)
    assert got is not None and got.id == third
    clock.advance(1e-6)
    got = mine.receive(timeout=0)
    assert got is not None and got.id == first


def test_a_short_lease_taken_after_longer_ones_is_the_next_to_end(tmp_path: Path) -> None:
    """Leases of 10, 40, 30, 20 and 50 s: once the first is deleted, the one this handle
    plans to look again for is the 20 s one, wherever it sits among the others (mutants
    in ``Consumer.claimed``: its shortcut for leases that end in claim order comparing
    with the wrong entry, which breaks the heap)."""
    clock = ManualClock()
    queue = _queue(tmp_path / "q", clock)
    queue.publish_batch([b"m"] * 5)
    clock.advance(1)
    held = []
    for vt in (10, 40, 30, 20, 50):
        message = queue.receive(visibility_timeout=vt, timeout=0)
        assert message is not None
        held.append(message)
    assert queue.delete(held[0].receipt)
    assert queue.next_look() == pytest.approx(20, abs=0.01)


def test_a_handle_keeps_at_most_twice_its_live_leases_plus_the_slack() -> None:
    """A handle holding 500 leases that takes and deletes 5,000 more never remembers
    more than twice its live leases plus ``_OWN_SLACK`` lease entries (one more, the
    lease just taken): deleted ones are pruned, not kept for their whole visibility
    timeout (mutant ``claimed`` 14: pruning at three times the live leases). Driven on
    the bookkeeping object itself, which does no I/O: the bound is its memory."""
    consumer = Consumer(refresh_interval=1.0)
    live = 500
    for n in range(live):
        consumer.claimed(f"held{n}", f"h{n}", expiry_us=10**12 + n)
    most = 0
    for n in range(5000):
        consumer.claimed(f"m{n}", f"r{n}", expiry_us=10**12 + live + n)
        most = max(most, len(consumer._own))
        assert consumer.settle(f"m{n}", f"r{n}")
    assert most <= 2 * (live + 1) + _OWN_SLACK + 1
    assert [consumer.receipt(f"held{n}") for n in range(live)] == [f"h{n}" for n in range(live)]


def _waiting_for_the_lock(thread: threading.Thread) -> bool:
    """Whether *thread* stands at a ``with self._lock:`` line of ``Consumer.take``
    (blocked there: the test holds that lock)."""
    frame = sys._current_frames().get(thread.ident or -1)
    if frame is None:
        return False
    line = linecache.getline(frame.f_code.co_filename, frame.f_lineno).strip()
    return "take" in frame.f_code.co_name and line == "with self._lock:"


def test_two_takes_racing_for_the_last_requeued_id_give_it_once_and_nothing_else() -> None:
    """Two threads both see one id put back (the lock-free check in ``Consumer.take``)
    and then queue for the lock: the first takes the id, the second finds nothing left
    and gets ``None``, not an ``IndexError`` (mutants ``take`` 3, ``or`` for ``and``
    before the heap's head, and 15, popping the empty view). The test holds the lock
    until both threads wait for it (their frames stand at the ``with``), so it stops
    them between those two lines without timing; which one wins does not matter."""
    consumer = Consumer(refresh_interval=1.0)
    consumer.put_back([7])
    got: list[int | None] = []
    errors: list[BaseException] = []

    def take() -> None:
        try:
            got.append(consumer.take())
        except BaseException as exc:  # noqa: BLE001 -- reported by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=take) for _ in range(2)]
    with consumer._lock:
        for thread in threads:
            thread.start()
        wait_until(lambda: all(_waiting_for_the_lock(t) for t in threads), "both takes")
    for thread in threads:
        thread.join(CHILD_TIMEOUT)
    assert errors == []
    assert sorted(got, key=str) == [7, None]


def test_a_lease_popped_while_lease_due_reads_the_heap_is_reported_due() -> None:
    """``Consumer.lease_due`` reads the lease heap without the lock: when another
    thread pops the last lease between its ``bool(own)`` and its ``own[0]``, it answers
    ``True`` (look again: ``due()`` finds nothing, a cost only), never ``False``, which
    could let a receive sleep past a lease that ended (mutant ``lease_due`` 13). The
    thread is stopped between the two halves of that expression with an opcode trace
    (``sys.settrace``), at its first subscript, while the test pops the heap through
    ``due()``; nothing depends on timing."""
    consumer = Consumer(refresh_interval=1.0)
    consumer.claimed("m", "r", expiry_us=100)
    at_subscript, popped = threading.Event(), threading.Event()
    answers: list[bool] = []

    def trace(frame: FrameType, event: str, _arg: object) -> Any:
        if event == "call":
            names = frame.f_code.co_varnames
            if "lease_due" not in frame.f_code.co_name or "own" not in names:
                return None  # mutmut's trampoline, or anything else
            frame.f_trace_opcodes = True
            return trace
        if event == "opcode" and not at_subscript.is_set():
            subscripts = [
                i.offset for i in dis.get_instructions(frame.f_code) if i.opname == "BINARY_SUBSCR"
            ]
            if frame.f_lasti == subscripts[0]:  # own[0], bool(own) was true
                at_subscript.set()
                assert popped.wait(CHILD_TIMEOUT)
        return trace

    def check() -> None:
        sys.settrace(trace)
        try:
            answers.append(consumer.lease_due(200))
        finally:
            sys.settrace(None)
            at_subscript.set()  # answered without reaching it (``or`` for ``and``): no race

    thread = threading.Thread(target=check)
    thread.start()
    try:
        assert at_subscript.wait(CHILD_TIMEOUT)
        if not answers:
            assert consumer.due(200) == ["r"]  # the heap is empty now
    finally:
        popped.set()
        thread.join(CHILD_TIMEOUT)
    assert answers == [True]
