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

import bisect
import heapq
import math
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import replace
from typing import Final

from . import _fs, _ingest, _lifecycle, _scan
from ._capacity import Capacity
from ._clock import SYSTEM_CLOCK, Clock
from ._dedup import Deduplicator
from ._errors import InvalidId, InvalidPayload, LeaseLost, NotAQueue, QueueClosed, QueueDrained
from ._ids import Precision, decode_ready, format_time, parse_name, source_for
from ._ids import State as _State
from ._message import NO_ATTRIBUTES, Counts, Message
from ._meta import Meta, MetaStore, validate_attributes
from ._stats import Counters, Stats, read_totals
from ._view import ReadyView
from ._wait import Waiter, make_waiter

_RECEIPT_CACHE: Final = 4096
_DRAIN_GRACE_NEW_US: Final = 60_000_000  # a `.new` older than this cannot block a drain
CLOSE_GRACE: Final = 0.1
"""Seconds a publisher trusts that the queue is open, and consumers wait after a close."""
_monotonic = time.monotonic
# Until when (monotonic) this process trusts that a queue directory is open; shared by all
# Queue objects on it, so a close() here is seen by every publisher here at once.
_open_until: dict[str, float] = {}


def _seconds(value: float, what: str, *, allow_zero: bool = True) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{what} must be a number of seconds, not {type(value).__name__}")
    if math.isnan(value) or math.isinf(value) or value < 0 or (value == 0 and not allow_zero):
        raise ValueError(f"{what} must be a finite number of seconds >= 0, not {value!r}")
    return float(value)


def _as_view(data: object) -> memoryview:
    if isinstance(data, (bytes, bytearray, memoryview)):
        view = memoryview(data)
        return view if view.c_contiguous and view.format == "B" else memoryview(view.tobytes())
    raise InvalidPayload(type(data).__name__)


