"""A blocked receive that wakes on an inotify event claims the messages the event named,
oldest first, without listing the directory again; when it cannot be sure it saw every
event (a watch made after its look, an overflow), it lists as before."""

from __future__ import annotations

import ast
import inspect
import os
import shutil
import signal
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import vsqs
from tests.fixtures_core import CHILD_TIMEOUT, children, wait_blocked_in_inotify
from vsqs import _ids, _inotify, _inotify_hub, _libc, _meta, _queue, _scan
from vsqs._waiters import MultiWaiter

pytestmark = pytest.mark.skipif(not _inotify.have_inotify(), reason="needs inotify (Linux)")


def _publish_raw(qdir: Path, message_id: int, body: bytes) -> None:
    """Publish as any peer does: write `<id>.new`, rename it to `<id>`."""
    (qdir / f"{message_id}.new").write_bytes(body)
    os.rename(qdir / f"{message_id}.new", qdir / str(message_id))


def test_the_waiter_names_what_was_made_ready_since_a_token(tmp_path: Path) -> None:
    qdir = tmp_path / "q"
    qdir.mkdir()
    waiter = MultiWaiter([str(qdir)], recheck=1.0, clock=vsqs.PlainQueue(qdir).clock)
    # The waiter watches from its making: nothing happened since, nothing is named.
    token, names = waiter.wait_ready(waiter.token(), 0.01)
    assert names == []
    assert waiter.wait_ready(token, 0) == (token, [])
    _publish_raw(qdir, 1_700_000_000_000_002, b"b")
    _publish_raw(qdir, 1_700_000_000_000_001, b"a")
    (qdir / "1700000000000003.new").write_bytes(b"being written")  # not ready: not named
    os.rename(qdir / "1700000000000001", qdir / "1700000000000001.1800000000000000")  # held
    (qdir / "notes.txt").write_bytes(b"foreign")
    (qdir / "x").write_bytes(b"not canonical")
    os.rename(qdir / "x", qdir / "0017")  # digits, but no id (a leading zero): not named
    os.rename(qdir / "notes.txt", qdir / "170000000000000000001")  # too long for an id
    vsqs.PlainQueue(qdir).layout.announce("meta")
    _publish_raw(qdir, 42, b"a millisecond id")
    later, made_ready = waiter.wait_ready(token, 1.0)
    assert made_ready == [
        _ids.encode_ready(1_700_000_000_000_002),
        _ids.encode_ready(1_700_000_000_000_001),
        _inotify.ANNOUNCEMENT,
        _ids.encode_ready(42),
    ]
    assert _ids.decode_ready(made_ready[-1]) == "42"
    assert waiter.wait_ready(later, 0) == (later, [])


def test_wait_ready_gives_the_next_token_and_the_names_together(tmp_path: Path) -> None:
    """What a blocked receive uses: one call returns the token for the next wait and the
    names made ready since the old token; a polling or detached waiter says what it can."""
    qdir = tmp_path / "q"
    qdir.mkdir()
    clock = vsqs.PlainQueue(qdir).clock
    waiter = MultiWaiter([str(qdir)], recheck=1.0, clock=clock)
    token, names = waiter.wait_ready(waiter.token(), 0.01)  # watched since it was made
    assert names == [] and token == waiter.token()
    _publish_raw(qdir, 1_700_000_000_000_005, b"e")
    _publish_raw(qdir, 1_700_000_000_000_004, b"d")
    later, made_ready = waiter.wait_ready(token, 1.0)
    ids = (1_700_000_000_000_005, 1_700_000_000_000_004)
    assert made_ready == [_ids.encode_ready(v) for v in ids]
    assert later > token and later == waiter.token()
    assert waiter.wait_ready(later, 0.01) == (later, [])  # nothing since: timed out
    polling = MultiWaiter([str(qdir)], wait="poll", poll_interval=0.01, clock=clock)
    assert polling.wait_ready(polling.token(), 0.01) == (0, None)
    waiter.close()
    with pytest.raises(RuntimeError, match="detached"):
        waiter.wait_ready(later, 0.01)


def _blocked_batch_consumer(path: str, out: Any) -> None:
    """Receive a batch while blocked; report the ids and how many listings the wake took."""
    listings: list[str] = []
    real_scan = _scan.scan

    def counted(path: str) -> _scan.Listing:
        listings.append(path)
        return real_scan(path)

    _queue._scan.scan = counted  # type: ignore[attr-defined]
    queue = vsqs.PlainQueue(path, durable=False, poll_interval=3600)
    assert queue.receive(timeout=0.01) is None  # looked; the watch exists
    before = len(listings)
    got = queue.receive_batch(10, timeout=CHILD_TIMEOUT)
    out.put(([m.id for m in got], len(listings) - before))


