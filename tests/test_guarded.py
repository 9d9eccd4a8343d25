"""Guarantees that were false, or that no test would have noticed breaking (issue 37).

Each test here failed on the code before its fix, or on the one-line mutant that breaks
the guarantee it guards (its docstring says which); ``docs/reliability.rst`` names
them in its table. Races are forced by wrapping ``_fs`` functions, as in
``tests/test_races.py``; every ``Queue`` object stands for a separate process.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import vsqs
from vsqs import _fs
from vsqs.testing import ManualClock

from .fixtures_core import patch_fs


def _tree(root: Path) -> list[str]:
    """Every path under *root*, relative, sorted (what a swapped target may not gain)."""
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def _dead_lettering(tmp_path: Path, **dlq_options: Any) -> tuple[vsqs.Queue, ManualClock, Path]:
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
