"""Faults of the filesystem: a clear error, a consistent queue, nothing lost, and the queue
works again once the fault is gone. No operation may retry an error forever."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest

import vsqs
from vsqs.testing import ManualClock, assert_consistent, drain

from . import _faultchild
from ._mounts import filesystem_of, is_root, remount

T = TypeVar("T")


def bounded(step: Callable[[], T], seconds: float = 30.0) -> T:
    """Run *step* in a thread; fail (instead of hanging the suite) if it never returns."""
    result: list[T] = []
    error: list[BaseException] = []

    def target() -> None:
        try:
            result.append(step())
        except BaseException as exc:  # noqa: BLE001 (re-raised in the caller below)
            error.append(exc)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), "the operation never returned: an error is retried forever"
    if error:
        raise error[0]
    return result[0]


def expect_oserror(step: Callable[[], object], code: int, *, named: bool = True) -> OSError:
    """*step* raises an OSError with *code* (and a filename), within a bounded time."""
    with pytest.raises(OSError) as caught:
        bounded(step)
    assert caught.value.errno == code, caught.value
    # A failed write(2) has no path to name (the kernel reports it on a descriptor).
    assert caught.value.filename or not named, "the error names no path"
    return caught.value


@pytest.fixture
def public_dir() -> Iterator[Path]:
    """A directory any user can reach (pytest's tmp dirs are private to root)."""
    path = Path(tempfile.mkdtemp(prefix="vsqs-reliability-", dir="/tmp"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path)


def _publish_until_it_fails(q: vsqs.PlainQueue) -> tuple[list[bytes], OSError]:
    acknowledged: list[bytes] = []
    for n in range(1000):
        body = b"%04d" % n + b"x" * 8000
        try:
            bounded(lambda body=body: q.publish(body))  # type: ignore[misc]
        except OSError as exc:
            return acknowledged, exc
        acknowledged.append(body)
    raise AssertionError("the filesystem never filled up")


def test_enospc_on_a_full_tmpfs(tiny_tmpfs: Path) -> None:
    """ENOSPC: publish fails clearly, leaves no `.new`, loses nothing; works after deletes."""
    clock = ManualClock()
    q = vsqs.PlainQueue(tiny_tmpfs / "q", clock=clock)
    acknowledged, error = _publish_until_it_fails(q)
    assert error.errno == errno.ENOSPC, error
    assert acknowledged, "the tmpfs was full before the first publish"
    assert_consistent(q)  # the failed publish removed its partial `.new`
    # A publish bigger than what is left fails the same way, also mid-write.
    expect_oserror(lambda: q.publish(b"y" * 200_000), errno.ENOSPC, named=False)
    assert_consistent(q)
    # Consuming needs no space: renames and unlinks free it.
    first = drain(q, limit=5)
    assert [m.body for m in first] == acknowledged[:5]
    q.publish(b"after")
    rest = [m.body for m in drain(q)]
    assert rest == [*acknowledged[5:], b"after"]
    assert_consistent(q)


def test_erofs_on_a_read_only_remount(scratch_tmpfs: Path) -> None:
    """EROFS: every changing operation fails clearly and at once; after remount rw, all is there."""
    clock = ManualClock()
    q = vsqs.PlainQueue(scratch_tmpfs / "q", clock=clock)
    ids = [q.publish(b"m%d" % n) for n in range(3)]
    held = q.receive(timeout=0)
    assert held is not None
    remount(scratch_tmpfs, "ro")
    try:
        expect_oserror(lambda: q.publish(b"lost?"), errno.EROFS)
        expect_oserror(lambda: q.receive(timeout=0), errno.EROFS)
        expect_oserror(lambda: q.delete(held), errno.EROFS)
        expect_oserror(lambda: q.change_visibility(held, 60), errno.EROFS)
        assert q.counts().ready == 2  # reading still works
    finally:
        remount(scratch_tmpfs, "rw")
    assert_consistent(q)
    clock.advance(31)  # the lease taken before the fault ends and the message returns
    assert sorted(m.id for m in drain(q)) == sorted(ids)
    q.publish(b"works again")
    assert [m.body for m in drain(q)] == [b"works again"]


def test_eacces_for_another_user(public_dir: Path) -> None:
    """EACCES: a user without write permission gets PermissionError at once, not a loop."""
    if not is_root():
        pytest.skip("needs root to switch to user nobody and back")
    q = vsqs.PlainQueue(public_dir / "q")
    q.publish(b"root's message")
    os.chmod(q.path, 0o755)  # noqa: S103 (readable, not writable, by others: the fault)
    results = _faultchild.run(_faultchild.as_nobody, q.path, str(public_dir / "out.json"))
    assert results["open"]["ok"]  # opening creates nothing
    for step in ("publish", "receive", "create"):
        assert results[step]["type"] == "PermissionError", results[step]
        assert results[step]["errno"] == errno.EACCES
        assert results[step]["filename"], results[step]
    assert_consistent(q)
    assert [m.body for m in drain(q, delete=False)] == [b"root's message"]
    # The fault gone (the queue directory opened to everybody; root's `.vsqs/stats` still
    # is not), the same user publishes: counters it cannot write never fail a publish.
    os.chmod(q.path, 0o777)  # noqa: S103 (open to all: the fault is gone)
    results = _faultchild.run(_faultchild.as_nobody, q.path, str(public_dir / "out2.json"))
    assert results["publish"]["ok"], results["publish"]
    assert results["receive"] == {"ok": True, "value": "from nobody"}  # root holds its own
    later = vsqs.PlainQueue(q.path, clock=ManualClock(time.time() + 60))  # every lease ended
    assert sorted(m.body for m in drain(later)) == [b"from nobody", b"root's message"]
    assert_consistent(later)


def test_eperm_on_an_immutable_directory(tmp_path: Path) -> None:
    """EPERM: ``chattr +i`` on the queue directory; clear errors; works once removed."""
    if not is_root() or shutil.which("chattr") is None:
        pytest.skip("chattr +i needs root and e2fsprogs")
    if filesystem_of(tmp_path) not in ("ext4", "ext3", "ext2", "xfs", "btrfs"):
        pytest.skip(f"{filesystem_of(tmp_path)} has no immutable attribute")
    q = vsqs.PlainQueue(tmp_path / "q", clock=ManualClock())
    message_id = q.publish(b"kept")
    subprocess.run(["chattr", "+i", q.path], check=True)
    try:
        expect_oserror(lambda: q.publish(b"refused"), errno.EPERM)
        expect_oserror(lambda: q.receive(timeout=0), errno.EPERM)
    finally:
        subprocess.run(["chattr", "-i", q.path], check=True)
    assert_consistent(q)
    assert [m.id for m in drain(q)] == [message_id]
    q.publish(b"works again")
    assert [m.body for m in drain(q)] == [b"works again"]


def test_enoent_when_the_queue_directory_is_deleted(tmp_path: Path) -> None:
    """ENOENT: a blocked receive raises FileNotFoundError naming the queue; no silent re-create."""
    q = vsqs.PlainQueue(tmp_path / "q", poll_interval=0.05)
    q.publish(b"first")
    assert q.receive(timeout=0) is not None
    errors: list[BaseException] = []

    def consume() -> None:
        try:
            q.receive(timeout=30)
        except BaseException as exc:  # noqa: BLE001 (checked by the test thread)
            errors.append(exc)

    consumer = threading.Thread(target=consume, daemon=True)
    consumer.start()
    shutil.rmtree(q.path)
    consumer.join(30)
    assert not consumer.is_alive(), "receive kept waiting on a deleted directory"
    assert len(errors) == 1 and isinstance(errors[0], FileNotFoundError), errors
    assert q.path in str(errors[0].filename)
    error = expect_oserror(lambda: q.publish(b"into nothing"), errno.ENOENT)
    assert q.path in str(error.filename)
    assert not os.path.exists(q.path), "publish re-created a deleted queue behind our back"
    # The fault gone (the queue opened, hence created, again): it works.
    again = vsqs.PlainQueue(q.path)
    again.publish(b"again")
    assert [m.body for m in drain(again)] == [b"again"]
    q.detach()


def test_emfile_with_too_many_open_files(tmp_path: Path) -> None:
    """EMFILE: clear OSError, no leaked `.new`, works once descriptors are free again."""
    path = tmp_path / "q"
    results = _faultchild.run(_faultchild.few_descriptors, str(path), str(tmp_path / "out.json"))
    for step in ("publish", "receive"):
        assert results[step]["errno"] == errno.EMFILE, results[step]
        assert not results[step]["is_vsqs"]  # passed through unchanged, not re-wrapped
    assert results["publish_after"]["ok"], results["publish_after"]
    assert results["receive_after"] == {"ok": True, "value": "before"}
    q = vsqs.PlainQueue(path)
    assert_consistent(q)
    assert [m.body for m in drain(q)] == [b"after"]


def _fill_leaving(path: Path, free: int) -> None:
    """Fill the filesystem of *path* with the file *path*, then give back *free* bytes."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        size = 0
        while True:
            try:
                size += os.write(fd, b"\0" * 4096)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                break
        os.ftruncate(fd, max(0, size - free))
    finally:
        os.close(fd)


@pytest.mark.root
def test_a_bounded_publish_on_a_full_disk_never_raises_after_publishing(
    tiny_tmpfs: Path,
) -> None:
    """Issue 32.3: one page left: the bounded publish's message takes it and becomes
    visible, then the counter's rewrite finds no room. The publish returns (the caller
    must not retry a visible message), and the bound is recounted, never undercounted."""
    q = vsqs.PlainQueue(tiny_tmpfs / "q", capacity=3, durable=False)
    first = q.publish(b"1")  # the counter and the lock exist now
    _fill_leaving(tiny_tmpfs / "filler", free=4096)
    second = q.publish(b"2", timeout=0)  # raised ENOSPC here, its message visible
    assert sorted(n for n in os.listdir(q.path) if n.isdigit()) == sorted([first, second])
    (tiny_tmpfs / "filler").unlink()
    q.publish(b"3", timeout=0)
    with pytest.raises(vsqs.QueueFull):
        q.publish(b"over", timeout=0)  # the bound was recounted, not lost
    assert [m.body for m in drain(q)] == [b"1", b"2", b"3"]
    assert_consistent(q)
