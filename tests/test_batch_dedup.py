"""One deduplication marker per batch: ``publish_batch(..., batch_dedup_id=...)``.

The batch's marker is its commit point: before it nothing is visible, after it the
batch is published and whoever meets it unfinished (a retry, ``clean``) completes it.
Real kills at every filesystem call are in ``tests/reliability/test_kill_points.py``
(scenarios ``chunk_publish*``); these tests drive the same states deterministically.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

import vsqs
from vsqs import _fs
from vsqs.testing import ManualClock, assert_consistent, drain

from ._lifecycle_workers import forkserver
from .conftest import names

BODIES = [f"row {n}".encode() for n in range(6)]


pytestmark = pytest.mark.usefixtures("fresh_ids")


def _markers(qdir: Path) -> list[Path]:
    return sorted((qdir / ".vsqs" / "dedup").iterdir())


def _die_after_renames(monkeypatch: pytest.MonkeyPatch, count: int) -> None:
    """Make the publisher stop (as if killed) after *count* commit renames."""
    real, real_at = _fs.rename_noreplace, _fs.rename_noreplace_at
    done = [0]

    def die_at_count(src: str, dst: str) -> None:
        if src.endswith(".new") and not dst.endswith(".new"):
            if done[0] == count:
                raise SystemExit("killed")
            done[0] += 1

    def rename(src: str, dst: str) -> None:  # a commit with attributes or a delay
        die_at_count(src, dst)
        real(src, dst)

    def rename_at(src: str, dst: str, dir_fd: int) -> None:  # a plain one, in the dir's fd
        die_at_count(src, dst)
        real_at(src, dst, dir_fd)

    monkeypatch.setattr(_fs, "rename_noreplace", rename)
    monkeypatch.setattr(_fs, "rename_noreplace_at", rename_at)


def test_a_batch_published_again_adds_nothing(q: vsqs.PlainQueue, qdir: Path) -> None:
    """Same batch id within the window: the first batch's ids, no message, no file."""
    first = q.publish_batch(BODIES, batch_dedup_id="job:0")
    assert len(_markers(qdir)) == 1  # one marker for the whole batch
    assert q.publish_batch(BODIES, batch_dedup_id="job:0") == first
    assert names(qdir) == first  # nothing staged and left behind either
    other = q.publish_batch(BODIES, batch_dedup_id="job:1")
    assert [m.body for m in drain(q)] == BODIES * 2
    assert set(other).isdisjoint(first)
    assert q.publish_batch(BODIES, batch_dedup_id="job:0") == first  # even once consumed
    assert q.counts().total == 0


def test_batch_and_message_ids_do_not_collide(q: vsqs.PlainQueue) -> None:
    """A batch id equal to a message's dedup id is another key."""
    q.publish(b"one", dedup_id="k")
    q.publish_batch([b"two"], batch_dedup_id="k")
    assert [m.body for m in drain(q)] == [b"one", b"two"]


def test_batch_id_with_per_message_ids_is_refused(q: vsqs.PlainQueue) -> None:
    with pytest.raises(ValueError, match="not both"):
        q.publish_batch([b"a"], dedup_ids=["x"], batch_dedup_id="y")
    with pytest.raises(ValueError, match="batch_dedup_id must be a non-empty str"):
        q.publish_batch([b"a"], batch_dedup_id=7)  # type: ignore[arg-type]
    assert q.counts().total == 0


def test_the_window_expires_a_batch(q: vsqs.PlainQueue, clock: ManualClock) -> None:
    """Past ``dedup_window`` the same batch id publishes again (and the old marker goes)."""
    first = q.publish_batch(BODIES[:2], batch_dedup_id="b")
    clock.advance(q.dedup_window + 1)
    second = q.publish_batch(BODIES[:2], batch_dedup_id="b")
    assert second != first
    assert len(drain(q)) == 4


@pytest.mark.parametrize("durable", [True, False])
def test_a_retry_completes_a_batch_killed_midway(
    tmp_path: Path, clock: ManualClock, monkeypatch: pytest.MonkeyPatch, durable: bool
) -> None:
    """Killed after two of six commit renames: the retry publishes the other four, with
    the first attempt's ids, in order; the batch is exactly once."""
    q = vsqs.PlainQueue(tmp_path / "q", clock=clock, durable=durable)
    with monkeypatch.context() as patch:
        _die_after_renames(patch, 2)
        with pytest.raises(SystemExit):
            q.publish_batch(BODIES, batch_dedup_id="task-3")
    assert [m.body for m in q.browse()] == BODIES[:2]
    clock.advance(60)  # the writer is presumed dead at once: its marker is that old
    retry = vsqs.PlainQueue(tmp_path / "q", clock=clock, durable=durable)
    ids = retry.publish_batch(BODIES, batch_dedup_id="task-3")
    assert [m.id for m in retry.browse()] == ids
    assert [m.body for m in drain(retry)] == BODIES
    assert_consistent(retry)


