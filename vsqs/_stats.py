"""Produced and consumed counters, persistent and shared by every process.

Each process keeps its own counters in memory and writes them to its own file,
``.vsqs/stats/<host>-<pid>-<nonce>``, at most once per flush interval and when the queue
object is detached or the process exits. Readers sum every file. No publish ever waits
on a lock shared with another process.

Freshness: a count shows in the file within about one flush interval (one second), even
if the process then goes idle: the publish or delete after the interval flushes in
passing, and a count that finds no flush due hands its counters to the process's one
flusher thread (:class:`_Flusher`), which flushes them one interval later. That thread
runs only while some counters wait for it (no thread per queue handle, none in an idle
process), as a daemon; ``atexit`` and ``close()`` flush the rest.

Exactness: counts are exact once every process has flushed (a clean exit, ``close()``
or :meth:`vsqs.Queue.stats`). A process killed with SIGKILL loses at most the counts of
its last flush interval (one second by default); counts never go backwards.
"""

from __future__ import annotations

import atexit
import errno
import os
import sys
import threading
import time
import weakref
from collections import deque
from typing import TYPE_CHECKING, Any, Final

from ._layout import STATS
from ._meta import report_once

if TYPE_CHECKING:
    from ._layout import Layout

FLUSH_INTERVAL: Final = 1.0
_FIELDS: Final = ("produced_messages", "produced_bytes", "consumed_messages", "consumed_bytes")
_monotonic = time.monotonic


def _writer_name() -> str:
    """This process's own counters file name: host, pid and a random part."""
    import socket  # noqa: PLC0415 -- 2 ms at import, for one call per queue opened

    return f"{socket.gethostname()}-{os.getpid()}-{os.urandom(4).hex()}"


class Counters:
    """This process's counters for one queue.

    Hot paths only append a body size to a deque (atomic under the GIL, no lock, ~40 ns);
    the sizes are summed into the totals when the counters are flushed.
    """

    def __init__(self, layout: Layout) -> None:
        self._layout = layout
        self._lock = threading.Lock()  # serialises flushes, not the hot path
        self._values = dict.fromkeys(_FIELDS, 0)
        self.produced: deque[int] = deque()
        self.consumed: deque[int] = deque()
        self._last_flush = 0.0
        self._scheduled = False  # handed to the flusher thread, not flushed since
        self._name = _writer_name()
        self._pid = os.getpid()
        _live.add(self)
        _flush_at_child_exit()

    def __del__(self) -> None:
        # A queue dropped without close() (or collected before exit) must not lose what it
        # counted since its last flush.
        try:
            self.flush()
        except OSError:
            pass  # the queue directory is gone: nothing left to count into

    def add_produced(self, size: int) -> None:
        """Count one published message of *size* bytes (flushing when one is due)."""
        self.produced.append(size)
        if _monotonic() - self._last_flush >= FLUSH_INTERVAL:
            self.flush()
        elif not self._scheduled:
            self._schedule()

    def add_consumed(self, size: int) -> None:
        """Count one deleted message of *size* bytes (flushing when one is due)."""
        self.consumed.append(size)
        if _monotonic() - self._last_flush >= FLUSH_INTERVAL:
            self.flush()
        elif not self._scheduled:
            self._schedule()

    def _schedule(self) -> None:
        """Have the flusher thread write these counts one interval from now."""
        self._scheduled = True
        _FLUSHER.schedule(self)

    def flush(self) -> None:
        """Write this process's totals (atomically replacing its previous file)."""
        if os.getpid() != self._pid:
            # A forked child inherited our counters; it must not overwrite our file.
            self.after_fork()
        with self._lock:
            self._last_flush = _monotonic()
            # Before the sizes are drained: a count appended after this schedules again.
            self._scheduled = False
            dirty = False
            for field, sizes in (("produced", self.produced), ("consumed", self.consumed)):
                count = total = 0
                while sizes:  # RACE: other threads append while we drain; popleft is atomic
                    total += sizes.popleft()
                    count += 1
                if count:
                    self._values[field + "_messages"] += count
                    self._values[field + "_bytes"] += total
                    dirty = True
            if not dirty:
                return
            import json  # noqa: PLC0415 -- 2 ms at import: only where records are read or written

            data = json.dumps(self._values).encode()
            try:
                self._layout.write(STATS, self._name, data, durable=False)
            except OSError:
                # Counters are advisory: a full disk, a read-only remount or another user's
                # `.vsqs/stats` must not fail the publish or delete that already happened
                # (its caller would retry and duplicate). The totals stay for the next flush.
                pass

    def after_fork(self) -> None:
        """Start this process's own counts (in a forked child: the parent's are its own).

        A fresh lock first: another thread of the parent may have held it at the fork.
        """
        self._lock = threading.Lock()
        with self._lock:
            self._values = dict.fromkeys(_FIELDS, 0)
            self.produced.clear()
            self.consumed.clear()
            self._name = _writer_name()
            self._pid = os.getpid()
            self._scheduled = False


