"""The queue: the design's state machine, in one class.

Every arrow of the state diagram (all in one directory, each one atomic syscall) is
written once, in the one method of :class:`Queue` named here; every path that makes that
transition (a single publish, a batch, a Spark partition, a dead-letter, a redrive)
calls that method with what varies (a directory descriptor, a target id) as arguments.
``tests/test_architecture.py`` reads this table and checks that each method exists, that
only it makes its syscall, and that no public call is more than three calls from it::

    arrow    from -> to                                     method                 syscall
    create   nothing -> <id>.new (O_EXCL; or a link)        Queue._stage           create
    discard  <id>.new -> nothing (it was never visible)     Queue._discard         unlink
    commit   <id>.new -> <id>, or <id>.<due> if delayed     Queue._commit          rename
    claim    <id> -> <id>.<expiry>                          Queue._claim_one       rename
    extend   <id>.<expiry> -> <id>.<later>, or to a hold    Queue._extend_lease    rename
             <id>.<hold>.0 (release, requeue: step one)
    ready    <id>.<hold>.0 or <id>.<due> -> <id>            Queue._make_ready      rename
    delete   <id>.<expiry> (or <id>) -> nothing             Queue._unlink_message  unlink
    move     <id>.<hold> -> <other queue>/<id>              Queue._transfer        rename
    copy     a move across filesystems: create there,       Queue._copy_to         -
             commit there, delete here (those three arrows)

No transition ever replaces an existing name, so no collision (two hosts with skewed
clocks, a vsqs 0.3 peer, a requeue racing a publish) can overwrite a message. Every
syscall goes through ``_fs``; every path comes from ``_layout``; each decision that is
not a syscall (metadata, deduplication, capacity, receive counts, shutdown) is asked of a
helper that never sees the queue, and everything a receiving handle remembers between
calls (its view of the directory, its leases, its receipts) is one
:class:`~vsqs._consumer.Consumer` with its own lock, so a handle is safe to share
between threads.
"""

from __future__ import annotations

import enum
import errno
import math
import os
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext, suppress
from dataclasses import replace
from typing import TYPE_CHECKING, Final, Protocol, cast

from . import _fs, _history, _ingest, _scan, _stored
from ._capacity import Capacity, held_back, room_for_move
from ._clock import Clock
from ._consumer import Consumer
from ._dedup import Chunk, Deduplicator
from ._errors import (
    DurabilityError,
    InvalidId,
    InvalidPayload,
    LeaseLost,
    NotAQueue,
    QueueDrained,
    QueueFull,
    UnsafeEntry,
)
from ._groups import CLAIM_RETRY, CLAIM_WAIT, Gate, Groups, Held
from ._host import stable_inode
from ._ids import (
    HOLD_TAG,
    Precision,
    decode_ready,
    delivery_of,
    encode_ready,
    format_time,
    id_of,
    is_hold,
    parse_name,
    source_for,
    split_name,
)
from ._ids import State as _State
from ._layout import DIR, FIFO_LOCK, META, TMP, Layout
from ._lock import FileLock
from ._message import NO_ATTRIBUTES, Counts, Message, received
from ._meta import Meta, MetaStore, report_once, split_group, validate_attributes, with_group
from ._options import UNSET, Config, Unset, batch_size, queue_path
from ._options import validate_seconds as _seconds
from ._protocol import QueueLike
from ._renewal import Lease, Renewer, until_entered
from ._shutdown import ShutdownWatch
from ._stats import Counters, read_totals
from ._waiters import MultiWaiter, make_waiter

if TYPE_CHECKING:
    from ._reports import History, Stats

_RECEIPT_CACHE: Final = 4096
# What reading a planted non-file under a message name gives: a symlink (ELOOP, as we
# open with O_NOFOLLOW), a FIFO or directory (EINVAL from _fs.read_message's check), a
# socket (ENXIO).
_NOT_A_MESSAGE: Final = frozenset({errno.ELOOP, errno.EINVAL, errno.EISDIR, errno.ENXIO})
_NO_SPACE: Final = frozenset({errno.ENOSPC, errno.EDQUOT})


class Gone(enum.Enum):
    """Why a held message did not come back to ready (see :meth:`Queue._return`)."""

    LOST = "lost"
    """Another process requeued, deleted or dead-lettered it first."""
    DEAD_LETTERED = "dead-lettered"
    """This call moved it to the dead-letter queue (its receives were used up)."""


def _as_view(data: object) -> memoryview:
    if isinstance(data, (bytes, bytearray, memoryview)):
        view = memoryview(data)
        return view if view.c_contiguous and view.format == "B" else memoryview(view.tobytes())
    raise InvalidPayload(type(data).__name__)


def validate_receipt(receipt: object) -> str:
    """Return *receipt* if it is a message's receipt (``<id>.<expiry>``, what a receive
    gives) or a bare message id, by the name grammar; raise :class:`InvalidId` otherwise.
    Pure: an integration that is handed receipts (a command line, a web form) checks all
    of them before it deletes any.

    >>> import vsqs
    >>> vsqs.validate_receipt("1700000000000000.1700000030000000")
    '1700000000000000.1700000030000000'

    :raises InvalidId: not a ``str``, or not an id or receipt (a name being written,
        ``<id>.new``, is not one either).
    """
    if not isinstance(receipt, str):
        raise InvalidId(receipt, "expected a Message, a receipt or an id")
    entry = parse_name(receipt)
    if entry is None or entry.state is _State.NEW:
        raise InvalidId(receipt)
    return receipt


def read_bodies(queue: str | os.PathLike[str], receipts: Iterable[str]) -> Iterator[bytes | None]:
    """The bodies of messages handed over by receipt, read without a handle, in the
    order given: for a process that reads what another one claimed (a Spark executor
    reads the messages its driver holds).

    A message's content never changes while it exists, only its name (see
    :doc:`/concepts`), so each body is read whole from the file named by its receipt
    (one open, a regular file only, never through a symlink). When that name is gone
    because the message moved since (a heartbeat renewed the lease, a requeue made it
    ready), the directory is listed, once for all the receipts (again only when a name
    moved after that listing), and the file that carries the id now is read. ``None``
    for a message that no longer exists: deleted by someone else. Reads only: no lock,
    nothing changes, safe beside any other process.

    >>> import tempfile, vsqs
    >>> queue = vsqs.Queue(tempfile.mkdtemp())
    >>> _ = queue.publish(b"hello")
    >>> held = queue.receive(timeout=0)
    >>> renewed = queue.change_visibility(held, 60)  # a new receipt: the old name is gone
    >>> list(vsqs.read_bodies(held.queue, [held.receipt]))
    [b'hello']

    :param queue: the directory the receipts come from (:attr:`Message.queue
        <vsqs.Message.queue>`: a partition's, for a partitioned queue).
    :raises InvalidId: a receipt that is not one (when it is reached).
    :raises FileNotFoundError: the directory *queue* is gone.
    """
    layout = Layout(os.path.abspath(os.fspath(queue)))
    names: dict[str, str] | None = None
    for receipt in receipts:
        message_id = id_of(validate_receipt(receipt))
        body = _read_named(layout, receipt)
        for again in (False, True):
            if body is not None:
                break
            if names is None or again:  # again: the listing may predate a later rename
                names = _scan.current_names_in(layout.path)
            current = names.get(message_id)
            body = None if current is None else _read_named(layout, current)
        yield body


def _read_named(layout: Layout, name: str) -> bytes | None:
    try:
        return _fs.read_regular(layout.message(name))
    except FileNotFoundError:
        return None  # RACE: renamed by a heartbeat or requeue, or deleted, meanwhile


class MoveTarget(QueueLike, Protocol):
    """A queue a moved message (dead-lettered, redriven) may go to: one that says which
    directory a message of a given group lands in, and which bound it counts against
    (a plain queue: itself; a partitioned one: the group's partition, and its total)."""

    def landing(self, group: str | None) -> tuple[Queue, Capacity | None]: ...


def _is_target(value: object) -> bool:
    """Whether a ``dead_letter`` or ``to`` is a queue object rather than a path."""
    return hasattr(value, "landing") and not isinstance(value, type)


