"""Guarantees of vsqs._history that ``make mutate`` found unguarded (docs/reliability.rst,
"Mutation testing"): each test fails on the mutant named in its docstring."""

from __future__ import annotations

import errno
import json
import logging
import os
from pathlib import Path

import pytest

import vsqs
from vsqs import _fs
from vsqs.testing import ManualClock

from ..fixtures_core import patch_fs


def test_retention_drops_a_message_a_millisecond_past_it(tmp_path: Path) -> None:
    """A message older than the retention by one millisecond is dropped at the next
    receive; one that is not yet that old stays (mutant: seconds scaled by 1,000,001 µs,
    which keeps it 3.6 ms longer per hour of retention)."""
    clock = ManualClock()
    queue = vsqs.Queue(tmp_path / "q", durable=False, retention=3600, clock=clock)
    queue.publish(b"old")
    clock.advance(3600 - 0.001)
    assert queue.counts().ready == 1
    clock.advance(0.002)
    assert queue.receive(timeout=0) is None
    assert queue.counts().ready == 0


def test_clean_reports_debris_it_cannot_remove_and_does_not_count_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """An orphaned metadata record that cannot be removed (EACCES) is not counted by
    ``clean()``, and is reported once, naming the queue, the record and the error
    (mutants of that report and of the count)."""
    queue = vsqs.Queue(tmp_path / "q", durable=False, clock=ManualClock())
    message_id = queue.publish(b"m", attributes={"k": "v"})
    os.unlink(Path(queue.path, message_id))  # its metadata is an orphan now
    record = Path(queue.path, ".vsqs", "meta", message_id)
    os.utime(record, (1, 1))
    real = _fs.unlink_at

    def unlink_at(name: str, fd: int) -> bool:
        if name == message_id:
            raise OSError(errno.EACCES, "Permission denied")
        return real(name, fd)

    patch_fs(monkeypatch, "unlink_at", unlink_at)
    with caplog.at_level(logging.WARNING, logger="vsqs"):
        assert queue.clean(older_than=0) == 0
    assert record.exists()
    (text,) = [r.getMessage() for r in caplog.records if "debris" in r.getMessage()]
    assert text.startswith(f"queue {queue.path}: debris that cannot be removed (")
    assert f"meta/{message_id}: " in text and "Permission denied" in text


def test_a_message_given_a_new_id_by_its_moves_keeps_its_first_sent_time(
    tmp_path: Path,
) -> None:
    """A poison message dead-lettered into a queue where its id is taken gets a new id;
    its history still says when it was first published, and still does after it is
    redriven back, and after it is dead-lettered a second time (mutants of the
    ``first_sent_us`` record kept by both moves: it is the only place that time
    survives a new id)."""
    start = 1_700_000_000.0
    clock = ManualClock(start)
    dlq = vsqs.Queue(tmp_path / "dlq", clock=ManualClock(start), durable=False)
    queue = vsqs.Queue(
        tmp_path / "q", clock=clock, durable=False, visibility_timeout=1, dead_letter=dlq,
        max_receives=1,
    )  # fmt: skip
    message_id = queue.publish(b"poison")
    assert dlq.publish(b"already there") == message_id  # the same id, taken there
    assert queue.receive(timeout=0) is not None
    clock.advance(100)
    dlq.clock.advance(100)  # type: ignore[attr-defined]
    assert queue.receive(timeout=0) is None  # the lease ended: dead-lettered
    (moved,) = [m for m in dlq.browse() if m.body == b"poison"]
    assert moved.id != message_id
    assert dlq.history(moved).first_sent == start
    assert dlq.redrive() == 1  # only the dead letter has a source to go back to
    (back,) = [m for m in queue.browse() if m.body == b"poison"]
    assert queue.history(back).first_sent == start
    assert queue.receive(timeout=0) is not None  # poison again: dead-lettered again
    clock.advance(100)
    assert queue.receive(timeout=0) is None
    (again,) = [m for m in dlq.browse() if m.body == b"poison"]
    assert dlq.history(again).first_sent == start


@pytest.mark.parametrize("source", ["", 42, True, ["q"]], ids=["empty", "int", "bool", "list"])
def test_a_dead_letter_whose_recorded_source_is_not_a_path_stays_at_redrive(
    tmp_path: Path, source: object
) -> None:
    """A dead letter whose history names a source that is not a non-empty string (a
    hand-edited record) stays in the dead-letter queue, untouched, when it is redriven
    to its source; the next, well recorded, goes back (mutants ``redrive_source`` 6 and
    7, which accept such a ``source`` and try to open a queue at it)."""
    clock = ManualClock(1_700_000_000.0)
    dlq = vsqs.Queue(tmp_path / "dlq", clock=clock, durable=False)
    queue = vsqs.Queue(
        tmp_path / "q", clock=clock, durable=False, visibility_timeout=1, dead_letter=dlq,
        max_receives=1,
    )  # fmt: skip
    edited, kept = queue.publish_batch([b"edited", b"kept"])
    assert len(queue.receive_batch(2, timeout=0)) == 2
    clock.advance(100)
    assert queue.receive(timeout=0) is None  # both leases ended: both dead-lettered
    assert [m.id for m in dlq.browse()] == [edited, kept]
    record = Path(dlq.path, ".vsqs", "meta", edited)
    meta = json.loads(record.read_bytes())
    meta["history"]["source"] = source
    record.write_text(json.dumps(meta))
    assert dlq.redrive() == 1
    (left,) = dlq.browse()
    assert (left.id, left.body) == (edited, b"edited")
    assert json.loads(record.read_bytes()) == meta  # untouched
    assert [m.body for m in queue.browse()] == [b"kept"]
    assert sorted(os.listdir(tmp_path)) == ["dlq", "q"]