def test_a_woken_receive_claims_what_the_events_named_oldest_first_without_listing(
    tmp_path: Path,
) -> None:
    qdir = tmp_path / "q"
    vsqs.PlainQueue(qdir)
    ids = [str(2_000_000_000_000_000 + n) for n in range(3)]
    for name in ids:
        (qdir / f"{name}.new").write_bytes(name.encode())
    with children() as kids:
        out = kids.context.Queue()
        child = kids.start(_blocked_batch_consumer, str(qdir), out)
        wait_blocked_in_inotify(child)
        time.sleep(0.2)  # past its second look (the one after the watch was made)
        assert child.pid is not None
        os.kill(child.pid, signal.SIGSTOP)  # so that it reads all three events at once
        for name in reversed(ids):  # newest first: the events are not in id order
            os.rename(qdir / f"{name}.new", qdir / name)
        os.kill(child.pid, signal.SIGCONT)
        got, listings = out.get(timeout=CHILD_TIMEOUT)
        kids.join(child)
    assert got == ids  # oldest first, all of them, from the events alone
    assert listings == 1  # the look before it blocked; none after the wake-up


def test_attributes_of_the_first_message_with_metadata_are_seen_after_a_wake(
    tmp_path: Path,
) -> None:
    qdir = tmp_path / "q"
    consumer_queue = vsqs.PlainQueue(qdir, durable=False)
    got: list[vsqs.Message | None] = []
    consumer = threading.Thread(target=lambda: got.append(consumer_queue.receive(timeout=30)))
    consumer.start()
    time.sleep(0.3)  # blocked, with no metadata directory in the queue yet
    vsqs.PlainQueue(qdir, durable=False).publish(b"x", attributes={"trace": "abc"})
    consumer.join(10)
    assert got and got[0] is not None
    assert got[0].attributes == {"trace": "abc"}


def test_a_metadata_directory_made_while_a_receive_sleeps_is_announced(tmp_path: Path) -> None:
    """A writer that made `.vsqs/meta` and died before announcing it: the next writer
    announces it before its first record, so a receive that looked before the directory
    existed still gives the message its attributes (it does not list after a wake-up)."""
    qdir = tmp_path / "q"
    consumer_queue = vsqs.PlainQueue(qdir, durable=False, poll_interval=3600)
    got: list[vsqs.Message | None] = []
    consumer = threading.Thread(target=lambda: got.append(consumer_queue.receive(timeout=30)))
    consumer.start()
    time.sleep(0.3)  # blocked, having looked for metadata and found none
    (qdir / ".vsqs" / "meta").mkdir(parents=True)  # made, never announced
    vsqs.PlainQueue(qdir, durable=False).publish(b"x", attributes={"trace": "abc"})
    consumer.join(10)
    assert got and got[0] is not None
    assert got[0].attributes == {"trace": "abc"}
    assert sorted(p.name for p in qdir.iterdir()) == [".vsqs", got[0].receipt]  # no debris


def _rename_in(qdir: Path, first: int, count: int) -> list[str]:
    """Make *count* messages ready, one rename each (one inotify event each)."""
    names = [str(first + n) for n in range(count)]
    for name in names:
        (qdir / f"{name}.new").touch()
    for name in names:
        os.rename(qdir / f"{name}.new", qdir / name)
    return names


@pytest.mark.parametrize(
    ("events", "why"),
    [(5_000, "more names than the waiter keeps"), (17_000, "the kernel's event queue overflows")],
)
def test_a_waiter_that_lost_track_says_so_and_the_receive_lists(
    tmp_path: Path, events: int, why: str
) -> None:
    qdir = tmp_path / "q"
    queue = vsqs.PlainQueue(qdir, durable=False, poll_interval=3600)
    assert queue.receive(timeout=0.01) is None  # looked; the watch exists
    waiter = queue.waiter()
    token = waiter.token()
    names = _rename_in(qdir, 2_000_000_000_000_000, events)
    _, seen = waiter.wait_ready(token, 1.0)
    assert seen is None, why
    got = queue.receive_batch(10, timeout=5)  # falls back to a listing: still oldest first
    assert [m.id for m in got] == names[:10]
    later = waiter.token()
    _rename_in(qdir, 3_000_000_000_000_000, 1)
    _, seen = waiter.wait_ready(later, 1.0)
    assert seen == [_ids.encode_ready(3_000_000_000_000_000)]  # on track again


