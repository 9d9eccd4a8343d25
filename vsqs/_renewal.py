"""Leases that renew themselves: one thread per queue handle extends all of its leases.

A :class:`Lease` holds a received message while a ``with`` block works on it; the
:class:`Renewer` of the handle (one daemon thread, started with the first lease and gone
when the last one ends) extends each lease when a third of its visibility timeout is
left, through the handle's ``change_visibility``: one rename per renewal. Both are given
only what they need, a :class:`LeaseHolder` (the handle's ``change_visibility``,
``delete`` and clock), and never see the queue itself.

Concurrency: each lease has a lock, held by whoever acts on it (the renewal thread
extending it, the user's thread deleting or releasing it), so the two never act on one
lease at once. Lock order: a lease's lock, then the renewer's, never the reverse.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator
from types import TracebackType
from typing import Final, Protocol

from ._clock import Clock
from ._errors import LeaseLost
from ._message import Message
from ._options import validate_seconds as _seconds

RENEW_WHEN_LEFT: Final = 3  # renew when 1/RENEW_WHEN_LEFT of the visibility timeout is left
# The thread reads the wall clock at least this often (seconds): expiries are wall-clock
# times, its waits are monotonic, and a wall clock that steps (NTP, a manual test clock)
# must not make it oversleep by more than this.
MAX_NAP: Final = 1.0
RETRY_US: Final = 1_000_000  # the longest wait before retrying a renewal that failed with OSError


class LeaseHolder(Protocol):
    """What a lease needs from a queue handle (a :class:`~vsqs.Queue` offers it)."""

    @property
    def clock(self) -> Clock: ...

    def change_visibility(self, message: Message, seconds: float) -> Message: ...

    def delete(self, message: Message) -> bool: ...


class Lease:
    """A received message whose lease renews itself until the work on it ends.

    Made by :meth:`vsqs.Queue.lease` or :meth:`vsqs.Queue.consume_leases`, used as a
    context manager::

        with queue.lease(message) as lease:
            work(lease.message.body)
        # left normally: deleted; left by an exception: released at once

    While it is open, the handle's renewal thread extends the lease whenever a third of
    its *visibility_timeout* is left, up to *max_duration* after the lease was made (then
    it lets the lease run out, and the message is delivered again, as Pub/Sub's maximum
    lease duration). Leaving the block normally deletes the message; leaving it with an
    exception releases it at once (``change_visibility(message, 0)``, which counts as a
    receive, so ``max_receives`` and dead-lettering apply) and lets the exception go on
    (if the lease was lost meanwhile, there is nothing to release: :attr:`lost` says so).

    If the lease was lost (a renewal found it gone because the process was paused for
    longer than a third of the visibility timeout, or *max_duration* passed and another
    consumer got the message), leaving the block normally raises
    :class:`~vsqs.LeaseLost`, whose ``reason`` says why: the work may be done twice.
    Nothing that another consumer holds is ever deleted.
    """

    def __init__(
        self, renewer: Renewer, message: Message, *, visibility_timeout: float, max_duration: float
    ) -> None:
        self._renewer = renewer
        self._lock = threading.Lock()
        self._message = message
        self._vt_us = round(_seconds(visibility_timeout, "visibility_timeout", positive=True) * 1e6)
        self._max_us = round(_seconds(max_duration, "max_duration") * 1e6)
        self._deadline_us = renewer.holder.clock.time_us() + self._max_us
        self._expires_us = round(message.expires_at * 1e6)
        self._retry_us = 0
        self._lost: LeaseLost | None = None
        self._ended = False
        self._entered = False
        self._deferred = False  # renewed only from __enter__ on (see defer)
        self._gone: Callable[[], bool] | None = None  # see tie
        self.renewals = 0
        """How many times the lease was extended."""
        self.error: OSError | None = None
        """The last renewal's :class:`OSError` (retried until the lease runs out), or ``None``."""

    def __repr__(self) -> str:
        state = "lost" if self._lost else "ended" if self._ended else "open"
        return f"<Lease {self._message.receipt!r} {state}, {self.renewals} renewals>"

    @property
    def message(self) -> Message:
        """The message, with the receipt and expiry of the latest renewal."""
        return self._message

    @property
    def deadline(self) -> float:
        """Unix time (seconds) after which the lease is no longer extended (*max_duration*)."""
        return self._deadline_us / 1e6

    @property
    def lost(self) -> LeaseLost | None:
        """Why the lease was lost, if a renewal or the final delete found it lost."""
        return self._lost

    @property
    def ended(self) -> bool:
        """Whether the lease is over: deleted, released, left, or found lost."""
        return self._ended or self._lost is not None

    @property
    def next_renewal_us(self) -> int:
        """When (µs, the queue's clock) the next renewal is due."""
        return max(self._expires_us - self._vt_us // RENEW_WHEN_LEFT, self._retry_us)

    # -- the user's side ------------------------------------------------------------

    def __enter__(self) -> Lease:
        self._entered = True
        if self._deferred:
            with self._lock:
                self._deferred = False
                self._deadline_us = self._renewer.holder.clock.time_us() + self._max_us
            if not self.ended:
                self._renewer.start(self)
        return self

    def defer(self) -> None:
        """Renew only once the ``with`` block is entered (*max_duration* counts from
        there). :meth:`vsqs.Queue.consume_leases` and :mod:`vsqs.aio` defer every lease
        they make, so a lease the caller never enters is never renewed."""
        with self._lock:
            if self._entered:
                return
            self._deferred = True
        self._renewer.discard(self)

    def tie(self, gone: Callable[[], bool]) -> None:
        """Stop renewing, and release the message, once *gone()* is true: the lease's
        owner can no longer end it (an asyncio lease whose event loop is closed)."""
        self._gone = gone

    def abandon(self) -> None:
        """Release the message of a lease that was never entered (its loop moved on to
        the next lease, or ended); nothing if it was entered or has ended."""
        if self._entered or self.ended:
            return
        try:
            self.release()
        except LeaseLost:
            pass  # RACE: it ran out and another consumer took it: back already

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if exc_type is None:
            self.delete()
            return
        try:
            self.release()
        except LeaseLost:
            pass  # RACE: it expired or someone took it: already back, as release wanted

    def delete(self) -> None:
        """Delete the message now and stop renewing (what leaving the block does).

        Atomic: one unlink of the held file, under the lease's lock, so no renewal runs
        at the same time. Does nothing if the lease already ended through this object.

        :raises LeaseLost: the lease was lost; nothing was deleted.
        """
        holder = self._renewer.holder
        with self._lock:
            if self._ended:
                return
            self._ended = True
            lost = self._lost
            if lost is None and not holder.delete(self._message):
                # The held file is gone: our lease ran out and someone returned it (or a
                # bare-id delete or a purge removed it); our receipt cannot name theirs.
                expired = holder.clock.time_us() >= self._expires_us
                lost = self._lost = LeaseLost(
                    self._message.receipt, reason="expired" if expired else ""
                )
        self._renewer.discard(self)
        if lost is not None:
            raise lost

    def release(self, delay: float = 0.0) -> None:
        """Give the message back now, or after *delay* seconds (a retry backoff).

        Atomic: one rename (``change_visibility(message, delay)``), under the lease's
        lock. The release counts as a receive, so a message whose receives are used up
        goes to the dead-letter queue; :attr:`message` then names that queue. Does
        nothing if the lease already ended through this object.

        :raises LeaseLost: the lease was lost (the message is back, or held by another).
        """
        seconds = _seconds(delay, "delay")
        holder = self._renewer.holder
        with self._lock:
            if self._ended:
                return
            self._ended = True
            lost = self._lost
            if lost is None:
                try:
                    self._message = holder.change_visibility(self._message, seconds)
                except LeaseLost as exc:
                    lost = self._lost = exc
        self._renewer.discard(self)
        if lost is not None:
            raise lost

    # -- the renewal thread's side --------------------------------------------------

    def renew(self) -> bool:
        """Extend the lease if a renewal is due; return whether to keep renewing it.

        The renewal thread calls this; a program rarely needs to. One rename, under the
        lease's lock.
        """
        holder = self._renewer.holder
        with self._lock:
            if self._ended or self._lost is not None or self._deferred or self._end_if_orphaned():
                return False
            now_us = holder.clock.time_us()
            if now_us < self.next_renewal_us:
                return True
            expiry = min(now_us + self._vt_us, self._deadline_us)
            if expiry <= self._expires_us:
                return False  # max_duration reached: let the lease run out
            try:
                message = holder.change_visibility(self._message, (expiry - now_us) / 1e6)
            except LeaseLost as exc:
                self._lost = exc  # reported when the block is left
                return False
            except OSError as exc:
                # A transient fault (EIO, ESTALE on NFS...): retry while the lease lasts.
                self.error = exc
                self._retry_us = now_us + min(self._vt_us // 10, RETRY_US)
                return True
            self._message = message
            self._expires_us = round(message.expires_at * 1e6)
            self._retry_us = 0
            self.error = None
            self.renewals += 1
            return True

    def _end_if_orphaned(self) -> bool:
        """Release the lease if nobody can end it any more (see :meth:`tie`; under its
        lock, as :meth:`release`); whether it did."""
        if self._gone is None or not self._gone():
            return False
        self._ended = True
        try:
            self._message = self._renewer.holder.change_visibility(self._message, 0)
        except LeaseLost as exc:
            self._lost = exc  # RACE: it ran out and another consumer took it
        except OSError as exc:
            self.error = exc  # it runs out by itself at its expiry, a visibility timeout away
        return True

    def after_fork(self) -> None:
        """In a forked child: a fresh lock (the parent's renewal thread may have held it)."""
        self._lock = threading.Lock()


class Renewer:
    """The renewal thread of one queue handle, serving every lease of that handle.

    The thread is a daemon, started by the first lease and gone when no lease is left
    or the handle is closed; a later lease starts another. A forked child starts with no
    thread and no leases: the parent goes on renewing the leases it holds.
    """

    def __init__(self, holder: LeaseHolder, name: str) -> None:
        self.holder = holder
        self.name = name
        self._wake = threading.Condition()
        self._leases: set[Lease] = set()
        self._thread: threading.Thread | None = None
        _RENEWERS.add(self)

    @property
    def thread(self) -> threading.Thread | None:
        """The running renewal thread, if any."""
        return self._thread

    def lease(self, message: Message, *, visibility_timeout: float, max_duration: float) -> Lease:
        """A new lease on *message*, renewed from now on (see :meth:`Lease.defer`)."""
        lease = Lease(
            self, message, visibility_timeout=visibility_timeout, max_duration=max_duration
        )
        self.start(lease)
        return lease

    def start(self, lease: Lease) -> None:
        """Renew *lease* from now on (starting the thread if none runs)."""
        with self._wake:
            self._leases.add(lease)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
                self._thread.start()
            else:
                self._wake.notify()

    def discard(self, lease: Lease) -> None:
        """Stop renewing *lease* (the thread ends with the last one)."""
        with self._wake:
            self._leases.discard(lease)
            if not self._leases:
                self._wake.notify()

    def close(self) -> None:
        """Stop renewing every lease and wait for the thread to end."""
        with self._wake:
            self._leases.clear()
            thread, self._thread = self._thread, None
            self._wake.notify()
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def after_fork(self) -> None:
        """In a forked child: no thread, no leases (they are the parent's to renew)."""
        for lease in self._leases:
            lease.after_fork()
        self._wake = threading.Condition()
        self._leases = set()
        self._thread = None

    def _run(self) -> None:
        me = threading.current_thread()
        clock = self.holder.clock
        while True:
            with self._wake:
                if self._thread is not me:
                    return  # closed (or forked away)
                if not self._leases:
                    self._thread = None
                    return
                now_us = clock.time_us()
                leases = list(self._leases)
                due = [lease for lease in leases if lease.next_renewal_us <= now_us]
                if not due:
                    nap_us = min(lease.next_renewal_us for lease in leases) - now_us
                    self._wake.wait(min(nap_us / 1e6, MAX_NAP))
                    continue
            for lease in due:  # outside the renewer's lock: leases lock first
                if not lease.renew():
                    self.discard(lease)


def until_entered(leases: Iterable[Lease]) -> Iterator[Lease]:
    """Yield each of *leases* deferred: renewed only inside its ``with`` block. One left
    unentered when the loop ends (a ``break``: the generator is closed or collected) is
    released at once; one skipped (the loop asked for the next) is not renewed and comes
    back when its visibility timeout ends, as a received message (so a loop that skips a
    message does not get it straight back)."""
    for lease in leases:
        lease.defer()
        try:
            yield lease
        except GeneratorExit:
            lease.abandon()
            raise


_RENEWERS: Final[weakref.WeakSet[Renewer]] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for renewer in list(_RENEWERS):
        renewer.after_fork()


os.register_at_fork(after_in_child=_after_fork_in_child)
