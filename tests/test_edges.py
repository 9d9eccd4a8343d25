"""Edges of the public API that the scenario tests do not reach: argument errors, modes,
the null queue, queue sets, leases lost before they are left, detached waiters, ages
in the CLI, planted counter files, and moves across filesystems that meet taken ids.
"""

from __future__ import annotations

import io
import json
import os
import random
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

import vsqs
from vsqs.cli import cli
from vsqs.testing import ManualClock

START = 1_700_000_000.0


# -- argument errors name the argument ---------------------------------------------------


def test_a_queue_cannot_be_its_own_dead_letter_queue(qdir: Path) -> None:
    with pytest.raises(ValueError, match="own dead-letter queue"):
        vsqs.PlainQueue(qdir, dead_letter=qdir)


def test_batch_arguments(q: vsqs.PlainQueue) -> None:
    assert q.publish_batch([]) == []
    with pytest.raises(ValueError, match="2 dedup_ids for 1 bodies"):
        q.publish_batch([b"x"], dedup_ids=["a", "b"])
    for bad in (0, True, 1.5):
        with pytest.raises(ValueError, match="max_messages must be a positive int"):
            q.receive_batch(bad, timeout=1)  # type: ignore[arg-type]
    assert q.size() == 0


def test_files_and_streams_refuse_bounded_queues(qdir: Path, tmp_path: Path) -> None:
    q = vsqs.PlainQueue(qdir, capacity=10, durable=False)
    source = tmp_path / "body"
    source.write_bytes(b"x")
    with pytest.raises(ValueError, match="do not support bounded queues"):
        q.publish_file(source)
    with pytest.raises(ValueError, match="do not support bounded queues"):
        q.publish_stream(io.BytesIO(b"x"))
    assert source.exists() and q.size() == 0


def test_history_wants_a_message_or_a_name(q: vsqs.PlainQueue) -> None:
    with pytest.raises(vsqs.InvalidId, match="expected a Message"):
        q.history(123)  # type: ignore[arg-type]


def test_repr_names_the_path(qdir: Path) -> None:
    q = vsqs.PlainQueue(qdir)
    assert repr(q) == f"Queue({str(qdir)!r})"
    other = vsqs.PlainQueue(qdir.parent / "other")
    assert repr(vsqs.QueueSet(q, other)) == f"QueueSet({q!r}, {other!r}, order='oldest')"


def test_queue_set_arguments(tmp_path: Path) -> None:
    queues = [vsqs.PlainQueue(tmp_path / "a"), vsqs.PlainQueue(tmp_path / "b")]
    for bad in (0, -1, True, "1"):
        with pytest.raises(ValueError, match="recheck must be a positive number"):
            vsqs.QueueSet(*queues, recheck=bad)  # type: ignore[arg-type]
    qs = vsqs.QueueSet(*queues)
    with pytest.raises(ValueError, match="max_messages must be a positive int"):
        qs.receive_batch(0)
    with pytest.raises(ValueError, match="timeout must be >= 0 or None"):
        qs.receive_batch(1, timeout=-1)
    queues[0].publish(b"a")
    queues[1].publish(b"b")
    assert len(qs) == 2


def test_manual_clock_moves_forward_only() -> None:
    clock = ManualClock()
    with pytest.raises(ValueError, match="only moves forward"):
        clock.advance(-1)


# -- modes: a shared queue keeps the modes it was asked for ------------------------------


def test_umask_fixes_an_existing_directory_and_every_file(tmp_path: Path) -> None:
    qdir = tmp_path / "shared"
    qdir.mkdir(mode=0o700)
    os.chmod(qdir, 0o2700)  # set-group-id, as a shared group directory has
    q = vsqs.PlainQueue(qdir, umask=0o002)
    assert stat.S_IMODE(qdir.stat().st_mode) == 0o2775  # widened; set-group-id kept
    message_id = q.publish(b"x", attributes={"a": "b"})
    assert stat.S_IMODE((qdir / message_id).stat().st_mode) == 0o664
    source = tmp_path / "body"
    source.write_bytes(b"file")
    os.chmod(source, 0o600)
    from_file = q.publish_file(source)
    assert stat.S_IMODE((qdir / from_file).stat().st_mode) == 0o664
    metadata = [p for p in (qdir / ".vsqs").rglob("*") if p.is_dir()]
    assert metadata and all(stat.S_IMODE(p.stat().st_mode) & 0o775 == 0o775 for p in metadata)


# -- the null queue accepts everything and keeps nothing ---------------------------------


def test_null_queue_answers_every_call() -> None:
    null = vsqs.NullQueue()
    assert repr(null) == "NullQueue()"
    assert null.publish_stream(io.BytesIO(b"x")).isdigit()
    assert null.delete_batch(["1"]) == 0
    assert null.peek() is None and null.peek_oldest_key() is None
    assert null.requeue_expired() == 0 and null.clean() == 0 and null.redrive() == 0
    history = null.history("1700000000000000")
    assert history.receive_count == 0 and history.first_sent == 1_700_000_000.0
    with pytest.raises(vsqs.InvalidId):
        null.history("not-an-id")