def test_a_foreign_digit_name_that_is_not_an_id_is_never_taken(tmp_path: Path) -> None:
    qdir = tmp_path / "q"
    queue = vsqs.PlainQueue(qdir, durable=False, poll_interval=3600)
    got: list[vsqs.Message | None] = []
    consumer = threading.Thread(target=lambda: got.append(queue.receive(timeout=30)))
    consumer.start()
    time.sleep(0.3)
    (qdir / "00042.new").write_bytes(b"not ours")
    os.rename(qdir / "00042.new", qdir / "00042")  # digits, but a leading zero: not an id
    time.sleep(0.2)
    vsqs.PlainQueue(qdir, durable=False).publish(b"ours")
    consumer.join(10)
    assert got and got[0] is not None and got[0].body == b"ours"
    assert (qdir / "00042").read_bytes() == b"not ours"


def test_a_slow_look_for_metadata_never_undoes_what_another_thread_saw(tmp_path: Path) -> None:
    """A look for `.vsqs/meta` that saw nothing and ends after another thread of the
    process wrote metadata must not say "no metadata" over it, or a woken receive would
    trust that and give a message no attributes."""
    qdir = tmp_path / "q"
    queue = vsqs.PlainQueue(qdir, durable=False)
    store = queue._meta
    assert store.refresh() is False  # a plain queue: no metadata directory yet
    real = store.layout.has_dir

    def slow_look(sub: str) -> bool:
        seen = real(sub)  # nothing there yet; before this look returns, a write
        store.write("1", _meta.Meta(), durable=False)
        return seen

    store.layout.has_dir = slow_look  # type: ignore[method-assign]
    assert store.refresh() is True
    del store.layout.has_dir
    assert store.refresh() is True and (qdir / ".vsqs" / "meta").is_dir()


def test_a_commit_by_link_then_unlink_is_not_missed_by_a_woken_receive(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """*commit* arrow without an atomic no-replace rename (NFS, sshfs: ``link`` then
    ``unlink``): its new name raises no watched event, only the ``.new``'s removal does.
    A receive woken by that and by a plain rename together lists the directory instead
    of trusting the one name it saw: it gets both, oldest (the linked one) first. (Only
    where the filesystem may lack the atomic rename: this one is taken for such.)"""
    monkeypatch.setattr(_inotify_hub, "renames_without_replacing", lambda _fstype: False)
    qdir = tmp_path / "q"
    queue = vsqs.PlainQueue(qdir, durable=False, poll_interval=3600)
    assert queue.receive(timeout=0.01) is None  # looked; the watch exists
    publisher = vsqs.PlainQueue(qdir, durable=False)
    real_scan = _scan.scan
    published: list[str] = []

    def scan_then_publish(path: str) -> _scan.Listing:
        listing = real_scan(path)  # the blocked receive's look: nothing yet
        if not published:
            with monkeypatch.context() as patched:
                patched.setattr(_libc, "renameat2", lambda: None)  # as on NFS: link, unlink
                published.append(publisher.publish(b"linked"))
            published.append(publisher.publish(b"renamed"))
        return listing

    monkeypatch.setattr(_scan, "scan", scan_then_publish)
    got = queue.receive_batch(10, timeout=5)
    assert [m.body for m in got] == [b"linked", b"renamed"]
    assert [m.id for m in got] == published


@pytest.mark.parametrize("atomic", [False, True], ids=["may-link", "renames-atomically"])
def test_the_removal_of_anything_but_a_ready_name_or_an_announcement_is_unnamed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, atomic: bool
) -> None:
    """What the watch makes of removals: where a move may be a link then an unlink, a
    held message's or a ``.new``'s removal may end one (``None``: the receive lists); a
    ready message's (a claim, a purge) and an announcement's cannot. Where the
    filesystem always renames atomically (ext4, XFS, btrfs, tmpfs), no removal can: a
    receive woken after an ack trusts the names it was given."""
    monkeypatch.setattr(_inotify_hub, "renames_without_replacing", lambda _fstype: atomic)
    qdir = tmp_path / "q"
    qdir.mkdir()
    waiter = MultiWaiter([str(qdir)], recheck=1.0, clock=vsqs.PlainQueue(qdir).clock)
    token, _ = waiter.wait_ready(waiter.token(), 0.01)
    for name in ("1700000000000001", "1700000000000002.new", "1700000000000003.1800000000000"):
        (qdir / name).touch()
    vsqs.PlainQueue(qdir).layout.announce("meta")
    token, names = waiter.wait_ready(token, 1.0)
    assert names == [_inotify.ANNOUNCEMENT]
    os.unlink(qdir / "1700000000000001")  # a ready message's removal: nothing made ready
    token, names = waiter.wait_ready(token, 1.0)
    assert names == []
    for name in ("1700000000000002.new", "1700000000000003.1800000000000"):
        os.unlink(qdir / name)
        token, names = waiter.wait_ready(token, 1.0)
        assert names == ([] if atomic else None), name


