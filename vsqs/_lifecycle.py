"""What happens to a message after its first lease: requeue, receive counts, dead
letters, retention, redrive, and the clean-up of what crashed processes leave behind.

Receive counts are kept off the hot path: a receive only renames. When a lease *ends
without a delete* (it expires, or the consumer releases it), the message goes back to
the queue and its metadata records one more completed receive, tagged with the lease's
expiry so that two processes requeueing the same lease count it once. The next receive
reports ``completed + 1``. Dead-lettering is decided at that same moment, from the
metadata, so a poison message reaches the dead-letter queue after exactly
``max_receives`` receives, however many consumers race.
"""

from __future__ import annotations

import bisect
import errno
import os
from typing import TYPE_CHECKING

from . import _fs, _scan
from ._ids import IDS, decode_ready, encode_ready, format_time, parse_name, to_us
from ._meta import Meta

if TYPE_CHECKING:
    from ._queue import Queue


def _held_path_parts(held_name: str) -> tuple[str, str]:
    message_id, _, lease = held_name.partition(".")
    return message_id, lease


def return_to_ready(queue: Queue, held_name: str, *, released: bool = False) -> int | None:
    """Move a held (or delayed) message back to ready.

    Returns the packed id now ready, or ``None`` if another process got there first or
    the message was dead-lettered instead. Never replaces an existing file: a ready
    message that took the same id meanwhile keeps it, and ours gets a fresh id.
    """
    message_id, lease = _held_path_parts(held_name)
    source = queue._file(held_name)
    delayed_marker = os.path.join(queue._meta.delayed_dir, message_id)
    was_delayed = _fs.exists(delayed_marker)
    meta: Meta | None = None
    if not was_delayed:
        meta = queue._meta.read(message_id) or Meta()
        if meta.lease != lease:
            meta.receive_count += 1
            meta.lease = lease
            lease_value = parse_name(held_name)
            if lease_value is not None and lease_value.expires is not None:
                # The lease began one visibility timeout before it ended (an estimate when
                # the consumer chose another timeout; released leases end early).
                ended = queue.clock.time_us() if released else lease_value.expires
                meta.last_received_us = ended - (0 if released else queue._vt_us)
        if queue.max_receives is not None and meta.receive_count >= queue.max_receives:
            dead_letter(queue, held_name, meta)
            return None
        queue._meta.write(message_id, meta, durable=queue.durable)
        queue._meta_possible = True
    target = message_id
    while True:
        try:
            _fs.rename_noreplace(source, queue._file(target))
        except FileNotFoundError:
            return None  # RACE: another consumer requeued, deleted or dead-lettered it first
        except FileExistsError:
            if _fs.same_file(source, queue._file(target)):
                # A link-then-unlink rename (NFS) was cut short: both names are one message.
                _fs.unlink(source)
                break
            # RACE: a message published with the same id meanwhile (skewed clock, vsqs 0.3).
            fresh = IDS.next(queue.clock.time_us(), queue.precision)
            if meta is not None:
                queue._meta.write(fresh, meta, durable=queue.durable)
                queue._meta.remove(target)
            target = fresh
            continue
        break
    if was_delayed:
        queue._meta.unmark_delayed(message_id)
    return encode_ready(int(target))


def dead_letter(queue: Queue, held_name: str, meta: Meta) -> bool:
    """Move a held message to the dead-letter queue, keeping body, attributes and history.

    Atomic on one filesystem: one no-replace rename moves the file, after its metadata
    was written in the dead-letter queue. Returns ``False`` if another process moved or
    deleted the message first.
    """
    dlq = queue.dead_letter
    assert dlq is not None
    message_id, _ = _held_path_parts(held_name)
    now_us = queue.clock.time_us()
    history = {
        "source": queue.path,
        "source_id": message_id,
        "first_sent_us": to_us(int(message_id)),
        "last_received_us": meta.last_received_us,
        "receive_count": meta.receive_count,
        "dead_lettered_us": now_us,
    }
    moved = Meta(attributes=meta.attributes, history=history)
    source = queue._file(held_name)
    target = message_id
    while True:
        if not dlq._meta.create(target, moved, durable=dlq.durable):
            target = IDS.next(now_us, dlq.precision)  # the id is taken in the DLQ
            continue
        try:
            _fs.rename_noreplace(source, dlq._file(target))
        except FileNotFoundError:
            dlq._meta.remove(target)
            return False  # RACE: another consumer dead-lettered or deleted it first
        except FileExistsError:
            dlq._meta.remove(target)
            target = IDS.next(now_us, dlq.precision)
            continue
        except OSError as exc:
            if exc.errno != errno.EXDEV:
                dlq._meta.remove(target)
                raise
            # Another filesystem: copy, then remove. A crash in between leaves the message
            # in both queues (at least once, never lost).
            body = _fs.read_regular(source)
            new, _ = dlq._stage(memoryview(body), sync=dlq.durable)
            _fs.rename_noreplace(dlq._file(new), dlq._file(target))
            _fs.unlink(source)
        break
    dlq._meta_possible = True
    if dlq.durable:
        _fs.fsync_dir(dlq.path)
        _fs.fsync_dir(queue.path)
    queue._meta.remove(message_id)
    return True


