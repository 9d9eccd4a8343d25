"""Deduplication ids: idempotent publishes across processes, window, crash takeover, sweep."""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import vsqs
from vsqs.testing import ManualClock, assert_consistent, drain

from ._lifecycle_workers import dedup_publisher, dedup_publisher_dying_before_rename, forkserver
from .conftest import names

T0 = 1_700_000_000.0


pytestmark = pytest.mark.usefixtures("fresh_ids")


def _marker(qdir: Path, key: str) -> Path:
    return qdir / ".vsqs" / "dedup" / hashlib.sha256(key.encode()).hexdigest()


def test_concurrent_publishers_of_one_dedup_id_publish_once(tmp_path: Path) -> None:
    """Six processes publish the same dedup id at the same moment: one message, and
    every publisher is told its id."""
    qdir = tmp_path / "q"
    vsqs.PlainQueue(qdir)
    ctx = forkserver()
    barrier = ctx.Barrier(6)
    outs = [tmp_path / f"out{n}" for n in range(6)]
    procs = [
        ctx.Process(target=dedup_publisher, args=(str(qdir), "spark-task-7", barrier, str(out)))
        for out in outs
    ]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(120)
        assert proc.exitcode == 0
    ids = {out.read_text() for out in outs}
    assert len(ids) == 1
    assert names(qdir) == sorted(ids)
    assert_consistent(vsqs.PlainQueue(qdir))


def test_same_dedup_id_within_the_window_publishes_once(q: vsqs.PlainQueue, qdir: Path) -> None:
    """A retried publish returns the first id and adds nothing, even after a delete."""
    first = q.publish(b"row 1", dedup_id="batch-1")
    assert q.publish(b"row 1 again", dedup_id="batch-1") == first
    assert q.publish_batch([b"a", b"b"], dedup_ids=["batch-1", "batch-2"])[0] == first
    bodies = [m.body for m in drain(q)]
    assert bodies == [b"row 1", b"b"]
    assert q.publish(b"row 1", dedup_id="batch-1") == first  # consumed, still remembered
    assert names(qdir) == []


def test_window_expiry(qdir: Path, clock: ManualClock) -> None:
    """After the window (default 300 s) the same dedup id publishes again."""
    q = vsqs.PlainQueue(qdir, clock=clock)
    first = q.publish(b"x", dedup_id="k")
    clock.advance(300)
    assert q.publish(b"x", dedup_id="k") == first  # exactly 300 s: still inside
    clock.advance(1)
    second = q.publish(b"x", dedup_id="k")
    assert second != first
    assert names(qdir) == sorted([first, second])


def test_crashed_publisher_marker_is_taken_over(
    q: vsqs.PlainQueue, qdir: Path, clock: ManualClock
) -> None:
    """A marker whose message is still ``.new`` long after (its publisher died between
    marker and rename) does not swallow a retry: the retry publishes."""
    clock.advance(100)
    dead_id = str(round(T0 * 1e6) + 5)
    (qdir / f"{dead_id}.new").write_bytes(b"never published")
    _marker(qdir, "k").parent.mkdir(parents=True)
    _marker(qdir, "k").write_text(f"{dead_id} {round((T0 + 60) * 1e6)}")  # 40 s old
    new_id = q.publish(b"retry", dedup_id="k")
    assert new_id != dead_id
    assert [m.body for m in drain(q)] == [b"retry"]
    assert q.publish(b"again", dedup_id="k") == new_id


def test_young_in_progress_marker_is_waited_for_then_taken_over(
    q: vsqs.PlainQueue, qdir: Path, clock: ManualClock
) -> None:
    """A marker written just now whose ``.new`` never becomes ready: the duplicate waits
    (30 manual seconds), then publishes its own copy rather than lose the message."""
    dead_id = str(round(T0 * 1e6) + 5)
    (qdir / f"{dead_id}.new").write_bytes(b"never published")
    _marker(qdir, "k").parent.mkdir(parents=True)
    _marker(qdir, "k").write_text(f"{dead_id} {round(T0 * 1e6)}")
    new_id = q.publish(b"retry", dedup_id="k")
    assert clock.monotonic() >= 30
    assert [m.id for m in drain(q)] == [new_id]


