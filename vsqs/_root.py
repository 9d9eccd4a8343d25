"""A root directory of named queues (SQS CreateQueue / ListQueues / DeleteQueue)."""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING, Final, cast

from . import _fs, _host
from ._errors import InvalidName, NotAQueue, QueueNotFound
from ._options import Config, QueueOptions, partition_count
from ._queue import Queue as PlainQueue
from ._sets import PartitionedQueue, Queue
from ._stored import SHAPE, STORED

if TYPE_CHECKING:
    from typing_extensions import Unpack

# As SQS: letters, digits, hyphens and underscores, up to 80 characters; dots are
# allowed inside so that "orders.dlq" reads naturally, but never first (dot-entries are
# vsqs metadata) and never two in a row (no "..").
_NAME: Final = re.compile(r"[A-Za-z0-9_-](?:[A-Za-z0-9_-]|\.(?!\.)){0,79}")


def validate_name(name: object) -> str:
    """Return *name* if it is a valid queue name; raise :class:`InvalidName` otherwise."""
    if not isinstance(name, str):
        raise InvalidName(name, "a queue name must be a str")
    if not name:
        raise InvalidName(name, "a queue name cannot be empty")
    if len(name) > 80:
        raise InvalidName(name, "at most 80 characters")
    if "/" in name or "\\" in name or "\0" in name:
        raise InvalidName(name, "path separators and NUL are not allowed")
    if name.startswith("."):
        raise InvalidName(name, "names starting with '.' are reserved")
    if not _NAME.fullmatch(name):
        raise InvalidName(name, "use letters, digits, '-', '_' and single inner dots only")
    return name


class QueueRoot:
    """A directory whose subdirectories are queues, addressed by name.

    Names are validated so that no name can reach outside the root.

    :param path: the root directory (created if missing).
    :param options: default keyword options for every :class:`Queue` opened here.
    """

    def __init__(self, path: str | os.PathLike[str], **options: Unpack[QueueOptions]) -> None:
        self.path = os.path.abspath(os.fspath(path))
        try:
            # Flushed into its parent unless the queues here are not durable.
            _fs.make_dirs(self.path, durable=bool(options.get("durable", True)))
        except (FileExistsError, NotADirectoryError):
            raise NotAQueue(self.path) from None
        if not _host.is_dir(self.path):
            raise NotAQueue(self.path)
        # A wrong option fails here, naming it, not at create().
        Config.build(**{k: v for k, v in options.items() if k != "partitions"})
        if "partitions" in options:
            partition_count(options["partitions"])
        self._options = options

    def __repr__(self) -> str:
        return f"QueueRoot({self.path!r})"

    def _dir(self, name: str) -> str:
        return os.path.join(self.path, validate_name(name))

    def _is_queue(self, path: str) -> bool:
        """Whether *path* is a real directory: a symlink planted under a valid name is
        never followed, by any verb (it could lead anywhere)."""
        return _fs.is_plain_dir(path)

    def create(self, name: str, **options: Unpack[QueueOptions]) -> PlainQueue | PartitionedQueue:
        """Create (or open, if it exists) the queue *name*, storing its settings.

        The options that a queue stores (``visibility_timeout``, ``delay``,
        ``capacity``, ``dead_letter``, ``max_receives``, ``retention``,
        ``dedup_window``) are stored with it, as by :meth:`Queue.configure` (atomic;
        an existing queue's other settings are kept), so every later ``Queue(path)``
        uses them; ``partitions`` and ``fifo`` are stored when the queue is created and
        must agree with an existing one's; the others apply to the returned handle only.

        :raises NotAQueue: *name* exists and is not a directory (a symlink included).
        :raises ValueError: a stored ``dead_letter`` that is not a queue of this root.
        """
        path = self._dir(name)
        if _fs.exists(path) and not self._is_queue(path):
            raise NotAQueue(path)
        # The shape (partitions, fifo) is stored by the handle that creates the queue.
        stored = {k: v for k, v in options.items() if k in STORED and k not in SHAPE}
        handle = cast("QueueOptions", {k: v for k, v in options.items() if k not in stored})
        merged: QueueOptions = {**self._options, **handle}
        queue = Queue(path, **merged)
        if stored:
            queue.configure(**stored)  # type: ignore[arg-type]  # keys are STORED ones
            queue.close()
            queue = Queue(path, **merged)  # a handle that uses what was just stored
        return queue

    def get(self, name: str, **options: Unpack[QueueOptions]) -> PlainQueue | PartitionedQueue:
        """Open the existing queue *name*; :class:`QueueNotFound` if it does not exist
        (a symlink under that name is not a queue)."""
        path = self._dir(name)
        if not self._is_queue(path):
            raise QueueNotFound(name, self.path)
        merged: QueueOptions = {**self._options, **options}
        return Queue(path, **merged)

    def __contains__(self, name: object) -> bool:
        try:
            return self._is_queue(self._dir(name))  # type: ignore[arg-type]
        except InvalidName:
            return False

    def list(self) -> list[str]:
        """The names of the queues under the root, sorted."""
        names = []
        for entry in _fs.scandir(self.path):
            try:
                valid = entry.is_dir(follow_symlinks=False) and validate_name(entry.name)
            except InvalidName:
                continue  # not a queue of ours (a dot-dir, a stray folder)
            if valid:
                names.append(entry.name)
        return sorted(names)

    def delete(self, name: str) -> None:
        """Delete the queue *name* and every message in it."""
        path = self._dir(name)
        if not self._is_queue(path):
            raise QueueNotFound(name, self.path)
        _fs.remove_tree(path)
