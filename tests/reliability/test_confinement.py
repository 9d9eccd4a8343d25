"""Nothing outside the queue is ever touched, metadata never stops delivery, a full disk
loses nothing (the hostile-conditions issue). Each test failed on the code before it.

The ``sentinel`` fixture is a victim directory beside the queue; it is compared with a
snapshot at teardown, so a test passes only if nothing there changed.
"""

from __future__ import annotations

import errno
import hashlib
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import vsqs
from vsqs import _fs
from vsqs.cli import cli
from vsqs.testing import ManualClock, drain

# Where something could be planted: every directory and file vsqs uses under .vsqs.
PLANT_SITES = [
    ".vsqs",
    ".vsqs/meta",
    ".vsqs/delayed",
    ".vsqs/dedup",
    ".vsqs/stats",
    ".vsqs/closed",
    ".vsqs/capacity.lock",
    ".vsqs/capacity.count",
    ".vsqs/meta/{id}",
    ".vsqs/delayed/{id}",
    ".vsqs/dedup/{digest}",
]
KINDS = ["link-to-dir", "link-to-file", "directory", "fifo", "garbage"]


def _plant(queue_dir: Path, site: str, kind: str, victim: Path, message_id: str) -> None:
    digest = hashlib.sha256(b"order-1").hexdigest()
    target = queue_dir / site.format(id=message_id, digest=digest)
    inside = os.path.realpath(queue_dir)
    if not os.path.realpath(target.parent).startswith(inside):
        return  # a link planted higher up: planting through it would touch the victim
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        return  # something else was planted where the parent directory belongs
    if target.is_dir() and not target.is_symlink():
        return  # a directory vsqs made already stands there: plant inside it instead
    if os.path.lexists(target):
        target.unlink()  # an earlier plant at the same site
    if kind == "link-to-dir":
        target.symlink_to(victim)
    elif kind == "link-to-file":
        target.symlink_to(victim / "x")
    elif kind == "directory":
        target.mkdir()
        (target / "inside").write_bytes(b"planted")
    elif kind == "fifo":
        os.mkfifo(target)
    else:
        target.write_bytes(b"\x00garbage\xff")


def _every_operation(queue_dir: Path, dlq_dir: Path) -> None:
    """Every public operation once, each allowed to refuse (never to follow a link)."""
    clock = ManualClock()
    q = vsqs.Queue(queue_dir, durable=False, clock=clock, visibility_timeout=1)
    dlq = vsqs.Queue(dlq_dir, durable=False, clock=clock)
    bounded = vsqs.Queue(queue_dir, durable=False, clock=clock, capacity=50)
    dead = vsqs.Queue(queue_dir, durable=False, clock=clock, dead_letter=dlq, max_receives=1)
    steps: list[Callable[[], object]] = [
        lambda: q.publish(b"plain"),
        lambda: q.publish(b"attrs", attributes={"k": "v"}),
        lambda: q.publish(b"once", dedup_id="order-1"),
        lambda: q.publish(b"once", dedup_id="order-1"),
        lambda: q.publish(b"later", delay=0.5),
        lambda: q.publish_batch([b"a", b"b"], dedup_ids=["x1", "x2"]),
        lambda: bounded.publish(b"bounded", timeout=0),
        lambda: q.receive(timeout=0),
        lambda: clock.advance(2),
        lambda: dead.receive(timeout=0),
        lambda: clock.advance(2),
        dead.requeue_expired,
        lambda: [q.delete(m) for m in q.receive_batch(3, timeout=0)],
        lambda: q.history(q.publish(b"h")),
        q.stats,
        q.counts,
        lambda: list(q.browse()),
        lambda: q.clean(older_than=0),
        lambda: dlq.redrive(limit=5),
        q.purge,
        q.shutdown,
        q.close,
    ]
    for step in steps:
        try:
            step()
        except (OSError, vsqs.VsqsError):
            pass  # refusing is allowed; following the plant is what the sentinel catches


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(plants=st.lists(st.tuples(st.sampled_from(PLANT_SITES), st.sampled_from(KINDS)), max_size=4))
def test_planted_links_and_non_files_never_lead_outside_the_queue(
    tmp_path_factory: pytest.TempPathFactory, plants: list[tuple[str, str]]
) -> None:
    """A property: whatever is planted wherever under .vsqs, no public operation and no
    CLI command creates, reads through, changes or deletes anything in the victim."""
    from .conftest import snapshot

    base = tmp_path_factory.mktemp("plant")
    victim = base / "victim"
    (victim / "sub").mkdir(parents=True)
    (victim / "x").write_bytes(b"outside x")
    (victim / "notes.1700000000").write_bytes(b"old dotted name")
    (victim / "1700000000000000").write_bytes(b"looks like a message")
    before = snapshot(victim)
    queue_dir = base / "q"
    first = vsqs.Queue(queue_dir, durable=False).publish(b"first")
    for site, kind in plants:
        _plant(queue_dir, site, kind, victim, first)
    _every_operation(queue_dir, base / "dlq")
    runner = CliRunner()
    for args in (
        ["publish", str(queue_dir), "cli", "--attribute", "k=v"],
        ["receive", str(queue_dir), "--keep"],
        ["stats", str(queue_dir)],
        ["clean", str(queue_dir), "--older-than", "0"],
        ["purge", str(queue_dir), "--yes"],
        ["shutdown", str(queue_dir)],
    ):
        runner.invoke(cli, args)
    assert snapshot(victim) == before


