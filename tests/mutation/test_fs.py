"""Guarantees of vsqs._fs that ``make mutate`` found unguarded in its sample
(docs/reliability.rst, "Mutation testing"): each test fails on the mutant named in its
docstring. Faults are injected by wrapping system calls (``os.open``, ``os.write``), never
vsqs's own functions; the fallback rename has its own file, ``test_fs_rename.py``.
"""

from __future__ import annotations

import errno
import os
import stat
import time
from pathlib import Path
from typing import Any

import pytest

import vsqs
from vsqs import _flush, _fs
from vsqs.testing import ManualClock

from ..fixtures_core import patch_fs


def test_a_shutdown_marker_without_a_time_is_dated_by_its_mtime(tmp_path: Path) -> None:
    """A ``closed`` marker written without a time (by hand, or by vsqs before 1.0) an
    hour ago: the shutdown is long over, so an empty queue is drained at once, with no
    grace to wait for (mutant: ``mtime_us_at`` calling ``lstat`` without the name)."""
    queue = vsqs.PlainQueue(tmp_path / "q", durable=False)
    marker = Path(queue.path, ".vsqs", "closed")
    marker.parent.mkdir(exist_ok=True)
    marker.write_bytes(b"")
    hour_ago = time.time() - 3600
    os.utime(marker, (hour_ago, hour_ago))
    with pytest.raises(vsqs.QueueDrained):
        vsqs.PlainQueue(tmp_path / "q", durable=False).receive(timeout=0)


def test_a_fifo_planted_where_vsqs_opens_a_file_is_refused_by_name(tmp_path: Path) -> None:
    """A FIFO planted under a lock's name or a message's: ``EINVAL`` "not a regular file"
    naming it, never a hang nor a lock taken on it (mutants: ``open_lock_at`` and
    ``open_regular``'s error arguments)."""
    queue = vsqs.PlainQueue(tmp_path / "q", durable=False, capacity=2)
    queue.publish(b"a")
    lock = Path(queue.path, ".vsqs", "capacity.lock")
    lock.unlink()
    os.mkfifo(lock)
    with pytest.raises(OSError) as caught:
        vsqs.PlainQueue(tmp_path / "q", durable=False, capacity=2).publish(b"b")
    assert (caught.value.errno, caught.value.filename) == (errno.EINVAL, str(lock))
    assert caught.value.strerror == "not a regular file"
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(OSError) as caught:
        _fs.open_regular(str(fifo))  # its callers skip it by its errno: nothing shows
    assert (caught.value.errno, caught.value.filename) == (errno.EINVAL, str(fifo))
    assert caught.value.strerror == "not a regular file"


def test_directories_made_under_a_umask_get_its_mode_and_keep_only_an_inherited_setgid(
    tmp_path: Path,
) -> None:
    """``umask=0o002``: ``.vsqs/meta`` is made 0o775 whatever the process umask, with the
    set-group-id bit only when its parent has it (a shared queue's group), never added
    (mutant: ``fchmod_dir_at`` 11, the bit ORed in)."""
    for name, mode in (("plain", 0o775), ("shared", 0o2775)):
        path = tmp_path / name
        path.mkdir()
        os.chmod(path, mode)
        queue = vsqs.PlainQueue(path, durable=False, umask=0o002)
        queue.publish(b"m", attributes={"k": "v"})  # makes .vsqs/meta
        for made in (path / ".vsqs", path / ".vsqs" / "meta"):
            assert stat.S_IMODE(made.stat().st_mode) == mode, made


def test_a_queue_root_is_made_with_the_default_mode_and_opened_again(tmp_path: Path) -> None:
    """A queue root's directory is made as ``mkdir`` makes one (0o777 less the umask) and
    an existing one opens (mutants: ``make_dirs``' default mode, ``exist_ok``)."""
    old = os.umask(0o022)
    try:
        root = vsqs.QueueRoot(tmp_path / "a" / "root", durable=False)
    finally:
        os.umask(old)
    for made in (tmp_path / "a", tmp_path / "a" / "root"):
        assert stat.S_IMODE(made.stat().st_mode) == 0o755, made
    again = vsqs.QueueRoot(tmp_path / "a" / "root", durable=False)
    assert again.path == root.path


def test_the_filesystem_clock_probe_leaves_nothing_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Retention reads the filesystem's clock from a file it makes then removes in
    ``.vsqs``: nothing is left there nor in the working directory (mutant: ``now_us_at``
    creating the file relative to the working directory)."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    clock = ManualClock()
    queue = vsqs.PlainQueue(tmp_path / "q", durable=False, retention=10, clock=clock)
    queue.publish(b"m")
    clock.advance(3600)  # expired by this clock: the probe runs
    queue.receive(timeout=0)
    assert os.listdir(cwd) == []
    assert [n for n in os.listdir(Path(queue.path, ".vsqs")) if n.startswith(".now")] == []


