"""The producer side of a queue: publishing, its commit protocol, and shutdown.

A publish writes the body under ``<id>.new`` (created exclusively, so no two publishers
ever share a file), flushes it when durable, checks that the queue is still open, then
makes it ready with one no-replace rename. An id already taken by a message in another
state (a publisher with a skewed clock, a vsqs 0.3 peer) makes that rename fail, and the
message is given a fresh id: nothing is ever overwritten.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Final

from . import _fs, _ingest, _lifecycle
from ._clock import check_seconds as _seconds
from ._errors import InvalidPayload, QueueClosed
from ._ids import format_time
from ._meta import Meta, validate_attributes
from ._state import QueueState

if TYPE_CHECKING:
    pass

CLOSE_GRACE: Final = 0.1
"""Seconds a publisher trusts that the queue is open, and consumers wait after a shutdown."""
_monotonic = time.monotonic
# Until when (monotonic) this process trusts that a queue directory is open; shared by all
# Queue objects on it, so a shutdown() here is seen by every publisher here at once.
_open_until: dict[str, float] = {}


def _as_view(data: object) -> memoryview:
    if isinstance(data, (bytes, bytearray, memoryview)):
        view = memoryview(data)
        return view if view.c_contiguous and view.format == "B" else memoryview(view.tobytes())
    raise InvalidPayload(type(data).__name__)


class Publishing(QueueState):
    """Publish, publish_batch, publish_file, publish_stream and shutdown (part of Queue)."""

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
        :raises QueueClosed: the queue was shut down.
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
        filesystem sync (Linux ``syncfs``; elsewhere one ``fsync`` per body) and the
        directory once, instead of twice per message. ``syncfs`` flushes every dirty file
        of that filesystem, other programs' too: on a disk busy with other writers, very
        small batches may do better as single publishes.

        :param bodies: the bodies, bytes-like, in publish order.
        :param dedup_ids: one deduplication id (or ``None``) per body; see :meth:`publish`.
        :raises ValueError: as many ``dedup_ids`` as bodies are needed; a bounded queue
            cannot take a batch larger than its capacity.
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
                self._dedup.commit_staged(name, size, attrs, delay_us, key, sync_marker=False)
                if key is not None
                else self._commit(name, size, attrs, delay_us)
                for (name, size), key in zip(staged, dedup, strict=True)
            ]
            if any(key is not None for key in dedup) and _fs.sync_filesystem(self.path):
                # One flush makes every marker, and every rename above, durable at once
                # (syncfs covers directory entries too): no fsync per marker.
                return ids
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
        """Raise :class:`QueueClosed` if the queue was shut down.

        Called after this publish's ``.new`` exists and before it becomes ready. A look
        at the marker that found none is trusted for ``CLOSE_GRACE`` seconds: if that look
        was at time ``p`` and we are still within ``p + CLOSE_GRACE`` now, the ``.new`` was
        created before ``p + CLOSE_GRACE``, which is before ``shutdown() + CLOSE_GRACE``
        (the look came before the marker). A consumer declares the queue drained only
        after listing it ``CLOSE_GRACE`` after the shutdown, so it sees this message, as
        ``.new`` or ready (see ``Consuming._drain_grace_ends`` for how a consumer knows
        when the shutdown was). This spares a syscall on all but one publish per
        ``CLOSE_GRACE``.
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
        marker = self._closed_marker
        self._meta.ensure(self._meta.root)
        try:
            fd = _fs.create_exclusive(marker, self._file_mode or 0o666)
        except FileExistsError:
            self._closed_seen = True
            return  # RACE: shut down already (by us or another process): nothing to do
        try:
            if self._file_mode is not None:
                _fs.fchmod(fd, self._file_mode)
            # When it was shut down, by this host's clock: consumers arriving later
            # need not wait the grace again (see _drain_grace_ends).
            _fs.write_all(fd, str(self.clock.time_us()).encode())
            if self.durable:
                _fs.fsync(fd)
        finally:
            _fs.close(fd)
        if self.durable:
            _fs.fsync_dir(self._meta.root)
        self._closed_seen = True
        _open_until.pop(self.path, None)
        _lifecycle.poke(self._as_queue())  # wake consumers blocked in this and other processes

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
        :raises QueueClosed: the queue was shut down.
        """
        attrs, delay_us = self._check_extras(attributes, delay, dedup_id)
        return _ingest.publish_file(
            self._as_queue(), os.fspath(path), attrs=attrs, delay_us=delay_us, dedup_id=dedup_id
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
            self._as_queue(),
            readable,
            attrs=attrs,
            delay_us=delay_us,
            dedup_id=dedup_id,
            chunk_size=chunk_size,
        )

    def _check_extras(
        self, attributes: Mapping[str, str] | None, delay: float, dedup_id: str | None
    ) -> tuple[dict[str, str], int]:
        if self._capacity is not None:
            raise ValueError("publish_file and publish_stream do not support bounded queues")
        if dedup_id is not None and (not isinstance(dedup_id, str) or not dedup_id):
            raise ValueError(f"dedup_id must be a non-empty str, not {dedup_id!r}")
        return validate_attributes(attributes), round(_seconds(delay, "delay") * 1e6)