def test_a_symlinked_dot_vsqs_is_refused_with_an_error_that_names_it(
    tmp_path: Path, sentinel: Path
) -> None:
    q = vsqs.Queue(tmp_path / "q", durable=False)
    (tmp_path / "q" / ".vsqs").symlink_to(sentinel)
    with pytest.raises(OSError, match=r"\.vsqs .*not a directory"):
        q.publish(b"m", attributes={"k": "v"})
    with pytest.raises(OSError, match=r"\.vsqs"):
        q.shutdown()
    assert q.publish(b"plain") and q.receive(timeout=0) is not None  # delivery goes on


def test_a_symlinked_dot_vsqs_with_a_closed_marker_is_named_not_taken_for_a_shutdown(
    tmp_path: Path,
) -> None:
    """Issue 32: the shutdown probe must not follow a planted ``.vsqs`` link into a
    directory that holds a ``closed`` file: the error names the link (not QueueClosed)."""
    q = vsqs.Queue(tmp_path / "q", durable=False)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "closed").write_bytes(b"1700000000000000")
    (tmp_path / "q" / ".vsqs").symlink_to(elsewhere)
    for step in (lambda: q.publish(b"m"), lambda: q.is_shutdown):
        with pytest.raises(OSError, match=r"\.vsqs .*not a directory") as raised:
            step()
        assert not isinstance(raised.value, vsqs.QueueClosed)
    assert (elsewhere / "closed").read_bytes() == b"1700000000000000"


def test_queue_root_refuses_a_symlinked_queue_name_in_every_verb(
    tmp_path: Path, sentinel: Path
) -> None:
    root = vsqs.QueueRoot(tmp_path / "root")
    (tmp_path / "root" / "jobs").symlink_to(sentinel)
    assert "jobs" not in root
    assert root.list() == []
    with pytest.raises(vsqs.QueueNotFound):
        root.get("jobs")
    with pytest.raises(vsqs.NotAQueue):
        root.create("jobs")
    with pytest.raises(vsqs.QueueNotFound):
        root.delete("jobs")


