"""What happens to a message after its first lease: requeue, receive counts, dead
letters, retention, redrive, and the clean-up of what crashed processes leave behind.

Receive counts are kept off the hot path: a receive only renames. When a lease *ends
without a delete* (it expires, or the consumer releases it), the process that returns
the message first takes it out of everybody's reach with one more no-replace rename, to
a short *requeue hold* ``<id>.<now + hold>.0`` that only it owns; then it records one more
completed receive in the metadata, tagged with that hold; then it makes the message
ready (or dead-letters it). The next receive reports ``completed + 1``.

Exactness. Two processes that see the same expired lease race for the first rename;
the loser stops before touching the metadata, so no receive is counted twice and none
is lost. A requeuer that dies after its rename leaves ``<id>.<hold>.0``, an
ordinary lease that expires in turn; the tag tells the next requeuer whether the dead one had
counted already, so the count stays exact across that crash too. What can still make
it inexact:

* a consumer that crashes *while claiming* never returns a lease: its receive is
  counted when the lease expires, like any other, so nothing is lost there;
* a requeuer that stalls for longer than the hold (``max(visibility_timeout, 30 s)``)
  between its rename and its metadata write may overwrite a newer count with an older
  one (an undercount by the receives that happened meanwhile);
* a vsqs 0.3 peer requeues without counting; a directory written by it counts from
  the first receive vsqs itself sees.

Dead-lettering is decided by the requeuer that holds the message, from the metadata,
so a poison message reaches the dead-letter queue after exactly ``max_receives``
receives, once, however many consumers race.
"""

from __future__ import annotations

import bisect
import errno
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from . import _fs, _scan
from ._errors import InvalidId
from ._ids import State, decode_ready, encode_ready, format_time, parse_name, to_us
from ._meta import Meta

if TYPE_CHECKING:
    from ._queue import Queue

_REQUEUE_HOLD_US: Final = 30_000_000
"""The shortest requeue hold: a stalled requeuer keeps sole ownership at least this long."""


@dataclass(frozen=True, slots=True)
class History:
    """What vsqs knows about a message's past (see :meth:`Queue.history`).

    Times are unix seconds. In a dead-letter queue, ``source`` and the fields after it
    say where the message came from and why it was moved; elsewhere they are ``None``.
    """

    receive_count: int
    """Receives that ended without a delete (the current delivery, if any, excluded)."""
    first_sent: float
    """When the message was first published (its id, or its id in the source queue)."""
    last_received: float | None
    """When the last counted receive began (estimated from its lease), if any."""
    source: str | None = None
    """The queue it was dead-lettered from."""
    source_id: str | None = None
    """Its id in that queue."""
    dead_lettered: float | None = None
    reason: str | None = None
    """``"max_receives"`` or ``"retention"``."""


class DeadLettered(Exception):
    """Raised by :func:`return_to_ready` when the message went to the dead-letter queue
    instead (only when the caller asks, with ``report_dead_letter=True``)."""


def return_to_ready(
    queue: Queue, held_name: str, *, released: bool = False, report_dead_letter: bool = False
) -> int | None:
    """Move a held (or delayed) message back to ready, counting the receive that ended.

    Returns the packed id now ready, or ``None`` if another process got there first or
    the message was dead-lettered instead. Never replaces an existing file: a ready
    message that took the same id meanwhile keeps it, and ours gets a fresh id.
    """
    message_id, _, lease = held_name.partition(".")
    if _fs.exists(os.path.join(queue._meta.delayed_dir, message_id)):
        # A delayed publish coming due: not a receive, nothing to count.
        code = _make_ready(queue, queue._file(held_name), message_id, None)
        if code is not None:
            queue._meta.unmark_delayed(message_id)
        return code
    now_us = queue.clock.time_us()
    hold_us = now_us + max(queue._vt_us, _REQUEUE_HOLD_US)
    while True:
        # The ".0" fraction (tolerated by the grammar) keeps a hold's name apart from
        # every consumer lease, which vsqs writes without one: a tag is never mistaken.
        hold = format_time(hold_us, queue.precision) + ".0"
        try:
            _fs.rename_noreplace(queue._file(held_name), queue._file(f"{message_id}.{hold}"))
        except FileNotFoundError:
            return None  # RACE: another process requeued, deleted or dead-lettered it first
        except FileExistsError:
            hold_us += 1000  # RACE: a same-id lease with this expiry (a clock-skewed peer)
            continue
        break
    held_name = f"{message_id}.{hold}"
    # From here on this process alone holds the message.
    inode = _fs.inode(queue._file(held_name))
    meta = queue._meta.read(message_id) or Meta()
    target = message_id
    if not meta.owned_by(inode):
        # RACE: a publisher with a skewed clock (or a vsqs 0.3 peer) gave a new message
        # our id while we were held; that metadata is the newcomer's. Ours starts afresh,
        # under a fresh id, so neither message's metadata is ever mixed up.
        meta = Meta()
        target = queue._new_id()
    meta.inode = inode
    if meta.lease != lease:
        # The lease that ended was a consumer's (a requeue hold we tagged was counted).
        meta.receive_count += 1
        entry = parse_name(f"{message_id}.{lease}")
        if entry is not None and entry.expires is not None:
            # The lease began one visibility timeout before it ended (an estimate when
            # the consumer chose another timeout; released leases end early).
            meta.last_received_us = now_us if released else entry.expires - queue._vt_us
    meta.lease = hold
    if queue.max_receives is not None and meta.receive_count >= queue.max_receives:
        if target == message_id:
            queue._meta.write(message_id, meta, durable=queue.durable)
        moved = dead_letter(queue, held_name, meta, reason="max_receives")
        if moved and report_dead_letter:
            raise DeadLettered(held_name)
        return None
    queue._meta.write(target, meta, durable=queue.durable)
    queue._meta_possible = True
    return _make_ready(queue, queue._file(held_name), target, meta)


