"""Guarantees of vsqs._fs that ``make mutate`` found unguarded in its sample
(docs/reliability.rst, "Mutation testing"): each test fails on the mutant named in its
docstring.

The fallback rename (link then unlink, where a filesystem has no no-replace rename: NFS,
sshfs) is staged on the local filesystem: ``renameat2`` is taken away, and the races
between hosts are played by wrapping ``os.link``, the system call, so that another
"host" acts between the link and what follows, or the link fails the way an sshfs
client reports it. Nothing of vsqs is replaced.
"""

from __future__ import annotations

import ctypes
import errno
import os
import stat
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import vsqs
from vsqs import _flush, _fs, _libc
from vsqs.testing import ManualClock

from ..fixtures_core import patch_fs

_REAL_LINK: Callable[..., None] = os.link
_Name = Callable[[str], str]
_READY = "1700000000000001"  # a ready message's name (no dot)
_LEASE = "1700000000000001.1800000000000000"


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


# -- the rename without an atomic no-replace (link, then unlink) ----------------------


@pytest.fixture
def linking(monkeypatch: pytest.MonkeyPatch) -> None:
    """As on NFS or sshfs: no ``renameat2``, so every no-replace rename links then unlinks."""
    monkeypatch.setattr(_libc, "renameat2", lambda: None)


_Rename = Callable[[str, str], None]


@pytest.fixture(params=[False, True], ids=["by-path", "at-dir-fd"])
def mover(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[_Rename, _Name]]:
    """The no-replace rename under test, by path or relative to a descriptor of
    *tmp_path* (:func:`vsqs._fs.rename_noreplace_at`), and how a name is passed to it."""
    if not request.param:
        yield _fs.rename_noreplace, lambda name: str(tmp_path / name)
        return
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        yield (lambda src, dst: _fs.rename_noreplace_at(src, dst, fd)), lambda name: name
    finally:
        os.close(fd)


def _names(where: Path) -> dict[str, bytes]:
    return {entry.name: entry.read_bytes() for entry in where.iterdir()}


@pytest.mark.usefixtures("linking")
def test_the_linking_rename_moves_and_never_replaces(
    tmp_path: Path, mover: tuple[_Rename, _Name]
) -> None:
    """Without ``renameat2`` a rename is a link then an unlink: the source's name goes, the
    target's comes, an existing target is kept (``FileExistsError``) and a missing source
    is ``FileNotFoundError`` naming it (mutants: the fallback's arguments and the
    descriptor form passing ``None``)."""
    rename, name = mover
    (tmp_path / _READY).write_bytes(b"m")
    (tmp_path / "taken").write_bytes(b"theirs")
    with pytest.raises(FileExistsError):
        rename(name(_READY), name("taken"))
    assert _names(tmp_path) == {_READY: b"m", "taken": b"theirs"}
    rename(name(_READY), name(_LEASE))
    assert _names(tmp_path) == {_LEASE: b"m", "taken": b"theirs"}
    with pytest.raises(FileNotFoundError) as caught:
        rename(name(_READY), name("elsewhere"))
    assert caught.value.filename == name(_READY)
    assert _names(tmp_path) == {_LEASE: b"m", "taken": b"theirs"}


@pytest.mark.usefixtures("linking")
@pytest.mark.parametrize("ours_taken", [False, True], ids=["ours-left", "ours-taken-too"])
def test_a_move_lost_to_another_host_between_link_and_unlink_withdraws_its_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mover: tuple[_Rename, _Name], ours_taken: bool
) -> None:
    """Two hosts move one message at once: both link, the other unlinks the source first.
    The loser removes its own link (the message is held once, by the winner; already
    gone is fine) and raises ``FileNotFoundError`` naming the source, as an atomic rename
    would (mutants: the withdrawal of the wrong name or not tolerating it gone, the
    error's errno, message and file name)."""
    rename, name = mover
    (tmp_path / _READY).write_bytes(b"m")

    def link_then_lose(src: Any, dst: Any, **kwargs: Any) -> None:
        _REAL_LINK(src, dst, **kwargs)
        _REAL_LINK(tmp_path / _READY, tmp_path / "theirs")  # the other host's link...
        os.unlink(tmp_path / _READY)  # ...and its unlink, first
        if ours_taken:  # and a third host took the name we made, at once
            os.unlink(tmp_path / _LEASE)

    monkeypatch.setattr(os, "link", link_then_lose)
    with pytest.raises(FileNotFoundError) as caught:
        rename(name(_READY), name(_LEASE))
    assert (caught.value.errno, caught.value.strerror, caught.value.filename) == (
        errno.ENOENT,
        "moved by another process meanwhile",
        name(_READY),
    )
    assert _names(tmp_path) == {"theirs": b"m"}