@pytest.mark.parametrize("kind", ["directory", "fifo", "link-to-file", "garbage"])
def test_metadata_that_is_not_a_regular_file_never_stops_delivery(
    tmp_path: Path, sentinel: Path, kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Planted at .vsqs/meta/<id>: receives, requeues and deletes go on, as if there
    were no metadata (reported once through logging)."""
    clock = ManualClock()
    q = vsqs.Queue(tmp_path / "q", durable=False, clock=clock, visibility_timeout=5)
    message_id = q.publish(b"m", attributes={"k": "v"})
    meta = tmp_path / "q" / ".vsqs" / "meta" / message_id
    meta.unlink()
    _plant(tmp_path / "q", f".vsqs/meta/{message_id}", kind, sentinel, message_id)
    with caplog.at_level("WARNING", logger="vsqs"):
        for _ in range(3):  # received, its lease runs out, requeued, received again
            message = q.receive(timeout=0)
            assert message is not None and message.body == b"m"
            clock.advance(6)
        message = q.receive(timeout=0)
        assert message is not None
        assert q.delete(message)
    assert q.counts().total == 0


def test_deleting_an_old_message_keeps_the_metadata_of_a_newer_one_with_its_id(
    tmp_path: Path,
) -> None:
    """A publisher whose clock runs behind gives a new message the id of one that is
    held; deleting the held one must not take the newcomer's attributes."""
    path = tmp_path / "q"
    start = 1_700_000_000.0
    consumer = vsqs.Queue(path, durable=False, clock=ManualClock(start))
    old_id = consumer.publish(b"old")
    held = consumer.receive(timeout=0)
    assert held is not None and held.id == old_id
    late = vsqs.Queue(path, durable=False, clock=ManualClock(start))  # its own id source
    new_id = late.publish(b"new", attributes={"owner": "newcomer"})
    assert new_id == old_id  # the case the concepts page allows: two messages, one id
    assert consumer.delete(held)
    newcomer = consumer.receive(timeout=0)
    assert newcomer is not None and newcomer.body == b"new"
    assert dict(newcomer.attributes) == {"owner": "newcomer"}


def test_retention_with_a_consumer_clock_ahead_drops_nothing_fresh(tmp_path: Path) -> None:
    """The consumer's clock is two hours ahead; retention is one hour: the five fresh
    messages a correct producer published must all be delivered."""
    producer = vsqs.Queue(tmp_path / "q", durable=False)
    producer.publish_batch([b"fresh"] * 5)
    ahead = ManualClock(time.time() + 7200)
    consumer = vsqs.Queue(tmp_path / "q", durable=False, retention=3600, clock=ahead)
    assert [m.body for m in drain(consumer)] == [b"fresh"] * 5


def test_retention_still_drops_what_is_old_by_every_clock(tmp_path: Path) -> None:
    producer = vsqs.Queue(tmp_path / "q", durable=False, clock=ManualClock(1_700_000_000))
    producer.publish(b"ancient")  # 2023 by its id, and the file is dated now
    consumer = vsqs.Queue(tmp_path / "q", durable=False, retention=3600)
    assert consumer.receive(timeout=0) is None
    assert consumer.counts().total == 0


# -- moves across filesystems ---------------------------------------------------------


def _other_filesystem(tmp_path: Path) -> Path:
    shm = Path("/dev/shm")
    if not shm.is_dir() or os.stat(shm).st_dev == os.stat(tmp_path).st_dev:
        pytest.skip("needs /dev/shm on another filesystem than the test directory")
    return Path(os.path.realpath(shm))


@pytest.mark.parametrize("reason", ["retention", "max_receives"])
def test_a_slow_cross_filesystem_dead_letter_is_moved_exactly_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reason: str
) -> None:
    """The copy to a dead-letter queue on tmpfs takes longer than the lease (1 MiB
    chunks, each slowed down), while another handle keeps requeueing expired leases: the
    message must arrive once, and leave the source."""
    other = _other_filesystem(tmp_path)
    dlq_dir = Path(os.path.realpath(os.path.join(other, f"vsqs-dlq-{os.getpid()}-{reason}")))
    try:
        dlq = vsqs.Queue(dlq_dir, durable=False)
        options: dict[str, object] = {"visibility_timeout": 0.3, "dead_letter": dlq}
        options.update({"retention": 0.5} if reason == "retention" else {"max_receives": 1})
        source = vsqs.Queue(tmp_path / "q", durable=False, **options)  # type: ignore[arg-type]
        source.publish(os.urandom(5 << 20))
        real_read = os.read

        def slow_read(fd: int, n: int) -> bytes:
            if n == 1 << 20:  # the copy's chunks only
                time.sleep(0.15)  # five chunks: 0.75 s, more than two leases
            return real_read(fd, n)

        stop = threading.Event()
        rival = vsqs.Queue(tmp_path / "q", durable=False, **options)  # type: ignore[arg-type]

        def requeue_forever() -> None:
            while not stop.is_set():
                rival.requeue_expired()
                time.sleep(0.02)

        if reason == "max_receives":
            assert source.receive(timeout=0) is not None
        time.sleep(0.6)  # the lease (or the retention) ends
        monkeypatch.setattr(os, "read", slow_read)
        thread = threading.Thread(target=requeue_forever)
        thread.start()
        try:
            source.requeue_expired() if reason == "max_receives" else source.clean(3600)
        finally:
            stop.set()
            thread.join()
            monkeypatch.undo()
        time.sleep(0.1)
        assert dlq.counts().total == 1, dlq.counts()
        assert source.counts().total == 0
    finally:
        _fs.remove_tree(str(dlq_dir))