def test_an_ack_never_makes_the_next_woken_receive_list(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a filesystem that renames atomically, a consumer that deletes each message
    and blocks again lists the directory once per message (the look before it sleeps)
    and is woken with the next one's name: its delete's removal is known not to hide a
    message, so it wakes no one to list again."""
    base = Path("/dev/shm") if Path("/dev/shm").is_dir() else tmp_path
    qdir = Path(tempfile.mkdtemp(dir=base)) / "q"
    try:
        consumer = vsqs.PlainQueue(qdir, durable=False, poll_interval=3600)
        publisher = vsqs.PlainQueue(qdir, durable=False)
        published = threading.Event()
        listings: list[bool] = []  # one per listing: whether the message was published
        real_scan = _scan.scan

        def counted(path: str) -> _scan.Listing:
            listings.append(published.is_set())
            return real_scan(path)

        def publish(body: bytes) -> None:
            published.set()
            publisher.publish(body)

        assert consumer.receive(timeout=0.01) is None  # the watch exists
        monkeypatch.setattr(_scan, "scan", counted)
        for round_ in range(5):
            published.clear()
            timer = threading.Timer(0.05, publish, args=(str(round_).encode(),))
            timer.start()
            message = consumer.receive(timeout=10)
            timer.join()
            assert message is not None and message.body == str(round_).encode()
            assert consumer.delete(message)
        assert listings == [False] * 5  # one look per receive, before its message came
    finally:
        shutil.rmtree(qdir.parent)


class _LayoutWrites(ast.NodeVisitor):
    """Every ``<layout>.create/write(<subdirectory>, ...)`` call of a module, with the
    function it is in."""

    def __init__(self) -> None:
        self.scope: list[str] = []
        self.calls: list[tuple[str, str, int]] = []  # (function, subdirectory, line)

    def _enter(self, node: ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self.scope.append(node.name)
        self.generic_visit(node)
        self.scope.pop()

    visit_ClassDef = visit_FunctionDef = visit_AsyncFunctionDef = _enter  # noqa: N815

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr in {"create", "write"} and node.args:
            first = node.args[0]
            sub = first.id if isinstance(first, ast.Name) else ast.unparse(first)
            if "layout" in ast.unparse(func.value).lower() or sub == "META":
                self.calls.append((".".join(self.scope), sub, node.lineno))
        self.generic_visit(node)


def test_every_metadata_record_is_written_by_the_one_function_that_announces() -> None:
    """The announcement is no convention: every write of a record under ``.vsqs/meta``
    in vsqs is in ``MetaStore._record``, which announces before it writes; every other
    write through a layout names its subdirectory by a constant (so none can be META
    in disguise)."""
    package = Path(vsqs.__file__).parent
    meta_writers = []
    for path in sorted(package.rglob("*.py")):
        if path.name == "_layout.py":
            continue  # where create/write are defined
        visitor = _LayoutWrites()
        visitor.visit(ast.parse(path.read_text(encoding="utf-8")))
        module = path.relative_to(package.parent).as_posix()
        for function, sub, line in visitor.calls:
            assert sub.isupper() and sub.isidentifier(), f"{module}:{line} writes to {sub}"
            if sub == "META":
                meta_writers.append((f"{module}:{function}", line))
    assert {where for where, _ in meta_writers} == {"vsqs/_meta.py:MetaStore._record"}
    record = inspect.getsource(_meta.MetaStore._record)  # the one writer
    announced = record.index("self.layout.announce(META)")
    assert announced < record.index("self.layout.create(META")
    assert announced < record.index("self.layout.write(META")
