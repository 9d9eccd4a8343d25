"""Queues shared by several users: ``Queue(..., umask=)``, with real uids.

The children drop root for ``daemon`` (the creator) and ``nobody`` (another user); both
are put in the group ``nogroup``, the way two accounts share a group on a real host.
"""

from __future__ import annotations

import grp
import os
import pwd
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

import vsqs

from ._lifecycle_workers import as_user, forkserver

pytestmark = pytest.mark.usefixtures("fresh_ids")


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A directory every user can traverse (pytest's tmp_path is private to root)."""
    if os.geteuid() != 0:
        pytest.fail("these tests switch users with setuid: run the suite as root (make test)")
    path = Path(tempfile.mkdtemp(prefix="vsqs-perm-", dir="/tmp"))
    path.chmod(0o1777)  # like /tmp: any user may create the queue directory here
    try:
        yield path
    finally:
        shutil.rmtree(path)


def _ids() -> tuple[int, int, int]:
    return (
        pwd.getpwnam("daemon").pw_uid,
        pwd.getpwnam("nobody").pw_uid,
        grp.getgrnam("nogroup").gr_gid,
    )


def _run(uid: int, gid: int, action: str, path: Path, umask: int | None) -> int:
    proc = forkserver().Process(target=as_user, args=(uid, gid, action, str(path), umask))
    proc.start()
    proc.join(60)
    assert proc.exitcode is not None
    return proc.exitcode


def test_group_shared_queue_with_a_permissive_umask(shared_dir: Path) -> None:
    """Created by one user with ``umask=0o002`` (while the process umask is 0o077): the
    directory and files are group-writable, and another user of the group publishes,
    consumes and deletes."""
    creator, other, group = _ids()
    path = shared_dir / "q"
    assert _run(creator, group, "create", path, 0o002) == 0
    assert stat.S_IMODE(path.stat().st_mode) == 0o775
    for entry in path.iterdir():
        if entry.name != ".vsqs":
            assert stat.S_IMODE(entry.stat().st_mode) == 0o664
            assert entry.stat().st_uid == creator
    assert stat.S_IMODE((path / ".vsqs" / "meta").stat().st_mode) == 0o775
    assert _run(other, group, "publish", path, 0o002) == 0
    assert _run(other, group, "consume", path, 0o002) == 0
    assert vsqs.Queue(path).size() == 0


def test_restrictive_mode_refuses_other_users(shared_dir: Path) -> None:
    """Created with ``umask=0o077``: another user gets a PermissionError naming the
    queue, and the queue is unchanged."""
    creator, other, group = _ids()
    path = shared_dir / "q"
    assert _run(creator, group, "create", path, 0o077) == 0
    assert stat.S_IMODE(path.stat().st_mode) == 0o700
    assert _run(other, group, "publish", path, None) == 13
    assert _run(other, group, "consume", path, None) == 13
    assert vsqs.Queue(path).size() == 1


def test_umask_is_validated(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="umask"):
        vsqs.Queue(tmp_path / "q", umask=0o1000)