def apply_retention(queue: Queue, codes: list[int], now_us: int) -> list[int]:
    """Drop (or dead-letter) the ready messages older than the retention period.

    A message is judged by its id, its publisher's clock: none younger than the
    retention is dropped, unless that publisher's clock ran ahead. Each is claimed
    first, so a consumer that got it a moment earlier keeps it.
    """
    assert queue.retention is not None
    cutoff = (now_us - round(queue.retention * 1e6)) << 1
    split = bisect.bisect_left(codes, cutoff)
    if not split:
        return codes
    suffix = format_time(now_us + queue._vt_us, queue.precision)
    for code in codes[:split]:
        message_id = decode_ready(code)
        held = f"{message_id}.{suffix}"
        try:
            _fs.rename_noreplace(queue._file(message_id), queue._file(held))
        except (FileNotFoundError, FileExistsError):
            continue  # RACE: a consumer claimed it first; it is theirs now
        if queue.dead_letter is not None:
            meta = queue._meta.read(message_id) or Meta()
            dead_letter(queue, held, meta)
        else:
            _fs.unlink(queue._file(held))
            queue._meta.remove(message_id)
    return codes[split:]


def redrive(queue: Queue, to: Queue | None, limit: int | None) -> int:
    """Move ready messages of *queue* (a dead-letter queue) back to *to* or their source."""
    moved = 0
    targets: dict[str, Queue] = {}
    for code in _scan.scan(queue.path).ready:
        if limit is not None and moved >= limit:
            break
        message_id = decode_ready(code)
        lease_end = queue.clock.time_us() + queue._vt_us
        held = f"{message_id}.{format_time(lease_end, queue.precision)}"
        try:
            _fs.rename_noreplace(queue._file(message_id), queue._file(held))
        except (FileNotFoundError, FileExistsError):
            continue  # RACE: a consumer of the dead-letter queue took it
        meta = queue._meta.read(message_id) or Meta()
        destination = to
        if destination is None:
            source = str(meta.history.get("source", ""))
            if not source:
                _fs.rename_noreplace(queue._file(held), queue._file(message_id))
                continue  # no recorded source and no explicit target: leave it
            if source not in targets:
                targets[source] = type(queue)(source, durable=queue.durable, clock=queue.clock)
            destination = targets[source]
        target = message_id
        while True:
            fresh = Meta(attributes=meta.attributes)
            if fresh.attributes and not destination._meta.create(
                target, fresh, durable=destination.durable
            ):
                target = IDS.next(queue.clock.time_us(), destination.precision)
                continue
            try:
                _fs.rename_noreplace(queue._file(held), destination._file(target))
            except FileExistsError:
                if fresh.attributes:
                    destination._meta.remove(target)
                target = IDS.next(queue.clock.time_us(), destination.precision)
                continue
            break
        destination._meta_possible = destination._meta_possible or bool(fresh.attributes)
        queue._meta.remove(message_id)
        moved += 1
    for destination in {*targets.values(), *([to] if to is not None else [])}:
        if destination.durable:
            _fs.fsync_dir(destination.path)
    return moved


def clean(queue: Queue, older_than: float) -> int:
    """Remove debris older than *older_than* seconds (see :meth:`Queue.clean`)."""
    now_us = queue.clock.time_us()
    cutoff_us = now_us - round(older_than * 1e6)
    wall_cutoff = queue.clock.time_us() / 1e6 - older_than
    listing = _scan.scan(queue.path)
    removed = 0
    for created, name in listing.new:
        path = queue._file(name)
        # Judged by the id *and* the file's mtime: a publisher whose clock runs behind
        # must not lose a message that it is still writing.
        if created < cutoff_us and _mtime(path) < wall_cutoff and _fs.unlink(path):
            removed += 1
    live = _live_ids(listing)
    for directory, ids in (
        (queue._meta.meta_dir, queue._meta.meta_ids()),
        (queue._meta.delayed_dir, list(queue._meta.delayed_ids())),
    ):
        for message_id in ids:
            path = os.path.join(directory, message_id)
            if message_id not in live and _mtime(path) < wall_cutoff and _fs.unlink(path):
                removed += 1
    for directory in (queue._meta.meta_dir, queue._meta.delayed_dir, queue._meta.path("stats")):
        for name in _listdir(directory):
            path = os.path.join(directory, name)
            if name.startswith(".tmp-") and _mtime(path) < wall_cutoff and _fs.unlink(path):
                removed += 1
    removed += queue._dedup.clean()
    return removed


def _live_ids(listing: _scan.Listing) -> set[str]:
    ids = {decode_ready(code) for code in listing.ready}
    ids.update(name.partition(".")[0] for _, name in listing.held)
    ids.update(name.partition(".")[0] for _, name in listing.new)
    return ids


def _mtime(path: str) -> float:
    try:
        return os.lstat(path).st_mtime
    except FileNotFoundError:
        return float("inf")  # RACE: gone already; nothing to clean


def _listdir(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except FileNotFoundError:
        return []


def poke(queue: Queue) -> None:
    """Make an inotify event in the queue directory, to wake blocked consumers."""
    name = queue._file(f".wake-{os.getpid()}-{os.urandom(4).hex()}")
    _fs.close(_fs.create_exclusive(name))
    _fs.unlink(name)
