"""System calls of the core on files that are not a queue's, and on paths as named.

:mod:`vsqs._fs` makes every call on a queue's files; this module the core's others, so
that the two (with :mod:`vsqs._inotify`, the waiting layer's, and the integrations'
:mod:`vsqs._userfiles`) are the only modules that touch a file
(``tests/test_architecture.py`` checks every module): ``/proc/self/mountinfo``
(understood by :mod:`vsqs._mountinfo`) and a path the user named, followed as named (a
queue path may be a symlink the user chose). Nothing here changes a queue.
"""

from __future__ import annotations

import os
from typing import Final

from . import _mountinfo

_MOUNTINFO: Final = "/proc/self/mountinfo"
_stable: dict[int, bool] = {}  # by device: whether its inode numbers hold across hosts


def _mount_lines() -> list[str]:
    with open(_MOUNTINFO, encoding="utf-8", errors="replace") as mounts:
        return mounts.read().splitlines()


def filesystem_type(path: str) -> str:
    """The type of the filesystem holding *path* (``"ext4"``, ``"fuse.sshfs"``...), or
    ``""`` (see :func:`vsqs._mountinfo.filesystem_type_in`)."""
    real, lines = os.path.realpath(path), []
    try:
        lines = _mount_lines()
        dev = os.stat(real).st_dev
        device = f"{os.major(dev)}:{os.minor(dev)}"
    except OSError:
        if not lines:
            return ""
        device = ""  # the path does not exist (yet): its innermost mount point decides
    return _mountinfo.filesystem_type_in(lines, real, device)


def stable_inode(info: os.stat_result) -> int:
    """The inode number of a stat result, or 0 (unknown) where it means nothing to other
    hosts: a FUSE filesystem (:func:`vsqs._mountinfo.stable`). Looked up once per device."""
    stable = _stable.get(info.st_dev)
    if stable is None:
        try:
            lines = _mount_lines()
        except OSError:
            lines = []
        device = f"{os.major(info.st_dev)}:{os.minor(info.st_dev)}"
        stable = _stable[info.st_dev] = _mountinfo.stable(_mountinfo.mount_type_in(lines, device))
    return info.st_ino if stable else 0


def status(path: str) -> os.stat_result:
    """The status of *path*, following a symlink (a queue path the user chose may be one)."""
    return os.stat(path)


def lstatus(path: str) -> os.stat_result:
    """The status of *path* itself (a symlink is not followed)."""
    return os.lstat(path)


def is_dir(path: str) -> bool:
    """Whether *path* is a directory, or a symlink to one (a path the user chose)."""
    return os.path.isdir(path)