def _make_ready(queue: Queue, source: str, message_id: str, meta: Meta | None) -> int | None:
    """Rename a held file to ``<message_id>``, or to a fresh id if that one is taken."""
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
            fresh = queue._new_id()
            if meta is not None:
                queue._meta.write(fresh, meta, durable=queue.durable)
                theirs = queue._meta.read(target)
                if theirs is not None and meta.inode and theirs.inode == meta.inode:
                    queue._meta.remove(target)  # ours, written under the id we lost
            target = fresh
            continue
        break
    return encode_ready(int(target))


def _transfer(queue: Queue, held_name: str, dest: Queue, meta: Meta) -> str | None:
    """Move a held message of *queue* into *dest* as ready, with *meta*; return its id.

    The metadata is created (exclusively) in *dest* before the one no-replace rename
    that moves the file, so whoever sees the message there sees its metadata. Returns
    ``None`` if the file was gone (another process moved or deleted it first).
    """
    source = queue._file(held_name)
    target = held_name.partition(".")[0]
    now_us = queue.clock.time_us()
    with_meta = meta.to_json() != b"{}"
    try:
        meta.inode = _fs.inode(source)  # a rename keeps it: the metadata stays matched
    except FileNotFoundError:
        return None  # RACE: another process moved or deleted it first
    while True:
        if with_meta and not dest._meta.create(target, meta, durable=dest.durable):
            target = dest._ids.next(now_us, dest.precision)  # the id is taken in *dest*
            continue
        try:
            _fs.rename_noreplace(source, dest._file(target))
        except FileNotFoundError:
            if with_meta:
                dest._meta.remove(target)
            return None  # RACE: another process moved or deleted it first
        except FileExistsError:
            if with_meta:
                dest._meta.remove(target)
            target = dest._ids.next(now_us, dest.precision)
            continue
        except OSError as exc:
            if exc.errno != errno.EXDEV:
                if with_meta:
                    dest._meta.remove(target)
                raise
            # Another filesystem: copy, then remove. A crash in between leaves the message
            # in both queues (at least once, never lost).
            body = _fs.read_regular(source)
            new, _ = dest._stage(memoryview(body), sync=dest.durable)
            if with_meta:  # a copy is a new inode: match the metadata to it
                meta.inode = _fs.inode(dest._file(new))
                dest._meta.write(target, meta, durable=dest.durable)
            try:
                _fs.rename_noreplace(dest._file(new), dest._file(target))
            except FileExistsError:
                _fs.unlink(dest._file(new))
                if with_meta:
                    dest._meta.remove(target)
                target = dest._ids.next(now_us, dest.precision)
                continue
            _fs.unlink(source)
        break
    if with_meta:
        dest._meta_possible = True
    if dest.durable:
        _fs.fsync_dir(dest.path)
        _fs.fsync_dir(queue.path)
    return target


def dead_letter(queue: Queue, held_name: str, meta: Meta, *, reason: str) -> bool:
    """Move a held message to the dead-letter queue, keeping body, attributes and history.

    Atomic on one filesystem: one no-replace rename moves the file, after its metadata
    was written in the dead-letter queue. Returns ``False`` if another process moved or
    deleted the message first. A crash before the rename leaves the message held in the
    source queue, where it is dead-lettered again when that hold expires: never lost,
    never in both queues (except across filesystems, see :func:`_transfer`).
    """
    dlq = queue.dead_letter
    assert dlq is not None
    message_id = held_name.partition(".")[0]
    first_sent = meta.history.get("first_sent_us")
    history: dict[str, Any] = {
        "source": queue.path,
        "source_id": message_id,
        "first_sent_us": first_sent if isinstance(first_sent, int) else to_us(int(message_id)),
        "last_received_us": meta.last_received_us,
        "receive_count": meta.receive_count,
        "dead_lettered_us": queue.clock.time_us(),
        "reason": reason,
    }
    moved = Meta(attributes=meta.attributes, history=history)
    if _transfer(queue, held_name, dlq, moved) is None:
        return False
    queue._meta.remove(message_id)
    return True