# -- a full disk -----------------------------------------------------------------------


def _fill(path: Path) -> None:
    """Write *path* until the filesystem is full (raises ENOSPC)."""
    with open(path, "wb") as handle:
        while True:
            handle.write(b"\0" * 4096)
            handle.flush()


@pytest.mark.root
def test_a_failed_durable_batch_leaves_nothing_staged(tiny_tmpfs: Path) -> None:
    q = vsqs.Queue(tiny_tmpfs / "q")
    with pytest.raises(OSError) as raised:
        q.publish_batch([b"x" * 40_000] * 20)  # 800 KB into 256 KiB
    assert raised.value.errno == errno.ENOSPC
    assert q.counts().new == 0
    assert not [p for p in (tiny_tmpfs / "q").iterdir() if p.name.endswith(".new")]


@pytest.mark.root
def test_a_receive_on_a_full_disk_still_delivers_an_expired_lease(tiny_tmpfs: Path) -> None:
    clock = ManualClock()
    q = vsqs.Queue(tiny_tmpfs / "q", durable=False, clock=clock, visibility_timeout=5)
    q.publish(b"m")
    assert q.receive(timeout=0) is not None
    with pytest.raises(OSError) as full:
        _fill(tiny_tmpfs / "filler")
    assert full.value.errno == errno.ENOSPC
    clock.advance(6)
    again = q.receive(timeout=0)  # the requeue cannot write its count: delivered anyway
    assert again is not None and again.body == b"m"
    assert q.delete(again)


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


@pytest.mark.root
def test_a_bounded_batch_that_fails_after_a_prefix_counts_the_prefix(tiny_tmpfs: Path) -> None:
    q = vsqs.Queue(tiny_tmpfs / "q", durable=False, capacity=5)
    with pytest.raises(OSError):
        q.publish_batch([b"x" * 100_000] * 4)  # the third does not fit in 256 KiB
    made = q.counts().ready
    assert 0 < made < 4
    for path in list((tiny_tmpfs / "q").iterdir()):
        if path.name.isdigit():
            path.write_bytes(b"")  # make room without removing a message
    q.publish_batch([b"y"] * (5 - made), timeout=0)  # fills it to exactly the capacity
    with pytest.raises(vsqs.QueueFull):
        q.publish(b"one too many", timeout=0)
    assert q.counts().ready == 5


def test_a_cross_filesystem_dead_letter_keeps_attributes_and_history(tmp_path: Path) -> None:
    """The copy to a dead-letter queue on another filesystem carries the metadata: the
    attributes, the receive count and where it came from."""
    other = _other_filesystem(tmp_path)
    dlq_dir = Path(os.path.realpath(os.path.join(other, f"vsqs-dlq-{os.getpid()}-meta")))
    try:
        dlq = vsqs.Queue(dlq_dir, durable=False)
        q = vsqs.Queue(tmp_path / "q", durable=False, dead_letter=dlq, max_receives=1)
        source_id = q.publish(b"poison", attributes={"kind": "bad"})
        received = q.receive(timeout=0)
        assert received is not None
        moved = q.change_visibility(received, 0)  # its only receive ended: dead-lettered
        assert moved.queue == str(dlq_dir)
        dead = dlq.receive(timeout=0)
        assert dead is not None and dead.body == b"poison"
        assert dict(dead.attributes) == {"kind": "bad"}
        history = dlq.history(dead)
        assert (history.source, history.source_id) == (str(tmp_path / "q"), source_id)
        assert (history.receive_count, history.reason) == (1, "max_receives")
        assert q.counts().total == 0
    finally:
        _fs.remove_tree(str(dlq_dir))
