"""A root directory of named queues (SQS CreateQueue / ListQueues / DeleteQueue)."""

from __future__ import annotations

import contextlib
import errno
import os
import re
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Final, cast

from . import _fs, _host
from ._errors import InvalidName, NotAQueue, QueueNotFound
from ._ids import parse_name
from ._inotify import WAKE
from ._layout import ROOT, Layout
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
_DELETED: Final = ".deleted-"  # a deleted queue's directory, until it is removed
_REMOVE_TRIES: Final = 10
_REMOVE_PAUSE: Final = 0.002  # seconds, times the attempt: 0.09 s in all at most
_GATE: Final = ".names.lock"  # held by a deleter waiting for the names lock
_LOCK_WAIT: Final = 30.0
_LOCK_POLL: Final = 0.001
_NO_FLOCK: Final = frozenset({errno.EBADF, errno.ENOLCK, errno.EOPNOTSUPP, errno.EINVAL})


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


def foreign_entry(path: str | os.PathLike[str]) -> str | None:
    """An entry of the directory *path* that no queue holds, or ``None``: whether a
    directory someone named is a queue before a command changes anything in it.

    A queue has a ``.vsqs`` directory, or holds only message names (a queue of vsqs 0.3,
    or one made by hand) and the ``.wake-`` names vsqs makes to cause events. In a
    directory without ``.vsqs``, anything else (a user's files) says it is not a queue,
    and the first such name (in listing order) is returned. ``None`` also when *path* is
    not a directory, or absent: opening it says what is wrong. :func:`vsqs.Queue` opens
    any directory, as the design does; ask this first where a person typed the path, so
    that a slip never makes a ``receive`` rename their file named ``123``. One
    ``access`` and at most one listing, no lock: a snapshot (a concurrent change may
    not be seen), and nothing is changed.

    >>> import os, tempfile, vsqs
    >>> home = tempfile.mkdtemp()
    >>> vsqs.foreign_entry(home) is None  # empty: a queue yet to be used
    True
    >>> open(os.path.join(home, "notes.txt"), "w").close()
    >>> vsqs.foreign_entry(home)
    'notes.txt'
    """
    path = os.fspath(path)
    if not _host.is_dir(path) or Layout(path).has_dir(ROOT):
        return None
    fd = _fs.open_queue_dir(path)
    try:
        names = _fs.list_at(fd)
    finally:
        _fs.close(fd)
    for name in names:
        if parse_name(name) is None and not name.startswith(WAKE):
            return name
    return None


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
        (a symlink under that name is not a queue).

        Never makes the queue again: the check and the opening hold the root's names
        lock shared, which :meth:`delete` holds exclusively while it takes the name away
        (``Queue(path)`` would otherwise make an empty queue where one was just deleted).
        """
        path = self._dir(name)
        merged: QueueOptions = {**self._options, **options}
        with self._names_locked(shared=True):
            if not self._is_queue(path):
                raise QueueNotFound(name, self.path)
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
        """Delete the queue *name* and every message in it, all at once.

        Atomic: one rename takes the queue's directory out of the way, to a hidden name
        in the root that no queue can have (``.deleted-NAME-RANDOM``), so every other
        process sees the whole queue or none of it (never one without its settings or
        partitions); the hidden directory is removed after. A publish racing the delete
        either landed before it (and goes with the queue) or finds no queue
        (:class:`QueueNotFound` or ``FileNotFoundError``): no process makes the queue
        again by opening it through :meth:`get`. Nothing outside the root is touched.

        :raises QueueNotFound: there is no queue *name* (deleted first by another).
        """
        path = self._dir(name)
        aside = os.path.join(self.path, f"{_DELETED}{name}-{os.urandom(6).hex()}")
        with self._names_locked(shared=False):
            if not self._is_queue(path):
                raise QueueNotFound(name, self.path)
            try:
                _fs.rename_noreplace(path, aside)
            except FileNotFoundError:
                raise QueueNotFound(name, self.path) from None  # RACE: another deleter
        self._remove_deleted()

    def _remove_deleted(self) -> None:
        """Remove the hidden directories of deleted queues (this delete's, and any an
        earlier one left: a handle opened before a delete may still write into its
        directory, which makes a removal fail with ``ENOTEMPTY``; the next one ends it)."""
        for entry in _fs.scandir(self.path):
            if not entry.name.startswith(_DELETED):
                continue
            for attempt in range(_REMOVE_TRIES):
                try:
                    if entry.is_dir(follow_symlinks=False):
                        _fs.remove_tree(entry.path)
                    else:
                        _fs.unlink(entry.path)  # a link swapped in: removed, never followed
                    break
                except OSError:
                    # RACE: a handle opened before the delete wrote into it (ENOTEMPTY),
                    # or moved a file in it (ENOENT), meanwhile; or another deleter
                    # removed it. Left hidden after the last try, for the next delete.
                    if not _fs.exists(entry.path):
                        break
                    time.sleep(_REMOVE_PAUSE * attempt)

    @contextlib.contextmanager
    def _names_locked(self, *, shared: bool) -> Iterator[None]:
        """Hold the root's names lock (``flock`` on the root directory): shared while a
        queue is looked up and opened, exclusive while one is renamed away.

        A deleter first takes the gate (``flock`` on ``.names.lock`` in the root), which
        openers only look at: a steady stream of openers cannot keep a deleter waiting.
        Bounded: waits at most :data:`_LOCK_WAIT` seconds (holders keep it for a few
        system calls). On a filesystem whose directories take no ``flock`` (NFS), the
        lock is skipped: deletion stays one rename, but an opening racing it may make
        the queue again, empty.
        """
        names = _fs.open_queue_dir(self.path)
        gate = -1
        try:
            gate = _fs.open_lock_at(_GATE, 0o666, names)
            if shared:
                _wait(lambda: _passes(gate), self.path)  # RACE: a deleter is waiting
                _wait(lambda: _fs.try_lock(names, shared=True), self.path)
            else:
                _wait(lambda: _fs.try_lock(gate), self.path)
                _wait(lambda: _fs.try_lock(names), self.path)
        except OSError as exc:
            if exc.errno not in _NO_FLOCK:
                _fs.close(names)
                if gate >= 0:
                    _fs.close(gate)
                raise
        try:
            yield
        finally:
            _fs.close(names)  # closing releases the locks
            if gate >= 0:
                _fs.close(gate)


def _passes(gate: int) -> bool:
    """Whether no deleter holds the gate (taken shared and given back at once)."""
    if not _fs.try_lock(gate, shared=True):
        return False
    _fs.unlock(gate)
    return True


def _wait(ready: Callable[[], bool], root: str) -> None:
    """Poll *ready* until it is true, for at most :data:`_LOCK_WAIT` seconds."""
    deadline = time.monotonic() + _LOCK_WAIT
    while not ready():
        if time.monotonic() > deadline:
            raise TimeoutError(f"the names lock of the root {root!r} is held too long")
        time.sleep(_LOCK_POLL)