def apply_retention(queue: Queue, codes: list[int], now_us: int) -> list[int]:
    """Drop (or dead-letter) the ready messages older than the retention period.

    A message's age is read from its id, that is by its publisher's clock: none younger
    than the retention is dropped, unless that publisher's clock ran behind. Each is
    claimed first, so a consumer that got it a moment earlier keeps it.
    """
    assert queue.retention is not None
    # Strictly older: a message exactly `retention` old is kept.
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
            dead_letter(queue, held, meta, reason="retention")
        else:
            _fs.unlink(queue._file(held))
            queue._meta.remove(message_id)
    return codes[split:]


def redrive(queue: Queue, to: Queue | None, limit: int | None) -> int:
    """Move ready messages of *queue* (a dead-letter queue) back to *to* or their source.

    Each message is claimed in the dead-letter queue first (so a consumer inspecting it
    keeps it), then moved with one no-replace rename. Its receive count starts again
    from zero; its attributes and first-sent time are kept.
    """
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise ValueError(f"limit must be an int >= 0 or None, not {limit!r}")
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
            source = meta.history.get("source")
            if not isinstance(source, str) or not source:
                _fs.rename_noreplace(queue._file(held), queue._file(message_id))
                continue  # no recorded source and no explicit target: leave it
            if source not in targets:
                targets[source] = _sibling(queue, source)
            destination = targets[source]
        first_sent = meta.history.get("first_sent_us")
        fresh = Meta(
            attributes=meta.attributes,
            history={"first_sent_us": first_sent} if isinstance(first_sent, int) else {},
        )
        if _transfer(queue, held, destination, fresh) is not None:
            queue._meta.remove(message_id)
            moved += 1
    return moved


def _sibling(queue: Queue, path: str) -> Queue:
    """A queue object for *path* with the same durability, precision, modes and clock."""
    umask = None if queue._file_mode is None else 0o777 & ~queue._dir_mode
    return type(queue)(
        path, durable=queue.durable, precision=queue.precision, umask=umask, clock=queue.clock
    )


def history(queue: Queue, message_id: str) -> History:
    """Read the history of *message_id* from its metadata (see :class:`History`)."""
    entry = parse_name(message_id)
    if entry is None or entry.state is State.NEW:
        raise InvalidId(message_id)
    meta = queue._meta.read(entry.id) or Meta()
    past = meta.history

    def seconds(key: str) -> float | None:
        value = past.get(key)
        return value / 1e6 if isinstance(value, int) and value else None

    source = past.get("source")
    source_id = past.get("source_id")
    reason = past.get("reason")
    count = past.get("receive_count")
    last = past.get("last_received_us") or meta.last_received_us
    return History(
        receive_count=count if isinstance(count, int) else meta.receive_count,
        first_sent=seconds("first_sent_us") or entry.key / 1e6,
        last_received=last / 1e6 if isinstance(last, int) and last else None,
        source=source if isinstance(source, str) else None,
        source_id=source_id if isinstance(source_id, str) else None,
        dead_lettered=seconds("dead_lettered_us"),
        reason=reason if isinstance(reason, str) else None,
    )


def clean(queue: Queue, older_than: float) -> int:
    """Remove debris older than *older_than* seconds (see :meth:`Queue.clean`)."""
    now_us = queue.clock.time_us()
    wall_cutoff = now_us / 1e6 - older_than
    cutoff_us = now_us - round(older_than * 1e6)
    # Markers first: one whose publisher died leaves a stale `.new` that is removed below.
    removed = queue._dedup.clean()
    listing = _scan.scan(queue.path)
    kept_new = []
    for created, name in listing.new:
        path = queue._file(name)
        # Judged by the id *and* the file's mtime: a publisher whose clock runs behind
        # must not lose a message that it is still writing.
        if created < cutoff_us and _mtime(path) < wall_cutoff and _fs.unlink(path):
            removed += 1
        else:
            kept_new.append((created, name))
    listing.new = kept_new  # a removed `.new` no longer keeps its metadata alive
    if queue.retention is not None:
        removed += len(listing.ready) - len(apply_retention(queue, listing.ready, now_us))
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
