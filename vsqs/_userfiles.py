"""System calls on the files a person names to an integration, never on a queue's files.

The integrations' own way to the filesystem, beside the core's :mod:`vsqs._fs` (a
queue's files) and :mod:`vsqs._host` (``/proc/self/mountinfo``, a queue path as
named): the command line's input files and the roots it is told to use, ``vsqs
serve``'s credentials file and the status of a queue directory it caches a handle
for, a Spark reader's check that a queue exists, the demo's reports. What an
integration needs of a queue's storage goes through vsqs's public names instead
(:class:`vsqs.Storage`, :func:`vsqs.read_bodies`...). The core never imports this
module, so it can change without an integration noticing (an import contract in
``pyproject.toml`` says so); like ``_fs`` and ``_host`` it is a mechanism module,
one of the few that make system calls (``tests/test_architecture.py``). Paths are
followed as named (a symlink the person chose included), unless a function says
otherwise.
"""

from __future__ import annotations

import os
import stat
from typing import BinaryIO

from . import _mountinfo

# The core's one definition of a memory filesystem (where vsqs makes no flush), for `vsqs
# serve`, which runs requests on its event loop only there (integrations never import
# _mountinfo itself).
from ._mountinfo import MEMORY_FILESYSTEMS as MEMORY_FILESYSTEMS  # noqa: PLC0414 - a re-export


def status(path: str) -> os.stat_result:
    """The status of *path*, following a symlink."""
    return os.stat(path)


def lstatus(path: str) -> os.stat_result:
    """The status of *path* itself (a symlink is not followed)."""
    return os.lstat(path)


def names_anything(path: str) -> bool:
    """Whether *path* names anything, a dangling symlink included (nothing is followed)."""
    return os.path.lexists(path)


def is_dir(path: str) -> bool:
    """Whether *path* is a directory, or a symlink to one."""
    return os.path.isdir(path)


def make_temp_dir(prefix: str) -> str:
    """A fresh private directory (``mkdtemp``) for the caller to remove."""
    import tempfile  # noqa: PLC0415 -- shutil and tempfile: a few ms, for rare calls

    return tempfile.mkdtemp(prefix=prefix)


def remove_temp_dir(path: str) -> None:
    """Remove a directory :func:`make_temp_dir` made, and what is in it (best effort)."""
    import shutil  # noqa: PLC0415 -- see make_temp_dir

    shutil.rmtree(path, ignore_errors=True)


def write_text(path: str, text: str) -> None:
    """Create or replace the UTF-8 text file *path* (the demo's report)."""
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text)


def read_text(path: str) -> str:
    """The content of the UTF-8 text file *path*."""
    with open(path, encoding="utf-8") as handle:
        return handle.read()


def open_input(path: str) -> BinaryIO:
    """Open a file the person named (the command line's ``--file``) for reading."""
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


def filesystem_type(path: str) -> str:
    """The type of the filesystem holding the existing *path* (``"tmpfs"``,
    ``"ext4"``...), from ``/proc/self/mountinfo``; ``""`` if it cannot be told (``vsqs
    serve`` asks whether a queue's directory is in memory)."""
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as mounts:
            lines = mounts.read().splitlines()
        real = os.path.realpath(path)
        device = os.stat(real).st_dev
    except OSError:
        return ""
    return _mountinfo.filesystem_type_in(lines, real, f"{os.major(device)}:{os.minor(device)}")
