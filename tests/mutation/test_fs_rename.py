"""The no-replace rename where the filesystem has none (NFS, sshfs: a link, then an
unlink), which ``make mutate`` found unguarded in ``vsqs._fs`` (docs/reliability.rst,
"Mutation testing"): each test fails on the mutants named in its docstring.

The races between hosts are staged on the local filesystem: ``renameat2`` is taken away,
and ``os.link``, the system call, is wrapped so that another "host" acts between the
link and what follows, or the link fails the way an sshfs client reports it. Nothing of
vsqs is replaced.
"""

from __future__ import annotations

import ctypes
import errno
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import vsqs
from vsqs import _fs, _libc
from vsqs.testing import ManualClock

_REAL_LINK: Callable[..., None] = os.link
_Name = Callable[[str], str]
_READY = "1700000000000001"  # a ready message's name (no dot)
_LEASE = "1700000000000001.1800000000000000"


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
