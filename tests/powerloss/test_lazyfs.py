"""The power-loss filesystem itself: it loses exactly what was not synced, on command."""

from __future__ import annotations

import ctypes
import errno
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from vsqs import _fs, _host

from ._mount import LazyMount, lazy_mount
from .conftest import require_lazyfs

_libc = ctypes.CDLL(None, use_errno=True)

pytestmark = pytest.mark.root  # mounts a FUSE filesystem


def _write(path: Path, data: bytes, *, sync: bool) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        os.write(fd, data)
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)


def test_a_crash_keeps_synced_data_and_drops_the_rest(lazy: LazyMount) -> None:
    root = lazy.mountpoint
    _write(root / "synced", b"kept", sync=True)
    _write(root / "unsynced", b"lost", sync=False)
    fd = os.open(root / "synced", os.O_WRONLY | os.O_APPEND)
    os.write(fd, b" and more, never synced")
    os.close(fd)
    assert (root / "unsynced").read_bytes() == b"lost"  # as long as the power is on
    lazy.crash()
    with pytest.raises(OSError, match="Input/output error"):
        os.listdir(root)  # the machine is off
    assert (lazy.backing / "synced").read_bytes() == b"kept"
    assert (lazy.backing / "unsynced").read_bytes() == b""  # the entry was made, not the data


def test_syncfs_saves_nothing_on_it_as_on_every_fuse_filesystem(lazy: LazyMount) -> None:
    """Why a batch may not rely on syncfs here: the daemon never hears of it."""
    _write(lazy.mountpoint / "f", b"data", sync=False)
    assert _host.filesystem_type(str(lazy.mountpoint)).startswith("fuse")
    assert not _fs.syncfs_is_barrier(str(lazy.mountpoint))
    fd = os.open(lazy.mountpoint, os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert _libc.syncfs(fd) == 0  # it succeeds...
    finally:
        os.close(fd)
    lazy.crash()
    assert (lazy.backing / "f").read_bytes() == b""  # ...and saves nothing


def test_a_no_replace_rename_never_replaces(lazy: LazyMount) -> None:
    _write(lazy.mountpoint / "a", b"a", sync=True)
    _write(lazy.mountpoint / "b", b"b", sync=True)
    with pytest.raises(FileExistsError):
        _fs.rename_noreplace(str(lazy.mountpoint / "a"), str(lazy.mountpoint / "b"))
    assert (lazy.mountpoint / "b").read_bytes() == b"b"


@pytest.mark.parametrize("code", ["EIO", "ENOSPC"])
def test_a_failed_fsync_loses_the_data_and_a_retry_does_not_bring_it_back(
    lazy: LazyMount, code: str
) -> None:
    """As Linux after a failed writeback (fsyncgate): a second fsync succeeds, without
    the data."""
    path = lazy.mountpoint / "f"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        os.write(fd, b"data")
        lazy.command(f"fail-fsync {code}")
        with pytest.raises(OSError) as info:
            os.fsync(fd)
        assert info.value.errno == getattr(errno, code)
        lazy.command("fail-fsync off")
        os.fsync(fd)
    finally:
        os.close(fd)
    lazy.crash()
    assert (lazy.backing / "f").read_bytes() == b""


def test_only_directory_flushes_fail_on_command(lazy: LazyMount) -> None:
    _write(lazy.mountpoint / "f", b"data", sync=True)
    lazy.command("fail-fsyncdir EIO")
    with pytest.raises(OSError, match="Input/output error"):
        _fs.fsync_dir(str(lazy.mountpoint))
    lazy.command("fail-fsync off")
    _fs.fsync_dir(str(lazy.mountpoint))


@pytest.fixture
def strict(tmp_path: Path) -> Iterator[LazyMount]:
    """The power-loss filesystem that also rolls back unflushed directory operations."""
    require_lazyfs()
    with lazy_mount(tmp_path, roll_back_directories=True) as mount:
        yield mount


def test_a_crash_undoes_directory_operations_not_flushed(strict: LazyMount) -> None:
    root = strict.mountpoint
    (root / "d").mkdir()
    _fs.fsync_dir(str(root))  # "d" is committed
    _write(root / "d" / "kept", b"k", sync=True)
    _write(root / "d" / "gone", b"g", sync=True)  # its data is synced, its name is not
    _write(root / "d" / "old", b"o", sync=True)
    _fs.fsync_dir(str(root / "d"))  # commits "kept", "gone" and "old"
    os.rename(root / "d" / "kept", root / "d" / "renamed")
    os.unlink(root / "d" / "gone")
    os.replace(root / "d" / "old", root / "d" / "renamed")  # replaces; undone as a unit
    (root / "e").mkdir()
    strict.crash()
    assert sorted(os.listdir(strict.backing)) == ["d"]
    found = {name: (strict.backing / "d" / name).read_bytes() for name in ["kept", "gone", "old"]}
    assert found == {"kept": b"k", "gone": b"g", "old": b"o"}
    assert sorted(os.listdir(strict.backing / "d")) == ["gone", "kept", "old"]


def test_a_flushed_directory_keeps_its_operations(strict: LazyMount) -> None:
    root = strict.mountpoint
    _write(root / "a", b"a", sync=True)
    _fs.rename_noreplace(str(root / "a"), str(root / "b"))
    _fs.fsync_dir(str(root))
    _write(root / "c", b"c", sync=True)  # never flushed: gone
    strict.crash()
    assert sorted(os.listdir(strict.backing)) == ["b"]
    assert (strict.backing / "b").read_bytes() == b"a"