class Queue:
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
    :param dead_letter: a queue (or its path) that receives messages received more than
        ``max_receives`` times.
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
        self.path: Final = os.path.abspath(raw)
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
        self.detach()

    def detach(self) -> None:
        """Release this object's process resources: flush counters, drop the waiter.

        The queue on disk is not changed (use :meth:`close` to end a stream).
        """
        self._counters.flush()
        if self._waiter is not None:
            self._waiter.close()
            self._waiter = None

    # -- paths -------------------------------------------------------------------------

    def _file(self, name: str) -> str:
        return f"{self.path}/{name}"

    def _get_waiter(self) -> Waiter:
        if self._waiter is None:
            self._waiter = make_waiter(self.path, self.clock, self._wait_mode, self._poll_interval)
        return self._waiter

    # -- publish ----------------------------------------------------------------------

    def publish(
        self,
        data: bytes | bytearray | memoryview,
        *,
        delay: float = 0.0,
        attributes: Mapping[str, str] | None = None,
        dedup_id: str | None = None,
        timeout: float | None = None,
    ) -> str:
        """Add a message and return its id.

        Atomic: the message becomes visible whole, in one rename, or not at all; no
        existing file is ever replaced. Safe from any number of processes at once.

        :param data: the body, bytes-like.
        :param delay: seconds before the message can be received (SQS ``DelaySeconds``).
        :param attributes: a small ``str`` to ``str`` mapping returned with the message.
        :param dedup_id: publishing the same ``dedup_id`` again within ``dedup_window``
            returns the first id and adds nothing.
        :param timeout: for a bounded queue: seconds to wait for room (``None`` forever,
            ``0`` not at all).
        :raises InvalidPayload: *data* is not bytes-like.
        :raises QueueClosed: the queue was closed.
        :raises QueueFull: the queue stayed full for *timeout* seconds.

        >>> q.publish(b"hello")  # doctest: +SKIP
        '1732257000123456'
        """
        if not (delay or attributes or dedup_id is not None or self._capacity is not None):
            return self._publish_plain(data)
        return self.publish_batch(
            (data,),
            delay=delay,
            attributes=attributes,
            dedup_ids=None if dedup_id is None else (dedup_id,),
            timeout=timeout,
        )[0]

    def publish_batch(
        self,
        bodies: Iterable[bytes | bytearray | memoryview],
        *,
        delay: float = 0.0,
        attributes: Mapping[str, str] | None = None,
        dedup_ids: Iterable[str | None] | None = None,
        timeout: float | None = None,
    ) -> list[str]:
        """Publish several messages, in order, and return their ids.

        Each message is atomic as in :meth:`publish`; the batch as a whole is not (a crash
        may leave a prefix published). Durable batches flush all bodies with one
        filesystem sync and the directory once, instead of twice per message.
        """
        views = [_as_view(body) for body in bodies]
        if not views:
            return []
        attrs = validate_attributes(attributes)
        delay_us = round(_seconds(delay, "delay") * 1e6)
        dedup: list[str | None] = [None] * len(views) if dedup_ids is None else list(dedup_ids)
        if len(dedup) != len(views):
            raise ValueError(f"{len(dedup)} dedup_ids for {len(views)} bodies")
        for key in dedup:
            if key is not None and (not isinstance(key, str) or not key):
                raise ValueError(f"dedup_id must be a non-empty str, not {key!r}")
        if timeout is not None:
            _seconds(timeout, "timeout")
        if self._capacity is not None:
            return self._capacity.publish(views, attrs, delay_us, dedup, timeout)
        return self._publish_views(views, attrs, delay_us, dedup)

    def _publish_plain(self, data: bytes | bytearray | memoryview) -> str:
        """The common publish: :meth:`_stage`, then :meth:`_commit` without its options.

        Kept lean because this is the path whose cost is compared with the bare syscalls.
        """
        body = data if type(data) is bytes else _as_view(data)
        durable = self.durable
        name, size = self._stage(body, sync=durable)
        message_id = name[:-4]
        new = f"{self.path}/{name}"
        # The commit of _commit, minus its generality.
        try:
            self._check_open()
            _fs.rename_noreplace(new, f"{self.path}/{message_id}")
        except FileExistsError:
            # RACE: the id is taken by a message in another state (skewed clock, a
            # vsqs 0.3 peer): the general path re-ids it.
            message_id = self._commit(name, size, {}, 0)
        except BaseException:
            _fs.unlink(new)
            raise
        else:
            counters = self._counters
            counters.produced.append(size)
            if counters.due():
                counters.flush()
        if durable:
            _fs.fsync_dir(self.path)
        return message_id

    def _publish_views(
        self, views: list[memoryview], attrs: dict[str, str], delay_us: int, dedup: list[str | None]
    ) -> list[str]:
        if len(views) == 1 or not self.durable:
            ids = [
                self._dedup.publish(view, attrs, delay_us, key, sync=self.durable)
                if key is not None
                else self._write(view, attrs, delay_us, sync=self.durable)
                for view, key in zip(views, dedup, strict=True)
            ]
        else:
            # Write every body unsynced, flush the filesystem once, then rename them all.
            staged = [self._stage(view) for view in views]
            if not _fs.sync_filesystem(self.path):
                for name, _ in staged:
                    fd = _fs.open_regular(self._file(name))
                    try:
                        _fs.fsync(fd)
                    finally:
                        _fs.close(fd)
            ids = [
                self._dedup.commit_staged(name, size, attrs, delay_us, key)
                if key is not None
                else self._commit(name, size, attrs, delay_us)
                for (name, size), key in zip(staged, dedup, strict=True)
            ]
        if self.durable:
            _fs.fsync_dir(self.path)
        return ids

    def _write(self, view: memoryview, attrs: dict[str, str], delay_us: int, *, sync: bool) -> str:
        name, size = self._stage(view, sync=sync)
        return self._commit(name, size, attrs, delay_us)

    def _stage(
        self, body: bytes | memoryview | Callable[[int], int], *, sync: bool = False
    ) -> tuple[str, int]:
        """Write a body to a fresh ``<id>.new``; return its name and size.

        *body* is the bytes, or a function that writes them to the descriptor it is
        given and returns how many it wrote (to stream a large body in chunks).
        """
        while True:
            new = self._new_id() + ".new"
            path = f"{self.path}/{new}"
            try:
                fd = _fs.create_exclusive(path, self._file_mode or 0o666)
            except FileExistsError:
                continue  # RACE: another process drew the same id in the same tick
            try:
                if self._file_mode is not None:
                    _fs.fchmod(fd, self._file_mode)
                if callable(body):
                    size = body(fd)
                else:
                    _fs.write_all(fd, body)
                    size = len(body)
                if sync:
                    _fs.fsync(fd)
            except BaseException:
                _fs.close(fd)
                _fs.unlink(path)  # never leave a partial body behind
                raise
            _fs.close(fd)
            return new, size

    def _commit(self, new: str, size: int, attrs: dict[str, str], delay_us: int) -> str:
        """Make a staged ``<id>.new`` ready (or delayed); re-id it on a collision."""
        path = self._file(new)
        while True:
            message_id = new[:-4]
            try:
                if self._try_commit(path, message_id, attrs, delay_us):
                    break
            except BaseException:
                _fs.unlink(path)  # never leave an unfinished publish behind
                raise
            # RACE: a message with this id exists in another state (a publisher with a
            # skewed clock, a vsqs 0.3 peer): give ours a fresh id and try again.
            new = self._new_id() + ".new"
            try:
                _fs.rename_noreplace(path, self._file(new))
            except FileExistsError:
                continue  # RACE: even the fresh `.new` name is taken; draw again
            path = self._file(new)
        if attrs:
            self._meta_possible = True
        self._counters.produced.append(size)
        if self._counters.due():
            self._counters.flush()
        return message_id

    def _try_commit(self, path: str, message_id: str, attrs: dict[str, str], delay_us: int) -> bool:
        """One attempt at the final rename; ``False`` if the id is taken."""
        self._check_open()
        # Exclusive metadata creation doubles as a collision check: an id that already
        # has metadata belongs to another message, whatever state its file is in.
        meta = Meta(attributes=attrs, inode=_fs.inode(path)) if attrs else None
        if meta is not None and not self._meta.create(message_id, meta, durable=self.durable):
            return False
        target = message_id
        if delay_us:
            self._meta.mark_delayed(message_id)
            target += "." + format_time(self.clock.time_us() + delay_us, self.precision)
        try:
            _fs.rename_noreplace(path, self._file(target))
        except BaseException as exc:
            if attrs:
                self._meta.remove(message_id)  # ours: created just above
            if delay_us:
                self._meta.unmark_delayed(message_id)
            if isinstance(exc, FileExistsError):
                return False
            raise
        return True

    def _new_id(self) -> str:
        """A fresh id: the queue's clock, strictly increasing within this process."""
        return self._ids.next(self.clock.time_us(), self.precision)

    def _check_open(self) -> None:
        """Raise :class:`QueueClosed` if a producer closed the queue.

        Called after this publish's ``.new`` exists and before it becomes ready. A look
        at the marker that found none is trusted for ``CLOSE_GRACE`` seconds: if that look
        was at time ``p`` and we are still within ``p + CLOSE_GRACE`` now, the ``.new`` was
        created before ``p + CLOSE_GRACE``, which is before ``close() + CLOSE_GRACE``
        (the look came before the marker). A consumer declares the queue drained only
        after listing it ``CLOSE_GRACE`` after it first saw the marker, so it sees this
        message, as ``.new`` or ready. Only durations are compared, never two hosts'
        clocks. This spares a syscall on all but one publish per ``CLOSE_GRACE``.
        """
        if self._closed_seen:
            raise QueueClosed(self.path)
        if self._trust_open:
            now = _monotonic()
            if now < _open_until.get(self.path, -1.0):
                return
            if _fs.exists(self._closed_marker):
                self._closed_seen = True
                raise QueueClosed(self.path)
            _open_until[self.path] = now + CLOSE_GRACE
        elif _fs.exists(self._closed_marker):
            self._closed_seen = True
            raise QueueClosed(self.path)

    # -- receive ----------------------------------------------------------------------

    def receive(
        self, *, visibility_timeout: float | None = None, timeout: float | None = None
    ) -> Message | None:
        """Claim the oldest ready message, waiting up to *timeout* seconds for one.

        Atomic: a message is claimed by exactly one consumer (one rename); it stays hidden
        for *visibility_timeout* seconds, then returns to the queue unless deleted.
        Expired leases are returned to the queue first, as the design requires.

        :param visibility_timeout: overrides the queue's for this message.
        :param timeout: ``None`` waits forever, ``0`` does not wait.
        :returns: the message, or ``None`` if none came within *timeout*.
        :raises QueueDrained: the queue is closed and empty.
        """
        if timeout == 0 and visibility_timeout is None:  # the polling fast path
            got = self._claim(1, self._vt_us)
            if got:
                return got[0]
            if self._is_drained():
                raise QueueDrained(self.path)
            return None
        got = self.receive_batch(1, visibility_timeout=visibility_timeout, timeout=timeout)
        return got[0] if got else None

    def receive_batch(
        self,
        max_messages: int,
        *,
        visibility_timeout: float | None = None,
        timeout: float | None = 0,
    ) -> list[Message]:
        """Claim up to *max_messages* ready messages, oldest first.

        Waits (up to *timeout*) only while none is ready; returns as soon as at least one
        was claimed. Each message is claimed atomically, as in :meth:`receive`.
        """
        if not isinstance(max_messages, int) or max_messages < 1:
            raise ValueError(f"max_messages must be a positive int, not {max_messages!r}")
        vt_us = (
            self._vt_us
            if visibility_timeout is None
            else round(_seconds(visibility_timeout, "visibility_timeout") * 1e6)
        )
        if timeout == 0:  # the non-blocking fast path
            got = self._claim(max_messages, vt_us)
            if not got and self._is_drained():
                raise QueueDrained(self.path)
            return got
        deadline = (
            None if timeout is None else self.clock.monotonic() + _seconds(timeout, "timeout")
        )
        waiter = self._get_waiter()
        while True:
            token = waiter.token()
            got = self._claim(max_messages, vt_us)
            if got:
                return got
            if self._is_drained():
                raise QueueDrained(self.path)
            now = self.clock.monotonic()
            if deadline is not None and now >= deadline:
                return []
            pause = math.inf if deadline is None else deadline - now
            expiry = self._next_expiry()
            if expiry is not None:
                pause = min(pause, max(0.0, (expiry - self.clock.time_us()) / 1e6) + 0.0005)
            if self._grace_ends is not None:  # closed: look again when the grace ends
                pause = min(pause, max(0.0, self._grace_ends - now) + 0.001)
            waiter.wait(token, pause)

    def consume(
        self, *, visibility_timeout: float | None = None, timeout: float | None = None
    ) -> Iterator[Message]:
        """Yield messages as they come; stop when the queue is closed and drained.

        With a *timeout*, also stop after *timeout* seconds without a message. The caller
        deletes each message when done with it.
        """
        while True:
            try:
                message = self.receive(visibility_timeout=visibility_timeout, timeout=timeout)
            except QueueDrained:
                return
            if message is None:
                return
            yield message

    def _claim(self, limit: int, vt_us: int) -> list[Message]:
        clock = self.clock
        view = self._view
        lock = self._lock
        now_us = clock.time_us()
        own = self._own_leases
        held = view._held
        if (own and own[0][0] <= now_us) or (held and held[0][0] <= now_us):
            self._requeue_due(now_us)
        expiry = now_us + vt_us
        suffix = f".{expiry // 1000}" if self._ms else f".{expiry}"
        prefix = self.path + "/"
        got: list[Message] = []
        listed = relisted = False
        if view.stale(clock.monotonic()):
            self._relist(now_us)
            listed = True
        while len(got) < limit:
            code = view.take()
            if code is None:
                # One listing per call, or two when the first held messages back: the
                # second one confirms them (see _defer_listed_during_scan).
                if listed and (relisted or not self._deferred):
                    break
                relisted = listed
                self._relist(now_us)
                listed = True
                continue
            message_id = str(code >> 1) if not code & 1 else str((code >> 1) // 1000)
            receipt = message_id + suffix
            try:
                _fs.rename_noreplace(prefix + message_id, prefix + receipt)
            except FileNotFoundError:
                # RACE: another consumer claimed it first, or it was deleted or purged.
                with lock:
                    view.miss()
                continue
            except FileExistsError:
                continue  # RACE: a same-id message was claimed into the same tick by a peer
            message = self._open_claimed(message_id, receipt, code, expiry)
            if message is not None:
                got.append(message)
        return got

    def _open_claimed(
        self, message_id: str, receipt: str, code: int, expiry: int
    ) -> Message | None:
        try:
            body, inode = _fs.read_message(f"{self.path}/{receipt}")
        except FileNotFoundError:
            return None  # RACE: a peer whose clock runs ahead already requeued or deleted it
        except OSError:
            # Not a regular file (a planted symlink, FIFO or directory): put the name back
            # as it was and never look at it again.
            _fs.rename_noreplace(self._file(receipt), self._file(message_id))
            self._ignored.add(message_id)
            return None
        receipts = self._receipts
        if len(receipts) >= _RECEIPT_CACHE:
            receipts.popitem(last=False)
        receipts[message_id] = receipt
        heapq.heappush(self._own_leases, (expiry, message_id, receipt))
        if (
            self._meta_possible
            and (meta := self._meta.read(message_id)) is not None
            and meta.owned_by(inode)  # not the metadata of another message with our id
        ):
            return Message(
                message_id,
                body,
                receipt,
                expiry / 1e6,
                meta.receive_count + 1,
                meta.attributes or NO_ATTRIBUTES,
                (code >> 1) / 1e6,
                self.path,
            )
        return Message(
            message_id, body, receipt, expiry / 1e6, 1, NO_ATTRIBUTES, (code >> 1) / 1e6, self.path
        )

    def _relist(self, now_us: int) -> None:
        """List the directory, return expired leases, apply retention, reload the view."""
        started = self.clock.monotonic()
        started_us = self.clock.time_us()
        listing = _scan.scan(self.path)
        codes = listing.ready
        if self._ignored:
            codes = [c for c in codes if decode_ready(c) not in self._ignored]
        waiting: list[tuple[int, str]] = []
        listed = len(codes)  # not len(listing.ready): codes may be that very list
        for expires, name in listing.held:
            if expires <= now_us:
                code = _lifecycle.return_to_ready(self, name)
                if code is not None:
                    codes.append(code)
            else:
                waiting.append((expires, name))
        if len(codes) != listed:
            codes.sort()
        if self.retention is not None:
            codes = _lifecycle.apply_retention(self, codes, now_us)
        if self._defer_recent:
            codes = self._defer_listed_during_scan(codes, started_us)
        # Metadata is written before the message it describes becomes visible, so a check
        # made after the listing (and after our own requeues) covers every listed message.
        meta_possible = self._meta.exists()
        with self._lock:
            self._meta_possible = meta_possible
            self._view.load(
                codes, waiting, self.clock.monotonic(), self.clock.monotonic() - started
            )

    def _next_expiry(self) -> int | None:
        """The earliest lease or delay known to end (µs), listed or handed out by us."""
        own = self._own_leases
        receipts = self._receipts
        with self._lock:
            while own and receipts.get(own[0][1]) != own[0][2]:
                heapq.heappop(own)  # deleted, extended or released since: not our lease now
            listed = self._view.next_expiry()
        if own and (listed is None or own[0][0] < listed):
            return own[0][0]
        return listed

    def _defer_listed_during_scan(self, codes: list[int], started_us: int) -> list[int]:
        """Hold back the messages created while the listing ran, until the next listing.

        A listing is not a snapshot: a name that becomes ready while ``scandir`` runs may
        or may not be returned, depending on where it lands in the directory. So one
        producer's messages A then B, both made ready during the scan, could show up as
        B without A, and serving B would break FIFO. Every message created before the scan
        began was (if ready at all) ready before it began, and is listed. So only those
        are served; the others wait for the next listing, which sees every older message
        that was ready when they were. A message deferred once is served by the next
        listing whatever its id says, so a publisher whose clock runs ahead cannot
        starve.
        """
        split = bisect.bisect_left(codes, started_us << 1)
        if split == len(codes):
            self._deferred = set()
            return codes
        recent = codes[split:]
        earlier = self._deferred
        confirmed = [code for code in recent if code in earlier]
        self._deferred = set(recent).difference(confirmed)
        return codes[:split] + confirmed

    def _requeue_due(self, now_us: int) -> None:
        with self._lock:
            due = [name for _, name in self._view.due_leases(now_us)]
            own = self._own_leases
            while own and own[0][0] <= now_us:
                _, message_id, receipt = heapq.heappop(own)
                if self._receipts.get(message_id) == receipt:  # still held, undeleted
                    due.append(receipt)
        for name in due:
            code = _lifecycle.return_to_ready(self, name)
            if code is not None:
                with self._lock:
                    self._view.put_back(code)

    def _is_drained(self) -> bool:
        if not (self._closed_seen or _fs.exists(self._closed_marker)):
            return False
        self._closed_seen = True
        if self._grace_ends is None:
            # Publishers may trust an "open" look for CLOSE_GRACE (see _check_open): wait
            # that long after first seeing the marker before believing an empty listing.
            self._grace_ends = self.clock.monotonic() + (CLOSE_GRACE if self._grace else 0.0)
        if self.clock.monotonic() < self._grace_ends:
            return False
        listing = _scan.scan(self.path)
        stale_before = self.clock.time_us() - _DRAIN_GRACE_NEW_US
        live_new = [name for created, name in listing.new if created > stale_before]
        return not (listing.ready or listing.held or live_new)

    # -- delete and visibility ---------------------------------------------------------

    def delete(self, message: Message | str) -> bool:
        """Delete a received message; return whether this call deleted it.

        Given a :class:`Message` or its receipt, it unlinks exactly the held file: O(1),
        from any process. It returns ``False``, and deletes nothing, when the receipt no
        longer names a file: the message was already deleted (deleting twice is not an
        error), or its lease expired and it went back to the queue or to another consumer,
        whose copy is never touched. Given a bare id, it deletes the message in whatever
        state it is, as the design describes (a listing unless this object received it).

        :raises InvalidId: *message* is not an id or receipt of this queue.
        """
        if (
            isinstance(message, Message)
            and message.queue == self.path
            and self._receipts.get(message.id) == message.receipt
        ):
            # The fast path: this object issued the receipt, so it is one of ours (a
            # hand-made Message with a forged receipt takes the validating path below).
            receipt = message.receipt
            size = len(message.body)
        else:
            receipt = self._receipt_of(message)
            size = 0
        if "." not in receipt:
            receipt = self._locate(receipt)
            if not receipt:
                return False
        if not _fs.unlink(f"{self.path}/{receipt}"):
            return False
        message_id = receipt.partition(".")[0]
        self._receipts.pop(message_id, None)
        if self._meta_possible:
            self._meta.remove(message_id)
        counters = self._counters
        counters.consumed.append(size)
        if counters.due():
            counters.flush()
        return True

    def delete_batch(self, messages: Iterable[Message | str]) -> int:
        """Delete several messages (each as :meth:`delete`); return how many were deleted."""
        return sum(self.delete(message) for message in messages)

    def change_visibility(self, message: Message | str, seconds: float) -> Message:
        """Extend a lease (a heartbeat) or, with ``0``, release the message now.

        Atomic: one rename of the held file. Returns the message with its new receipt
        and expiry; use that one for the next call. A release that ends the message's
        last allowed receive (``max_receives``) moves it to the dead-letter queue
        instead; the returned message then names that queue in ``queue``.

        :raises LeaseLost: the lease already ended (deleted, or expired and requeued).
        """
        seconds = _seconds(seconds, "seconds")
        receipt = self._receipt_of(message)
        message_id, dot, _ = receipt.partition(".")
        if not dot:
            raise InvalidId(receipt, "a receipt (id.expiry) is needed, not a bare id")
        if not isinstance(message, Message):
            message = Message(id=message_id, body=b"", receipt=receipt, expires_at=0.0)
        now_us = self.clock.time_us()
        if seconds == 0:
            try:
                if (
                    _lifecycle.return_to_ready(
                        self, receipt, released=True, report_dead_letter=True
                    )
                    is None
                ):
                    raise LeaseLost(receipt)
            except _lifecycle.DeadLettered:
                # This release was its last allowed receive: it went to the dead-letter
                # queue, which is not a lost lease.
                assert self.dead_letter is not None
                self._receipts.pop(message_id, None)
                return replace(message, receipt=message_id, queue=self.dead_letter.path)
            self._receipts.pop(message_id, None)
            self._view.invalidate()  # the released message should be served again soon
            return replace(message, receipt=message_id, expires_at=now_us / 1e6)
        expiry = now_us + round(seconds * 1e6)
        while True:
            target = f"{message_id}.{format_time(expiry, self.precision)}"
            if target == receipt:
                return replace(message, expires_at=expiry / 1e6)
            try:
                _fs.rename_noreplace(self._file(receipt), self._file(target))
            except FileNotFoundError:
                raise LeaseLost(receipt) from None
            except FileExistsError:
                expiry += 1000 if self.precision is Precision.MS else 1  # RACE: same tick
                continue
            self._receipts[message_id] = target
            with self._lock:
                heapq.heappush(self._own_leases, (expiry, message_id, target))
            return replace(message, receipt=target, expires_at=expiry / 1e6)

    def _receipt_of(self, message: Message | str) -> str:
        if isinstance(message, Message):
            if message.queue and message.queue != self.path:
                raise InvalidId(message.receipt, f"the message belongs to {message.queue!r}")
            message = message.receipt  # validated below too: a Message can be made by hand
        if not isinstance(message, str):
            raise InvalidId(message, "expected a Message, a receipt or an id")
        entry = parse_name(message)
        if entry is None or entry.state is _State.NEW:
            raise InvalidId(message)
        return message

    def _locate(self, message_id: str) -> str:
        """The current name of a bare id: a lease we hold, a listed lease, or ready."""
        cached = self._receipts.get(message_id)
        if cached and _fs.exists(self._file(cached)):
            return cached
        held = _scan.held_names_for(self.path, message_id)
        if held:
            return held[0]
        return message_id if _fs.exists(self._file(message_id)) else ""

    # -- inspection --------------------------------------------------------------------

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
    def closed(self) -> bool:
        """Whether a producer closed the queue (see :meth:`close`)."""
        return self._closed_seen or _fs.exists(self._closed_marker)

    def close(self) -> None:
        """End the stream: refuse further publishes; consumers drain what is left.

        Persistent and visible to every process. A queue cannot be reopened by vsqs (as in
        the pressure protocol); to reuse the directory, remove ``.vsqs/closed`` by hand once
        every consumer has stopped, or publish to a new queue.

        :raises QueueClosed: the queue was already closed.
        """
        marker = self._meta.path("closed")
        self._meta.ensure(self._meta.root)
        try:
            _fs.close(_fs.create_exclusive(marker, self._file_mode or 0o666))
        except FileExistsError:
            raise QueueClosed(self.path, f"queue {self.path!r} is already closed") from None
        if self.durable:
            _fs.fsync_dir(self._meta.root)
        self._closed_seen = True
        _open_until.pop(self.path, None)
        _lifecycle.poke(self)  # wake consumers blocked in this and other processes

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
            closed=self.closed,
        )

    def peek_oldest_key(self) -> int | None:
        """The publish time (µs) of the oldest ready message, from one listing."""
        ready = _scan.scan(self.path).ready
        return (ready[0] >> 1) if ready else None

    # -- upkeep ------------------------------------------------------------------------

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

    # -- lifecycle (issue 4) -------------------------------------------------------------

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

    def publish_file(
        self,
        path: str | os.PathLike[str],
        *,
        attributes: Mapping[str, str] | None = None,
        delay: float = 0.0,
        dedup_id: str | None = None,
    ) -> str:
        """Move an existing file into the queue as a message, without copying it.

        The file gets a second name ``<id>.new`` by a hard link, which is published as
        usual (atomic, one no-replace rename), and then loses its original name. On any
        failure the source is left as it was. A crash after the publish and before the
        source is unlinked leaves both names (at least once, never lost).

        :raises OSError: with ``errno.EXDEV`` if *path* is on another filesystem than
            the queue (nothing is copied; use :meth:`publish_stream`).
        :raises FileNotFoundError: *path* does not exist.
        :raises ValueError: *path* is not a regular file.
        :raises QueueClosed: the queue was closed.
        """
        attrs, delay_us = self._check_extras(attributes, delay, dedup_id)
        return _ingest.publish_file(
            self, os.fspath(path), attrs=attrs, delay_us=delay_us, dedup_id=dedup_id
        )

    def publish_stream(
        self,
        readable: object,
        *,
        attributes: Mapping[str, str] | None = None,
        delay: float = 0.0,
        dedup_id: str | None = None,
        chunk_size: int = _ingest.DEFAULT_CHUNK,
    ) -> str:
        """Copy a binary file object into one message, in chunks of bounded memory.

        Atomic like :meth:`publish`: the body is written to ``<id>.new`` and becomes
        visible whole, in one rename. Memory use is one *chunk_size* buffer, whatever
        the payload size.

        :param readable: has ``readinto(buffer)`` or ``read(n)`` returning bytes.
        :raises InvalidPayload: the stream returns text.
        """
        attrs, delay_us = self._check_extras(attributes, delay, dedup_id)
        return _ingest.publish_stream(
            self, readable, attrs=attrs, delay_us=delay_us, dedup_id=dedup_id, chunk_size=chunk_size
        )

    def _check_extras(
        self, attributes: Mapping[str, str] | None, delay: float, dedup_id: str | None
    ) -> tuple[dict[str, str], int]:
        if self._capacity is not None:
            raise ValueError("publish_file and publish_stream do not support bounded queues")
        if dedup_id is not None and (not isinstance(dedup_id, str) or not dedup_id):
            raise ValueError(f"dedup_id must be a non-empty str, not {dedup_id!r}")
        return validate_attributes(attributes), round(_seconds(delay, "delay") * 1e6)


def _reopen(path: str, options: dict[str, object]) -> Queue:
    return Queue(path, **options)  # type: ignore[arg-type]