def test_a_lock_file_is_made_with_its_mode_never_through_a_symlink_and_locks(
    tmp_path: Path,
) -> None:
    """``open_lock_at`` makes the lock file with the mode asked for, refuses a symlink
    (nothing made at its target), and ``try_lock`` takes it exclusively by default:
    one holder, no shared one beside it; shared, several (mutants: ``open_lock_at``'s
    mode and ``O_NOFOLLOW``, ``try_lock``'s default and its ``shared`` test)."""
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    old = os.umask(0o022)
    try:
        first, second = (_fs.open_lock_at("lock", 0o640, fd) for _ in range(2))
        assert stat.S_IMODE(os.stat(tmp_path / "lock").st_mode) == 0o640
        (tmp_path / "link").symlink_to(tmp_path / "target")
        with pytest.raises(OSError) as caught:
            _fs.open_lock_at("link", 0o640, fd)
        assert caught.value.errno == errno.ELOOP
        assert not (tmp_path / "target").exists()
        assert _fs.try_lock(first)
        assert not _fs.try_lock(second)
        assert not _fs.try_lock(second, shared=True)
        _fs.unlock(first)
        assert _fs.try_lock(first, shared=True)
        assert _fs.try_lock(second, shared=True)
        assert not _fs.try_lock(os.open(tmp_path / "lock", os.O_RDONLY))
    finally:
        os.umask(old)
        os.close(fd)


def test_two_names_are_one_file_only_if_both_exist_on_one_inode(tmp_path: Path) -> None:
    """``same_file``: a hard link yes, a copy no, a missing name no (mutant: a missing
    name taken for the same file, so a requeue would discard a message's only name)."""
    (tmp_path / "a").write_bytes(b"m")
    os.link(tmp_path / "a", tmp_path / "b")
    (tmp_path / "c").write_bytes(b"m")
    assert _fs.same_file(str(tmp_path / "a"), str(tmp_path / "b"))
    assert not _fs.same_file(str(tmp_path / "a"), str(tmp_path / "c"))
    assert not _fs.same_file(str(tmp_path / "a"), str(tmp_path / "gone"))
    assert not _fs.same_file(str(tmp_path / "gone"), str(tmp_path / "a"))


def test_a_queue_root_has_no_queue_under_an_absent_name(tmp_path: Path) -> None:
    """A name with nothing under it is not a queue of the root (mutant: ``is_plain_dir``
    true for a missing path)."""
    root = vsqs.QueueRoot(tmp_path / "root", durable=False)
    assert "absent" not in root
    with pytest.raises(vsqs.QueueNotFound):
        root.get("absent")


def test_a_fresh_shutdown_marker_without_a_time_is_not_yet_drained(tmp_path: Path) -> None:
    """A ``closed`` marker without a time, written just now: the shutdown is dated by its
    mtime, in whole µs, so the grace for publishers in flight has not passed and a
    receive finds nothing without raising ``QueueDrained`` (mutants: ``mtime_us_at``'s
    division)."""
    queue = vsqs.PlainQueue(tmp_path / "q", durable=False)
    marker = Path(queue.path, ".vsqs", "closed")
    marker.parent.mkdir(exist_ok=True)
    marker.write_bytes(b"")
    assert vsqs.PlainQueue(tmp_path / "q", durable=False).receive(timeout=0) is None


