"""The consumer side of a queue: receive, delete, visibility, and waiting.

A receive claims the oldest ready message it knows of with one no-replace rename to
``<id>.<expiry>``; whoever loses that race simply moves on. Candidates come from an
amortised, sorted view of the directory (``_view``), so no receive lists the directory in
steady state; leases that end undeleted are returned to the queue first, as the design
requires.
"""

from __future__ import annotations

import bisect
import errno
import heapq
import math
from collections.abc import Iterable, Iterator
from dataclasses import replace
from typing import TYPE_CHECKING, Final

from . import _fs, _lifecycle, _scan
from ._clock import check_seconds as _seconds
from ._errors import InvalidId, LeaseLost, QueueDrained
from ._ids import Precision, decode_ready, format_time, parse_name
from ._ids import State as _State
from ._message import NO_ATTRIBUTES, Message
from ._publish import CLOSE_GRACE
from ._state import QueueState

if TYPE_CHECKING:
    pass

_RECEIPT_CACHE: Final = 4096
# What reading a planted non-file under a message name gives: a symlink (ELOOP, as we
# open with O_NOFOLLOW), a FIFO or directory (EINVAL from _fs.read_message's check), a
# socket (ENXIO).
_NOT_A_MESSAGE: Final = frozenset({errno.ELOOP, errno.EINVAL, errno.EISDIR, errno.ENXIO})
_DRAIN_GRACE_NEW_US: Final = 60_000_000  # a `.new` older than this cannot block a drain
DRAIN_SKEW: Final = 1.0
"""Seconds of clock difference between hosts that the drain rule tolerates."""
_PROVEN_OVER_US: Final = round((CLOSE_GRACE + DRAIN_SKEW) * 1e6)


