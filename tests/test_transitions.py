"""One test per arrow of the state diagram, checked on the directory itself."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import vsqs
from vsqs.testing import ManualClock

from .conftest import names
from .fixtures_core import patch_fs

T0 = 1_700_000_000.0


def test_publish_new_to_ready(q: vsqs.PlainQueue, qdir: Path) -> None:
    """Arrows *create* then *commit* (a publish): ``<id>.new`` -> ``<id>``; the ready file
    holds the whole body."""
    message_id = q.publish(b"payload")
    assert names(qdir) == [message_id]
    assert (qdir / message_id).read_bytes() == b"payload"
    # Microseconds by default, from the clock (ids of one process only ever increase).
    assert round(T0 * 1e6) <= int(message_id) < round((T0 + 1) * 1e6)


def test_publish_never_shows_a_partial_body(q: vsqs.PlainQueue, qdir: Path) -> None:
    """Arrow *commit*: the ready name appears only after the body is complete."""
    seen: list[list[str]] = []
    real_rename = vsqs._fs.rename_noreplace

    def spy(src: str, dst: str, dir_fd: int = -100) -> None:  # AT_FDCWD
        seen.append(names(qdir))
        assert Path(src).read_bytes() == b"x" * 100_000
        real_rename(src, dst, dir_fd)

    vsqs._fs.rename_noreplace = spy
    try:
        message_id = q.publish(b"x" * 100_000)
    finally:
        vsqs._fs.rename_noreplace = real_rename
    assert seen == [[f"{message_id}.new"]]


def test_publish_delayed_new_to_held(q: vsqs.PlainQueue, qdir: Path, clock: ManualClock) -> None:
    """Arrow *commit* of a delayed message: ``<id>.new`` -> ``<id>.<due>``; then *ready*
    once the delay passes."""
    message_id = q.publish(b"later", delay=10)
    assert names(qdir) == [f"{message_id}.{round((T0 + 10) * 1e6)}"]
    assert q.counts() == vsqs.Counts(ready=0, held=0, delayed=1, new=0)
    assert q.receive(timeout=0) is None
    clock.advance(10)
    message = q.receive(timeout=0)
    assert message is not None and message.body == b"later"
    assert message.receive_count == 1  # a delay is not a receive


def test_receive_ready_to_held(q: vsqs.PlainQueue, qdir: Path) -> None:
    """Arrow *claim* (a receive): ``<id>`` -> ``<id>.<now + visibility timeout>``."""
    message_id = q.publish(b"m")
    message = q.receive(timeout=0)
    assert message is not None
    expiry = round((T0 + 30) * 1e6)
    assert message.receipt == f"{message_id}.{expiry}"
    assert names(qdir) == [message.receipt]
    assert message.expires_at == pytest.approx(T0 + 30)
    assert message.sent_at == pytest.approx(T0)
    assert q.receive(timeout=0) is None  # hidden from everybody else


def test_heartbeat_held_to_held(q: vsqs.PlainQueue, qdir: Path, clock: ManualClock) -> None:
    """Arrow *extend* (a heartbeat): ``<id>.<expiry>`` -> ``<id>.<later expiry>``."""
    q.publish(b"m")
    message = q.receive(timeout=0)
    assert message is not None
    clock.advance(20)
    extended = q.change_visibility(message, 60)
    assert names(qdir) == [extended.receipt]
    assert extended.expires_at == pytest.approx(T0 + 80)
    clock.advance(30)  # past the first expiry, not the extended one
    assert q.receive(timeout=0) is None
    # Another handle cannot use the old receipt: the lease lives on under the new one.
    other = vsqs.PlainQueue(qdir, clock=clock)
    with pytest.raises(vsqs.LeaseLost) as lost:
        other.change_visibility(message, 10)
    assert (lost.value.reason, lost.value.current) == ("superseded", extended.receipt)
    assert "newer receipt" in str(lost.value)


def test_requeue_expired_held_to_ready(q: vsqs.PlainQueue, qdir: Path, clock: ManualClock) -> None:
    """Arrows *extend* (to a hold) then *ready* (a requeue): an expired ``<id>.<expiry>``
    -> ``<id>``, before the next claim."""
    message_id = q.publish(b"m")
    first = q.receive(timeout=0)
    assert first is not None
    clock.advance(30.5)
    again = q.receive(timeout=0)
    assert again is not None and again.id == message_id
    assert again.receive_count == 2
    assert q.delete(first) is False  # the first lease is over; the new holder keeps it
    assert names(qdir) == [again.receipt]


def test_requeue_expired_explicitly(q: vsqs.PlainQueue, qdir: Path, clock: ManualClock) -> None:
    """Arrows *extend* then *ready* (a requeue) by the upkeep call: every expired lease
    goes back at once."""
    ids = q.publish_batch([b"a", b"b"])
    assert len(q.receive_batch(2)) == 2
    clock.advance(31)
    assert q.requeue_expired() == 2
    assert names(qdir) == sorted(ids)


def test_release_held_to_ready(q: vsqs.PlainQueue, qdir: Path) -> None:
    """Arrows *extend* then *ready* (a release): ``change_visibility(m, 0)`` makes it
    ready now."""
    message_id = q.publish(b"m")
    message = q.receive(timeout=0)
    assert message is not None
    released = q.change_visibility(message, 0)
    assert released.receipt == message_id
    assert names(qdir) == [message_id]
    again = q.receive(timeout=0)
    assert again is not None and again.receive_count == 2


def test_delete_held_to_gone(q: vsqs.PlainQueue, qdir: Path) -> None:
    """Arrow *delete*: unlink ``<id>.<expiry>``; deleting twice is not an error."""
    q.publish(b"m")
    message = q.receive(timeout=0)
    assert message is not None
    assert q.delete(message) is True
    assert names(qdir) == []
    assert q.delete(message) is False
    assert q.delete(message.receipt) is False


def test_delete_by_bare_id_as_the_design_says(q: vsqs.PlainQueue, qdir: Path) -> None:
    """Arrow *delete* given only an id: whatever state the message is in."""
    ready_id = q.publish(b"ready")
    held_id = q.publish(b"held")
    other = vsqs.PlainQueue(qdir, clock=q.clock)  # another process knows only the ids
    claimed = q.receive_batch(2)
    assert [m.id for m in claimed] == [ready_id, held_id]
    q.change_visibility(claimed[0], 0)
    assert other.delete(ready_id) is True  # ready
    assert other.delete(held_id) is True  # held, found by a listing
    assert names(qdir) == []


def test_fifo_order_for_one_producer_and_one_consumer(q: vsqs.PlainQueue) -> None:
    bodies = [str(n).encode() for n in range(500)]
    for body in bodies:
        q.publish(body)
    got = []
    while (message := q.receive(timeout=0)) is not None:
        got.append(message.body)
        q.delete(message)
    assert got == bodies


def test_precision_ms_writes_milliseconds(qdir: Path, clock: ManualClock) -> None:
    q = vsqs.PlainQueue(qdir, precision="ms", clock=clock, visibility_timeout=2.5)
    message_id = q.publish(b"m")
    assert round(T0 * 1e3) <= int(message_id) < round((T0 + 1) * 1e3)
    message = q.receive(timeout=0)
    assert message is not None
    assert message.receipt == f"{message_id}.{round((T0 + 2.5) * 1e3)}"


def test_fractional_visibility_timeouts_work(q: vsqs.PlainQueue, clock: ManualClock) -> None:
    """vsqs 0.3 wrote ``<id>.<float>`` for 0.5 s and stranded the message; we must not."""
    q.publish(b"m")
    first = q.receive(timeout=0, visibility_timeout=0.5)
    assert first is not None and "." not in first.receipt.partition(".")[2]
    clock.advance(0.6)
    again = q.receive(timeout=0)
    assert again is not None and again.id == first.id


def test_files_are_fsynced_before_rename_and_directory_after(
    qdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []
    for name in ("fsync", "fsync_dir", "rename_noreplace", "sync_filesystem"):
        real = getattr(vsqs._fs, name)

        def traced(*args: object, _real: object = real, _name: str = name) -> object:
            calls.append(_name)
            return _real(*args)  # type: ignore[operator]

        patch_fs(monkeypatch, name, traced)
    durable = vsqs.PlainQueue(qdir)
    calls.clear()  # making the queue flushed its new directory's parent
    durable.publish(b"m")
    assert calls == ["fsync", "rename_noreplace", "fsync_dir"]
    calls.clear()
    durable.publish_batch([b"a", b"b", b"c"])
    assert calls == ["sync_filesystem", *["rename_noreplace"] * 3, "fsync_dir"]
    calls.clear()
    vsqs.PlainQueue(qdir, durable=False).publish(b"fast")
    assert calls == ["rename_noreplace"]


def test_a_directory_made_by_hand_by_the_seed_rules(tmp_path: Path) -> None:
    """Millisecond and microsecond ids in one directory, foreign files, an expired lease."""
    clock = ManualClock(start=T0)
    qdir = tmp_path / "handmade"
    qdir.mkdir()
    now_ms = round(T0 * 1e3)
    files = {
        f"{now_ms - 5000}": b"ms, oldest",  # 5 s ago, in milliseconds
        f"{(now_ms - 4000) * 1000}": b"us, second",  # 4 s ago, in microseconds
        f"{now_ms - 3000}.{now_ms - 1000}": b"ms, held, expired",  # expired lease
        f"{(now_ms - 2000) * 1000}.{(now_ms + 60_000) * 1000}": b"us, held, live",
        f"{now_ms - 1000}.new": b"still being written",
        "README": b"foreign",
        ".hidden": b"foreign dot-file",
        "0123": b"leading zero: not an id",
        "12.34.56.78": b"not a name of the grammar",
        f"{now_ms}.{now_ms}.x": b"not a name of the grammar",
    }
    for name, body in files.items():
        (qdir / name).write_bytes(body)
    (qdir / "subdir").mkdir()
    q = vsqs.PlainQueue(qdir, clock=clock)
    assert q.counts() == vsqs.Counts(ready=2, held=2, delayed=0, new=1)
    assert q.size() == 4  # vsqs 0.3's meaning: ready + held
    got = []
    while (message := q.receive(timeout=0)) is not None:
        got.append(message.body)
        q.delete(message)
    assert got == [b"ms, oldest", b"us, second", b"ms, held, expired"]  # one time scale
    for foreign in ("README", ".hidden", "0123", "12.34.56.78", f"{now_ms}.{now_ms}.x", "subdir"):
        assert (qdir / foreign).exists(), foreign
    assert (qdir / "README").read_bytes() == b"foreign"


def test_vsqs03_float_expiry_is_recovered(tmp_path: Path) -> None:
    """vsqs 0.3 with visibility_timeout=0.5 wrote ``<id>.<expiry>.0``; it must not strand."""
    clock = ManualClock(start=T0)
    qdir = tmp_path / "q03"
    qdir.mkdir()
    now_us = round(T0 * 1e6)
    (qdir / f"{now_us - 10}.{now_us - 5}.0").write_bytes(b"stranded by 0.3")
    q = vsqs.PlainQueue(qdir, clock=clock)
    message = q.receive(timeout=0)
    assert message is not None and message.body == b"stranded by 0.3"


def test_queue_constructor_has_no_side_effects_beyond_the_directory(tmp_path: Path) -> None:
    qdir = tmp_path / "fresh"
    with vsqs.PlainQueue(qdir, capacity=3, dead_letter=tmp_path / "dlq", max_receives=2):
        assert sorted(os.listdir(tmp_path)) == ["dlq", "fresh"]
        assert os.listdir(qdir) == []