def test_clean_frees_the_key_of_a_crashed_publisher(
    q: vsqs.PlainQueue, qdir: Path, clock: ManualClock
) -> None:
    """``clean()`` removes the stale ``.new`` *and* its marker, so a later retry is
    published instead of being taken for a duplicate of a message that never was."""
    dead_id = str(round(T0 * 1e6) + 5)
    (qdir / f"{dead_id}.new").write_bytes(b"never published")
    os.utime(qdir / f"{dead_id}.new", (T0, T0))
    _marker(qdir, "k").parent.mkdir(parents=True)
    _marker(qdir, "k").write_text(f"{dead_id} {round(T0 * 1e6)}")
    clock.advance(3700)
    assert q.clean() == 2
    assert not _marker(qdir, "k").exists()
    assert q.publish(b"retry", dedup_id="k") != dead_id
    assert len(drain(q)) == 1


def test_clean_right_after_a_killed_dedup_publisher_never_loses_the_retry(
    tmp_path: Path,
) -> None:
    """Issue 32.1: a publisher killed between its marker and its rename, then
    ``clean(older_than=0)`` at once: the ``.new`` its marker names is kept, so the retry
    (after the marker's in-progress limit) publishes instead of returning the dead id."""
    qdir = tmp_path / "q"
    vsqs.PlainQueue(qdir)
    child = forkserver().Process(
        target=dedup_publisher_dying_before_rename, args=(str(qdir), "job-1")
    )
    child.start()
    child.join(120)
    assert child.exitcode == 137
    (dead,) = names(qdir)
    assert dead.endswith(".new")
    assert _marker(qdir, "job-1").exists()
    clock = ManualClock(time.time())  # the retry waits on it, not for real
    q = vsqs.PlainQueue(qdir, clock=clock)
    q.clean(older_than=0)
    assert names(qdir) == [dead]  # named by a marker in force: spared
    retry = q.publish(b"retry", dedup_id="job-1")
    assert retry != dead[:-4]
    assert [m.body for m in drain(q)] == [b"retry"]
    clock.advance(31)
    q.clean(older_than=0)  # the dead marker is gone now, and so is its `.new`
    assert names(qdir) == []


def test_expired_markers_are_swept_by_clean_and_by_publishers(
    q: vsqs.PlainQueue, qdir: Path, clock: ManualClock
) -> None:
    """Markers older than the window are removed by ``clean()``, and every window by a
    deduplicating publisher."""
    for n in range(5):
        q.publish(b"x", dedup_id=f"k{n}")
    dedup_dir = qdir / ".vsqs" / "dedup"
    assert len(os.listdir(dedup_dir)) == 5
    clock.advance(301)
    assert q.clean() == 5
    assert os.listdir(dedup_dir) == []
    for n in range(3):
        q.publish(b"y", dedup_id=f"j{n}")
    clock.advance(301)
    q.publish(b"z", dedup_id="trigger")  # a window since the last sweep: sweeps
    assert os.listdir(dedup_dir) == [_marker(qdir, "trigger").name]


def test_marker_sweep_never_lists_the_queue_directory(
    q: vsqs.PlainQueue, qdir: Path, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The publishers' sweep lists only ``.vsqs/dedup``: its cost does not grow with the
    backlog (2000 ready messages here)."""
    q.publish_batch([b"backlog"] * 2000)
    for n in range(10):
        q.publish(b"x", dedup_id=f"k{n}")
    clock.advance(301)
    listed: list[str] = []
    real_scandir, real_listdir = os.scandir, os.listdir

    def named(path: Any) -> str:
        # A directory listed through its descriptor (as under .vsqs): the path behind it.
        return os.readlink(f"/proc/self/fd/{path}") if isinstance(path, int) else os.fspath(path)

    def scandir(path: Any = ".") -> Iterator[os.DirEntry[str]]:
        listed.append(named(path))
        return real_scandir(path)

    def listdir(path: Any = ".") -> list[str]:
        listed.append(named(path))
        return real_listdir(path)

    monkeypatch.setattr(os, "scandir", scandir)
    monkeypatch.setattr(os, "listdir", listdir)
    q.publish(b"x", dedup_id="sweeper")
    monkeypatch.undo()
    assert listed == [str(qdir / ".vsqs" / "dedup")]
    assert os.listdir(qdir / ".vsqs" / "dedup") == [_marker(qdir, "sweeper").name]


def test_dedup_id_must_be_a_non_empty_str(q: vsqs.PlainQueue) -> None:
    with pytest.raises(ValueError, match="dedup_id"):
        q.publish(b"x", dedup_id="")
    with pytest.raises(ValueError, match="dedup_id"):
        q.publish(b"x", dedup_id=7)  # type: ignore[arg-type]