# -- leases left after they were lost ----------------------------------------------------


def test_a_lease_lost_before_an_exception_lets_the_exception_through(q: vsqs.PlainQueue) -> None:
    q.publish(b"job")
    message = q.receive(timeout=0)
    assert message is not None
    lease = q.lease(message)

    def job() -> None:
        with lease:
            q.purge()  # someone emptied the queue, the held message too
            raise KeyError("the job failed")

    with pytest.raises(KeyError, match="the job failed"):
        job()
    assert lease.ended


def test_release_of_a_lost_lease_raises_lease_lost(q: vsqs.PlainQueue) -> None:
    q.publish(b"job")
    message = q.receive(timeout=0)
    assert message is not None
    lease = q.lease(message)
    assert lease.renew()  # not due yet: nothing to do, keep renewing
    q.purge()
    with pytest.raises(vsqs.LeaseLost):
        lease.release()
    lease.release()  # once ended, a second release is a no-op


# -- waiting ------------------------------------------------------------------------------


def test_a_closed_handles_waiter_is_detached(tmp_path: Path) -> None:
    q = vsqs.PlainQueue(tmp_path / "q", wait="inotify")
    assert q.receive(timeout=0.01) is None  # the watch exists
    waiter = q.waiter()
    q.close()
    assert waiter.token() == 0
    with pytest.raises(RuntimeError, match="detached"):
        waiter.wait(0, 0.01)
    waiter.close()
    q.publish(b"x")  # the handle itself works again, with a new waiter
    assert q.receive(timeout=1) is not None


# -- the CLI shows ages in the unit that reads best --------------------------------------


@pytest.mark.parametrize(
    ("age", "shown"),
    [(120, "2.0 min"), (7200, "2.0 h"), (3 * 86400, "3.0 d")],
)
def test_stats_shows_the_oldest_age_in_a_readable_unit(
    tmp_path: Path, age: int, shown: str
) -> None:
    qdir = tmp_path / "q"
    vsqs.PlainQueue(qdir)
    # A message published *age* seconds ago (its id is its creation time).
    (qdir / str(int((time.time() - age) * 1e6))).write_bytes(b"old")
    result = CliRunner().invoke(cli, ["stats", str(qdir)])
    assert result.exit_code == 0, result.output
    assert shown in result.output


# -- counter files written by others are read with care ----------------------------------


def test_stats_ignore_temporary_torn_and_foreign_counter_files(qdir: Path) -> None:
    q = vsqs.PlainQueue(qdir, durable=False)
    q.publish(b"x")
    q.close()  # flushes this process's counters
    stats_dir = next(p for p in (qdir / ".vsqs").iterdir() if p.name == "stats")
    (stats_dir / ".tmp-writer").write_text(json.dumps({"produced_messages": 100}))
    (stats_dir / "torn").write_text("{not json")
    (stats_dir / "a-list").write_text("[1, 2]")
    (stats_dir / "a-dir").mkdir()
    (stats_dir / "strings").write_text(json.dumps({"produced_messages": "7"}))
    assert vsqs.PlainQueue(qdir).stats().produced_messages == 1


def test_stats_of_a_queue_whose_metadata_is_a_file(tmp_path: Path) -> None:
    qdir = tmp_path / "q"
    qdir.mkdir()
    (qdir / ".vsqs").write_text("not a directory")
    (qdir / "1700000000000000").write_bytes(b"x")
    stats = vsqs.PlainQueue(qdir).stats()
    assert stats.produced_messages == 0 and stats.ready == 1


# -- moves to another filesystem that meet taken ids -------------------------------------


@pytest.fixture
def shm_dir() -> Iterator[Path]:
    if (
        not os.path.isdir("/dev/shm")
        or os.stat("/dev/shm").st_dev == os.stat(tempfile.gettempdir()).st_dev
    ):
        pytest.skip("needs /dev/shm on another filesystem than the temporary directory")
    with tempfile.TemporaryDirectory(dir="/dev/shm") as path:
        yield Path(path)


