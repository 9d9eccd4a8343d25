"""Where everything of one queue lives: every path under the queue directory.

A plain message is exactly the design's file, ``<queue>/<name>``, and nothing else.
What vsqs needs beyond that lives in ``<queue>/.vsqs/``, which vsqs 0.3 and any other
reader of the design's format ignore (its name does not parse as an id)::

    .vsqs/meta/<id>              JSON: attributes, receive count, history (when needed)
    .vsqs/delayed/<id>           empty: the held file of <id> is a delayed publish
    .vsqs/dedup/<digest>         the id published under a deduplication id (expires)
    .vsqs/stats/<process>        JSON counters of one process (summed on read)
    .vsqs/closed                 present once the queue was shut down (its time inside)
    .vsqs/capacity.lock          the cross-process lock of bounded queues
    .vsqs/capacity.count         an upper bound on the message count (under that lock)
    .vsqs/spark/<consumer>/      the state of a Spark consumer

This module is the only one that builds those paths. Its directories are created on
first use (never in a constructor), with the queue's modes.
"""

from __future__ import annotations

import os
import stat
from typing import Final

from . import _fs

DIR: Final = ".vsqs"
"""The name of the metadata directory inside a queue."""


class Layout:
    """The paths of one queue directory, and the lazy creation of its subdirectories.

    :param path: the queue directory (absolute).
    :param dir_mode: the mode of created directories.
    :param file_mode: the mode forced on created files; ``None`` leaves it to the umask.
    """

    __slots__ = (
        "_made",
        "dedup_dir",
        "delayed_dir",
        "dir_mode",
        "file_mode",
        "meta_dir",
        "path",
        "root",
        "stats_dir",
    )

    def __init__(self, path: str, dir_mode: int = 0o777, file_mode: int | None = None) -> None:
        self.path = path
        self.root = f"{path}/{DIR}"
        self.meta_dir = f"{self.root}/meta"
        self.delayed_dir = f"{self.root}/delayed"
        self.dedup_dir = f"{self.root}/dedup"
        self.stats_dir = f"{self.root}/stats"
        self.dir_mode = dir_mode
        self.file_mode = file_mode
        self._made: set[str] = set()

    def message(self, name: str) -> str:
        """The path of a message file named *name* (any state)."""
        return f"{self.path}/{name}"

    def meta(self, message_id: str) -> str:
        return f"{self.meta_dir}/{message_id}"

    def delayed(self, message_id: str) -> str:
        return f"{self.delayed_dir}/{message_id}"

    def dedup(self, digest: str) -> str:
        return f"{self.dedup_dir}/{digest}"

    @property
    def closed(self) -> str:
        """The shutdown marker."""
        return f"{self.root}/closed"

    @property
    def capacity_lock(self) -> str:
        return f"{self.root}/capacity.lock"

    @property
    def capacity_count(self) -> str:
        return f"{self.root}/capacity.count"

    def spark_dir(self, consumer: str) -> str:
        """The state directory of the Spark consumer *consumer*."""
        return f"{self.root}/spark/{consumer}"

    def wake(self) -> str:
        """A fresh, unique name in the queue directory for an inotify poke."""
        return f"{self.path}/.wake-{os.getpid()}-{os.urandom(4).hex()}"

    @property
    def create_mode(self) -> int:
        """The mode to create files with."""
        return 0o666 if self.file_mode is None else self.file_mode

    def ensure(self, directory: str) -> str:
        """Create *directory* (``root`` or one under it) on first use; return it."""
        if directory not in self._made:
            if directory != self.root:
                self.ensure(os.path.dirname(directory))
            if _fs.make_dir(directory, self.dir_mode) and self.file_mode is not None:
                # Keep a set-group-id bit inherited from the queue directory: it is how a
                # shared queue keeps its group on everything created inside it.
                inherited = os.stat(directory).st_mode & stat.S_ISGID
                _fs.chmod(directory, self.dir_mode | inherited)
            self._made.add(directory)
        return directory

    def write_atomic(self, path: str, data: bytes, *, durable: bool) -> None:
        """Replace the file *path* with *data* atomically (a temporary file, then rename).

        Readers see the old content or the new, never a mix. The temporary file is named
        ``.tmp-<name>-...`` in the same directory, removed on failure.
        """
        directory, name = os.path.split(path)
        tmp = f"{directory}/.tmp-{name}-{os.getpid()}-{os.urandom(4).hex()}"
        fd = _fs.create_exclusive(tmp, self.create_mode)
        self.fill(fd, tmp, data, durable=durable)
        _fs.replace(tmp, path)

    def fill(self, fd: int, path: str, data: bytes, *, durable: bool) -> None:
        """Write *data* to a freshly created *fd* at *path* and close it; unlink on failure."""
        try:
            if self.file_mode is not None:
                _fs.fchmod(fd, self.file_mode)  # whatever the process umask
            _fs.write_all(fd, memoryview(data))
            if durable:
                _fs.fsync(fd)
        except BaseException:
            _fs.close(fd)
            _fs.unlink(path)
            raise
        _fs.close(fd)
