"""System calls on files that are not a queue's, and on paths as the user named them.

:mod:`vsqs._fs` makes every call on a queue's files; this module the rest, so that the
two (with :mod:`vsqs._inotify`, the waiting layer's) are the only modules that touch a
file (``tests/test_architecture.py`` checks every module): ``/proc/self/mountinfo``
(understood by :mod:`vsqs._mountinfo`), a path the user named, followed as named (a
queue path may be a symlink the user chose), the CLI's input files, the demo's reports.
Nothing here changes a queue.
"""

from __future__ import annotations

import os
import stat
from typing import BinaryIO, Final

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


def names_anything(path: str) -> bool:
    """Whether *path* names anything, a dangling symlink included (nothing is followed)."""
    return os.path.lexists(path)


def is_dir(path: str) -> bool:
    """Whether *path* is a directory, or a symlink to one (a path the user chose)."""
    return os.path.isdir(path)


def remove_temp_dir(path: str) -> None:
    """Remove a directory :func:`make_temp_dir` made, and what is in it (best effort)."""
    import shutil  # noqa: PLC0415 -- shutil and tempfile: 3 ms of every import, for rare calls

    shutil.rmtree(path, ignore_errors=True)


def make_temp_dir(prefix: str) -> str:
    """A fresh private directory (``mkdtemp``) for the caller to remove."""
    import tempfile  # noqa: PLC0415 -- see remove_temp_dir

    return tempfile.mkdtemp(prefix=prefix)


def write_text(path: str, text: str) -> None:
    """Create or replace the UTF-8 text file *path* (not a queue's: the demo's report)."""
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text)


def read_text(path: str) -> str:
    """The content of the UTF-8 text file *path* (not a queue's)."""
    with open(path, encoding="utf-8") as handle:
        return handle.read()


def open_input(path: str) -> BinaryIO:
    """Open a file the user named (the CLI's ``--file``) for reading, as Python does."""
    return open(path, "rb")


def input_size(path: str) -> int | None:
    """The size of the regular file *path* (a symlink followed); ``None`` for anything
    else (a pipe, a device, a missing file)."""
    try:
        info = os.stat(path)
    except OSError:
        return None
    return info.st_size if stat.S_ISREG(info.st_mode) else None


def silence(fd: int) -> None:
    """Point the descriptor *fd* at ``/dev/null`` (a closed stdout's last flush)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, fd)
    finally:
        os.close(devnull)
