"""A dead-letter move that meets a full disk keeps the message: it waits in its requeue
hold and moves once there is room, with its attributes; it is never lost or redelivered."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

import vsqs
from vsqs.testing import ManualClock


def _fill(path: Path) -> None:
    """Write *path* until the filesystem is full (raises ENOSPC)."""
    with open(path, "wb") as handle:
        while True:
            handle.write(b"\0" * 4096)
            handle.flush()


@pytest.mark.root
def test_a_dead_letter_move_on_a_full_disk_waits_for_room(tiny_tmpfs: Path) -> None:
    clock = ManualClock()
    dlq = vsqs.Queue(tiny_tmpfs / "dlq", durable=False, clock=clock)
    q = vsqs.Queue(
        tiny_tmpfs / "q", durable=False, clock=clock, visibility_timeout=5, dead_letter=dlq,
        max_receives=1,
    )  # fmt: skip
    q.publish(b"poison", attributes={"order": "42"})
    assert q.receive(timeout=0) is not None
    with pytest.raises(OSError) as full:
        _fill(tiny_tmpfs / "filler")
    assert full.value.errno == errno.ENOSPC
    clock.advance(6)
    # Exhausted, but its record cannot be written: it stays held, not lost, not delivered.
    assert q.receive(timeout=0) is None
    assert q.counts().held == 1 and dlq.counts().total == 0
    (tiny_tmpfs / "filler").unlink()
    clock.advance(31)  # the requeue hold ends
    assert q.receive(timeout=0) is None
    assert q.counts().total == 0
    moved = dlq.receive(timeout=0)
    assert moved is not None and moved.body == b"poison"
    assert moved.attributes == {"order": "42"}
    assert dlq.history(moved).reason == "max_receives"
