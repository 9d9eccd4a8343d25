"""The queue: the seed's state machine, its policies, and the public operations.

States and transitions (all in one directory, each transition one atomic syscall)::

    publish        create  <id>.new  (O_EXCL)  --rename-noreplace-->  <id>
    delayed        <id>.new  --rename-noreplace-->  <id>.<due>
    receive        <id>  --rename-noreplace-->  <id>.<expiry>
    heartbeat      <id>.<expiry>  --rename-noreplace-->  <id>.<later>
    requeue        <id>.<expiry in the past>  --rename-noreplace-->  <id>
    release        <id>.<expiry>  --rename-noreplace-->  <id>   (change_visibility(m, 0))
    delete         unlink <id>.<expiry>

No transition ever replaces an existing name, so no collision (two hosts with skewed
clocks, a vsqs 0.3 peer, a requeue racing a publish) can overwrite a message; the seed's
directory listing on every publish is replaced by that rule (see ``docs/concepts``).
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Iterator

from . import _fs, _lifecycle, _scan
from ._capacity import Capacity
from ._clock import SYSTEM_CLOCK, Clock
from ._clock import check_seconds as _seconds
from ._consume import Consuming
from ._dedup import Deduplicator
from ._errors import InvalidId, NotAQueue
from ._ids import Precision, decode_ready, source_for
from ._message import NO_ATTRIBUTES, Counts, Message
from ._meta import MetaStore
from ._publish import Publishing
from ._stats import Counters, Stats, read_totals
from ._view import ReadyView
from ._wait import Waiter


class Queue(Publishing, Consuming):
    """A message queue stored in a directory, shareable by any number of processes.

    Creating a ``Queue`` creates the directory if needed and nothing else: no thread, no
    file, no descriptor. Any number of ``Queue`` objects, in any number of processes and
    hosts sharing the filesystem, may use one directory at once.

    :param path: the queue directory.
    :param visibility_timeout: seconds a received message stays hidden before it returns
        to the queue, unless deleted or extended (default 30, as SQS).
    :param durable: fsync each message before it becomes visible and the directory after;
        ``False`` trades crash safety (OS crash, power loss) for speed.
    :param precision: ``"us"`` (default, as vsqs 0.3 writes) or ``"ms"`` (as the design text
        shows) for the ids and expiries this queue writes; both are always read.
    :param capacity: bound the number of messages; publishers block when it is reached.
    :param dead_letter: a queue (or its path) that a message moves to after exactly
        ``max_receives`` receives without a delete (it is delivered exactly that often).
    :param max_receives: receives after which a message is dead-lettered (needs ``dead_letter``).
    :param retention: seconds after which an unconsumed message is dropped (or dead-lettered).
    :param dedup_window: seconds during which a ``dedup_id`` is remembered (default 300).
    :param wait: ``"auto"``, ``"inotify"`` or ``"poll"``: how blocked calls wait.
    :param poll_interval: polling interval, or the safety re-check period under inotify.
    :param refresh_interval: the shortest time between two directory listings of a busy
        consumer, which bounds how late a returned message is noticed.
    :param umask: create the directory and files with ``0o777 & ~umask`` / ``0o666 & ~umask``
        whatever the process umask, so several users can share a queue.
    :param clock: a :class:`~vsqs.testing.ManualClock` in tests; the system clock otherwise.
    :raises NotAQueue: *path* exists and is not a directory.
    :raises PermissionError: the directory cannot be created.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        visibility_timeout: float = 30.0,
        durable: bool = True,
        precision: str | Precision = Precision.US,
        capacity: int | None = None,
        dead_letter: Queue | str | os.PathLike[str] | None = None,
        max_receives: int | None = None,
        retention: float | None = None,
        dedup_window: float = 300.0,
        wait: str = "auto",
        poll_interval: float | None = None,
        refresh_interval: float = 1.0,
        umask: int | None = None,
        clock: Clock | None = None,
    ) -> None:
        # Kept to rebuild the queue in another process (pickling; Spark closures).
        self._options: dict[str, object] = {
            "visibility_timeout": visibility_timeout,
            "durable": durable,
            "precision": precision,
            "capacity": capacity,
            "dead_letter": dead_letter,
            "max_receives": max_receives,
            "retention": retention,
            "dedup_window": dedup_window,
            "wait": wait,
            "poll_interval": poll_interval,
            "refresh_interval": refresh_interval,
            "umask": umask,
            "clock": clock,
        }
        raw = os.fspath(path)
        if not isinstance(raw, str) or not raw or "\0" in raw:
            raise ValueError(f"queue path must be a non-empty str without NUL bytes: {raw!r}")
        self.path = os.path.abspath(raw)
        self.visibility_timeout = _seconds(visibility_timeout, "visibility_timeout")
        self.durable = bool(durable)
        self.precision = Precision(precision)
        self._ms = self.precision is Precision.MS
        self.clock: Clock = clock or SYSTEM_CLOCK
        self._ids = source_for(self.clock)
        self.retention = None if retention is None else _seconds(retention, "retention")
        self.dedup_window = _seconds(dedup_window, "dedup_window")
        if max_receives is not None and (not isinstance(max_receives, int) or max_receives < 1):
            raise ValueError(f"max_receives must be a positive int, not {max_receives!r}")
        if max_receives is not None and dead_letter is None:
            raise ValueError("max_receives needs a dead_letter queue to move messages to")
        self.max_receives = max_receives
        if umask is not None and not (isinstance(umask, int) and 0 <= umask <= 0o777):
            raise ValueError(f"umask must be an int between 0 and 0o777, not {umask!r}")
        self._dir_mode = 0o777 if umask is None else 0o777 & ~umask
        self._file_mode = None if umask is None else 0o666 & ~umask
        self._create_directory()
        self._meta = MetaStore(self.path, self._dir_mode, self._file_mode)
        if isinstance(dead_letter, Queue):
            self.dead_letter: Queue | None = dead_letter
        elif dead_letter is not None:
            self.dead_letter = Queue(
                dead_letter, durable=durable, precision=self.precision, umask=umask, clock=clock
            )
        else:
            self.dead_letter = None
        if self.dead_letter is not None and self.dead_letter.path == self.path:
            raise ValueError("a queue cannot be its own dead-letter queue")
        self._capacity = None if capacity is None else Capacity(self, capacity)
        self._dedup = Deduplicator(self)
        self._wait_mode = wait
        self._poll_interval = poll_interval
        self._waiter: Waiter | None = None
        self._lock = threading.Lock()
        self._view = ReadyView(_seconds(refresh_interval, "refresh_interval"))
        self._meta_possible = True  # until a listing proves there is no metadata at all
        self._receipts: OrderedDict[str, str] = OrderedDict()
        # Receipts this object superseded by extending their lease -> the next receipt.
        self._superseded: OrderedDict[str, str] = OrderedDict()
        # Leases this object handed out (a heap by expiry), so a blocked receive wakes when
        # one ends undeleted. Deleted, extended or released ones are skipped lazily:
        # their receipt is no longer the one in _receipts.
        self._own_leases: list[tuple[int, str, str]] = []
        self._ignored: set[str] = set()  # names that are not regular files (planted)
        self._counters = Counters(self._meta)
        self._closed_seen = False
        # Listing-race protection (see _defer_listed_during_scan). A manual clock stands
        # still while ids keep increasing, so there every id looks "recent": tests with a
        # manual clock run in one process, where the race cannot happen anyway.
        self._defer_recent = self.clock.is_real
        self._deferred: set[int] = set()
        # Real-clock queues trust an "open" look for CLOSE_GRACE (see _check_open); a
        # manual clock does not move by itself, so those queues look every time, and so
        # need no grace when draining either.
        self._trust_open = self.clock.is_real
        self._grace = self.clock.is_real
        self._grace_ends: float | None = None
        self._vt_us = round(self.visibility_timeout * 1e6)
        self._closed_marker = self._meta.path("closed")

    def _create_directory(self) -> None:
        try:
            os.makedirs(self.path, mode=self._dir_mode, exist_ok=True)
        except FileExistsError:
            raise NotAQueue(self.path) from None
        except NotADirectoryError:
            raise NotAQueue(self.path) from None
        except PermissionError as exc:
            raise PermissionError(
                exc.errno, f"cannot create queue directory {self.path!r}: permission denied",
                exc.filename,
            ) from exc  # fmt: skip
        if not os.path.isdir(self.path):
            raise NotAQueue(self.path)
        if self._file_mode is not None:
            # Only the owner may chmod (another user sharing the queue gets EPERM), and a
            # set-group-id bit, which keeps a shared queue's group, must survive.
            info = os.stat(self.path)
            if info.st_uid == os.geteuid() and info.st_mode & 0o777 != self._dir_mode:
                _fs.chmod(self.path, self._dir_mode | (info.st_mode & 0o2000))

    def __repr__(self) -> str:
        return f"Queue({self.path!r})"

    @property
    def _claim_misses(self) -> int:
        """Claims this object lost to another consumer (for benchmarks and tests)."""
        return self._view.claim_misses

    def __reduce__(self) -> tuple[object, ...]:
        # A Queue is a path plus options; another process opens its own (locks, waiters
        # and caches are per process).
        return (_reopen, (self.path, self._options))

    def __enter__(self) -> Queue:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Release this handle: flush its counters, drop its waiter (inotify descriptor).

        As ``close()`` on a file, a socket or a vsqs 0.3 queue, this touches only this
        object: the queue on disk, and every other handle in this or another process,
        go on as before. The object may be used again afterwards (it re-acquires what
        it needs lazily). ``with Queue(...) as q:`` calls it at the end of the block.
        To end the stream for everybody, use :meth:`shutdown`.
        """
        self._counters.flush()
        if self._waiter is not None:
            self._waiter.close()
            self._waiter = None

    detach = close
    """An alias of :meth:`close` (its name before 1.0)."""

    def __bool__(self) -> bool:
        # A queue object is always true, empty or not: ``if queue.dead_letter:`` asks
        # whether one is configured, and must not list a directory to answer.
        return True

    def size(self) -> int:
        """Ready plus held messages (what vsqs 0.3's ``size()`` counts); one listing."""
        listing = _scan.scan(self.path)
        return len(listing.ready) + len(listing.held)

    def __len__(self) -> int:
        return self.size()

    def counts(self) -> Counts:
        """Messages by state, from one listing (a snapshot)."""
        listing = _scan.scan(self.path)
        delayed_ids = self._meta.delayed_ids() if listing.held else set()
        delayed = sum(1 for _, name in listing.held if name.partition(".")[0] in delayed_ids)
        return Counts(
            ready=len(listing.ready),
            held=len(listing.held) - delayed,
            delayed=delayed,
            new=len(listing.new),
        )

    def browse(self) -> Iterator[Message]:
        """Iterate over the ready messages, oldest first, without claiming them.

        A snapshot: messages may be claimed by others while you browse; those are skipped.
        """
        for code in _scan.scan(self.path).ready:
            message_id = decode_ready(code)
            try:
                body = _fs.read_regular(self._file(message_id))
            except OSError:
                continue  # RACE: claimed or deleted since the listing (or not a regular file)
            meta = self._meta.read(message_id) if self._meta_possible else None
            yield Message(
                id=message_id,
                body=body,
                receipt=message_id,
                expires_at=0.0,
                receive_count=0 if meta is None else meta.receive_count,
                attributes=meta.attributes if meta and meta.attributes else NO_ATTRIBUTES,
                sent_at=(code >> 1) / 1e6,
                queue=self.path,
            )

    __iter__ = browse

    def peek(self) -> Message | None:
        """The oldest ready message, without claiming it (``None`` if none is ready)."""
        return next(self.browse(), None)

    @property
    def is_shutdown(self) -> bool:
        """Whether the queue was shut down, by any process (see :meth:`shutdown`)."""
        return self._closed_seen or _fs.exists(self._closed_marker)

    def stats(self) -> Stats:
        """Counters (produced and consumed, cross-process) and the current counts."""
        self._counters.flush()
        totals = read_totals(self._meta)
        counts = self.counts()
        oldest = self.peek_oldest_key()
        return Stats(
            **totals,
            ready=counts.ready,
            held=counts.held,
            delayed=counts.delayed,
            new=counts.new,
            oldest_ready_age=None
            if oldest is None
            else max(0.0, (self.clock.time_us() - oldest) / 1e6),
            is_shutdown=self.is_shutdown,
        )

    def peek_oldest_key(self) -> int | None:
        """The publish time (µs) of the oldest ready message, from one listing."""
        ready = _scan.scan(self.path).ready
        return (ready[0] >> 1) if ready else None

    def requeue_expired(self) -> int:
        """Return every expired lease to the queue now (consumers also do it as they go)."""
        now_us = self.clock.time_us()
        count = 0
        for expires, name in _scan.scan(self.path).held:
            if expires <= now_us and _lifecycle.return_to_ready(self, name) is not None:
                count += 1
        self._view.invalidate()
        return count

    def purge(self) -> int:
        """Delete every ready, held and delayed message; return how many.

        Messages being written (``.new``) are left alone: a concurrent publish is never
        cut short. A message claimed by a consumer during the purge may survive it.
        """
        listing = _scan.scan(self.path)
        names = [decode_ready(code) for code in listing.ready] + [n for _, n in listing.held]
        removed = 0
        for name in names:
            if _fs.unlink(self._file(name)):  # RACE: ENOENT when a consumer got there first
                removed += 1
                message_id = name.partition(".")[0]
                self._meta.remove(message_id)
                self._meta.unmark_delayed(message_id)
        self._view.invalidate()
        return removed

    def clean(self, older_than: float = 3600.0) -> int:
        """Remove debris older than *older_than* seconds; return how many entries.

        Debris is what crashed processes leave: ``.new`` files of publishers that died
        mid-write (never visible, so nothing is lost), orphaned metadata, and expired
        deduplication markers. Young ``.new`` files are never touched. With a
        ``retention``, messages past it are dropped (or dead-lettered) too and counted.
        """
        return _lifecycle.clean(self, _seconds(older_than, "older_than"))

    def redrive(
        self, to: Queue | str | os.PathLike[str] | None = None, limit: int | None = None
    ) -> int:
        """Move dead letters back: call it on a dead-letter queue; return how many moved.

        Each message goes to *to*, or to the queue it was dead-lettered from (recorded
        in its history; messages without one stay). Each move is atomic (one no-replace
        rename after its metadata is written) and never duplicates a message; messages
        being received from this queue are skipped. The receive count starts again.

        :param to: a queue or path; ``None`` for each message's source queue.
        :param limit: move at most this many, oldest first (SQS ``StartMessageMoveTask``).
        """
        if to is not None and not isinstance(to, Queue):
            to = _lifecycle._sibling(self, os.fspath(to))
        return _lifecycle.redrive(self, to, limit)

    def history(self, message: Message | str) -> _lifecycle.History:
        """What is known of a message's past: receives, first sent, last received, and,
        in a dead-letter queue, its source queue and why it was moved.

        One read of its metadata (none is taken for a message never requeued: the count
        is then 0). Safe at any time; a snapshot.

        :raises InvalidId: *message* is not an id or receipt.
        """
        name = message.id if isinstance(message, Message) else message
        if not isinstance(name, str):
            raise InvalidId(name, "expected a Message, a receipt or an id")
        return _lifecycle.history(self, name)


def _reopen(path: str, options: dict[str, object]) -> Queue:
    return Queue(path, **options)  # type: ignore[arg-type]