@pytest.mark.usefixtures("linking")
def test_the_linking_rename_moves_a_planted_symlink_as_a_link(
    tmp_path: Path, mover: tuple[_Rename, _Name]
) -> None:
    """A symlink planted under a message's name is moved as the link it is, never as its
    target (a hard link to a file outside the queue would make it a message); so is a
    second name given by ``link_noreplace`` (mutants: ``follow_symlinks`` of both)."""
    rename, name = mover
    outside = tmp_path.parent / f"{tmp_path.name}-outside"
    outside.write_bytes(b"secret")
    try:
        (tmp_path / _READY).symlink_to(outside)
        rename(name(_READY), name(_LEASE))
        assert (tmp_path / _LEASE).is_symlink()
        _fs.link_noreplace(str(tmp_path / _LEASE), str(tmp_path / "second"))
        assert (tmp_path / "second").is_symlink()
        assert os.stat(outside).st_nlink == 1
    finally:
        outside.unlink()


@pytest.mark.usefixtures("linking")
@pytest.mark.parametrize("source", [_READY, f"{_READY}.new", _LEASE])
def test_a_link_made_whose_new_name_was_not_found_moves_or_reports_a_miss(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mover: tuple[_Rename, _Name], source: str
) -> None:
    """sshfs and NFS look the new name up after the server made the link: if another host
    took it meanwhile the link fails with ENOENT although it was made. A source still
    there then means the link was made, and the move goes on (the source's name goes);
    a ready name, which can leave and come back, needs its new name still there too,
    or the move is reported as a miss (``FileNotFoundError``) with both names as they
    were. (Mutants: each test of the source, the target and the kind of name.)"""
    rename, name = mover
    (tmp_path / source).write_bytes(b"m")
    target = "target"

    def link_but_lose_the_lookup(src: Any, dst: Any, **kwargs: Any) -> None:
        _REAL_LINK(src, dst, **kwargs)
        raise FileNotFoundError(errno.ENOENT, "No such file or directory", dst)

    monkeypatch.setattr(os, "link", link_but_lose_the_lookup)
    rename(name(source), name(target))
    assert _names(tmp_path) == {target: b"m"}

    # The new name taken by another host before the lookup: nothing tells the link apart.
    (tmp_path / target).rename(tmp_path / source)

    def link_then_taken(src: Any, dst: Any, **kwargs: Any) -> None:
        _REAL_LINK(src, dst, **kwargs)
        os.rename(tmp_path / target, tmp_path / "other-host")
        raise FileNotFoundError(errno.ENOENT, "No such file or directory", dst)

    monkeypatch.setattr(os, "link", link_then_taken)
    if source == _READY:
        with pytest.raises(FileNotFoundError):
            rename(name(source), name(target))
        assert _names(tmp_path) == {source: b"m", "other-host": b"m"}  # at least once
    else:
        rename(name(source), name(target))  # a .new or a lease cannot have come back
        assert _names(tmp_path) == {"other-host": b"m"}


@pytest.mark.usefixtures("linking")
def test_a_link_that_failed_on_a_vanished_source_is_a_miss(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mover: tuple[_Rename, _Name]
) -> None:
    """ENOENT from the link with the source gone: another host moved it first; a miss,
    and nothing is made (mutant: the source's presence not tested)."""
    rename, name = mover
    (tmp_path / _LEASE).write_bytes(b"m")

    def taken_first(src: Any, dst: Any, **kwargs: Any) -> None:
        os.rename(tmp_path / _LEASE, tmp_path / "other-host")
        _REAL_LINK(src, dst, **kwargs)

    monkeypatch.setattr(os, "link", taken_first)
    with pytest.raises(FileNotFoundError):
        rename(name(_LEASE), name(_READY))
    assert _names(tmp_path) == {"other-host": b"m"}