def test_a_retry_waits_for_a_live_writer_then_takes_over(
    q: vsqs.PlainQueue, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A duplicate that finds the batch unfinished and young waits for its writer (up to
    ``IN_PROGRESS_LIMIT``) before completing it itself."""
    with monkeypatch.context() as patch:
        _die_after_renames(patch, 3)
        with pytest.raises(SystemExit):
            q.publish_batch(BODIES, batch_dedup_id="t")
    started = clock.monotonic()
    q.publish_batch(BODIES, batch_dedup_id="t")
    assert clock.monotonic() - started >= 30  # it waited, on the test clock
    assert [m.body for m in drain(q)] == BODIES


def test_clean_completes_a_batch_whose_writer_died(
    q: vsqs.PlainQueue, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``clean`` rolls a dead writer's batch forward (with its attributes and delay)
    rather than removing its ``.new`` files; a later retry then adds nothing."""
    with monkeypatch.context() as patch:
        _die_after_renames(patch, 1)
        with pytest.raises(SystemExit):
            q.publish_batch(BODIES, attributes={"a": "1"}, batch_dedup_id="t")
    q.clean(older_than=0)  # the writer may still be alive: its files are spared
    assert len(list(q.browse())) == 1
    clock.advance(60)
    q.clean(older_than=0)
    assert [(m.body, m.attributes) for m in q.browse()] == [(b, {"a": "1"}) for b in BODIES]
    q.publish_batch(BODIES, attributes={"a": "1"}, batch_dedup_id="t")
    assert [m.body for m in drain(q)] == BODIES
    assert_consistent(q)


def test_a_failure_before_the_commit_point_leaves_nothing(
    q: vsqs.PlainQueue, qdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A shutdown seen before the marker: every staged body removed, no marker; a retry
    on an open queue publishes the batch whole."""
    real = _fs.write_all
    calls = [0]

    def write(fd: int, data: Any) -> None:
        calls[0] += 1
        if calls[0] == 4:
            raise OSError(28, "No space left on device")
        real(fd, data)

    with monkeypatch.context() as patch:
        patch.setattr(_fs, "write_all", write)
        with pytest.raises(OSError, match="No space"):
            q.publish_batch(BODIES, batch_dedup_id="t")
    assert names(qdir) == []
    assert not (qdir / ".vsqs" / "dedup").exists() or _markers(qdir) == []
    q.publish_batch(BODIES, batch_dedup_id="t")
    assert [m.body for m in drain(q)] == BODIES


def test_a_batch_past_its_commit_point_survives_a_shutdown(
    q: vsqs.PlainQueue, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A shutdown between the marker and the renames does not cut the batch in half."""
    with monkeypatch.context() as patch:
        _die_after_renames(patch, 2)
        with pytest.raises(SystemExit):
            q.publish_batch(BODIES, batch_dedup_id="t")
    q.shutdown()
    clock.advance(60)
    q.clean(older_than=0)
    assert [m.body for m in q.browse()] == BODIES
    with pytest.raises(vsqs.QueueClosed):
        q.publish_batch(BODIES, batch_dedup_id="other")


def test_a_torn_or_planted_marker_does_not_block_the_batch(q: vsqs.PlainQueue, qdir: Path) -> None:
    """A record that does not parse reads as expired: the batch is published."""
    q.publish_batch([b"x"], batch_dedup_id="t")
    (marker,) = _markers(qdir)
    drain(q)
    marker.write_text('{"time": 1, "ids": [')
    assert len(q.publish_batch(BODIES, batch_dedup_id="t")) == len(BODIES)
    assert [m.body for m in drain(q)] == BODIES
    record = json.loads(marker.read_text())
    assert len(record["ids"]) == len(BODIES)


def _publisher(qdir: str, barrier: Any, out: str) -> None:
    queue = vsqs.PlainQueue(qdir)
    barrier.wait(timeout=60)
    ids = queue.publish_batch([f"{n}".encode() for n in range(200)], batch_dedup_id="same")
    with open(out, "w", encoding="ascii") as handle:
        handle.write(",".join(ids))


def test_concurrent_publishers_of_one_batch_publish_it_once(tmp_path: Path) -> None:
    """Four processes publish the same 200-message batch at once: 200 messages, and
    every publisher is told the same ids."""
    qdir = tmp_path / "q"
    vsqs.PlainQueue(qdir)
    ctx = forkserver()
    barrier = ctx.Barrier(4)
    outs = [tmp_path / f"out{n}" for n in range(4)]
    procs = [ctx.Process(target=_publisher, args=(str(qdir), barrier, str(o))) for o in outs]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(120)
        assert proc.exitcode == 0
    assert len({out.read_text() for out in outs}) == 1
    q = vsqs.PlainQueue(qdir)
    assert [m.body for m in drain(q)] == [f"{n}".encode() for n in range(200)]
    assert not [n for n in os.listdir(qdir) if n.endswith(".new")]


def test_clean_removes_expired_batch_markers(
    q: vsqs.PlainQueue, qdir: Path, clock: ManualClock
) -> None:
    """A complete batch's marker goes once the window is over, like a message's."""
    q.publish_batch(BODIES, batch_dedup_id="t")
    q.publish(b"one", dedup_id="k")
    assert q.clean() == 0
    assert len(_markers(qdir)) == 2
    clock.advance(q.dedup_window + 1)
    assert q.clean() == 2
    assert _markers(qdir) == []


def test_a_taken_id_is_redrawn_and_the_retry_is_told_the_final_ids(
    q: vsqs.PlainQueue, qdir: Path, clock: ManualClock
) -> None:
    """An id taken by a message in another state (a skewed peer) is drawn again, by
    renaming the recorded ``.new`` straight to the fresh id; the record follows."""
    planted = str(clock.time_us())
    (qdir / planted).write_bytes(b"a peer's message")
    ids = q.publish_batch(BODIES[:3], batch_dedup_id="t")
    assert planted not in ids
    assert q.publish_batch(BODIES[:3], batch_dedup_id="t") == ids
    # As for any publish, a redrawn id is a later one: that message comes last.
    assert [m.body for m in drain(q)] == [b"a peer's message", *BODIES[1:3], BODIES[0]]


def test_staging_skips_a_taken_new_name_and_keeps_the_mode(tmp_path: Path) -> None:
    """A ``.new`` name another publisher holds is skipped; a queue's umask applies."""
    clock = ManualClock(1_700_000_000.0)
    q = vsqs.PlainQueue(tmp_path / "q", clock=clock, umask=0o027)
    taken = tmp_path / "q" / f"{clock.time_us()}.new"
    taken.write_bytes(b"another publisher's")
    ids = q.publish_batch(BODIES[:2], batch_dedup_id="t")
    assert f"{ids[0]}.new" != taken.name
    assert taken.read_bytes() == b"another publisher's"
    assert {os.stat(tmp_path / "q" / i).st_mode & 0o777 for i in ids} == {0o640}


def test_a_planted_marker_is_replaced(q: vsqs.PlainQueue, qdir: Path) -> None:
    """A directory planted under a batch's marker name reads as expired, never blocks."""
    q.publish_batch([b"x"], batch_dedup_id="t")
    (marker,) = _markers(qdir)
    marker.unlink()
    marker.mkdir()
    (marker / "f").write_text("keeps the directory from being removed")
    drain(q)
    q.publish_batch(BODIES[:2], batch_dedup_id="t")
    assert [m.body for m in drain(q)] == BODIES[:2]
    assert json.loads(marker.read_text())["ids"]


def test_two_finishers_of_one_batch_make_each_message_ready_once(
    q: vsqs.PlainQueue, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another finisher renames a recorded ``.new`` just before we do: ours finds it
    gone and moves on (RACE in ``_finish_chunk``)."""
    with monkeypatch.context() as patch:
        _die_after_renames(patch, 1)
        with pytest.raises(SystemExit):
            q.publish_batch(BODIES, batch_dedup_id="t")
    clock.advance(60)
    real = _fs.rename_noreplace_at

    def rename(src: str, dst: str, dir_fd: int) -> None:
        if src.endswith(".new") and _fs.exists_at(src, dir_fd):
            real(src, dst, dir_fd)  # the other finisher, a moment earlier
        real(src, dst, dir_fd)

    with monkeypatch.context() as patch:
        patch.setattr(_fs, "rename_noreplace_at", rename)
        q.publish_batch(BODIES, batch_dedup_id="t")
    assert [m.body for m in drain(q)] == BODIES
