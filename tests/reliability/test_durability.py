"""The fsync ordering behind the durability statement, traced on the ``_fs`` calls."""

from __future__ import annotations

import functools
import inspect
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import vsqs
import vsqs.testing
from vsqs import _fs, _host, _mountinfo
from vsqs.testing import ManualClock

from ..fixtures_core import patch_fs

SYNCS = {"fsync", "fsync_dir", "sync_filesystem"}


@pytest.fixture
def trace(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every public ``_fs`` call, as ``name`` or ``name:<its first path>``."""
    calls: list[str] = []

    def wrap(name: str, real: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(real)
        def traced(*args: Any, **kwargs: Any) -> Any:
            path = next((a for a in args if isinstance(a, str)), "")
            if not path and args and isinstance(args[0], int):
                path = os.readlink(f"/proc/self/fd/{args[0]}")  # the file behind a descriptor
            calls.append(f"{name}:{path}" if path else name)
            return real(*args, **kwargs)

        return traced

    for name, value in vars(_fs).items():
        if not name.startswith("_") and inspect.isfunction(value):
            patch_fs(monkeypatch, name, wrap(name, value))
    return calls  # monkeypatch restores the real functions


def _kinds(calls: list[str]) -> list[str]:
    """The message-changing and syncing calls only, in order."""
    keep = {"create_exclusive", "write_all", "rename_noreplace", "unlink", *SYNCS}
    return [c.split(":")[0] for c in calls if c.split(":")[0] in keep and "/.vsqs/" not in c]


def test_durable_publish_syncs_file_before_rename_and_directory_after(
    tmp_path: Path, trace: list[str]
) -> None:
    q = vsqs.Queue(tmp_path / "q", clock=ManualClock())
    trace.clear()  # making the queue (its directory, flushed) is not publishing
    q.publish(b"m")
    kinds = [k for k in _kinds(trace) if k != "unlink"]
    assert kinds == ["create_exclusive", "write_all", "fsync", "rename_noreplace", "fsync_dir"]


def test_durable_batch_syncs_once_then_renames_then_syncs_the_directory_once(
    tmp_path: Path, trace: list[str]
) -> None:
    q = vsqs.Queue(tmp_path / "q", clock=ManualClock())
    trace.clear()  # making the queue (its directory, flushed) is not publishing
    q.publish_batch([b"a", b"b", b"c"])
    kinds = _kinds(trace)
    assert kinds[:6] == ["create_exclusive", "write_all"] * 3
    rest = kinds[6:]
    first_rename = rest.index("rename_noreplace")
    # One filesystem sync (or one fsync per file where syncfs is missing) before any rename.
    assert set(rest[:first_rename]) <= {"sync_filesystem", "fsync"} and rest[:first_rename]
    assert rest[first_rename:] == ["rename_noreplace"] * 3 + ["fsync_dir"]


def test_non_durable_publish_never_syncs(tmp_path: Path, trace: list[str]) -> None:
    q = vsqs.Queue(tmp_path / "q", durable=False, clock=ManualClock())
    q.publish(b"m")
    q.publish_batch([b"a", b"b"])
    assert not SYNCS & {c.split(":")[0] for c in trace}


def test_attributes_are_durable_before_the_message_is_visible(
    tmp_path: Path, trace: list[str]
) -> None:
    """Metadata is written (and synced) before the rename that makes the message visible."""
    q = vsqs.Queue(tmp_path / "q", clock=ManualClock())
    q.publish(b"m", attributes={"k": "v"})
    # The message's commit (its `.new` renamed), not a wake-up poke's rename before it.
    rename = next(
        i for i, c in enumerate(trace) if c.startswith("rename_noreplace:") and c.endswith(".new")
    )
    before = trace[:rename]
    # Metadata is created relative to the descriptor of .vsqs/meta (create_at).
    meta_create = next(i for i, c in enumerate(before) if c.startswith("create_at:"))
    assert any(c.startswith("fsync:") for c in before[meta_create:])


def test_a_new_durable_queue_flushes_the_directories_it_makes(
    tmp_path: Path, trace: list[str]
) -> None:
    """Each directory made for a durable queue is flushed into its parent, top down: a
    message flushed inside a directory whose own name was lost is lost too (POSIX)."""
    vsqs.Queue(tmp_path / "a" / "q", clock=ManualClock())
    syncs = [c for c in trace if c.split(":")[0] == "fsync_dir"]
    assert syncs == [f"fsync_dir:{tmp_path}", f"fsync_dir:{tmp_path / 'a'}"]
    trace.clear()
    vsqs.Queue(tmp_path / "a" / "q", clock=ManualClock())  # made already: nothing to flush
    assert not [c for c in trace if c.split(":")[0] == "fsync_dir"]


@pytest.mark.parametrize(
    ("fstype", "barrier"),
    [("ext4", True), ("xfs", True), ("btrfs", True), ("tmpfs", True), ("fuse.sshfs", False),
     ("fuse", False), ("fuse.juicefs", False), ("nfs4", False), ("overlay", False), ("", False)],
)  # fmt: skip
def test_syncfs_is_relied_on_only_where_it_is_a_barrier(fstype: str, barrier: bool) -> None:
    """A FUSE daemon never receives syncfs; NFS, overlay and unknown filesystems are not
    proven: there each body is fsynced."""
    assert _mountinfo.syncfs_flushes(fstype) is barrier


def test_a_queue_on_tmp_and_dev_shm_may_use_syncfs() -> None:
    for directory in ("/dev/shm", "/tmp"):
        fstype = _host.filesystem_type(directory)
        assert _fs.syncfs_is_barrier(directory) is _mountinfo.syncfs_flushes(fstype)


def test_without_a_barrier_a_batch_fsyncs_every_body_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """sync_files: one fsync per body, on the fsync threads, before any rename."""
    patch_fs(monkeypatch, "syncfs_is_barrier", lambda _directory: False)
    events: list[tuple[str, str]] = []
    real_fsync, real_rename = _fs.fsync, _fs.rename_noreplace

    def fsync(fd: int, directory: str) -> None:
        events.append(("fsync", threading.current_thread().name))
        real_fsync(fd, directory)

    def rename(src: str, dst: str, dir_fd: int = -100) -> None:
        events.append(("rename", ""))
        real_rename(src, dst, dir_fd)

    patch_fs(monkeypatch, "fsync", fsync)
    monkeypatch.setattr(_fs, "rename_noreplace", rename)
    q = vsqs.Queue(tmp_path / "q", clock=ManualClock())
    events.clear()
    q.publish_batch([b"a", b"b", b"c", b"d"])
    assert [kind for kind, _ in events] == ["fsync"] * 4 + ["rename"] * 4
    assert all(thread.startswith("vsqs-fsync") for kind, thread in events if kind == "fsync")
    assert sorted(m.body for m in vsqs.testing.drain(q)) == [b"a", b"b", b"c", b"d"]