@pytest.mark.usefixtures("linking")
def test_a_link_refused_with_eperm_on_a_taken_name_says_it_is_taken(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mover: tuple[_Rename, _Name]
) -> None:
    """sshfs reports a link onto a name another host made meanwhile as EPERM (SFTP's bare
    failure): that is ``FileExistsError``, saying so; an EPERM on a free name stays a
    ``PermissionError``; the source is kept either way (mutants: ``_raise_if_taken``'s
    test and message, the EPERM branch's arguments)."""
    rename, name = mover
    (tmp_path / _READY).write_bytes(b"m")

    def sftp_link(src: Any, dst: Any, **kwargs: Any) -> None:
        raise PermissionError(errno.EPERM, "Operation not permitted", dst)

    monkeypatch.setattr(os, "link", sftp_link)
    with pytest.raises(PermissionError) as refused:
        rename(name(_READY), name(_LEASE))
    assert type(refused.value) is PermissionError
    (tmp_path / _LEASE).write_bytes(b"theirs")
    with pytest.raises(FileExistsError) as caught:
        rename(name(_READY), name(_LEASE))
    assert (caught.value.errno, caught.value.strerror) == (
        errno.EEXIST,
        "made by another host meanwhile",
    )
    assert caught.value.filename == name(_LEASE)
    assert _names(tmp_path) == {_READY: b"m", _LEASE: b"theirs"}
    (tmp_path / _LEASE).unlink()
    (tmp_path / _LEASE).symlink_to(tmp_path / "nowhere")  # a name too, though dangling
    with pytest.raises(FileExistsError):
        rename(name(_READY), name(_LEASE))


@pytest.mark.parametrize("code", [errno.EINVAL, errno.ENOSYS, errno.ENOTSUP, errno.EIO])
def test_a_renameat2_the_filesystem_lacks_falls_back_and_other_errors_pass(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mover: tuple[_Rename, _Name], code: int
) -> None:
    """A filesystem without ``RENAME_NOREPLACE`` answers EINVAL (or ENOSYS, ENOTSUP): the
    rename links then unlinks instead; any other error is raised as it is, naming both
    names (mutants: the errnos of the fallback, the error's arguments)."""
    rename, name = mover
    (tmp_path / _READY).write_bytes(b"m")

    def unsupported(*_args: object) -> int:
        ctypes.set_errno(code)
        return -1

    monkeypatch.setattr(_libc, "renameat2", lambda: unsupported)
    if code == errno.EIO:
        with pytest.raises(OSError, match="Input/output error") as caught:
            rename(name(_READY), name(_LEASE))
        assert (caught.value.errno, caught.value.filename) == (code, name(_READY))
        assert caught.value.filename2 == name(_LEASE)
        assert _names(tmp_path) == {_READY: b"m"}
    else:
        rename(name(_READY), name(_LEASE))
        assert _names(tmp_path) == {_LEASE: b"m"}


@pytest.mark.usefixtures("linking")
def test_a_commit_whose_link_is_reported_missing_publishes_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """End to end: every link of a publish's commit reports ENOENT after taking effect
    (an sshfs lookup racing another host): the publish succeeds, and the message is
    delivered once (mutant: ``_link_then_unlink`` 19, the source's name not read)."""
    queue = vsqs.PlainQueue(tmp_path / "q", durable=False, clock=ManualClock())

    def link_but_lose_the_lookup(src: Any, dst: Any, **kwargs: Any) -> None:
        _REAL_LINK(src, dst, **kwargs)
        raise FileNotFoundError(errno.ENOENT, "No such file or directory", dst)

    monkeypatch.setattr(os, "link", link_but_lose_the_lookup)
    message_id = queue.publish(b"once")
    monkeypatch.undo()
    got = queue.receive(timeout=0)
    assert got is not None and (got.id, got.body) == (message_id, b"once")
    assert queue.receive(timeout=0) is None


# -- errors, modes and leftovers ------------------------------------------------------


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
    mode asked for (mutants: the cleanup, the EPERM branch and the mode of
    ``create_at``)."""
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
            assert _names(tmp_path) == {"new": b"theirs"}
            (tmp_path / "new").unlink()
            os.close(_fs.create_at(name, 0o640, dir_fd))
            assert stat.S_IMODE((tmp_path / "new").stat().st_mode) == 0o640
            (tmp_path / "new").unlink()
    finally:
        os.umask(old)
        os.close(fd)


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
