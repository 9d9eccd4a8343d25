"""Guarantees of vsqs._flush that ``make mutate`` found unguarded (docs/reliability.rst,
"Mutation testing"): each test fails on the mutant named in its docstring."""

from __future__ import annotations

import ctypes
import errno
import os
import signal
import threading
from pathlib import Path
from typing import NamedTuple

import pytest

from vsqs import _flush, _host, _libc, _mountinfo

from ..fixtures_core import CHILD_TIMEOUT, patch_fs
from ..flushes import Events, Syncfs, join_threads, run_threads
from ..reliability._mounts import mounted, why_not_mountable


class _Uname(NamedTuple):
    sysname: str
    nodename: str
    release: str
    version: str
    machine: str


@pytest.mark.parametrize(
    ("release", "expected"),
    [
        ("5.8.0-1-amd64", True),
        ("5.7.19", False),
        ("5.10.0-28-cloud-amd64", True),  # minor 10 > 8: compared as numbers
        ("6.1.0-13-amd64", True),
        ("4.19.0", False),
        ("6.0", True),
        ("unknown", False),
    ],
)
def test_syncfs_reports_errors_from_linux_5_8_on(
    release: str, expected: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``syncfs`` counts as a barrier only where it reports write-back errors: Linux 5.8
    and later, read from the kernel's release string; a release that does not parse is
    not trusted (mutants of ``_kernel_at_least``, which runs once at import)."""
    monkeypatch.setattr(os, "uname", lambda: _Uname("Linux", "h", release, "#1", "x86_64"))
    assert _flush._kernel_at_least(5, 8) is expected


def _files(directory: Path, count: int) -> list[str]:
    names = [f"f{n}" for n in range(count)]
    for name in names:
        (directory / name).write_bytes(b"x")
    return names


def test_eight_fsyncs_run_at_once_where_there_is_no_barrier(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without a filesystem-wide barrier, ``sync_files`` fsyncs the bodies eight at once
    (a network filesystem answers each after a round trip): eight fsyncs that each wait
    for all eight to have started complete (mutant: the pool made with the default
    size, six threads on two cores, so they never all start)."""
    _flush._forget_pool()  # a pool of this test's own, not one another test made
    patch_fs(monkeypatch, "sync_filesystem", lambda path: False)
    everyone = threading.Barrier(8, timeout=20)
    real_fsync = _flush.fsync

    def fsync(fd: int, directory: str) -> None:
        everyone.wait()
        real_fsync(fd, directory)

    patch_fs(monkeypatch, "fsync", fsync)
    _flush.sync_files(str(tmp_path), _files(tmp_path, 8))


@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_a_forked_child_flushes_with_threads_of_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fsync threads do not survive a fork: a child of a process that used them makes
    its own, and its flushes complete (mutant: the pool not forgotten in the child, whose
    work then waits for threads that are not there)."""
    patch_fs(monkeypatch, "sync_filesystem", lambda path: False)
    _flush.sync_files(str(tmp_path), _files(tmp_path, 2))  # the parent's pool exists now
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through its exit status
        status = 1
        try:
            signal.alarm(20)  # a child that hangs ends (SIGALRM) rather than block the test
            _flush.sync_files(str(tmp_path), _files(tmp_path, 3))
            status = 0
        finally:
            os._exit(status)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_syncfs_is_never_a_barrier_on_a_filesystem_it_is_not_proven_for(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Only the filesystems of ``SYNCFS_FILESYSTEMS`` trust one ``syncfs`` (here: procfs
    is not one of them), whatever the kernel (mutant: ``or`` for ``and``, which trusts it
    everywhere on a kernel that reports errors, ``syncfs_is_barrier`` 7). The cache
    starts empty: mutmut forks each mutant from a process whose clean run filled it."""
    monkeypatch.setattr(_flush, "_barriers", {})
    assert _flush.syncfs_is_barrier("/proc") is False


def test_syncfs_is_no_barrier_on_a_kernel_that_hides_its_errors(
    fast_tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before Linux 5.8 ``syncfs`` returned 0 when a write-back failed: there it is no
    barrier even on a filesystem it flushes, such as tmpfs (mutants: ``or`` for either
    ``and``, which trust it there, ``syncfs_is_barrier`` 7 and 8). The kernel's answer,
    read once at import, is replaced by that of an older kernel."""
    directory = str(fast_tmp_path)
    monkeypatch.setattr(_flush, "_barriers", {})
    if not _flush.syncfs_is_barrier(directory):
        pytest.skip(f"syncfs is no barrier on {directory} here")
    monkeypatch.setattr(_flush, "_barriers", {})
    monkeypatch.setattr(_flush, "_KERNEL_SYNCFS_REPORTS_ERRORS", False)
    assert _flush.syncfs_is_barrier(directory) is False


def _trace_flushes(monkeypatch: pytest.MonkeyPatch, *, barrier: bool) -> list[str]:
    """``sync_filesystem`` answering *barrier*, and every flush recorded (fsyncs wait,
    up to 20 s, until two have started: they must run at once)."""
    calls: list[str] = []
    two = threading.Barrier(2, timeout=20)

    def sync_filesystem(path: str) -> bool:
        calls.append("sync_filesystem")
        return barrier

    def fsync(fd: int, directory: str) -> None:
        calls.append("fsync")
        if not barrier:
            two.wait()

    patch_fs(monkeypatch, "sync_filesystem", sync_filesystem)
    patch_fs(monkeypatch, "fsync", fsync)
    return calls


def test_one_body_is_fsynced_and_several_are_flushed_by_one_syncfs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where ``syncfs`` is a barrier, two bodies cost one ``syncfs`` and no fsync; one
    body costs one fsync and no ``syncfs`` (mutants: ``>= 1``, ``> 2`` there)."""
    calls = _trace_flushes(monkeypatch, barrier=True)
    names = _files(tmp_path, 2)
    _flush.sync_files(str(tmp_path), names)
    assert calls == ["sync_filesystem"]
    calls.clear()
    _flush.sync_files(str(tmp_path), names[:1])
    assert calls == ["fsync"]


def test_without_a_barrier_two_bodies_are_fsynced_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without a barrier, two bodies are fsynced in parallel (each fsync waits for the
    other to start), one body directly (mutants: ``< 1``, ``<= 2``)."""
    _flush._forget_pool()
    calls = _trace_flushes(monkeypatch, barrier=False)
    _flush.sync_files(str(tmp_path), _files(tmp_path, 2))
    assert sorted(calls) == ["fsync", "fsync", "sync_filesystem"]


@pytest.mark.parametrize(
    ("kernels", "raised"),
    [(errno.EIO, errno.EIO), (errno.ENOSPC, errno.ENOSPC), (0, errno.EIO)],
)
def test_a_failed_syncfs_raises_the_kernels_error_naming_the_directory(
    monkeypatch: pytest.MonkeyPatch, disk_tmp_path: Path, kernels: int, raised: int
) -> None:
    """A ``syncfs`` that fails raises :class:`OSError` with the kernel's errno, its
    message and the directory (mutants of that error); a failure without an errno is
    EIO, never a success (``_SharedSyncfs.flush`` 23: ``and`` for ``or`` there, which
    turned ENOSPC into EIO and a failure without errno into success). libc's ``syncfs``
    is replaced by one that fails, as a disk that cannot write back would make it."""
    directory = str(disk_tmp_path)  # a disk: on tmpfs no syncfs is made at all
    if not _flush.syncfs_is_barrier(directory):
        pytest.skip("syncfs is no barrier here (Linux before 5.8)")

    def failing_syncfs(fd: int) -> int:
        ctypes.set_errno(kernels)
        return -1

    monkeypatch.setattr(_libc, "syncfs", lambda: failing_syncfs)
    with pytest.raises(OSError, match=os.strerror(raised)) as info:
        _flush.sync_filesystem(directory)
    assert info.value.errno == raised
    assert info.value.strerror == os.strerror(raised)
    assert info.value.filename == directory


@pytest.mark.parametrize(
    ("decide", "cache"),
    [("syncfs_is_barrier", "_barriers"), ("fsync_keeps_new_names", "_names_kept")],
)
def test_what_a_filesystem_honours_is_decided_once_per_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, decide: str, cache: str
) -> None:
    """The filesystem type behind a directory is looked up once (it reads the mount
    table), then remembered: whether ``syncfs`` is a barrier there, and whether an
    ``fsync`` keeps a new name (mutants of either cache: never filled, filled with
    ``None``, looked up by ``None``; ``fsync_keeps_new_names`` 1, 2 and 9)."""
    monkeypatch.setattr(_flush, cache, {})
    looked_up: list[str] = []
    real = _host.filesystem_type

    def filesystem_type(path: str) -> str:
        looked_up.append(path)
        return real(path)

    monkeypatch.setattr(_host, "filesystem_type", filesystem_type)
    directory = str(tmp_path)
    decided = getattr(_flush, decide)
    first = decided(directory)
    assert [decided(directory) for _ in range(3)] == [first] * 3
    assert looked_up == [directory]


def test_an_fsync_keeps_a_new_name_only_where_the_filesystem_commits_it(
    fast_tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``fsync_keeps_new_names`` answers from the directory's filesystem type: ``True``
    on tmpfs or ext4 (so a durable publish there skips the metadata directory's fsync),
    ``False`` on procfs, where only a directory fsync would do; a ``bool`` either way
    (mutants: the type not looked up, or looked up for ``None``, or ``None`` answered,
    ``fsync_keeps_new_names`` 3, 4, 5 and 6)."""
    monkeypatch.setattr(_flush, "_names_kept", {})
    directory = str(fast_tmp_path)
    kept = _mountinfo.fsync_keeps_names(_host.filesystem_type(directory))
    assert _flush.fsync_keeps_new_names(directory) is kept
    assert _flush.fsync_keeps_new_names("/proc") is False


@pytest.mark.parametrize("flush", ["fsync_dir", "sync_filesystem"])
def test_a_file_given_for_a_directory_is_refused(disk_tmp_path: Path, flush: str) -> None:
    """The flushes of a directory open it as one (``O_DIRECTORY``): a regular file in
    its place raises ``NotADirectoryError`` rather than be flushed as though it were the
    directory whose renames had to be made durable (mutants: ``&`` for either ``|`` of
    the open flags, which drop ``O_DIRECTORY``: ``fsync_dir`` 6 and 7,
    ``sync_filesystem`` 12 and 13). On a disk: on tmpfs neither opens anything."""
    planted = disk_tmp_path / "not-a-directory"
    planted.write_bytes(b"x")
    if flush == "sync_filesystem" and not _flush.syncfs_is_barrier(str(disk_tmp_path)):
        pytest.skip("syncfs is no barrier here (Linux before 5.8)")
    with pytest.raises(NotADirectoryError):
        getattr(_flush, flush)(str(planted))
    assert planted.read_bytes() == b"x"


@pytest.mark.root
def test_each_filesystem_shares_only_its_own_syncfs(
    disk_tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ``syncfs`` of one filesystem never answers, nor delays, a caller flushing
    another: while a ``syncfs`` of one disk is held, a caller flushing another disk is
    answered at once by a ``syncfs`` of that one (mutant: one shared ``syncfs`` for every
    filesystem, ``sync_filesystem`` 19, where the second caller waits for the first's
    and may then be answered by a ``syncfs`` of the first disk). The second disk is a
    loop-mounted ext4 (tmpfs would do, but vsqs makes no flush there)."""
    reason = why_not_mountable("ext4")
    if reason is not None:
        pytest.skip(f"cannot mount a second disk: {reason}")
    with mounted("ext4", disk_tmp_path) as mountpoint:
        _flushes_apart(str(mountpoint), str(disk_tmp_path), monkeypatch)


def _flushes_apart(first: str, second: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Hold a ``syncfs`` of *first*'s filesystem; one of *second*'s is made meanwhile."""
    devices = [os.stat(first).st_dev, os.stat(second).st_dev]
    assert devices[0] != devices[1]
    if not (_flush.syncfs_is_barrier(first) and _flush.syncfs_is_barrier(second)):
        pytest.skip("syncfs is no barrier on both filesystems here")
    syncfs = Syncfs(monkeypatch, Events(), hold=True)
    held, _ = run_threads([lambda: _flush.sync_filesystem(first)])
    try:
        assert syncfs.held.wait(CHILD_TIMEOUT), "the first caller never reached syncfs"
        other, results = run_threads([lambda: _flush.sync_filesystem(second)])
        join_threads(other)  # the first syncfs still held
        assert results == [True]
        assert syncfs.devices == devices
    finally:
        syncfs.release()
        join_threads(held)


def test_on_tmpfs_no_flush_opens_anything(fast_tmp_path: Path) -> None:
    """On tmpfs every flush returns at once, before any system call: given what would
    make each fail on a disk (a file for a directory, a name that does not exist, a
    closed descriptor), none raises (mutants: any of them reaching its ``open``,
    ``fsync`` or ``syncfs`` there). ``tests/reliability/test_memory_flushes.py``
    counts the system calls themselves, with strace."""
    directory = str(fast_tmp_path)
    if _host.filesystem_type(directory) != "tmpfs":
        pytest.skip(f"{directory} is not on tmpfs")
    planted = fast_tmp_path / "not-a-directory"
    planted.write_bytes(b"x")
    closed = os.open(directory, os.O_RDONLY)
    os.close(closed)
    _flush.fsync_dir(str(planted))
    assert _flush.sync_filesystem(str(planted)) is True
    _flush.sync_files(directory, ["absent"])
    _flush.sync_files(directory, ["absent", "gone"])
    _flush.fsync(closed, directory)
    _flush.flush_made([str(planted / "below")])
