"""Homes: which partition each consumer (and each publisher) of a partitioned queue
takes as its own, decided through locks that every handle on the filesystem sees.

A home is an exclusive, non-blocking ``flock`` on ``.vsqs/<role>-<i>.lock`` in the
queue directory, taken once, on the first receive (or the first publish spread over the
partitions) of each thread of a handle, and held until the handle is closed or its
process ends (the kernel drops the lock with the process, a ``kill -9`` included). So K
consumers started together on K partitions take K different homes, on one host and
across hosts whose filesystem shares ``flock`` (NFSv4, CephFS, Lustre, GPFS...), and a
consumer that comes after them, finding every home taken, has none: it takes over the
first home whose holder goes, when it next looks (see :class:`~vsqs._sets._spread.Spread`).

Where locks are not shared across hosts (sshfs, NFS mounted ``local_lock=all``), each
host's consumers still take distinct homes among themselves, and consumers of
different hosts that fell on the same home part through lost races, as when no lock
was taken (:meth:`Spread.visited <vsqs._sets._spread.Spread.visited>`).

Nothing here is done per message: a home is looked for once per thread, then only by
a thread that has none, once per look at another partition.
"""

from __future__ import annotations

import threading

from .. import _fs
from .._layout import Layout


class Homes:
    """The home locks one handle holds, one per thread that took one (thread-safe).

    :param layout: the queue directory's layout (the locks are under its ``.vsqs``).
    :param role: ``"home"`` for consumers, ``"sticky"`` for publishers: a consumer and a
        publisher of one process do not compete for one lock.
    :param partitions: how many there are.
    """

    def __init__(self, layout: Layout, role: str, partitions: int) -> None:
        self._layout = layout
        self._role = role
        self._partitions = partitions
        self._held: dict[int, int] = {}  # partition -> descriptor holding its lock
        self._lock = threading.Lock()

    def take(self, start: int) -> int | None:
        """Take the first free home from *start* on (in turn); ``None`` if every one is
        held (by another handle, process or host, or another thread of this handle).

        Each try is one ``open`` and one non-blocking ``flock``: no wait.
        """
        count = self._partitions
        with self._lock:
            for step in range(count):
                index = (start + step) % count
                if index in self._held:
                    continue  # another thread of this handle: flock would say it is ours
                fd = self._layout.open_lock(f"{self._role}-{index}.lock")
                if _fs.try_lock(fd):
                    self._held[index] = fd
                    return index
                _fs.close(fd)  # RACE: another consumer holds it; it is theirs
        return None

    def release(self) -> None:
        """Give up every home this handle holds (at ``close()``): another consumer takes
        them over when it next looks."""
        with self._lock:
            held, self._held = self._held, {}
        for fd in held.values():
            _fs.close(fd)  # closing the last descriptor drops the flock
