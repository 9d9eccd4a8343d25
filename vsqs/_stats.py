"""Produced and consumed counters, persistent and shared by every process.

Each process keeps its own counters in memory and writes them to its own file,
``.vsqs/stats/<host>-<pid>-<nonce>``, at most once per flush interval and when the queue
object is detached or the process exits. Readers sum every file. No publish ever waits
on a lock shared with another process.

Exactness: counts are exact once every process has flushed (a clean exit, ``detach()``
or :meth:`vsqs.Queue.stats`). A process killed with SIGKILL loses at most the counts of
its last flush interval (one second by default); counts never go backwards.
"""

from __future__ import annotations

import atexit
import json
import os
import socket
import threading
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from ._meta import MetaStore

FLUSH_INTERVAL: Final = 1.0
_FIELDS: Final = ("produced_messages", "produced_bytes", "consumed_messages", "consumed_bytes")


@dataclass(frozen=True, slots=True)
class Stats:
    """A snapshot of a queue's counters and contents (pressure's stats, and more)."""

    produced_messages: int
    produced_bytes: int
    consumed_messages: int
    """Messages deleted after being received (acknowledged)."""
    consumed_bytes: int
    ready: int
    held: int
    delayed: int
    new: int
    oldest_ready_age: float | None
    """Seconds since the oldest ready message was published, ``None`` if none is ready."""
    closed: bool


class Counters:
    """This process's counters for one queue."""

    def __init__(self, store: MetaStore) -> None:
        self._store = store
        self._lock = threading.Lock()
        self._values = dict.fromkeys(_FIELDS, 0)
        self._dirty = False
        self._last_flush = 0.0
        self._name = f"{socket.gethostname()}-{os.getpid()}-{os.urandom(4).hex()}"
        self._pid = os.getpid()
        _live.add(self)

    def add(self, field: str, messages: int, nbytes: int, now: float) -> None:
        with self._lock:
            self._values[f"{field}_messages"] += messages
            self._values[f"{field}_bytes"] += nbytes
            self._dirty = True
            due = now - self._last_flush >= FLUSH_INTERVAL
        if due:
            self.flush(now)

    def flush(self, now: float = 0.0) -> None:
        """Write this process's totals (atomically replacing its previous file)."""
        if os.getpid() != self._pid:
            # A forked child inherited our counters; it must not overwrite our file.
            self._reset_after_fork()
        with self._lock:
            if not self._dirty:
                return
            data = json.dumps(self._values).encode()
            self._dirty = False
            self._last_flush = now
        directory = self._store.ensure(self._store.path("stats"))
        self._store.write_file(directory, self._name, data, durable=False)

    def _reset_after_fork(self) -> None:
        with self._lock:
            self._values = dict.fromkeys(_FIELDS, 0)
            self._dirty = False
            self._name = f"{socket.gethostname()}-{os.getpid()}-{os.urandom(4).hex()}"
            self._pid = os.getpid()


def read_totals(store: MetaStore) -> dict[str, int]:
    """Sum the counter files of every process that ever used the queue."""
    totals = dict.fromkeys(_FIELDS, 0)
    directory = store.path("stats")
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return totals
    for name in names:
        if name.startswith("."):
            continue  # a writer's temporary file
        try:
            with open(os.path.join(directory, name), "rb") as handle:
                data = json.load(handle)
        except (FileNotFoundError, ValueError):
            continue  # RACE: replaced or being replaced by its process; its next flush counts
        for key in _FIELDS:
            value = data.get(key, 0)
            if isinstance(value, int):
                totals[key] += value
    return totals


_live: weakref.WeakSet[Counters] = weakref.WeakSet()


@atexit.register
def _flush_all() -> None:
    for counters in list(_live):
        try:
            counters.flush()
        except OSError:
            pass  # the queue directory may be gone at exit; nothing left to count into
