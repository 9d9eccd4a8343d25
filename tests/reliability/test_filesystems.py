"""The core round trips on each local filesystem vsqs supports: ext4, tmpfs, xfs, btrfs.

Each filesystem is mounted once for the module (loop images for ext4, xfs and btrfs; ext4
is the root filesystem's own when that is ext4). Where mounting is impossible the tests
skip with the reason in the report.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import vsqs
from vsqs import _fs
from vsqs.testing import ManualClock, assert_consistent, drain

from ._mounts import filesystem_of, mounted
from .conftest import require_mount

FILESYSTEMS = ["ext4", "tmpfs", "xfs", "btrfs"]


@pytest.fixture(scope="module", params=FILESYSTEMS)
def fs_root(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Path]:
    """A directory on the requested filesystem (unmounted after the module)."""
    fstype: str = request.param
    base = tmp_path_factory.mktemp(fstype)
    if fstype == "ext4" and filesystem_of(base) == "ext4":
        yield base  # the root filesystem is ext4 already
        return
    require_mount(fstype)
    with mounted(fstype, base) as mountpoint:
        assert filesystem_of(mountpoint) == fstype
        yield mountpoint


@pytest.fixture
def ahead_clock() -> ManualClock:
    # Ahead of every id this process drew on the real clock, so ids come from this clock.
    return ManualClock(time.time() + 10_000)


@pytest.fixture
def fs_qpath(fs_root: Path, request: pytest.FixtureRequest) -> Path:
    name: str = request.node.name
    return fs_root / name.replace("[", "-").replace("]", "")


def test_publish_receive_delete_fifo(fs_qpath: Path, ahead_clock: ManualClock) -> None:
    q = vsqs.Queue(fs_qpath, clock=ahead_clock)
    ids = [q.publish(b"%d" % n) for n in range(20)]
    q.publish_batch([b"b1", b"b2"])
    got = drain(q)
    assert [m.id for m in got][:20] == ids
    assert [m.body for m in got] == [b"%d" % n for n in range(20)] + [b"b1", b"b2"]
    assert_consistent(q)


def test_requeue_release_and_delay(fs_qpath: Path, ahead_clock: ManualClock) -> None:
    q = vsqs.Queue(fs_qpath, visibility_timeout=30, clock=ahead_clock)
    q.publish(b"m")
    q.publish(b"later", delay=10)
    first = q.receive(timeout=0)
    assert first is not None and q.receive(timeout=0) is None
    released = q.change_visibility(first, 0)
    again = q.receive(timeout=0)
    assert again is not None and again.id == released.id and again.receive_count == 2
    ahead_clock.advance(31)
    assert [m.body for m in drain(q)] == [b"m", b"later"]
    assert_consistent(q)


def test_dead_letter_dedup_and_capacity(fs_qpath: Path, ahead_clock: ManualClock) -> None:
    dlq = vsqs.Queue(fs_qpath.with_name(fs_qpath.name + "-dlq"), clock=ahead_clock)
    q = vsqs.Queue(fs_qpath, visibility_timeout=5, clock=ahead_clock, dead_letter=dlq,
                   max_receives=1, capacity=3)  # fmt: skip
    assert q.publish(b"poison", dedup_id="k") == q.publish(b"poison", dedup_id="k")
    q.publish(b"a")
    q.publish(b"b")
    with pytest.raises(vsqs.QueueFull):
        q.publish(b"c", timeout=0)
    assert q.receive(timeout=0) is not None
    ahead_clock.advance(6)
    q.requeue_expired()
    assert [m.body for m in drain(dlq)] == [b"poison"]
    assert [m.body for m in drain(q)] == [b"a", b"b"]
    assert_consistent(q)
    assert_consistent(dlq)


def test_no_replace_rename_is_native(fs_qpath: Path) -> None:
    """RENAME_NOREPLACE works in one syscall here (no link+unlink fallback), never replaces."""
    fs_qpath.mkdir()
    (fs_qpath / "a").write_bytes(b"a")
    (fs_qpath / "b").write_bytes(b"b")
    with pytest.raises(FileExistsError):
        _fs.rename_noreplace(str(fs_qpath / "a"), str(fs_qpath / "b"))
    assert (fs_qpath / "b").read_bytes() == b"b"
    fallbacks: list[str] = []
    real = _fs.link_noreplace

    def fallback(src: str, dst: str, dir_fd: int | None = None, _tries: int = 0) -> None:
        fallbacks.append(dst)

    _fs.link_noreplace = fallback
    try:
        _fs.rename_noreplace(str(fs_qpath / "a"), str(fs_qpath / "c"))
    finally:
        _fs.link_noreplace = real
    assert fallbacks == [] and (fs_qpath / "c").read_bytes() == b"a"


def test_an_id_collision_is_re_ided_never_overwritten(
    fs_qpath: Path, ahead_clock: ManualClock
) -> None:
    """A ready file already holds the id the publisher draws: it keeps it; ours moves."""
    q = vsqs.Queue(fs_qpath, clock=ahead_clock)
    taken = str(ahead_clock.time_us())
    (fs_qpath / taken).write_bytes(b"already here")
    mine = q.publish(b"mine")
    assert (fs_qpath / taken).read_bytes() == b"already here"
    assert sorted(m.body for m in drain(q)) == [b"already here", b"mine"]
    assert mine != taken
    assert_consistent(q)


def test_link_counts_and_timestamps(fs_qpath: Path, ahead_clock: ManualClock) -> None:
    """What the docs say about each filesystem: one link per message, mtimes that move."""
    q = vsqs.Queue(fs_qpath, clock=ahead_clock)
    message_id = q.publish(b"m")
    info = os.lstat(fs_qpath / message_id)
    assert info.st_nlink == 1  # a finished rename never leaves a second name
    assert info.st_mtime_ns > 0
    q.clean(older_than=0)  # judges debris by mtime: must not take a fresh ready message
    assert [m.id for m in drain(q)] == [message_id]