def read_totals(layout: Layout) -> dict[str, int]:
    """Sum the counter files of every process that ever used the queue."""
    totals = dict.fromkeys(_FIELDS, 0)
    try:
        names = layout.names(STATS)
    except OSError:
        return totals  # `.vsqs` or its stats directory is not a directory: nothing to sum
    for name in names:
        if name.startswith("."):
            continue  # a writer's temporary file
        try:
            raw = layout.read(STATS, name)
            import json  # noqa: PLC0415 -- see above

            data = json.loads(raw) if raw is not None else {}
        except (OSError, ValueError) as exc:
            if isinstance(exc, OSError) and exc.errno == errno.EFBIG:
                report_once(layout.path, "a counter file too large to be ours is ignored", str(exc))
            continue  # RACE: replaced by its process meanwhile (its next flush counts); or planted
        if not isinstance(data, dict):
            continue
        for key in _FIELDS:
            value = data.get(key, 0)
            if isinstance(value, int):
                totals[key] += value
    return totals


class _Flusher:
    """The one thread of a process that flushes counters a count left unflushed.

    Started by the first such count and gone once an interval passes with none, so an
    idle process runs no thread. Holds the counters it is given (weakly: a dropped
    queue flushes itself in ``__del__``) for one interval, then flushes each. Stopped
    around a ``fork`` (the parent forks with no thread of ours, as Python 3.12+ wants),
    then started again for the counts still due.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._due: weakref.WeakSet[Counters] = weakref.WeakSet()
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    def schedule(self, counters: Counters) -> None:
        """Flush *counters* about one interval from now."""
        with self._lock:
            self._due.add(counters)
            self._start()

    def _start(self) -> None:
        """Start the thread if none runs (under the lock)."""
        if self._thread is None:
            self._stop = threading.Event()
            self._thread = threading.Thread(
                target=self._run, args=(self._stop,), name="vsqs-stats-flusher", daemon=True
            )
            self._thread.start()

    def _run(self, stop: threading.Event) -> None:
        while not stop.wait(FLUSH_INTERVAL):
            with self._lock:
                due = list(self._due)
                self._due = weakref.WeakSet()
                if not due:
                    if self._thread is threading.current_thread():
                        self._thread = None
                    return
            for counters in due:
                try:
                    counters.flush()
                except OSError:
                    pass  # the queue directory is gone: nothing left to count into

    def before_fork(self) -> None:
        """Stop the thread (what is due stays due)."""
        with self._lock:
            thread, self._thread = self._thread, None
            self._stop.set()
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def after_fork_in_parent(self) -> None:
        """Start again, if anything is due."""
        with self._lock:
            if self._due:
                self._start()

    def after_fork_in_child(self) -> None:
        """No thread (it did not survive the fork), nothing due (the parent's counts)."""
        self._lock = threading.Lock()
        self._due = weakref.WeakSet()
        self._thread = None
        self._stop = threading.Event()


_FLUSHER: Final = _Flusher()
_live: weakref.WeakSet[Counters] = weakref.WeakSet()


@atexit.register
def _flush_all() -> None:
    for counters in list(_live):
        try:
            counters.flush()
        except OSError:
            pass  # the queue directory may be gone at exit; nothing left to count into


_exit_hook_pid = 0


def _flush_at_child_exit() -> None:
    """Flush when a multiprocessing child exits: fork and forkserver children end with
    ``os._exit``, which skips ``atexit``, but they do run multiprocessing's finalizers."""
    global _exit_hook_pid  # noqa: PLW0603 - one registration per process
    finalize = _multiprocessing_util("Finalize")
    if finalize is None or _exit_hook_pid == os.getpid():
        return  # not imported (no child to flush in), or not yet whole: the next one registers
    _exit_hook_pid = os.getpid()
    finalize(None, _flush_all, exitpriority=0)


def _multiprocessing_util(name: str) -> Any:
    """``multiprocessing.util.<name>`` if this process imported that module; ``None`` if
    it did not (never imported here: a process without children need not pay for it).

    A module is in ``sys.modules`` from the start of its import, its names defined as
    its code runs: ``None`` too while another thread is still importing it.
    """
    # RACE: another thread imports multiprocessing (a library's first use of it) while a
    # queue is opened here, or this process forks: the half-made module lacks *name*.
    return getattr(sys.modules.get("multiprocessing.util"), name, None)


def _after_fork_in_child() -> None:
    # The child's own counts start now; what it inherited is the parent's to write.
    _FLUSHER.after_fork_in_child()
    for counters in list(_live):
        counters.after_fork()
    register_after_fork = _multiprocessing_util("register_after_fork")
    if register_after_fork is not None:
        # A multiprocessing child clears its finalizers after this hook, then runs its
        # after-fork callbacks: register the exit flush from there.
        register_after_fork(_flush_all, lambda _: _flush_at_child_exit())


if hasattr(os, "register_at_fork"):  # POSIX
    os.register_at_fork(
        before=_FLUSHER.before_fork,
        after_in_parent=_FLUSHER.after_fork_in_parent,
        after_in_child=_after_fork_in_child,
    )