class Consuming(QueueState):
    """Receive, consume, delete and change_visibility (part of Queue)."""

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
            # decode_ready(code), inlined: this loop is the receive hot path.
            message_id = str(code >> 1) if not code & 1 else str((code >> 1) // 1000)
            receipt = message_id + suffix
            try:
                _fs.rename_noreplace(prefix + message_id, prefix + receipt)
            except FileNotFoundError:
                # RACE: another consumer claimed it first, or it was deleted or purged:
                # try the next one (never skip ahead, which would break FIFO).
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
        except OSError as exc:
            # We cannot read what we claimed: put the name back as it was.
            try:
                _fs.rename_noreplace(self._file(receipt), self._file(message_id))
            except (FileExistsError, FileNotFoundError):
                pass  # RACE: a peer requeued or replaced it meanwhile; its lease will end
            if exc.errno in _NOT_A_MESSAGE:
                self._ignored.add(message_id)  # planted; never look at it again
                return None
            raise  # a real fault (EMFILE, EIO...): the caller must hear of it

        receipts = self._receipts
        if len(receipts) >= _RECEIPT_CACHE:
            receipts.popitem(last=False)
        receipts[message_id] = receipt
        # A live receipt is never a superseded one (a manual clock, or a coarse one, may
        # give a new lease a receipt that an older lease had): chains end at live leases.
        self._superseded.pop(receipt, None)
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
                code = _lifecycle.return_to_ready(self._as_queue(), name)
                if code is not None:
                    codes.append(code)
            else:
                waiting.append((expires, name))
        if len(codes) != listed:
            codes.sort()
        if self.retention is not None:
            codes = _lifecycle.apply_retention(self._as_queue(), codes, now_us)
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
            code = _lifecycle.return_to_ready(self._as_queue(), name)
            if code is not None:
                with self._lock:
                    self._view.put_back(code)

    def _is_drained(self) -> bool:
        if not (self._closed_seen or _fs.exists(self._closed_marker)):
            return False
        self._closed_seen = True
        if self._grace_ends is None:
            self._grace_ends = self._drain_grace_ends()
        if self.clock.monotonic() < self._grace_ends:
            return False
        listing = _scan.scan(self.path)
        stale_before = self.clock.time_us() - _DRAIN_GRACE_NEW_US
        live_new = [name for created, name in listing.new if created > stale_before]
        return not (listing.ready or listing.held or live_new)

    def _drain_grace_ends(self) -> float:
        """When (monotonic) an empty listing proves the shut-down queue drained.

        Publishers may trust an "open" look for ``CLOSE_GRACE`` (see ``_check_open``), so
        a message may still become ready until ``CLOSE_GRACE`` after the shutdown. The
        marker records when that was, by the clock of the process that shut the queue
        down: once this clock says it was more than ``CLOSE_GRACE + DRAIN_SKEW`` ago,
        the grace is over already (a handle that arrives later does not wait again).
        Otherwise the grace is counted from now, when this handle first saw the marker,
        which needs no clock agreement at all. ``DRAIN_SKEW`` is the clock difference
        between hosts that this tolerates.
        """
        now = self.clock.monotonic()
        if not self._grace:
            return now
        shut_us = _marker_time_us(self._closed_marker)
        if shut_us is not None and self.clock.time_us() - shut_us > _PROVEN_OVER_US:
            return now
        return now + CLOSE_GRACE

    def delete(self, message: Message | str) -> bool:
        """Delete a received message; return whether this call deleted it.

        Given a :class:`Message` or its receipt, it unlinks exactly the held file: O(1),
        from any process. It returns ``False``, and deletes nothing, when the receipt no
        longer names a file: the message was already deleted (deleting twice is not an
        error), or its lease expired and it went back to the queue or to another consumer,
        whose copy is never touched. Given a bare id, it deletes the message in whatever
        state it is, as the design describes (a listing unless this object received it).

        A receipt that this object has since extended with :meth:`change_visibility`
        (a heartbeat) still deletes the message: this object issued both receipts, so the
        lease is still the caller's, and the current receipt is used. A superseded
        receipt from another object (or process) deletes nothing.

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
            receipt = self._current(self._receipt_of(message))
            size = len(message.body) if isinstance(message, Message) else 0
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
        and expiry. On this object, the receipt it replaced keeps working (it stands for
        the same lease); elsewhere only the new one does, so pass the returned message
        on. A release that ends the message's last allowed receive (``max_receives``)
        moves it to the dead-letter queue instead; the returned message then names that
        queue in ``queue``.

        :raises LeaseLost: the lease already ended; its ``reason`` says whether it was
            ``"deleted"``, ``"expired"`` (and returned to the queue), or ``"superseded"``
            (extended through another object, whose newer receipt is ``current``).
        """
        seconds = _seconds(seconds, "seconds")
        receipt = self._current(self._receipt_of(message))
        message_id, dot, _ = receipt.partition(".")
        if not dot:
            raise InvalidId(receipt, "a receipt (id.expiry) is needed, not a bare id")
        if not isinstance(message, Message):
            message = Message(id=message_id, body=b"", receipt=receipt, expires_at=0.0)
        now_us = self.clock.time_us()
        if seconds == 0:
            try:
                returned = _lifecycle.return_to_ready(
                    self._as_queue(), receipt, released=True, report_dead_letter=True
                )
                if returned is None:
                    raise self._lease_lost(receipt)
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
                raise self._lease_lost(receipt) from None
            except FileExistsError:
                expiry += 1000 if self.precision is Precision.MS else 1  # RACE: same tick
                continue
            self._receipts[message_id] = target
            superseded = self._superseded
            if len(superseded) >= _RECEIPT_CACHE:
                superseded.popitem(last=False)
            superseded[receipt] = target
            superseded.pop(target, None)  # live now (see _open_claimed): no cycle can form
            with self._lock:
                heapq.heappush(self._own_leases, (expiry, message_id, target))
            return replace(message, receipt=target, expires_at=expiry / 1e6)

    def _current(self, receipt: str) -> str:
        """The receipt that this handle's later extensions of *receipt* gave the lease.

        A heartbeat (``change_visibility``) renames the held file, so the ``Message`` it
        was given names a file that no longer exists. This handle issued both receipts,
        so the lease is still the caller's: follow the chain to its latest receipt.
        Receipts from other handles (or processes) are not followed.
        """
        superseded = self._superseded
        while receipt in superseded:
            receipt = superseded[receipt]
        return receipt

    def _lease_lost(self, receipt: str) -> LeaseLost:
        """A :class:`LeaseLost` for *receipt* that says what became of the lease.

        A diagnosis after the fact, from one listing and one metadata read: a message
        held under another name was either extended through another handle (its lease
        lives on) or returned and received again. A return after our lease is recorded
        in the metadata (every requeue writes its hold there), so no such record means
        the lease was extended.
        """
        message_id = receipt.partition(".")[0]
        held = _scan.held_names_for(self.path, message_id)
        if held:
            ours = parse_name(receipt)
            meta = self._meta.read(message_id)
            hold = parse_name(f"{message_id}.{meta.lease}") if meta and meta.lease else None
            returned_since = (
                hold is not None
                and hold.expires is not None
                and (ours is None or ours.expires is None or hold.expires > ours.expires)
            )
            if not returned_since:
                return LeaseLost(receipt, reason="superseded", current=held[0])
            return LeaseLost(receipt, reason="expired")
        if _fs.exists(self._file(message_id)):
            return LeaseLost(receipt, reason="expired")
        return LeaseLost(receipt, reason="deleted")

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


def _marker_time_us(marker: str) -> int | None:
    """When the queue was shut down (µs), as its marker records it; ``None`` if unknown.

    The shutdown writes its clock's time into the marker; a marker without it (written
    by hand, or by vsqs before 1.0) is dated by its modification time.
    """
    try:
        raw = _fs.read_regular(marker)
    except OSError:
        return None  # RACE: removed by hand meanwhile; or not a regular file (planted)
    text = raw.strip()
    if text.isdigit():
        return int(text)
    try:
        return _fs.mtime_us(marker)
    except OSError:
        return None  # RACE: removed by hand meanwhile