@pytest.mark.parametrize("with_attributes", [False, True])
def test_dead_letter_across_filesystems_into_a_taken_id(
    tmp_path: Path, shm_dir: Path, with_attributes: bool
) -> None:
    clock = ManualClock(START)
    dlq = vsqs.PlainQueue(shm_dir / "dlq", clock=ManualClock(START), durable=True)
    q = vsqs.PlainQueue(
        tmp_path / "q", clock=clock, durable=True, visibility_timeout=1, dead_letter=dlq,
        max_receives=1,
    )  # fmt: skip
    attributes = {"k": "v"} if with_attributes else None
    message_id = q.publish(b"poison", attributes=attributes)
    # The dead-letter queue's own publisher drew the same id (its clock agrees).
    assert dlq.publish(b"already there", attributes=attributes) == message_id
    assert q.receive(timeout=0) is not None
    clock.advance(2)
    assert q.receive(timeout=0) is None  # dead-lettered, by a copy
    got = {}
    while (m := dlq.receive(timeout=0)) is not None:
        got[m.body] = m
        dlq.delete(m)
    assert set(got) == {b"poison", b"already there"}
    assert got[b"poison"].id != message_id
    assert got[b"poison"].attributes == (attributes or {})
    assert q.counts().total == 0


def test_clean_survives_planted_entries_among_dedup_markers(qdir: Path, clock: ManualClock) -> None:
    q = vsqs.PlainQueue(qdir, clock=clock, durable=False, dedup_window=60)
    first = q.publish(b"x", dedup_id="order-1")
    dedup = next(p for p in (qdir / ".vsqs").iterdir() if p.name == "dedup")
    (dedup / "planted-dir").mkdir()
    (dedup / "planted-dir" / "keep").write_bytes(b"not vsqs's")
    os.mkfifo(dedup / "planted-fifo")
    q.clean(older_than=0)  # never blocks on the FIFO, never follows or empties the dir
    assert q.publish(b"x again", dedup_id="order-1") == first  # the real marker stands
    clock.advance(120)
    q.clean(older_than=0)
    assert q.publish(b"x later", dedup_id="order-1") != first  # expired with its window
    kept = list(dedup.rglob("keep"))
    assert [p.read_bytes() for p in kept] == [b"not vsqs's"]  # moved aside, never emptied


def test_clean_removes_pokes_and_announcements_a_dead_process_left(qdir: Path) -> None:
    """A process killed between making a poke (`.wake-*`) or an announcement
    (`.wake-*-meta`) and removing it leaves an empty file: clean() removes old ones only,
    and never another dot-file."""
    q = vsqs.PlainQueue(qdir, durable=False)
    q.publish(b"kept")
    left = [".wake-41-0a1b2c3d", ".wake-41-0a1b2c3e-meta"]
    for name in [*left, ".wake-young", ".my-notes"]:
        (qdir / name).touch()
    old = time.time() - 7200
    for name in [*left, ".my-notes"]:
        os.utime(qdir / name, (old, old))
    assert q.clean(older_than=3600) == 2
    remaining = sorted(p.name for p in qdir.iterdir() if not p.name.isdigit())
    assert remaining == [".my-notes", ".vsqs", ".wake-young"]
    assert [m.body for m in q.receive_batch(10)] == [b"kept"]


# -- Ctrl-C in a producer -------------------------------------------------------------------

_PRODUCER = """\
import signal
import sys
import vsqs

# Ctrl-C as at a terminal, even when the tests run with SIGINT ignored (nohup, `&`),
# which a child inherits and which would make it deaf to the signal sent below.
signal.signal(signal.SIGINT, signal.default_int_handler)
queue = vsqs.PlainQueue(sys.argv[1])
try:
    while True:
        queue.publish_batch([b"0123456789"] * 100)  # one syncfs, then 100 renames
        queue.publish(b"one")  # the single publish's path
except KeyboardInterrupt:
    sys.exit(130)
"""


def test_ctrl_c_in_a_python_producer_never_leaves_an_unfinished_publish(
    fast_tmp_path: Path,
) -> None:
    """SIGINT at random moments of a real producer process: no `<id>.new` is left.

    Most of a publish is spent in the ``open`` that creates the ``.new``, so that is
    where Ctrl-C's KeyboardInterrupt mostly lands: raised as the open returns, it lost
    the descriptor and left the file (3 tries in 4) until ``_fs.create_at`` removed it.
    """
    rng = random.Random(26_13)
    for attempt in range(24):
        path = fast_tmp_path / str(attempt)
        path.mkdir()
        child = subprocess.Popen([sys.executable, "-c", _PRODUCER, str(path)])
        try:
            deadline = time.monotonic() + 60
            while not any(name.isdigit() for name in os.listdir(path)):  # publishing now
                assert child.poll() is None, "the producer died"
                assert time.monotonic() < deadline, "the producer never published"
                time.sleep(0.005)
            time.sleep(rng.uniform(0, 0.05))
            child.send_signal(signal.SIGINT)
            try:
                code = child.wait(timeout=15)
            except subprocess.TimeoutExpired:
                # Under `make test` (coverage traces the child), once in about fifty
                # tries the first Ctrl-C was not seen; never outside coverage in 450.
                # Pressed again, as a user would: the point here is what is left behind.
                child.send_signal(signal.SIGINT)
                code = child.wait(timeout=60)
            assert code == 130
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
        assert not [name for name in os.listdir(path) if name.endswith(".new")], attempt