class Queue:
    """A message queue stored in a directory, shareable by any number of processes.

    Creating a ``Queue`` creates the directory if needed, reads the queue's stored
    settings if it has any, and nothing else: no thread, no file, no descriptor kept.
    Any number of ``Queue`` objects, in any number of processes and
    hosts sharing the filesystem, may use one directory at once. Every option is checked
    here, once; a wrong one raises :class:`TypeError` or :class:`ValueError` naming it.

    Options marked *stored* may be stored with the queue (:meth:`configure`); a
    handle given none uses the stored value, or the default shown. Given one, the
    handle uses its own, except ``capacity``: a stored capacity binds every producer.

    :param path: the queue directory.
    :param visibility_timeout: *stored*; seconds a received message stays hidden before it returns
        to the queue, unless deleted or extended (default 30, as SQS).
    :param durable: fsync each message before it becomes visible and the directory after;
        ``False`` trades crash safety (OS crash, power loss) for speed.
    :param delay: *stored*; seconds every publish is delayed by when it gives no
        ``delay`` of its own (SQS ``DelaySeconds``; default 0).
    :param precision: ``"us"`` (default, as vsqs 0.3 writes) or ``"ms"`` (as the design text
        shows) for the ids and expiries this queue writes; both are always read.
    :param capacity: *stored*; bound the number of messages; publishers block when it
        is reached.
    :param dead_letter: *stored* (by name, beside this queue); a queue (or its path)
        that a message moves to after exactly ``max_receives`` receives without a
        delete (it is delivered exactly that often).
    :param max_receives: *stored*; receives after which a message is dead-lettered
        (needs ``dead_letter``).
    :param retention: *stored*; seconds after which an unconsumed message is dropped
        (or dead-lettered).
    :param dedup_window: *stored*; seconds during which a ``dedup_id`` is remembered (default 300).
    :param wait: ``"auto"``, ``"inotify"`` or ``"poll"``: how blocked calls wait.
    :param poll_interval: polling interval, or the safety re-check period under inotify.
    :param refresh_interval: the shortest time between two directory listings of a busy
        consumer, which bounds how late a returned message is noticed.
    :param umask: create the directory and files with ``0o777 & ~umask`` / ``0o666 & ~umask``
        whatever the process umask, so several users can share a queue.
    :param clock: a :class:`~vsqs.testing.ManualClock` in tests; the system clock otherwise.
    :raises NotAQueue: *path* exists and is not a directory.
    :raises PermissionError: the directory cannot be created.
    :raises InvalidSettings: the queue's stored settings file cannot be trusted.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        fifo: bool | Unset = UNSET,
        visibility_timeout: float | Unset = UNSET,
        durable: bool = True,
        delay: float | Unset = UNSET,
        precision: str | Precision = Precision.US,
        capacity: int | Unset | None = UNSET,
        dead_letter: MoveTarget | str | os.PathLike[str] | Unset | None = UNSET,
        max_receives: int | Unset | None = UNSET,
        retention: float | Unset | None = UNSET,
        dedup_window: float | Unset = UNSET,
        wait: str = "auto",
        poll_interval: float | None = None,
        refresh_interval: float = 1.0,
        umask: int | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.path = queue_path(path)
        given = {
            "visibility_timeout": visibility_timeout,
            "delay": delay,
            "capacity": capacity,
            "dead_letter": cast("MoveTarget", dead_letter).path
            if _is_target(dead_letter)
            else dead_letter,
            "max_receives": max_receives,
            "retention": retention,
            "dedup_window": dedup_window,
        }
        on_disk = _stored.load(self.path)
        adopt = _stored.shape(self.path, on_disk, {} if fifo is UNSET else {"fifo": fifo})
        stored = _stored.resolve(
            self.path,
            cast("_stored.Settings", {**on_disk, **adopt}),
            {key: value for key, value in given.items() if value is not UNSET},
        )
        config = Config.build(
            **stored,
            durable=durable,
            precision=precision,
            wait=wait,
            poll_interval=poll_interval,
            refresh_interval=refresh_interval,
            umask=umask,
            clock=clock,
        )
        if config.dead_letter == self.path:
            raise ValueError("a queue cannot be its own dead-letter queue")
        self.config: Final = config
        """The validated options (a frozen :class:`~vsqs._options.Config`)."""
        self.clock: Final = config.clock
        self.durable: Final = config.durable
        self.precision: Final = config.precision
        self.visibility_timeout: Final = config.visibility_timeout
        self.retention: Final = config.retention
        self.dedup_window: Final = config.dedup_window
        self.max_receives: Final = config.max_receives
        self._create_directory()
        self.layout: Final = Layout(
            self.path, config.dir_mode, config.file_mode, durable=config.durable
        )
        """Where every file of this queue lives (the on-disk format; see ``docs/concepts``)."""
        if adopt:
            self._adopt(adopt)
        dlq: MoveTarget | None = None
        if _is_target(dead_letter):
            dlq = cast("MoveTarget", dead_letter)
        elif config.dead_letter is not None:
            dlq = self._sibling(config.dead_letter)
        self.dead_letter: Final = dlq
        self._ids = source_for(self.clock)
        self._ms = self.precision is Precision.MS
        self._vt_us = config.vt_us
        self._file_mode = config.file_mode  # a property of the config: read once, not per publish
        self._meta = MetaStore(self.layout)
        self._counters = Counters(self.layout)
        self._dedup = Deduplicator(self.layout, self.clock, config.dedup_window)
        self._capacity = (
            None if config.capacity is None else Capacity(self.layout, self.clock, config.capacity)
        )
        self._shutdown = ShutdownWatch(self.layout, self.clock)
        self._waiter: MultiWaiter | None = None
        self._lock = threading.Lock()  # guards _waiter and _renewer, made on first use
        self._consumer = Consumer(config.refresh_interval)  # all receive bookkeeping
        # fifo=True: one claim step at a time in this directory, across processes and
        # hosts that share flock, and this handle's threads (held for the step only).
        self._claim_lock = FileLock.in_queue(self.layout, FIFO_LOCK, self.clock)
        self._groups = Groups(self._meta)
        self._held = Held()  # fifo=True: the held names of the last listing, and ours
        self._claim_missed = False  # the last fifo claim found the claim lock held

    def _adopt(self, shape: dict[str, object]) -> None:
        """Store the shape this handle creates the queue with (see ``_stored.shape``)."""
        _stored.adopt(self.layout, self.clock, shape)

    def use_deduplicator(self, dedup: Deduplicator) -> None:
        """Keep this directory's deduplication markers in *dedup* from now on: one set
        for several directories read as one queue, so a
        ``dedup_id`` is unique across all of them. Call it before publishing."""
        self._dedup = dedup

    @classmethod
    def from_config(cls, path: str | os.PathLike[str], config: Config) -> Queue:
        """A queue on *path* with an already validated *config* (pickling, Spark)."""
        return cls(path, **config.options())

    def _create_directory(self) -> None:
        config = self.config
        try:
            _fs.make_queue_dir(
                self.path,
                config.dir_mode,
                set_mode=config.file_mode is not None,
                durable=config.durable,
            )
        except (FileExistsError, NotADirectoryError):
            raise NotAQueue(self.path) from None
        except PermissionError as exc:
            raise PermissionError(
                exc.errno, f"cannot create queue directory {self.path!r}: permission denied",
                exc.filename,
            ) from exc  # fmt: skip

    # -- the handle ---------------------------------------------------------------------

    def __repr__(self) -> str:
        return f"Queue({self.path!r})"

    def __reduce__(self) -> tuple[Callable[[str, Config], Queue], tuple[str, Config]]:
        # A Queue is a path plus its configuration; another process opens its own (locks,
        # waiters and caches are per process).
        return (Queue.from_config, (self.path, self.config))

    def __enter__(self) -> Queue:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Release this handle: flush its counters, drop its waiter, stop lease renewals,
        close its descriptors of ``.vsqs``.

        As ``close()`` on a file, a socket or a vsqs 0.3 queue, this touches only this
        object: the queue on disk, and every other handle in this or another process,
        go on as before. The object may be used again afterwards (it re-acquires what
        it needs lazily). ``with Queue(...) as q:`` calls it at the end of the block.
        To end the stream for everybody, use :meth:`shutdown`.
        """
        self._counters.flush()
        with self._lock:
            waiter, self._waiter = self._waiter, None
            renewer = self._renewer
        if waiter is not None:
            waiter.close()  # a thread still waiting on it is woken by its next re-check
        if renewer is not None:
            renewer.close()  # open leases are no longer renewed; they run out
        self.layout.close()

    detach = close
    """An alias of :meth:`close` (its name before 1.0)."""

    def __bool__(self) -> bool:
        # A queue object is always true, empty or not: ``if queue.dead_letter:`` asks
        # whether one is configured, and must not list a directory to answer.
        return True

    def waiter(self) -> MultiWaiter:
        """What a blocked call on this queue waits on (created on first use).

        ``token = queue.waiter().token()`` before looking at the queue, then
        ``wait(token, seconds)``: a change made in between is never missed.
        """
        waiter = self._waiter
        if waiter is None:
            with self._lock:  # one waiter per handle, however many threads ask at once
                waiter = self._waiter
                if waiter is None:
                    config = self.config
                    waiter = self._waiter = make_waiter(
                        self.path, self.clock, config.wait, config.poll_interval
                    )
        return waiter

    @property
    def fifo(self) -> bool:
        """Whether a message group's next message waits while an earlier one is held
        (a stored setting)."""
        return self.config.fifo

    def landing(self, group: str | None) -> tuple[Queue, Capacity | None]:
        """Where a message of *group* moved here (dead-lettered, redriven) lands, and the
        bound it counts against: this directory and its own capacity."""
        return self, self._capacity

    @property
    def claim_misses(self) -> int:
        """Claims this handle lost to another consumer (the message was gone when it
        renamed it): a count that rises means other consumers serve this queue too."""
        return self._consumer.claim_misses

    def refresh(self) -> None:
        """Forget this handle's view of the directory: its next receive lists it afresh
        (after other consumers took many of the messages it knew of). No I/O."""
        self._consumer.invalidate()

    # -- publishing: create and commit --------------------------------------------------

    def publish(
        self,
        data: bytes | bytearray | memoryview,
        *,
        delay: float = 0.0,
        attributes: Mapping[str, str] | None = None,
        dedup_id: str | None = None,
        timeout: float | None = None,
        group: str | None = None,
    ) -> str:
        """Add a message and return its id.

        Atomic: the message becomes visible whole, in one rename, or not at all; no
        existing file is ever replaced. Safe from any number of processes and threads at
        once; one process's (and one handle's) messages get increasing ids, so they are
        received in publish order.

        :param data: the body, bytes-like.
        :param delay: seconds before the message can be received (SQS ``DelaySeconds``);
            ``0`` uses the queue's ``delay`` setting (itself 0 unless configured).
        :param attributes: a small ``str`` to ``str`` mapping returned with the message.
        :param dedup_id: publishing the same ``dedup_id`` again within ``dedup_window``
            returns the first id and adds nothing.
        :param timeout: for a bounded queue: seconds to wait for room (``None`` forever,
            ``0`` not at all).
        :param group: the message group (1 to 128 printable ASCII characters): a group's
            messages keep their publish order (and in a partitioned queue live in one
            partition); returned as ``Message.group``.
        :raises InvalidPayload: *data* is not bytes-like.
        :raises QueueClosed: the queue was shut down.
        :raises QueueFull: the queue stayed full for *timeout* seconds.
        :raises DurabilityError: the directory flush after the commit failed: the message
            is visible (its id is in ``ids``) and may not survive a power loss.

        >>> q.publish(b"hello")  # doctest: +SKIP
        '1732257000123456'
        """
        body = data if type(data) is bytes else _as_view(data)
        ids: list[str] = []
        with self._publishing(ids) as staged:
            if not (
                delay or attributes or dedup_id is not None or self._capacity or group is not None
            ) and (not self.config.delay):
                # The common publish, compared with the bare syscalls: create, commit.
                new, size = self._stage(body, staged=staged, sync=self.durable)
                ids.append(self._commit(new, size))
            else:
                attrs = with_group(validate_attributes(attributes), group)
                delay_us = self._delay_us(delay)
                _check_dedup_id(dedup_id)
                if dedup_id is not None and self._capacity is not None:
                    earlier = self._dedup.published(dedup_id)
                    if earlier is not None:
                        return earlier  # a retry adds nothing: it needs no room
                with self._room(1, timeout):
                    new, size = self._stage(body, staged=staged, sync=self.durable)
                    ids.append(self._commit_keyed(new, size, attrs, delay_us, dedup_id))
        return ids[0]

    def publish_batch(
        self,
        bodies: Iterable[bytes | bytearray | memoryview],
        *,
        delay: float = 0.0,
        attributes: Mapping[str, str] | None = None,
        dedup_ids: Iterable[str | None] | None = None,
        batch_dedup_id: str | None = None,
        timeout: float | None = None,
        group: str | None = None,
    ) -> list[str]:
        """Publish several messages, in order, and return their ids.

        Each message is atomic as in :meth:`publish`; the batch as a whole is not (a crash
        may leave a prefix published), unless it has a ``batch_dedup_id``. Durable
        batches flush all bodies with one filesystem sync (Linux ``syncfs``, where that
        is a proven barrier: ext4, XFS, btrfs, tmpfs; elsewhere, FUSE and NFS included,
        one ``fsync`` per body, several at once) and the directory once, instead of twice
        per message. ``syncfs`` flushes every dirty file of that filesystem, other
        programs' too: on a disk busy with other writers, very small batches may do
        better as single publishes.

        :param bodies: the bodies, bytes-like, in publish order.
        :param dedup_ids: one deduplication id (or ``None``) per body; see :meth:`publish`.
        :param group: the message group of every message of the batch (see :meth:`publish`).
        :param batch_dedup_id: one deduplication id for the whole batch (one marker, not
            one per message): publishing a batch under the same id again within
            ``dedup_window`` returns the first batch's ids and adds nothing. Such a batch
            is all or nothing under crashes: a publisher killed before the batch's
            commit point leaves nothing visible, one killed after it leaves a batch that
            the next publish of that id (or :meth:`clean`) completes. A retry must
            publish the same bodies (the first batch's are the ones kept).
        :raises ValueError: as many ``dedup_ids`` as bodies are needed; ``dedup_ids`` and
            ``batch_dedup_id`` exclude each other; a bounded queue cannot take a batch
            larger than its capacity.
        :raises DurabilityError: a flush failed after some messages became visible (its
            ``ids``); a flush that fails before leaves nothing visible and is raised as is.

        >>> q.publish_batch([b"a", b"b"], batch_dedup_id="job-7:part-0")  # doctest: +SKIP
        ['1732257000123456', '1732257000123457']
        """
        views = [_as_view(body) for body in bodies]
        if not views:
            return []
        attrs = with_group(validate_attributes(attributes), group)
        delay_us = self._delay_us(delay)
        keys = _batch_keys(len(views), dedup_ids, batch_dedup_id)
        durable = self.durable
        earlier = self._published_batch(keys, batch_dedup_id)
        if earlier is not None:
            return earlier  # a retry of a published batch: it needs no room
        with self._room(len(views), timeout):
            if batch_dedup_id is not None:
                return self._publish_chunk(views, attrs, delay_us, batch_dedup_id)
            if len(views) == 1 or not durable:  # each body flushed as it is created
                ids: list[str] = []
                for view, key in zip(views, keys, strict=True):
                    # The directory is flushed once, below, for the whole batch.
                    with self._publishing(ids, flush=False) as staged:
                        new, size = self._stage(view, staged=staged, sync=durable)
                        ids.append(self._commit_keyed(new, size, attrs, delay_us, key))
            else:
                ids = self._publish_synced(views, attrs, delay_us, keys)
                with _fs.flushing_published(ids):
                    if any(keys) and _fs.sync_filesystem(self.path):
                        return ids  # one flush covers every marker and every rename
        if durable:
            with _fs.flushing_published(ids):
                _fs.fsync_dir(self.path)
        return ids

    def _published_batch(self, keys: list[str | None], batch_key: str | None) -> list[str] | None:
        """In a bounded queue, the ids of a batch already published whole under its
        *batch_key* or its *keys* (every message has one) within the window; ``None``
        otherwise, and in an unbounded queue (whose publish finds them without waiting)."""
        dedup = self._dedup
        if self._capacity is None:
            return None
        if batch_key is not None:
            chunk = dedup.find_chunk(batch_key)
            if chunk is None or dedup.pending(chunk):
                return None
            return [message_id for message_id, _ in chunk.entries]
        found = [None if key is None else dedup.published(key) for key in keys]
        return None if None in found else cast("list[str]", found)

    def _delay_us(self, delay: float) -> int:
        """A publish's *delay* (or the queue's own) in µs, checked."""
        return round((_seconds(delay, "delay") or self.config.delay) * 1e6)

    def _room(self, need: int, timeout: float | None) -> AbstractContextManager[None]:
        """Hold room for *need* messages in a bounded queue while they are published
        (waiting up to *timeout* seconds for it); nothing to hold in an unbounded one."""
        if timeout is not None:
            _seconds(timeout, "timeout")
        if self._capacity is None:
            return nullcontext()
        waiter = None if timeout == 0 else self.waiter()
        return self._capacity.room(need, timeout, waiter)

    def _publish_synced(
        self, views: list[memoryview], attrs: dict[str, str], delay_us: int, keys: list[str | None]
    ) -> list[str]:
        """Create every body unsynced, flush the filesystem once, then commit them all.

        On any failure (a full disk, a shutdown) every body created and not yet visible is
        discarded: nothing is left behind as debris.
        """
        names: list[str] = []  # every `.new` made, even by a call that was cut short
        ids: list[str] = []
        # The markers are flushed by the caller's syncfs where that is a barrier, else
        # each as it is written.
        sync_marker = any(keys) and not _fs.syncfs_is_barrier(self.path)
        try:
            sizes = [self._stage(view, staged=names)[1] for view in views]
            _fs.sync_files(self.path, names)
            for new, size, key in zip(names, sizes, keys, strict=True):
                commit = self._commit_keyed
                ids.append(commit(new, size, attrs, delay_us, key, sync_marker=sync_marker))
        except BaseException as exc:
            self._discard_all(names[len(ids) :])  # never visible: left as no debris
            if ids and isinstance(exc, OSError):
                with _fs.flushing_published(ids):
                    raise  # the first messages are visible, unflushed: say which
            raise
        return ids

    def _publish_chunk(
        self, views: list[memoryview], attrs: dict[str, str], delay_us: int, key: str
    ) -> list[str]:
        """Publish a batch under one deduplication marker, all or nothing under crashes.

        Create every body as ``<id>.new`` (flushed once, if durable), then record the
        batch in its marker (the commit point, :meth:`Deduplicator.claim_chunk`), then
        roll it forward (the *commit* arrow of each). A batch already recorded under
        *key* is completed instead, if its writer died, and nothing is created.
        """
        dedup = self._dedup
        earlier = dedup.find_chunk(key)  # a retry of a published batch writes nothing
        if earlier is not None:
            return self._finish_chunk(earlier, dedup.await_chunk(earlier))
        names: list[str] = []  # every `.new` made, even by a call that was cut short
        # Every name of the batch is resolved from one descriptor of the directory: one
        # path walk per batch instead of two per message.
        dir_fd = _fs.open_queue_dir(self.path)
        try:
            try:
                sizes = [self._stage(view, staged=names, dir_fd=dir_fd)[1] for view in views]
                if self.durable:
                    _fs.sync_files(self.path, names)
                self._shutdown.check_open()
                entries = [(name[:-4], size) for name, size in zip(names, sizes, strict=True)]
                chunk, ours = dedup.claim_chunk(key, entries, attrs, delay_us, self.durable)
            except BaseException:
                self._discard_all(names, dir_fd)  # never visible: left as no debris
                raise
            if not ours:
                self._discard_all(names, dir_fd)  # a duplicate: never visible
                return self._finish_chunk(chunk, dedup.await_chunk(chunk), dir_fd)
            # From here on the batch is published: a failure leaves its `.new` files for
            # whoever finishes it (a retry, `clean`), never removes them.
            ids = self._finish_chunk(chunk, entries, dir_fd)
        finally:
            _fs.close(dir_fd)
        if self.durable:
            with _fs.flushing_published(ids):
                _fs.fsync_dir(self.path)
        dedup.sweep_if_due()
        return ids

    def _finish_chunk(
        self, chunk: Chunk, pending: list[tuple[str, int]], dir_fd: int | None = None
    ) -> list[str]:
        """Roll a recorded batch forward: the *commit* arrow of each of its *pending*
        ``.new``; return the batch's ids. *dir_fd*: the queue directory, if open.

        Past the commit point, so no shutdown check: a batch recorded before the queue
        was shut down is published whole. Tolerates another finisher on the same batch.
        """
        meta_of = (lambda: Meta(attributes=dict(chunk.attributes))) if chunk.attributes else None
        done: dict[str, str] = {}
        for message_id, size in pending:
            try:
                final = self._commit(
                    message_id + ".new", size, None if meta_of is None else meta_of(),
                    chunk.delay_us, recorded=True, dir_fd=dir_fd,
                )  # fmt: skip
            except FileNotFoundError:
                continue  # RACE: another finisher (a retry, `clean`) made it ready first
            if final != message_id:
                done[message_id] = final
        ids = [done.get(message_id, message_id) for message_id, _ in chunk.entries]
        if done:
            # A re-id leaves nothing under the recorded name (the `.new` was renamed
            # straight to the fresh id): the record only needs the final ids for the
            # duplicates it answers. A crash before this line tells them the old id.
            self._dedup.repoint_chunk(chunk, ids)
        return ids

    def _commit_keyed(
        self,
        new: str,
        size: int,
        attrs: dict[str, str],
        delay_us: int,
        key: str | None,
        *,
        sync_marker: bool = True,
    ) -> str:
        """Commit a created ``.new``, unless its *key* was published within the window."""
        meta = Meta(attributes=attrs) if attrs else None
        if key is None:
            return self._commit(new, size, meta, delay_us)
        claim = self._dedup.claim(key, new[:-4], durable=self.durable and sync_marker)
        if claim.duplicate_of is not None:
            self._discard(new)  # a duplicate: drop our copy, never visible
            return claim.duplicate_of
        try:
            message_id = self._commit(new, size, meta, delay_us)
        except BaseException:
            self._dedup.release(claim)  # not published: a retry must be free to publish
            raise
        if message_id != new[:-4]:
            self._dedup.repoint(claim, message_id)  # the id collided and was re-drawn
        self._dedup.sweep_if_due()
        return message_id

    # -- the arrows of publishing: create, discard, commit -------------------------------

    def _stage(
        self,
        body: bytes | memoryview | Callable[[int], int] | _ingest.Linked,
        *,
        staged: list[str],
        sync: bool = False,
        dir_fd: int | None = None,
    ) -> tuple[str, int]:
        """The *create* arrow: a fresh ``<id>.new`` holding *body*; its name and size.

        One exclusive create (``O_CREAT | O_EXCL``, never through a symlink), so no
        existing name is ever opened; an id taken meanwhile by another process is drawn
        again. Nothing is visible to consumers yet. On any failure the partial file is
        removed. *body* is the bytes; or a function that writes them to the descriptor it
        is given and returns how many it wrote (a stream, a copy); or a file to link
        (:class:`~vsqs._ingest.Linked`: the ``.new`` is a second name of it, made by one
        ``link``, and no byte is copied). *dir_fd*: the queue directory, if open (names
        are then resolved from it).

        The name is appended to *staged* before the file is made, so that a caller whose
        call was cut short anywhere (Ctrl-C lands between any two Python steps, even
        between this return and the caller's next line) can discard what it staged and
        never leaves an unfinished publish behind.
        """
        file_mode = self._file_mode
        while True:
            new = self._new_id() + ".new"
            where = new if dir_fd is not None else self.layout.message(new)
            # RACE: cut short before the create below, the name is discarded though not
            # ours: only another process that drew the same microsecond could own it.
            staged.append(new)
            try:
                if isinstance(body, _ingest.Linked):
                    _fs.link_noreplace(body.path, where)
                    fd = _fs.open_regular(where)
                elif dir_fd is None:
                    fd = _fs.create_exclusive(where, file_mode or 0o666)
                else:
                    fd = _fs.create_at(where, file_mode or 0o666, dir_fd)
            except FileExistsError:
                staged.pop()  # another process's: never ours to discard
                continue  # RACE: another process drew the same id in the same tick
            except OSError as exc:
                staged.pop()  # nothing was made
                if isinstance(body, _ingest.Linked) and exc.errno == errno.EXDEV:
                    raise _ingest.cross_device(body.path, self.path) from exc
                raise
            try:
                if file_mode is not None:
                    _fs.fchmod(fd, file_mode)
                size = _write_body(fd, body)
                if sync:
                    _fs.fsync(fd, self.path)
            except BaseException:
                _fs.close(fd)
                self._discard(new, dir_fd)  # never leave a partial body behind
                raise
            _fs.close(fd)
            return new, size

    def _publishing(self, ids: list[str], *, flush: bool = True) -> _Publishing:
        """Around one message's *create* and *commit* (``with self._publishing(ids) as
        staged``: the block passes *staged* to :meth:`_stage` and appends the committed id
        to *ids*). Cut short (an error, Ctrl-C), the block's ``<id>.new`` is discarded:
        none is left behind, none was visible. Completed, the directory is flushed if the
        queue is durable and *flush* (a batch flushes once, after its last message): a
        failure of that flush is a :class:`DurabilityError` naming *ids*."""
        return _Publishing(self._discard, ids, self.path if flush and self.durable else None)

    def _discard_all(self, names: list[str], dir_fd: int | None = None) -> None:
        """:meth:`_discard` each of *names* (a publish cut short: none is visible)."""
        for new in names:
            self._discard(new, dir_fd)

    def _discard(self, new: str, dir_fd: int | None = None) -> bool:
        """The *discard* arrow: remove a ``<id>.new`` that never became visible (a failed
        or duplicate publish, a dead publisher's debris). One unlink; ``False`` if the
        name was gone already."""
        if dir_fd is None:
            return _fs.unlink(self.layout.message(new))
        return _fs.unlink_at(new, dir_fd)

    def _commit(
        self,
        new: str,
        size: int,
        meta: Meta | None = None,
        delay_us: int = 0,
        *,
        to: str | None = None,
        recorded: bool = False,
        moved: bool = False,
        dir_fd: int | None = None,
        metas: MetaStore | None = None,
    ) -> str:
        """The *commit* (or *delay*) arrow: make a created ``<id>.new`` ready (or
        delayed, ``<id>.<due>``); return the id it got.

        One no-replace rename: a consumer sees the whole message or nothing, and an id
        taken meanwhile by a message in another state re-ids ours, so nothing is ever
        overwritten. The message's metadata (*meta*: attributes, or a moved message's
        history) is created before the rename, exclusively: an id that already has
        metadata belongs to another message, and is not ours to share.

        *to*: commit under this id (a moved message keeps its place), not the ``.new``'s.
        *recorded*: the ``.new`` belongs to a batch past its commit point (its marker names
        it): no shutdown check, and a failure leaves it for whoever completes the batch.
        *moved*: a copy moved in from another queue (:meth:`_copy_to`): no shutdown check
        and not counted as produced. Otherwise, on failure, the ``.new`` is discarded.
        *metas*: where the metadata goes (a move's, reached through *dir_fd*); this
        queue's own by default.
        """
        source = new if dir_fd is not None else self.layout.message(new)
        message_id = new[:-4] if to is None else to
        try:
            while True:
                if not (recorded or moved):
                    self._shutdown.check_open()
                target: str | None = message_id
                if meta is not None or delay_us:
                    target = self._describe(message_id, meta, delay_us, source, dir_fd, metas=metas)
                if target is not None:
                    try:
                        if dir_fd is None:
                            _fs.rename_noreplace(source, self.layout.message(target))
                        else:
                            _fs.rename_noreplace_at(source, target, dir_fd)
                        break
                    except BaseException as exc:
                        if meta is not None or delay_us:
                            self._undescribe(message_id, meta, delay_us, metas)
                        if not isinstance(exc, FileExistsError):
                            raise
                # RACE: a message with this id exists in another state (a publisher with
                # a skewed clock, a vsqs 0.3 peer): ours gets a fresh id. The `.new` is
                # renamed straight to it, so the file always has its created name or is
                # published.
                message_id = self._new_id()
        except BaseException:
            if not recorded:
                self._discard(new, dir_fd)  # never leave an unfinished publish behind
            raise
        if not moved:
            self._counters.add_produced(size)
        return message_id

    def _describe(
        self,
        message_id: str,
        meta: Meta | None,
        delay_us: int,
        source: str,
        dir_fd: int | None,
        *,
        metas: MetaStore | None = None,
    ) -> str | None:
        """Before a commit: create the message's metadata and, if delayed, its delay
        marker; the name to commit to, or ``None`` if the id is another message's."""
        store = self._meta if metas is None else metas
        if meta is not None:
            meta.inode = _fs.inode(source, dir_fd)  # matches the metadata to this file
            if not store.create(message_id, meta, durable=self.durable):
                return None
        if not delay_us:
            return message_id
        if not store.mark_delayed(message_id):
            # RACE: a peer's delayed message has this id (same tick, another host): its
            # marker is not ours to share or remove.
            if meta is not None:
                store.remove(message_id)  # ours: created just above
            return None
        return f"{message_id}.{format_time(self.clock.time_us() + delay_us, self.precision)}"

    def _undescribe(
        self, message_id: str, meta: Meta | None, delay_us: int, metas: MetaStore | None = None
    ) -> None:
        """Undo :meth:`_describe` after a commit rename that failed."""
        store = self._meta if metas is None else metas
        if meta is not None:
            store.remove(message_id)
        if delay_us:
            store.unmark_delayed(message_id)

    def _new_id(self) -> str:
        """A fresh id: the queue's clock, strictly increasing within this process."""
        return self._ids.next(self.clock.time_us(), self.precision)

    def publish_file(
        self,
        path: str | os.PathLike[str],
        *,
        attributes: Mapping[str, str] | None = None,
        delay: float = 0.0,
        dedup_id: str | None = None,
        group: str | None = None,
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
        :raises QueueClosed: the queue was shut down.
        """
        attrs, delay_us = self._check_extras(attributes, delay, dedup_id, group)
        source = _ingest.Linked.of(os.fspath(path))
        self._shutdown.check_open()  # fail before touching anything
        ids: list[str] = []
        with self._publishing(ids) as staged:  # on failure: `<id>.new`, our link, no more
            new, size = self._stage(source, staged=staged, sync=self.durable)
            ids.append(self._commit_keyed(new, size, attrs, delay_us, dedup_id))
        with _fs.flushing_published(ids):
            # Published: now drop the original name. A crash before this leaves the file
            # in both places, one inode (at least once, never lost).
            _ingest.unlink_source(source, durable=self.durable)
        return ids[0]

    def publish_stream(
        self,
        readable: object,
        *,
        attributes: Mapping[str, str] | None = None,
        delay: float = 0.0,
        dedup_id: str | None = None,
        group: str | None = None,
        chunk_size: int = _ingest.DEFAULT_CHUNK,
    ) -> str:
        """Copy a binary file object into one message, in chunks of bounded memory.

        Atomic like :meth:`publish`: the body is written to ``<id>.new`` and becomes
        visible whole, in one rename. Memory use is one *chunk_size* buffer, whatever
        the payload size.

        :param readable: has ``readinto(buffer)`` or ``read(n)`` returning bytes.
        :raises InvalidPayload: the stream returns text.
        """
        attrs, delay_us = self._check_extras(attributes, delay, dedup_id, group)
        copy = _ingest.stream_writer(readable, chunk_size)
        self._shutdown.check_open()
        ids: list[str] = []
        with self._publishing(ids) as staged:
            new, size = self._stage(copy, staged=staged, sync=self.durable)
            ids.append(self._commit_keyed(new, size, attrs, delay_us, dedup_id))
        return ids[0]

    def _check_extras(
        self,
        attributes: Mapping[str, str] | None,
        delay: float,
        dedup_id: str | None,
        group: str | None = None,
    ) -> tuple[dict[str, str], int]:
        if self._capacity is not None:
            raise ValueError("publish_file and publish_stream do not support bounded queues")
        _check_dedup_id(dedup_id)
        return with_group(validate_attributes(attributes), group), self._delay_us(delay)

    # -- shutdown -----------------------------------------------------------------------

    @property
    def is_shutdown(self) -> bool:
        """Whether the queue was shut down, by any process (see :meth:`shutdown`)."""
        return self._shutdown.is_shut_down()

    def shutdown(self) -> None:
        """End the stream for every process: refuse further publishes; consumers drain.

        Like Python 3.13's :meth:`queue.Queue.shutdown`: once shut down, :meth:`publish`
        raises :class:`~vsqs.QueueClosed` in every process and host that shares the
        directory, and consumers receive what is left, then :class:`~vsqs.QueueDrained`
        (``consume()`` stops). Persistent: one exclusive create of ``.vsqs/closed``,
        which records when the queue was shut down. Idempotent: shutting down a queue
        that is already shut down does nothing. A queue cannot be reopened by vsqs; to
        reuse the directory, remove ``.vsqs/closed`` by hand once every consumer has
        stopped, or publish to a new queue.

        This is not :meth:`close`, which only releases this handle.
        """
        if self._shutdown.mark(durable=self.durable):
            self.layout.poke()  # wake consumers blocked in this and other processes

    def _is_drained(self) -> bool:
        """Whether the queue is shut down and provably empty (see ``_shutdown``)."""
        return self._shutdown.is_drained()

    # -- receiving: the claim arrow -----------------------------------------------------

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
        :raises QueueDrained: the queue is shut down and empty.
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

        :raises QueueDrained: the queue is shut down and empty.
        """
        batch_size(max_messages)
        vt_us = self._lease_us(visibility_timeout)
        if timeout == 0:  # the non-blocking fast path
            got = self._claim(max_messages, vt_us)
            if not got and self._is_drained():
                raise QueueDrained(self.path)
            return got
        clock = self.clock
        deadline = None if timeout is None else clock.monotonic() + _seconds(timeout, "timeout")
        waiter = self.waiter()
        made_ready: list[int] | None = None
        token = waiter.token()
        while True:
            got = self._claim(max_messages, vt_us, made_ready)
            if got:
                return got
            if self._is_drained():
                raise QueueDrained(self.path)
            now = clock.monotonic()
            if deadline is not None and now >= deadline:
                return []
            if not self._meta.possible:
                # Look for metadata now, after the token and before sleeping, not on the
                # wake-up: its directory made later is announced among the names.
                self._meta.refresh()
            # The names made ready since the look that found nothing, if the waiter saw
            # them all: the next claim tries them before listing the directory again.
            # RACE: another thread of this process may read the events at any moment; the
            # waiter takes the next token and the names under one lock, so every event the
            # token counts is in the names, and any later one wakes the next wait.
            token, made_ready = waiter.wait_ready(token, self._pause(now, deadline))

    def _lease_us(self, visibility_timeout: float | None) -> int:
        """A receive's lease in µs: its own *visibility_timeout* (checked), or the queue's."""
        if visibility_timeout is None:
            return self._vt_us
        return round(_seconds(visibility_timeout, "visibility_timeout") * 1e6)

    def try_receive(
        self, max_messages: int = 1, *, visibility_timeout: float | None = None
    ) -> list[Message]:
        """Claim up to *max_messages* without waiting, as :meth:`receive_batch` with
        ``timeout=0``, but stop at the first race lost to another consumer (where a
        receive moves on to the next message): a look at a queue that others may be
        serving, which takes what nobody else is taking and little time where others
        are. Each claim is atomic, oldest first.

        :raises QueueDrained: the queue is shut down and empty.
        """
        batch_size(max_messages)
        vt_us = self._lease_us(visibility_timeout)
        got = self._claim(max_messages, vt_us, looking=True)
        if not got and self._is_drained():
            raise QueueDrained(self.path)
        return got

    def next_look(self, deadline: float | None = None) -> float:
        """Seconds until something this handle knows of may change the queue without a
        file event: the next lease or delay it knows to end, the end of a shutdown's
        grace, or *deadline* (on the queue's ``clock.monotonic()``), whichever is first.

        For event loops that wait on the directory themselves (:mod:`vsqs.aio`): wait
        for a file event or this long, then look again. No I/O.
        """
        return self._pause(self.clock.monotonic(), deadline)

    def _pause(self, now: float, deadline: float | None) -> float:
        """How long a blocked receive may wait before something it knows of changes."""
        pause = math.inf if deadline is None else deadline - now
        expiry = self._consumer.next_expiry()
        if expiry is not None:
            pause = min(pause, max(0.0, (expiry - self.clock.time_us()) / 1e6) + 0.0005)
        grace_ends = self._shutdown.grace_ends
        if grace_ends is not None:  # shut down: look again when the grace ends
            pause = min(pause, max(0.0, grace_ends - now) + 0.001)
        if self._claim_missed:  # another's claim step ends soon: no file event says when
            pause = min(pause, CLAIM_RETRY)
        return pause

    def consume(
        self, *, visibility_timeout: float | None = None, timeout: float | None = None
    ) -> Iterator[Message]:
        """Yield messages as they come; stop when the queue is shut down and drained.

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

    def _claim(
        self,
        limit: int,
        vt_us: int,
        made_ready: list[int] | None = None,
        *,
        looking: bool = False,
    ) -> list[Message]:
        """Claim up to *limit* messages, oldest first (each by the *claim* arrow).

        Takes the oldest candidate this handle knows of; a lost race (the file is gone)
        moves on to the next one, never further: each consumer claims in id order.
        *looking* (a look at a directory other than the one a consumer of several
        claims from): give up at the first lost race instead, which shows that another
        consumer serves this directory, rather than walk past every name taken since
        this handle listed it (a failed rename each).

        *made_ready* (consumed) are the messages made ready since a look that found
        nothing ready, as the waiter saw them (packed ids, and announcements:
        :meth:`vsqs._waiters.Waiter.wait_ready`): then they are every message that can be
        ready, so claiming them oldest first, before listing again, is FIFO. That saves a
        listing on every wake-up of a blocked receive.
        """
        if self.config.fifo:
            return self._claim_in_flight_one(limit, vt_us)
        clock = self.clock
        consumer = self._consumer
        now_us = clock.time_us()
        if consumer.lease_due(now_us):  # return the leases known to have ended first
            outcomes = [self._return(name) for name in consumer.due(now_us)]
            consumer.put_back(ready for ready in outcomes if not isinstance(ready, Gone))
        expiry = now_us + vt_us
        suffix = "." + format_time(expiry, self.precision)
        got: list[Message] = []
        listed = relisted = False
        named: list[int] | None = None  # made ready, newest first, when the view is empty
        # Woken with the names made ready (none: the events were this handle's own claim
        # and delete, or a spurious wake), they stand for a listing; with none, only while
        # the view is fresh (a dead consumer's ended lease shows only in a listing).
        if (
            made_ready is not None
            and self.retention is None
            and (made_ready or not consumer.stale(clock.monotonic()))
        ):
            picked = consumer.named(made_ready)
            if picked is not None:
                if made_ready and min(made_ready) < 0 and not self._meta.possible:
                    # An announcement: metadata may exist now. Its records are written
                    # before their messages become ready, so looking after the event, as a
                    # listing would, gives a first message its attributes. Without one,
                    # the look before the wait stands (receive_batch).
                    self._meta.refresh()
                named = picked
                listed = True  # as good as a listing: nothing else can be ready
        if not listed and consumer.stale(clock.monotonic()):
            self._relist(now_us)
            listed = True
        given_up = False
        while len(got) < limit and not given_up:
            code = named.pop() if named else consumer.take()
            if code is None:
                # One listing per call, or two when the first held messages back: the
                # second one confirms them (see Consumer.load).
                if listed and (relisted or not consumer.deferred()):
                    break
                relisted = listed
                self._relist(now_us)
                listed = True
                continue
            message_id = decode_ready(code)
            receipt = message_id + suffix
            if not self._claim_one(message_id, receipt):
                consumer.miss()  # never skip ahead, which would break FIFO
                given_up = looking
                continue
            message = self._open_claimed(message_id, receipt, code, expiry)
            if message is not None:
                got.append(message)
        if named:  # more were made ready than asked for: keep them for next time
            consumer.put_back(named)
        return got

    def _claim_in_flight_one(self, limit: int, vt_us: int) -> list[Message]:
        """``fifo=True``: claim up to *limit*, oldest first, one group in flight at a time.

        Under the directory's claim lock (across processes and hosts that share
        ``flock``, and this handle's threads), held for this step only, never for a
        lease: claim in id order every ready message whose group has nothing held (see
        :mod:`vsqs._groups`: a group with a live lease waits for it to be deleted or to
        end; a delayed message holds back only its group's later messages). So a group
        is delivered in order, its next message only once the earlier one is done with,
        and unrelated groups never wait for each other; a batch may hold several
        messages of one group, in order.

        What it claims from is the handle's last listing, kept between steps with this
        handle's own claims and deletes applied (O(batch) a step at any depth). It lists
        afresh (expired leases come back first, with their old ids) when that listing
        is stale or was invalidated (another transition of this handle, a lost claim),
        when a held or delayed name in it has reached its end, when it has nothing left
        to offer, and on every step with retention: :mod:`vsqs._groups` says why a
        stale listing never delivers out of order.

        The lock is waited for at most :data:`CLAIM_WAIT` seconds (its holder may be
        stopped): then nothing is claimed, and a blocked receive looks again within
        :data:`CLAIM_RETRY` seconds, until its own timeout.
        """
        lock = self._claim_lock
        if not lock.acquire(CLAIM_WAIT):
            # RACE: another process (or thread) is in its claim step, or stopped in it.
            self._claim_missed = True
            return []
        self._claim_missed = False
        consumer, held = self._consumer, self._held
        kept = False  # whether the listing may serve the next step (not after a raise)
        try:
            now_us = self.clock.time_us()
            listed = (
                self.retention is not None
                or consumer.stale(self.clock.monotonic())
                or held.due(now_us)
            )
            gate = self._fifo_gate(now_us, relist=listed)
            expiry = now_us + vt_us
            suffix = "." + format_time(expiry, self.precision)
            got: list[Message] = []
            skipped: list[int] = []  # its group held: offered again by the next step
            relisted = lost = False
            while len(got) < limit:
                code = consumer.take()
                if code is None:
                    # Nothing left to offer: list, and once more when the listing held
                    # messages back as listed while it ran (the second one confirms them).
                    if listed and (relisted or not consumer.deferred()):
                        break
                    relisted = listed
                    gate = self._fifo_gate(now_us, relist=True)
                    skipped = []  # the listing offers them again
                    listed = True
                    continue
                message_id = decode_ready(code)
                group = gate.admits(code, message_id)
                if group is None:
                    skipped.append(code)  # its group has a message held before it
                    continue
                if not self._claim_one(message_id, message_id + suffix):
                    # RACE: another consumer (process, host, a vsqs 0.3 peer that ignores
                    # the lock, a purge) took it since our listing: its group may be held
                    # now, which only a new listing shows.
                    gate.close(group)
                    lost = True
                    continue
                held.add(message_id + suffix, expiry)
                message = self._open_claimed(message_id, message_id + suffix, code, expiry)
                if message is None:
                    lost = True  # RACE: a peer requeued or deleted it at once
                else:
                    got.append(message)
            consumer.put_front(skipped)
            kept = not lost
        finally:
            if not kept:
                consumer.invalidate()  # the next step lists again, under the lock
            lock.release()
        return got

    def _fifo_gate(self, now_us: int, *, relist: bool) -> Gate:
        """``fifo=True``, under the claim lock: the gate of the kept listing (listed
        afresh first if *relist*), with this handle's claims and deletes since."""
        if relist:
            self._relist(now_us)
        return self._groups.gate(*self._held.snapshot())

    def _claim_one(self, message_id: str, receipt: str) -> bool:
        """The *claim* arrow: ``<id>`` to ``<id>.<expiry>`` (*receipt*), one no-replace
        rename; ``False`` if the message was not there to take."""
        message = self.layout.message
        try:
            _fs.rename_noreplace(message(message_id), message(receipt))
        except FileNotFoundError:
            # RACE: another consumer claimed it first, or it was deleted or purged.
            return False
        except FileExistsError:
            return False  # RACE: a same-id message was claimed into the same tick by a peer
        return True

    def _open_claimed(
        self, message_id: str, receipt: str, code: int, expiry: int
    ) -> Message | None:
        """Read a message this handle just claimed (held as *receipt*); remember its lease."""
        try:
            body, info = _fs.read_message(self.layout.message(receipt))
        except FileNotFoundError:
            return None  # RACE: a peer whose clock runs ahead already requeued or deleted it
        except OSError as exc:
            # We cannot read what we claimed: put the name back as it was.
            self._make_ready(receipt, message_id, None)
            if exc.errno in _NOT_A_MESSAGE:
                self._consumer.ignore(message_id)  # planted; never look at it again
                return None
            raise  # a real fault (EMFILE, EIO...): the caller must hear of it
        self._consumer.claimed(message_id, receipt, expiry)
        sent_at = (code >> 1) / 1e6
        meta = self._meta.read(message_id) if self._meta.possible else None
        # Not another message's, with our id (the inode is looked up only then).
        if meta is not None and meta.owned_by(stable_inode(info)):
            attributes, group = split_group(meta.attributes or NO_ATTRIBUTES)
            return received(
                message_id, body, receipt, expiry / 1e6, meta.receive_count + 1, attributes,
                sent_at, self.path, group,
            )  # fmt: skip
        return received(
            message_id, body, receipt, expiry / 1e6, 1, NO_ATTRIBUTES, sent_at, self.path
        )

    def _relist(self, now_us: int) -> list[tuple[int, str]]:
        """List the directory, return expired leases, apply retention, reload the view;
        the live leases and delays (``(end, name)``, of any consumer)."""
        clock = self.clock
        started = clock.monotonic()
        started_us = clock.time_us()
        listing = _scan.scan(self.path)
        consumer = self._consumer
        codes = consumer.without_ignored(listing.ready)
        waiting: list[tuple[int, str]] = []
        listed = len(codes)  # not len(listing.ready): codes may be that very list
        for expires, name in listing.held:
            if expires <= now_us:
                code = self._return(name)
                if not isinstance(code, Gone):
                    codes.append(code)
            else:
                waiting.append((expires, name))
        if len(codes) != listed:
            codes.sort()
        if self.retention is not None:
            codes = self._apply_retention(codes, now_us)
        # Metadata is written before the message it describes becomes visible, so a check
        # made after the listing (and after our own requeues) covers every listed message.
        self._meta.refresh()
        consumer.load(codes, waiting, started_us, clock.monotonic(), clock.monotonic() - started)
        if self.config.fifo:  # only ever under the claim lock (see _claim_in_flight_one)
            self._held.load(waiting, self._meta.delayed_ids() if waiting else set())
        return waiting

    # -- leases: extend, release, delete ------------------------------------------------

    def delete(self, message: Message | str) -> bool:
        """Delete a received message; return whether this call deleted it.

        Given a :class:`Message` or its receipt, it unlinks exactly the held file: O(1),
        from any process. It returns ``False``, and deletes nothing, when the receipt no
        longer names a file: the message was already deleted (deleting twice is not an
        error), or its lease expired and it went back to the queue or to another consumer,
        whose copy is never touched. Given a bare id, it deletes the message in whatever
        state it is, as the design describes (a listing unless this object received it).
        Of several threads or processes deleting one message at once, exactly one gets
        ``True``.

        A receipt that this object has since extended with :meth:`change_visibility`
        (a heartbeat) still deletes the message: this object issued both receipts, so the
        lease is still the caller's, and the current receipt is used. A superseded
        receipt from another object (or process) deletes nothing.

        :raises InvalidId: *message* is not an id or receipt of this queue.
        """
        consumer = self._consumer
        if (
            isinstance(message, Message)
            and message.queue == self.path
            and consumer.settle(message.id, message.receipt)
        ):
            # The fast path: this object issued the receipt, so it is one of ours (a
            # hand-made Message with a forged receipt takes the validating path below),
            # and it is forgotten now: its lease ends here, deleted or found gone.
            if not self._unlink_message(message.receipt):
                return False
            self._held.discard(message.receipt)  # fifo=True: its group may go on
            self._counters.add_consumed(len(message.body))
            return True
        receipt = consumer.current(self._receipt_of(message))
        size = len(message.body) if isinstance(message, Message) else 0
        if "." not in receipt:
            receipt = self._locate(receipt)
            if not receipt:
                return False
        if not self._unlink_message(receipt):
            return False
        self._held.discard(receipt)  # fifo=True: its group may go on
        consumer.ended(id_of(receipt), receipt)
        self._counters.add_consumed(size)
        return True

    def _unlink_message(self, name: str) -> bool:
        """The *delete* arrow: unlink the message file *name* (held, or ready), then its
        metadata; ``False`` if the file was gone.

        One unlink decides: of concurrent deleters, exactly one sees ``True``. The
        metadata goes only if it is this file's: a message published under the id of one
        that was held (a skewed publisher, a vsqs 0.3 peer) keeps its own.
        """
        if not self._meta.possible:
            return _fs.unlink(self.layout.message(name))
        message_id = id_of(name)
        meta = self._meta.read(message_id)
        inode = 0
        if meta is not None and meta.inode:
            try:
                inode = _fs.inode(self.layout.message(name))
            except FileNotFoundError:
                return False  # RACE: deleted, requeued or moved by another process first
        if not _fs.unlink(self.layout.message(name)):
            return False
        if meta is not None and meta.owned_by(inode or meta.inode):
            self._meta.remove(message_id)
        return True

    def delete_batch(self, messages: Iterable[Message | str]) -> int:
        """Delete several messages (each as :meth:`delete`); return how many were deleted."""
        return sum(self.delete(message) for message in messages)

    def change_visibility(self, message: Message | str, seconds: float) -> Message:
        """Extend a lease (a heartbeat) or, with ``0``, release the message now.

        Atomic: one rename of the held file. Returns the message with its new receipt
        and expiry: ``<id>.<expiry>.<delivery>``, where *delivery* is the expiry of
        the receive that began the lease (kept by every extension), so that a holder
        of an older receipt can tell this lease from a later delivery of the message.
        On this object, the receipt it replaced keeps working (it stands for the same
        lease); elsewhere only the new one does, so pass the returned message on. A
        release that ends the message's last allowed receive (``max_receives``) moves
        it to the dead-letter queue instead; the returned message then names that
        queue in ``queue``. Of several threads or processes changing one lease at once,
        each rename either succeeds or raises :class:`~vsqs.LeaseLost`.

        :raises LeaseLost: the lease already ended; its ``reason`` says whether it was
            ``"deleted"``, ``"expired"`` (and returned to the queue), or ``"superseded"``
            (extended through another object, whose newer receipt is ``current``).
        """
        duration = _seconds(seconds, "seconds")
        receipt = self._consumer.current(self._receipt_of(message))
        message_id = id_of(receipt)
        if message_id == receipt:  # no dot: a bare id
            raise InvalidId(receipt, "a receipt (id.expiry) is needed, not a bare id")
        if not isinstance(message, Message):
            message = Message(
                id=message_id, body=b"", receipt=receipt, expires_at=0.0, queue=self.path
            )
        if duration == 0:  # release: a hold, then ready (as a requeue, counting the receive)
            now_us = self.clock.time_us()
            outcome = self._return(receipt, released=True)
            if outcome is Gone.LOST:
                raise self._lease_lost(receipt)
            self._consumer.ended(message_id, receipt)
            if outcome is Gone.DEAD_LETTERED:
                # This release was its last allowed receive: it went to the dead-letter
                # queue, which is not a lost lease.
                assert self.dead_letter is not None
                return replace(message, receipt=message_id, queue=self.dead_letter.path)
            self._consumer.invalidate()  # the released message should be served again soon
            return replace(message, receipt=message_id, expires_at=now_us / 1e6)
        # The extended lease carries its delivery (the first receipt's expiry) as its
        # fraction: whoever holds an older receipt of this delivery can tell it from a
        # later delivery of the message, with no record to write or read.
        moved = self._extend_lease(
            receipt, self.clock.time_us() + round(duration * 1e6), tag="." + delivery_of(receipt)
        )
        if moved is None:
            raise self._lease_lost(receipt)
        target, expiry = moved
        if target != receipt:
            self._consumer.extended(message_id, receipt, target, expiry)
        if self.config.fifo:
            self._consumer.invalidate()  # the held names changed: list before claiming
        return replace(message, receipt=target, expires_at=expiry / 1e6)

    def _extend_lease(self, name: str, expiry_us: int, *, tag: str = "") -> tuple[str, int] | None:
        """The *extend* arrow: rename the held file *name* to ``<id>.<expiry><tag>``;
        the new name and the expiry it got, or ``None`` if *name* was gone.

        One no-replace rename, so of concurrent extenders of one lease exactly one wins
        (the others find the name gone). A name taken by a same-id lease of a clock-skewed
        peer moves the expiry on by one tick. Used for heartbeats, a mover's claim on a
        long copy (:class:`_Claim`), and, with the ``.0`` *tag*, the requeue hold that
        takes an ended lease out of everybody's reach (:meth:`_return`).
        """
        message_id = id_of(name)
        tick = 1000 if self._ms else 1
        while True:
            target = f"{message_id}.{format_time(expiry_us, self.precision)}{tag}"
            if target == name and tag != HOLD_TAG:
                return name, expiry_us  # already there: nothing to rename
            try:
                _fs.rename_noreplace(self.layout.message(name), self.layout.message(target))
            except FileNotFoundError:
                return None  # RACE: requeued, deleted or moved by another process first
            except FileExistsError:
                expiry_us += tick  # RACE: a same-id lease with this expiry (a skewed peer)
                continue
            return target, expiry_us

    def _lease_lost(self, receipt: str) -> LeaseLost:
        """A :class:`LeaseLost` for *receipt* that says what became of the lease.

        A diagnosis after the fact, from one listing: a message held under another name
        was either extended through another handle (its lease lives on, and carries
        our delivery: :func:`~vsqs._ids.delivery_of`) or returned and received again
        (a later delivery, which never carries ours). Positive evidence, in the name
        itself: no record is needed, so a requeue that could not record its receive
        (a full disk, a vsqs 0.3 peer) is never taken for an extension.
        """
        message_id = id_of(receipt)
        held = _scan.held_names_for(self.path, message_id)
        if held:
            ours = delivery_of(receipt)
            for name in held:
                if delivery_of(name) == ours:
                    return LeaseLost(receipt, reason="superseded", current=name)
            return LeaseLost(receipt, reason="expired")
        if _fs.exists(self.layout.message(message_id)):
            return LeaseLost(receipt, reason="expired")
        return LeaseLost(receipt, reason="deleted")

    def _receipt_of(self, message: Message | str) -> str:
        if isinstance(message, Message):
            if message.queue and message.queue != self.path:
                raise InvalidId(message.receipt, f"the message belongs to {message.queue!r}")
            message = message.receipt  # validated below too: a Message can be made by hand
        return validate_receipt(message)

    def _locate(self, message_id: str) -> str:
        """The current name of a bare id: a lease we hold, a listed lease, or ready."""
        cached = self._consumer.receipt(message_id)
        if cached and _fs.exists(self.layout.message(cached)):
            return cached
        held = _scan.held_names_for(self.path, message_id)
        if held:
            return held[0]
        return message_id if _fs.exists(self.layout.message(message_id)) else ""

    # -- requeue, dead letters, moves ---------------------------------------------------

    def _return(self, held_name: str, *, released: bool = False) -> int | Gone:
        """Requeue (or release) a held or delayed message: a hold, then *ready*.

        A lease that ended undeleted is first taken out of everybody's reach by the
        *extend* arrow to a requeue hold ``<id>.<hold>.0`` that only this process owns;
        the receive is counted in the metadata, tagged with that hold; then the message
        becomes ready (the *ready* arrow), or goes to the dead-letter queue once its
        receives are used up. A delayed publish coming due is made ready at once (no
        receive to count).

        Returns the packed id now ready, or why the message did not come back. Never
        replaces an existing file: a message that took the id meanwhile keeps it, and
        ours gets a fresh id.
        """
        message_id, lease = split_name(held_name)
        if self._meta.is_delayed(message_id):
            code = self._make_ready(held_name, message_id, None)
            if code is not None:
                self._meta.unmark_delayed(message_id)
            return Gone.LOST if code is None else code
        now_us = self.clock.time_us()
        # The ``.0`` fraction (tolerated by the grammar) keeps a hold's name apart from
        # every consumer lease, which vsqs writes without one: a tag is never mistaken.
        taken = self._extend_lease(
            held_name, _history.hold_until(now_us, self._vt_us), tag=HOLD_TAG
        )
        if taken is None:
            return Gone.LOST  # RACE: another process requeued, deleted or dead-lettered it
        held_name = taken[0]
        hold = split_name(held_name)[1]
        # From here on this process alone holds the message.
        inode = _fs.inode(self.layout.message(held_name))
        meta = self._meta.read(message_id) or Meta()
        target = message_id
        if not meta.owned_by(inode):
            # RACE: a publisher with a skewed clock (or a vsqs 0.3 peer) gave a new message
            # our id while we were held; that metadata is the newcomer's. Ours starts
            # afresh, under a fresh id, so neither message's metadata is ever mixed up.
            meta = Meta()
            target = self._new_id()
        meta.inode = inode
        _history.count_ended_lease(
            meta, message_id, lease, hold, released=released, now_us=now_us, vt_us=self._vt_us
        )
        if self.dead_letter is not None and _history.exhausted(meta, self.max_receives):
            try:
                if target == message_id:
                    self._meta.write(message_id, meta, durable=self.durable)
                # Atomic on one filesystem (one rename, after its metadata was written in
                # the dead-letter queue); a crash before it leaves the message in its hold
                # here, dead-lettered again when that ends: never lost, never in both.
                record = self._dead_letter_meta(held_name, meta, reason="max_receives")
                moved = self._transfer(held_name, self.dead_letter, record) is not None
            except OSError as exc:  # QueueFull and UnsafeEntry are OSErrors too
                self._kept_back(exc)  # it stays in its hold: tried again when that ends
                return Gone.LOST
            return Gone.DEAD_LETTERED if moved else Gone.LOST
        self._write_count(target, meta)
        code = self._make_ready(held_name, target, meta)
        return Gone.LOST if code is None else code

    def _kept_back(self, exc: OSError) -> None:
        """A dead-letter move failed with *exc*: say why the message stays held here (to
        be tried again when its hold ends), or raise what is not such a reason.

        A full bounded dead-letter queue (:class:`QueueFull`) is the normal case; one
        swapped for a link (:class:`UnsafeEntry`: never moved through) and a full disk are
        logged once.
        """
        if isinstance(exc, DurabilityError):
            raise exc  # it moved, and the flush after failed: never hidden, never retried
        if isinstance(exc, QueueFull):
            return
        if isinstance(exc, UnsafeEntry):
            report_once(self.path, "cannot dead-letter a message", str(exc))
        elif exc.errno in _NO_SPACE:
            report_once(self.path, "no space to dead-letter a message", str(exc))
        else:
            raise exc

    def _write_count(self, message_id: str, meta: Meta) -> None:
        """Record a receive count; on a full disk, deliver without it (reported once).

        A receive never needs free space: the count of a message requeued while the
        disk is full is lost, not its delivery.
        """
        try:
            self._meta.write(message_id, meta, durable=self.durable)
        except OSError as exc:
            if exc.errno not in _NO_SPACE:
                raise
            report_once(self.path, "no space to record a receive count", str(exc))

    def _make_ready(self, held_name: str, message_id: str, meta: Meta | None) -> int | None:
        """The *ready* arrow: rename the held (or delayed) file *held_name* to
        ``<message_id>``, or to a fresh id if that one is taken; the packed id, or
        ``None`` if the file was gone (another process got there first).

        One no-replace rename, never replacing a message that took the id meanwhile.
        """
        source = self.layout.message(held_name)
        target = message_id
        while True:
            try:
                _fs.rename_noreplace(source, self.layout.message(target))
            except FileNotFoundError:
                return None  # RACE: another consumer requeued, deleted or dead-lettered it
            except FileExistsError:
                if _fs.same_file(source, self.layout.message(target)):
                    # A link-then-unlink rename (NFS) was cut short: both names are one file.
                    _fs.unlink(source)
                    break
                # RACE: a message published with the same id meanwhile (skewed clock, 0.3).
                fresh = self._new_id()
                if meta is not None:
                    self._meta.write(fresh, meta, durable=self.durable)
                    theirs = self._meta.read(target)
                    if theirs is not None and meta.inode and theirs.inode == meta.inode:
                        self._meta.remove(target)  # ours, written under the id we lost
                target = fresh
                continue
            break
        return encode_ready(int(target))

    def _dead_letter_meta(self, held_name: str, meta: Meta, *, reason: str) -> Meta:
        """The metadata a message dead-lettered from here carries: its history, its source
        and why it was moved (no I/O)."""
        return _history.dead_letter_record(
            meta, source=self.path, message_id=id_of(held_name),
            now_us=self.clock.time_us(), reason=reason,
        )  # fmt: skip

    def _hold_back(self, held_name: str, meta: Meta) -> None:
        """Keep a message that its dead-letter queue has no room for out of delivery.

        A requeue hold (the *max_receives* path) simply stays: when it ends, the next
        requeue tries the move again and counts no receive (the hold is the tag in its
        metadata). Any other claim (retention's) is turned into such a hold, tagged.
        """
        message_id = id_of(held_name)
        if is_hold(held_name):
            return
        taken = self._extend_lease(
            held_name, _history.hold_until(self.clock.time_us(), self._vt_us), tag=HOLD_TAG
        )
        if taken is None:
            return  # RACE: its claim ended and another process requeued or deleted it
        meta.lease = split_name(taken[0])[1]
        self._write_count(message_id, meta)

    def _transfer(self, held_name: str, to: MoveTarget, meta: Meta) -> str | None:
        """The *move* arrow (dead-letter, redrive): a held message of this queue into
        *to* (where *to* lands a message of its group: :meth:`landing`), ready, with
        *meta*; its id there.

        The metadata is created (exclusively) in *dest* before the one no-replace rename
        that moves the file, so whoever sees the message there sees its metadata; this
        queue's metadata of it goes after. Returns ``None`` if the file was gone (another
        process moved or deleted it first). Across filesystems (``EXDEV``) it copies
        instead (:meth:`_copy_to`). A bounded *dest* takes the message only if it has room
        (under its capacity lock, as a publish; a move never waits for room).

        :raises QueueFull: *dest* is full: nothing moved.
        """
        landed = to.landing(split_group(meta.attributes)[1])
        dest: Queue = landed[0]
        with self._opened_target(dest, landed[1]) as (into, metas):
            source = self.layout.message(held_name)
            target = id_of(held_name)
            with_meta = meta.to_json() != b"{}"
            try:
                meta.inode = _fs.inode(source)  # a rename keeps it: the metadata matches
            except FileNotFoundError:
                return None  # RACE: another process moved or deleted it first
            while True:
                if with_meta and not metas.create(target, meta, durable=dest.durable):
                    target = dest._new_id()  # the id is taken in *dest*
                    continue
                try:
                    # *source* is absolute: only *target* is resolved in *into*.
                    _fs.rename_noreplace(source, target, into)
                except OSError as exc:
                    if with_meta:
                        metas.remove(target)
                    if isinstance(exc, FileNotFoundError):
                        return None  # RACE: another process moved or deleted it first
                    if isinstance(exc, FileExistsError):
                        target = dest._new_id()  # RACE: a message took that id in *dest*
                        continue
                    if exc.errno != errno.EXDEV:
                        raise
                    copied = self._copy_to(
                        dest, held_name, target, meta if with_meta else None, into=into,
                        metas=metas,
                    )  # fmt: skip
                    if copied is not None:
                        self._meta.remove(id_of(held_name))
                    return copied
                break
            self._meta.remove(id_of(held_name))
            if dest.durable:
                with _fs.flushing_published([target]):  # moved: a failed flush says so
                    _fs.fsync(into, dest.path)
                    _fs.fsync_dir(self.path)
            return target

    @contextmanager
    def _opened_target(
        self, dest: Queue, bound: Capacity | None
    ) -> Iterator[tuple[int, MetaStore]]:
        """Room under *bound* (the target's capacity: a partitioned queue's is its total,
        at its root) for a move into the queue *dest*: a descriptor of *dest*'s
        directory, and *dest*'s metadata reached through it.

        The target's names are opened now, without following a link, before anything is
        written: a target swapped for a symlink after this handle was made raises
        :class:`UnsafeEntry` here, and one swapped later gets everything of the move
        (the capacity lock and counter, the metadata, the message) through the
        descriptors, so nothing lands where the link points.

        :raises QueueFull: *bound* is full.
        """
        into = dest.layout.open_queue()
        bound_fd = into
        try:
            bound_layout = dest.layout if bound is None else bound.layout
            if bound_layout.path != dest.layout.path:  # a partitioned queue's root
                bound_fd = bound_layout.open_queue()
            pinned, layout = _pinned(bound_layout, bound_fd), _pinned(dest.layout, into)
            try:
                with room_for_move(bound, pinned):
                    yield into, MetaStore(layout)
            finally:
                layout.close()
                pinned.close()
        finally:
            if bound_fd != into:
                _fs.close(bound_fd)
            _fs.close(into)

    def _copy_to(
        self,
        dest: Queue,
        held_name: str,
        target: str,
        meta: Meta | None,
        *,
        into: int,
        metas: MetaStore,
    ) -> str | None:
        """The *copy* arrow, a move across filesystems: *create* a copy in *dest*,
        *commit* it there, *delete* the original here; *dest*'s names are resolved
        from its open directory *into*, its metadata through *metas* (see
        :meth:`_opened_target`).

        Exactly once without a crash: the copy is created in *dest* while this process
        keeps renewing its claim on the source (so no requeue can hand the message to
        another mover however long the copy takes); the claim is renewed once more
        before the copy becomes visible, and the source is deleted right after. If the
        claim is lost anyway (this process stalled longer than a lease), the copy is
        discarded before anyone sees it, or, if it was already visible, reported. A
        crash between the copy's commit and the delete leaves the message in both
        queues (at least once, never lost). Returns the id in *dest*, or ``None`` if
        another process took the message first.
        """
        claim = _Claim(
            held_name,
            self._extend_lease,
            self.clock.time_us,
            max(self._vt_us, _history.REQUEUE_HOLD_US),
        )
        try:
            source = _fs.open_regular(self.layout.message(held_name))
        except FileNotFoundError:
            return None  # RACE: another process moved or deleted it first
        except OSError as exc:
            if exc.errno not in _NOT_A_MESSAGE:
                raise
            return None  # planted (a link, a FIFO): never copied; it is not a message
        staged: list[str] = []
        try:
            try:
                new, size = dest._stage(
                    lambda out: _fs.copy_fd(source, out, claim.renew),
                    staged=staged,
                    sync=dest.durable,
                    dir_fd=into,
                )
            finally:
                _fs.close(source)
            if not claim.renew(force=True):
                dest._discard_all(staged, into)  # withdrawn before anyone could see it
                return None
            # A copy is a new inode: _commit matches the metadata to it.
            target = dest._commit(new, size, meta, to=target, moved=True, dir_fd=into, metas=metas)
        except _ClaimLost:
            dest._discard_all(staged, into)
            return None  # RACE: another process took the message while we copied
        except BaseException:
            dest._discard_all(staged, into)  # cut short: the copy is never left half made
            if claim.name != held_name:
                # The caller keeps the message held under the name it gave (a requeue
                # hold its metadata names, retention's claim to turn into one): renewals
                # are undone, or its receive would be counted again when that ends.
                # RACE: a stall let another take it (gone), or requeue it (name taken):
                # it comes back or is served by that consumer, as any lease.
                with suppress(FileNotFoundError, FileExistsError):
                    _fs.rename_noreplace(
                        self.layout.message(claim.name), self.layout.message(held_name)
                    )
            raise
        if not self._unlink_message(claim.name):
            # RACE: the claim ran out between the renewal and now (a stall longer than
            # a lease): the other copy is whoever took it. Ours is visible already.
            report_once(self.path, "a moved message was taken back during its move", target)
        if dest.durable:
            _fs.fsync(into, dest.path)
            _fs.fsync_dir(self.path)
        return target

    def _claim_for_move(self, message_id: str) -> str | None:
        """Claim a ready message for a move (retention, redrive); its held name or None."""
        lease_end = format_time(self.clock.time_us() + self._vt_us, self.precision)
        held = f"{message_id}.{lease_end}"
        # RACE: a consumer may claim it first; it is theirs now.
        return held if self._claim_one(message_id, held) else None

    def _apply_retention(self, codes: list[int], now_us: int) -> list[int]:
        """Drop (or dead-letter) the ready messages older than the retention period.

        Each is claimed first, so a consumer that got it a moment earlier keeps it.
        """
        assert self.retention is not None
        split = _history.expired_split(codes, now_us, self.retention)
        if split:
            # Never judge by a clock that runs ahead of the filesystem's own (the time of
            # a file made now): a consumer whose clock is ahead must not drop fresh
            # messages. One probe, only when some message looks expired.
            now_us = min(now_us, self.layout.now_us())
            split = _history.expired_split(codes, now_us, self.retention)
        for code in codes[:split]:
            message_id = decode_ready(code)
            held = self._claim_for_move(message_id)
            if held is None:
                continue  # RACE: a consumer claimed it first; it is theirs now
            if self.dead_letter is not None:
                meta = self._meta.read(message_id) or Meta()
                record = self._dead_letter_meta(held, meta, reason="retention")
                try:
                    self._transfer(held, self.dead_letter, record)
                except OSError as exc:
                    self._kept_back(exc)
                    self._hold_back(held, meta)  # held here, tried again when that ends
            else:
                self._unlink_message(held)
        return codes[split:]

    # -- looking and housekeeping -------------------------------------------------------

    def size(self) -> int:
        """Ready plus held messages (what vsqs 0.3's ``size()`` counts); one listing."""
        listing = _scan.scan(self.path)
        return len(listing.ready) + len(listing.held)

    def __len__(self) -> int:
        return self.size()

    def counts(self) -> Counts:
        """Messages by state, from one listing (a snapshot)."""
        return self._counts(_scan.scan(self.path))

    def _counts(self, listing: _scan.Listing) -> Counts:
        delayed_ids = self._meta.delayed_ids() if listing.held else set()
        delayed = sum(1 for _, name in listing.held if id_of(name) in delayed_ids)
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
                body = _fs.read_regular(self.layout.message(message_id))
            except OSError:
                continue  # RACE: claimed or deleted since the listing (or not a regular file)
            meta = self._meta.read(message_id) if self._meta.possible else None
            attributes, group = split_group(meta.attributes if meta else NO_ATTRIBUTES)
            yield Message(
                id=message_id,
                body=body,
                receipt=message_id,
                expires_at=0.0,
                receive_count=0 if meta is None else meta.receive_count,
                attributes=attributes,
                sent_at=(code >> 1) / 1e6,
                queue=self.path,
                group=group,
            )

    __iter__ = browse

    def peek(self) -> Message | None:
        """The oldest ready message, without claiming it (``None`` if none is ready)."""
        return next(self.browse(), None)

    def check(self, *, allow_new: bool = False) -> list[str]:
        """What vsqs should not have left in the directory, one line per problem (after
        the directory's path); ``[]`` for a consistent queue
        (:func:`vsqs.testing.assert_consistent` asserts it).

        A problem is a ``.new`` file (a publish that never finished; one still being
        written is one too, unless *allow_new*), an entry named by the grammar that is
        not a regular file, a ``.vsqs`` that is not a directory, metadata of a message
        that no longer exists, or a temporary file left in the metadata. Files that are
        not vsqs's (the user's) are none. Reads only (one listing of the directory and
        one of the metadata), changes nothing: a snapshot, exact only where no other
        process publishes, receives or deletes meanwhile.

        >>> import tempfile, vsqs
        >>> vsqs.PlainQueue(tempfile.mkdtemp()).check()
        []
        """
        problems: list[str] = []
        ids: set[str] = set()
        for entry in _fs.scandir(self.path):
            name = entry.name
            if name == DIR:
                if not entry.is_dir(follow_symlinks=False):
                    problems.append(f"{name} is not a directory")
                continue
            parsed = parse_name(name)
            if parsed is None:
                continue  # foreign files are the user's, not ours
            ids.add(parsed.id)
            if parsed.state is _State.NEW and not allow_new:
                problems.append(f"orphaned {name} (a publish that never finished)")
            if not entry.is_file(follow_symlinks=False):
                problems.append(f"{name} is not a regular file")
        try:
            meta_names = self.layout.names(META)
        except UnsafeEntry as exc:  # never followed: a planted .vsqs (said above) or meta
            problems.append(f"{exc.filename} is not a directory")
            meta_names = []
        for name in meta_names:
            if not name.startswith(".") and name not in ids:
                problems.append(f"metadata of {name}, which no longer exists")
            elif name.startswith(TMP):
                problems.append(f"temporary file {name} left in metadata")
        return [f"{self.path}: {problem}" for problem in problems]

    def stats(self) -> Stats:
        """Counters (produced and consumed, cross-process) and the current counts.

        One listing (whatever the depth, no body is read) and one read of each process's
        counter file; a snapshot.
        """
        from ._reports import Stats  # noqa: PLC0415 -- a report's dataclass, made when asked

        self._counters.flush()
        totals = read_totals(self.layout)
        listing = _scan.scan(self.path)
        counts = self._counts(listing)
        oldest = listing.ready[0] if listing.ready else None
        return Stats(
            produced_messages=totals["produced_messages"],
            produced_bytes=totals["produced_bytes"],
            consumed_messages=totals["consumed_messages"],
            consumed_bytes=totals["consumed_bytes"],
            ready=counts.ready,
            held=counts.held,
            delayed=counts.delayed,
            new=counts.new,
            oldest_ready_age=None
            if oldest is None
            else max(0.0, (self.clock.time_us() - (oldest >> 1)) / 1e6),
            is_shutdown=self.is_shutdown,
            oldest_ready_id=None if oldest is None else decode_ready(oldest),
            held_back=held_back(listing.held),
        )

    def peek_oldest_key(self, *, known: bool = False) -> int | None:
        """The publish time (µs) of the oldest ready message, from one listing.

        *known*: the oldest this handle knows of instead, without a listing while it
        knows of any: its last listing's (a receive's, or this call's), less what it has
        claimed and skipped since, plus what it put back. It costs nothing at any depth
        but may be out of date: another consumer may have taken that message since (a
        receive then finds the next), and an ended lease of another consumer shows only
        in the next listing. The listing made when the view is used up returns ended
        leases, as a receive's does (``fifo=True``: only if the claim lock is free at
        once; otherwise a plain listing answers). ``fifo=True``: a message passed over
        because its group is in flight is still known, as it is still ready.
        """
        if known:
            code = self._consumer.peek()
            if code is None and self._relist_unless_claiming():
                code = self._consumer.peek()
            elif code is None:
                # RACE: another consumer's claim step holds the fifo claim lock: a plain
                # listing answers (ended leases then return in the next claim step's).
                known = False
            if known:
                return None if code is None else code >> 1
        ready = _scan.scan(self.path).ready
        return (ready[0] >> 1) if ready else None

    def _relist_unless_claiming(self) -> bool:
        """List the directory into the view now (:meth:`_relist`); ``fifo=True`` only
        under the claim lock, taken without waiting, since a fifo listing is loaded with
        its held names or a claim step could pair this view with older ones: ``False``,
        listing nothing, while another consumer holds it."""
        if not self.config.fifo:
            self._relist(self.clock.time_us())
            return True
        if not self._claim_lock.acquire(0):
            return False
        try:
            self._relist(self.clock.time_us())
        finally:
            self._claim_lock.release()
        return True

    def requeue_expired(self) -> int:
        """Return every expired lease to the queue now (consumers also do it as they go)."""
        now_us = self.clock.time_us()
        count = 0
        for expires, name in _scan.scan(self.path).held:
            if expires <= now_us and not isinstance(self._return(name), Gone):
                count += 1
        self._consumer.invalidate()
        return count

    def purge(self) -> int:
        """Delete every ready, held and delayed message; return how many.

        Messages being written (``.new``) are left alone: a concurrent publish is never
        cut short. A message claimed by a consumer during the purge may survive it.
        Entries of the message grammar that are not regular files (a planted directory or
        FIFO) are not messages: they are left alone and logged once.
        """
        listing = _scan.scan(self.path)
        if listing.planted:  # not messages (directories, FIFOs...): never removed, said once
            report_once(self.path, "purge left entries that are not messages", listing.planted[0])
        names = [decode_ready(code) for code in listing.ready] + [n for _, n in listing.held]
        removed = 0
        self._meta.refresh()
        for name in names:
            # RACE: a consumer may get there first (the unlink finds nothing).
            if self._unlink_message(name):
                removed += 1
                self._meta.unmark_delayed(id_of(name))
        self._consumer.invalidate()
        return removed

    def clean(self, older_than: float = 3600.0) -> int:
        """Remove debris older than *older_than* seconds; return how many entries.

        Debris is what crashed processes leave: ``.new`` files of publishers that died
        mid-write (never visible, so nothing is lost), orphaned metadata, expired
        deduplication markers, and pokes and announcements (empty regular files named
        exactly ``.wake-<pid>-<hex>`` or ``.wake-<pid>-<hex>-meta``; nothing else). Young
        ``.new`` files are never touched, nor, whatever *older_than*, one that a
        deduplication marker in force names (its publisher died between marker and rename
        under 30 s ago): a retry then waits for it and publishes, never taking it for a
        published message. With a ``retention``, messages past it are dropped (or
        dead-lettered) too and counted.
        """
        age = _seconds(older_than, "older_than")
        now_us = self.clock.time_us()
        wall_cutoff = now_us / 1e6 - age
        cutoff_us = now_us - round(age * 1e6)
        # Batches whose publisher died past their commit point are completed, not removed;
        # those of a live publisher (still renaming) keep their `.new` files.
        spared: set[str] = set()
        for chunk, pending, stale in self._dedup.unfinished_chunks():
            if stale:
                self._finish_chunk(chunk, pending)
            else:
                spared.update(message_id + ".new" for message_id, _ in pending)
        # Markers next: one whose publisher died leaves a stale `.new` that is removed below.
        removed = self._dedup.clean(spared)  # and spares the `.new` of a marker in force
        listing = _scan.scan(self.path)
        kept_new = []
        for created, name in listing.new:
            path = self.layout.message(name)
            # Judged by the id *and* the file's mtime: a publisher whose clock runs behind
            # must not lose a message that it is still writing.
            old = created < cutoff_us and name not in spared and _fs.mtime(path) < wall_cutoff
            if old and self._discard(name):
                removed += 1
            else:
                kept_new.append((created, name))
        for name in listing.pokes:  # empty files a process died between making and removing
            if self.layout.remove_poke(name, older_than=wall_cutoff):
                removed += 1
        if self.retention is not None:
            removed += len(listing.ready) - len(self._apply_retention(listing.ready, now_us))
        live = {decode_ready(code) for code in listing.ready}
        live.update(id_of(name) for _, name in (*listing.held, *kept_new))
        return removed + _history.remove_orphans(self.layout, self._meta, live, wall_cutoff)

    def redrive(
        self, to: MoveTarget | str | os.PathLike[str] | None = None, limit: int | None = None
    ) -> int:
        """Move dead letters back: call it on a dead-letter queue; return how many moved.

        Each message goes to *to*, or to the queue it was dead-lettered from (recorded
        in its history; messages without one stay). Each move is atomic (one no-replace
        rename after its metadata is written) and never duplicates a message; messages
        being received from this queue are skipped. The receive count starts again.

        :param to: a queue or path; ``None`` for each message's source queue.
        :param limit: move at most this many, oldest first (SQS ``StartMessageMoveTask``).

        A bounded target takes messages while it has room (under its capacity lock, as
        a publish); once it is full, the redrive stops (a message whose own source
        queue is full stays here, and the others go on) and returns how many moved.
        """
        bad_limit = isinstance(limit, bool) or not isinstance(limit, int) or limit < 0
        if limit is not None and bad_limit:
            raise ValueError(f"limit must be an int >= 0 or None, not {limit!r}")
        fixed: MoveTarget | None = None
        if to is not None:
            fixed = cast("MoveTarget", to) if _is_target(to) else self._sibling(os.fspath(to))  # type: ignore[arg-type]
        moved = 0
        targets: dict[str, MoveTarget] = {}
        for code in _scan.scan(self.path).ready:
            if limit is not None and moved >= limit:
                break
            message_id = decode_ready(code)
            held = self._claim_for_move(message_id)
            if held is None:
                continue  # RACE: a consumer of the dead-letter queue took it
            meta = self._meta.read(message_id) or Meta()
            destination = fixed
            if destination is None:
                source = _history.redrive_source(meta)
                if source is None:
                    self._make_ready(held, message_id, None)
                    continue  # no recorded source and no explicit target: leave it
                if source not in targets:
                    targets[source] = self._sibling(source)
                destination = targets[source]
            try:
                done = self._transfer(held, destination, _history.redrive_record(meta))
            except QueueFull:
                self._make_ready(held, message_id, meta)  # stays here
                if fixed is not None:
                    break  # the target is full: stop
                continue
            if done is not None:
                moved += 1
        self._consumer.invalidate()  # what this handle listed has moved
        return moved

    def _sibling(self, path: str) -> Queue:
        """A queue object for *path* with the same durability, precision, modes and clock."""
        config = self.config
        return Queue(
            path,
            durable=config.durable,
            precision=config.precision,
            umask=config.umask,
            clock=config.clock,
        )

    def history(self, message: Message | str) -> History:
        """What is known of a message's past: receives, first sent, last received, and,
        in a dead-letter queue, its source queue and why it was moved.

        One read of its metadata (none is taken for a message never requeued: the count
        is then 0). Safe at any time; a snapshot.

        :raises InvalidId: *message* is not an id or receipt.
        """
        name = message.id if isinstance(message, Message) else message
        if not isinstance(name, str):
            raise InvalidId(name, "expected a Message, a receipt or an id")
        entry = parse_name(name)
        if entry is None or entry.state is _State.NEW:
            raise InvalidId(name)
        return _history.history_of(self._meta.read(entry.id) or Meta(), entry)

    # -- settings stored with the queue -------------------------------------------------

    def configure(
        self,
        *,
        visibility_timeout: float | Unset | None = UNSET,
        delay: float | Unset | None = UNSET,
        capacity: int | Unset | None = UNSET,
        dead_letter: MoveTarget | str | os.PathLike[str] | Unset | None = UNSET,
        max_receives: int | Unset | None = UNSET,
        retention: float | Unset | None = UNSET,
        dedup_window: float | Unset | None = UNSET,
        fifo: bool | Unset | None = UNSET,
    ) -> _stored.Settings:
        """Store settings with the queue (as SQS ``SetQueueAttributes``); return them all.

        Atomic: the settings file is replaced in one rename (readers see the old
        settings or the new), and concurrent calls from any process are serialised, so
        each one's changes land. Settings not given are kept; ``None`` removes one (back
        to the default). Handles made afterwards, in any process, use them; existing
        handles, this one included, keep the options they were made with.

        :param dead_letter: a queue, its path, or its bare name: a queue *beside* this
            one, in the same directory; it is stored by name, so the file can never
            point outside that directory.
        :raises TypeError: a value of the wrong type.
        :raises ValueError: a value out of range, ``max_receives`` without a
            ``dead_letter``, or a dead-letter queue that is not beside this one.
        :raises InvalidSettings: the stored file cannot be trusted (nothing is changed).

        >>> import tempfile, vsqs
        >>> q = vsqs.Queue(tempfile.mkdtemp())
        >>> q.configure(visibility_timeout=60)
        {'visibility_timeout': 60.0}
        >>> vsqs.Queue(q.path).visibility_timeout
        60.0
        """
        if _is_target(dead_letter):
            dead_letter = cast("MoveTarget", dead_letter).path
        if isinstance(dead_letter, str) and dead_letter and "/" not in dead_letter:
            dead_letter = os.path.join(os.path.dirname(self.path), dead_letter)  # a name
        if dead_letter is not UNSET and dead_letter is not None:
            target = queue_path(dead_letter, "dead_letter")
            if os.path.dirname(target) != os.path.dirname(self.path):
                raise ValueError(
                    f"a stored dead_letter must be beside the queue, in "
                    f"{os.path.dirname(self.path)!r}, not {target!r}"
                )
            dead_letter = os.path.basename(target)
        changes = {
            "visibility_timeout": visibility_timeout,
            "delay": delay,
            "capacity": capacity,
            "dead_letter": dead_letter,
            "max_receives": max_receives,
            "retention": retention,
            "dedup_window": dedup_window,
            "fifo": fifo,
        }
        return self._store({k: v for k, v in changes.items() if v is not UNSET})

    def _store(self, changes: dict[str, object]) -> _stored.Settings:
        """Apply checked *changes* to the stored settings (see :meth:`configure`)."""
        return _stored.update(self.layout, self.clock, changes)

    def settings(self) -> _stored.Settings:
        """The settings stored with the queue (``dead_letter`` by name); one read.

        :raises InvalidSettings: the stored file cannot be trusted.
        """
        return _stored.read(self.layout)

    # -- self-renewing leases (the extend arrow, on a timer) ------------------------------

    _renewer: Renewer | None = None  # this handle's renewal thread, made by the first lease

    def lease(
        self,
        message: Message,
        *,
        max_duration: float = 3600.0,
        visibility_timeout: float | None = None,
    ) -> Lease:
        """Hold a received *message* in a lease that renews itself until the work ends.

        Each renewal is the *extend* arrow (one rename, as :meth:`change_visibility`),
        made by this handle's one renewal thread, which serves all of its leases, when a
        third of the visibility timeout is left, until *max_duration* seconds from now.
        The renewal thread and the caller never act on one lease at once. Leaving the
        ``with`` block deletes the message; leaving it by an exception releases it at
        once (a receive is counted); leaving it after the lease was lost raises
        :class:`~vsqs.LeaseLost` and deletes nothing. See :class:`~vsqs.Lease`.

        :param visibility_timeout: seconds each renewal extends the lease by (default:
            the queue's).
        :param max_duration: stop renewing after this many seconds (default one hour);
            the lease then runs out and the message is delivered again.
        :raises InvalidId: *message* belongs to another queue.

        >>> import tempfile, vsqs
        >>> q = vsqs.Queue(tempfile.mkdtemp(), visibility_timeout=5)
        >>> _ = q.publish(b"long job")
        >>> with q.lease(q.receive(timeout=0)) as lease:
        ...     lease.message.body  # work for as long as it takes
        b'long job'
        >>> q.counts().total
        0
        """
        if not isinstance(message, Message):
            raise InvalidId(message, "lease() takes a received Message")
        if message.queue and message.queue != self.path:
            raise InvalidId(message.receipt, f"the message belongs to {message.queue!r}")
        with self._lock:
            renewer = self._renewer
            if renewer is None:
                renewer = self._renewer = Renewer(self, f"vsqs-lease-renewer {self.path}")
        vt = self.visibility_timeout if visibility_timeout is None else visibility_timeout
        return renewer.lease(message, visibility_timeout=vt, max_duration=max_duration)

    def consume_leases(
        self,
        *,
        visibility_timeout: float | None = None,
        timeout: float | None = None,
        max_duration: float = 3600.0,
    ) -> Iterator[Lease]:
        """Yield a self-renewing :class:`~vsqs.Lease` per message, as :meth:`consume` does.

        Each message is claimed as by :meth:`receive`, then held as by :meth:`lease`;
        use each lease in a ``with`` block, where it is renewed (*max_duration* counts
        from entering it). A lease never entered is never renewed; if the loop ends
        without entering it (a ``break``), it is released at once. Stops when the queue
        is shut down and drained, or after *timeout* seconds without a message.

        >>> import tempfile, vsqs
        >>> q = vsqs.Queue(tempfile.mkdtemp())
        >>> _ = q.publish(b"a")
        >>> for lease in q.consume_leases(timeout=0):
        ...     with lease:
        ...         print(lease.message.body)
        b'a'
        """
        return until_entered(
            self.lease(message, max_duration=max_duration, visibility_timeout=visibility_timeout)
            for message in self.consume(visibility_timeout=visibility_timeout, timeout=timeout)
        )


class _Publishing:
    """The context manager of :meth:`Queue._publishing`: discards what its block staged
    if the block is cut short, flushes *directory* after it (unless ``None``).

    Discarding is the *discard* arrow, passed in as *discard* (``Queue._discard``). A
    class, not a generator: every publish enters one, and this costs a third as much.
    """

    __slots__ = ("_directory", "_discard", "_ids", "staged")

    def __init__(self, discard: Callable[[str], bool], ids: list[str], directory: str | None):
        self._discard = discard
        self._ids = ids
        self._directory = directory
        self.staged: list[str] = []

    def __enter__(self) -> list[str]:
        return self.staged

    def __exit__(self, kind: type[BaseException] | None, *_: object) -> None:
        if kind is not None:
            for new in self.staged:  # cut short (Ctrl-C too): no `.new` is left behind
                self._discard(new)
        elif self._directory is not None and self._ids:  # a dedup retry published nothing
            with _fs.flushing_published(self._ids):
                _fs.fsync_dir(self._directory)


class _ClaimLost(Exception):
    """Raised from a copy's progress callback to abandon it (caught in ``_copy_to``)."""


class _Claim:
    """A mover's claim on a held message, renewed while a long copy runs.

    Renewing is the *extend* arrow, passed in as *extend* (``Queue._extend_lease``), so
    this object holds no queue: only the name it renews and when it ends.
    """

    def __init__(
        self,
        name: str,
        extend: Callable[..., tuple[str, int] | None],
        time_us: Callable[[], int],
        length_us: int,
    ) -> None:
        self.name = name
        self._extend = extend
        self._time_us = time_us
        self._tag = HOLD_TAG if is_hold(name) else ""
        self._length_us = length_us
        entry = parse_name(name)
        self._expires = entry.expires if entry is not None and entry.expires else 0

    def renew(self, *, force: bool = False) -> bool:
        """Push the expiry one lease further once half of it is used (or now if *force*).

        As a copy's progress callback it raises :class:`_ClaimLost` instead of
        returning ``False``, which stops the copy.
        """
        now_us = self._time_us()
        if not force and self._expires - now_us > self._length_us // 2:
            return True
        moved = self._extend(self.name, now_us + self._length_us, tag=self._tag)
        if moved is None:
            if force:
                return False
            raise _ClaimLost(self.name)  # RACE: requeued by another process
        self.name, self._expires = moved
        return True


def _write_body(fd: int, body: bytes | memoryview | Callable[[int], int] | _ingest.Linked) -> int:
    """Fill a new message file open as *fd* with *body* (see ``Queue._stage``); its size."""
    if isinstance(body, (bytes, bytearray, memoryview)):  # every publish's: first
        _fs.write_all(fd, body)
        return len(body)
    if isinstance(body, _ingest.Linked):
        return body.size  # the file is the body already
    return body(fd)


def _pinned(layout: Layout, dir_fd: int) -> Layout:
    """*layout* reached through *dir_fd*, a descriptor of its queue directory, never
    by its path (see :meth:`Queue._opened_target`)."""
    return Layout(
        layout.path, layout.dir_mode, layout.file_mode, durable=layout.durable, base=dir_fd
    )


def _batch_keys(
    count: int, dedup_ids: Iterable[str | None] | None, batch_dedup_id: str | None
) -> list[str | None]:
    """The checked deduplication id (or ``None``) of each of *count* bodies of a batch."""
    keys: list[str | None] = [None] * count if dedup_ids is None else list(dedup_ids)
    if len(keys) != count:
        raise ValueError(f"{len(keys)} dedup_ids for {count} bodies")
    for key in keys:
        _check_dedup_id(key)
    if batch_dedup_id is not None:
        _check_dedup_id(batch_dedup_id, "batch_dedup_id")
        if dedup_ids is not None:
            raise ValueError("give dedup_ids or batch_dedup_id, not both")
    return keys


def _check_dedup_id(key: object, name: str = "dedup_id") -> None:
    if key is not None and (not isinstance(key, str) or not key):
        raise ValueError(f"{name} must be a non-empty str, not {key!r}")