@pytest.fixture
def flushed(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every directory flushed (``fsync_dir``, which still flushes), in order."""
    paths: list[str] = []
    real = _flush.fsync_dir

    def recorded(path: str) -> None:
        paths.append(path)
        real(path)

    patch_fs(monkeypatch, "fsync_dir", recorded)
    return paths


@pytest.mark.parametrize("durable", [False, True])
def test_a_queue_root_flushes_the_directories_it_made_only_when_durable(
    tmp_path: Path, flushed: list[str], durable: bool
) -> None:
    """A durable root flushes the parent of each directory it made, so that their names
    survive a power loss; a root that is not durable flushes nothing (mutants:
    ``make_dirs``' test of *durable*)."""
    vsqs.QueueRoot(tmp_path / "a" / "root", durable=durable)
    assert flushed == ([str(tmp_path), str(tmp_path / "a")] if durable else [])


def test_a_copy_returns_its_size_and_reports_progress_before_each_chunk(tmp_path: Path) -> None:
    """``copy_fd`` copies every byte, in 1 MiB chunks, calls *progress* before each read
    (a mover renews its claim there) and returns the size copied. (Its one caller, the
    cross-filesystem move, does not count a moved message as produced, so the size is
    seen only here; mutants: ``copy_fd``'s running size.)"""
    body = os.urandom((1 << 20) + 5)  # two chunks
    (tmp_path / "source").write_bytes(body)
    calls: list[int] = []
    source = os.open(tmp_path / "source", os.O_RDONLY)
    target = os.open(tmp_path / "target", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        size = _fs.copy_fd(source, target, lambda: calls.append(os.lseek(source, 0, os.SEEK_CUR)))
    finally:
        os.close(source)
        os.close(target)
    assert size == len(body)
    assert (tmp_path / "target").read_bytes() == body
    assert calls == [0, 1 << 20, len(body)]


def test_an_exclusive_create_cut_short_by_ctrl_c_leaves_nothing_and_eperm_says_taken(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``create_at``: Ctrl-C raised as the ``open`` returns removes the file it made
    (its descriptor is lost to the caller), or nothing if none was made; an existing
    name is ``FileExistsError`` and never removed; sshfs's EPERM on a taken name is
    ``FileExistsError``, on a free one stays ``PermissionError``; the file gets the
    mode asked for, 0o666 less the umask if none is (mutants: the cleanup, the EPERM
    branch and the mode of ``create_at``; ``create_at`` 1: its default mode 0o667)."""
    real_open = os.open
    fail: list[BaseException] = []
    made = [True]

    def interrupted_open(path: Any, flags: int, mode: int = 0o777, **kwargs: Any) -> int:
        if fail and flags & os.O_EXCL:
            if made[0]:
                os.close(real_open(path, flags, mode, **kwargs))  # made, then interrupted
            raise fail[0]
        return real_open(path, flags, mode, **kwargs)

    monkeypatch.setattr(os, "open", interrupted_open)
    fd = real_open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    old = os.umask(0o022)
    try:
        for dir_fd, name in ((None, str(tmp_path / "new")), (fd, "new")):
            fail[:] = [KeyboardInterrupt()]
            for made[0] in (True, False):
                with pytest.raises(KeyboardInterrupt):
                    _fs.create_at(name, 0o600, dir_fd)
                assert os.listdir(tmp_path) == []
            fail[:] = [PermissionError(errno.EPERM, "Operation not permitted", name)]
            with pytest.raises(PermissionError) as refused:
                _fs.create_at(name, 0o600, dir_fd)
            assert type(refused.value) is PermissionError
            (tmp_path / "new").write_bytes(b"theirs")
            with pytest.raises(FileExistsError):  # EPERM, on a taken name
                _fs.create_at(name, 0o600, dir_fd)
            fail.clear()
            with pytest.raises(FileExistsError):  # EEXIST
                _fs.create_at(name, 0o600, dir_fd)
            assert os.listdir(tmp_path) == ["new"]
            assert (tmp_path / "new").read_bytes() == b"theirs"
            (tmp_path / "new").unlink()
            os.close(_fs.create_at(name, 0o640, dir_fd))
            assert stat.S_IMODE((tmp_path / "new").stat().st_mode) == 0o640
            (tmp_path / "new").unlink()
            os.close(_fs.create_at(name, dir_fd=dir_fd))  # 0o666 by default, less the umask
            assert stat.S_IMODE((tmp_path / "new").stat().st_mode) == 0o644
            (tmp_path / "new").unlink()
    finally:
        os.umask(old)
        os.close(fd)


@pytest.mark.parametrize("at", [False, True], ids=["by_path", "in_dir_fd"])
@pytest.mark.parametrize("call", ["create", "link"])
def test_an_eperm_on_a_free_name_is_tried_again_three_times_at_most(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, call: str, at: bool
) -> None:
    """sshfs's EPERM for a name another host made and already renamed away: the create
    or link is made again, in the same directory (by path or in the directory
    descriptor), and makes our own file; an EPERM that stays is raised after 3 tries in
    all; EACCES (a real denial, on sshfs too) at once (mutants: ``_TRIES``, ``_raced``'s
    errno and bound, the retries of ``create_at`` and ``link_noreplace``, ``create_at``
    23: a retry without the descriptor, which makes the file in the working directory).
    The real race on a real mount: ``tests/multihost/test_exclusive_create.py``."""
    real_open, real_link = os.open, os.link
    failures: list[int] = []  # errnos the next calls fail with, one each, before the real one
    calls: list[str] = []

    def refused(path: Any) -> None:
        calls.append(str(path))
        if failures:
            code = failures.pop(0)
            raise PermissionError(code, os.strerror(code), path)

    def sftp_open(path: Any, flags: int, mode: int = 0o777, **kwargs: Any) -> int:
        if flags & os.O_EXCL:
            refused(path)
        return real_open(path, flags, mode, **kwargs)

    def sftp_link(src: Any, dst: Any, **kwargs: Any) -> None:
        refused(dst)
        real_link(src, dst, **kwargs)

    queue, cwd = tmp_path / "queue", tmp_path / "cwd"
    queue.mkdir()
    cwd.mkdir()
    (queue / "src").write_bytes(b"ours")
    monkeypatch.chdir(cwd)  # where a retry that lost the descriptor would make its file
    dir_fd = os.open(queue, os.O_RDONLY | os.O_DIRECTORY) if at else None
    where = "" if at else f"{queue}/"
    target = f"{where}new"

    def make() -> None:
        if call == "create":
            os.close(_fs.create_at(target, 0o600, dir_fd))
        else:
            _fs.link_noreplace(f"{where}src", target, dir_fd)

    monkeypatch.setattr(os, "open", sftp_open)
    monkeypatch.setattr(os, "link", sftp_link)
    try:
        for raced in (1, 2):
            failures[:], calls[:] = [errno.EPERM] * raced, []
            make()
            assert (calls, failures) == ([target] * (raced + 1), [])
            assert os.listdir(cwd) == []
            assert (queue / "new").read_bytes() == (b"" if call == "create" else b"ours")
            (queue / "new").unlink()
        for code, tries in ((errno.EPERM, 3), (errno.EACCES, 1)):
            failures[:], calls[:] = [code] * 5, []
            with pytest.raises(PermissionError) as caught:
                make()
            assert (caught.value.errno, calls) == (code, [target] * tries)
            assert sorted(os.listdir(queue)) == ["src"]
    finally:
        if dir_fd is not None:
            os.close(dir_fd)


def test_a_short_write_is_continued_to_the_last_byte(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``write_all`` loops on short writes (a signal, a pipe, a quota) until every byte
    is written, in order (mutants: ``write_all``'s loop)."""
    real_write = os.write
    body = os.urandom(1000)

    def short_write(fd: int, data: Any) -> int:
        return real_write(fd, bytes(data)[:7])

    fd = os.open(tmp_path / "f", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    monkeypatch.setattr(os, "write", short_write)
    try:
        _fs.write_all(fd, body)
    finally:
        monkeypatch.undo()
        os.close(fd)
    assert (tmp_path / "f").read_bytes() == body


def test_a_queue_directory_gets_its_mode_keeps_its_setgid_and_spares_others_dirs(
    tmp_path: Path, flushed: list[str]
) -> None:
    """``umask=0o002`` while the process umask is 0o077: a queue directory made is 0o775;
    an existing one of ours is set to 0o775 keeping a set-group-id bit, and not touched
    when its mode is right already; another user's is left as it is (we may not chmod
    it); a file in the way is refused; a durable queue flushes the parents of the
    directories it made (mutants: ``make_queue_dir``)."""
    if os.geteuid() != 0:
        pytest.fail("it gives a directory to another user: run the suite as root (make test)")
    old = os.umask(0o077)
    try:
        vsqs.PlainQueue(tmp_path / "a" / "made", durable=True, umask=0o002)
        assert flushed == [str(tmp_path), str(tmp_path / "a")]
        assert stat.S_IMODE((tmp_path / "a" / "made").stat().st_mode) == 0o775
        flushed.clear()
        vsqs.PlainQueue(tmp_path / "b" / "made", durable=False, umask=0o002)
        assert flushed == []  # not durable: made, not flushed
        ours, theirs = tmp_path / "ours", tmp_path / "theirs"
        for path in (ours, theirs):
            path.mkdir()
            os.chmod(path, 0o2701)
        os.chown(theirs, 65534, -1)  # nobody's
        for path in (ours, theirs):
            vsqs.PlainQueue(path, durable=True, umask=0o007)
        assert flushed == []  # nothing made
        assert stat.S_IMODE(ours.stat().st_mode) == 0o2770  # o+x gone, g+s kept
        assert stat.S_IMODE(theirs.stat().st_mode) == 0o2701
        os.chmod(ours, 0o775)  # noqa: S103 -- as the queue would make it
        before = ours.stat().st_ctime_ns
        time.sleep(0.01)
        vsqs.PlainQueue(ours, durable=False, umask=0o002)
        assert ours.stat().st_ctime_ns == before  # the mode was right: no chmod
        vsqs.PlainQueue(ours, durable=False)  # no umask: the mode is left alone
        os.chmod(ours, 0o700)
        vsqs.PlainQueue(ours, durable=False)
        assert stat.S_IMODE(ours.stat().st_mode) == 0o700
        (tmp_path / "file").write_bytes(b"")
        with pytest.raises(vsqs.NotAQueue):
            vsqs.PlainQueue(tmp_path / "file", durable=False, umask=0o002)
    finally:
        os.umask(old)
