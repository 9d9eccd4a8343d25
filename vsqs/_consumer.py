"""A consumer's bookkeeping: what one queue handle knows of the directory and of its leases.

Everything a receiving handle remembers between calls lives here, in one object with one
lock, so that a :class:`~vsqs.Queue` shared by many threads stays consistent without
relying on the GIL (filelock keeps its state in a context dataclass the same way):

* the *view*: the ready ids of the last listing, sorted, and the ids this handle put
  back (requeues), which receives take oldest first;
* the leases seen in that listing (a heap by expiry), to return them when they end;
* the leases this handle handed out (a heap by expiry, stale entries skipped lazily),
  so that a blocked receive wakes when one of them ends undeleted;
* the receipt this handle issued per id, and the receipts it superseded by extending a
  lease (so an old receipt of the same lease still deletes through this handle);
* names that are not regular files (planted: never looked at again), and the ids held
  back from the last listing because they appeared while it ran (see :meth:`load`).

Concurrency. Every method is atomic with respect to the others: each takes the lock for
its whole update and returns plain values, never a live reference to shared state. No
method does I/O, so the lock is held for microseconds. Between two calls other threads
may run; the callers' syscalls decide who gets a message (one rename), and this object
only ever holds hints: a stale hint costs a failed rename, never a wrong delivery.

Freshness. New publishes carry newer ids than everything in the view, so serving the
view first is FIFO. Only messages that come *back* with old ids (a lease that expired in
another process, a delayed publish coming due, a clock-skewed publisher) can be missed,
and only until the next listing, which happens at least every ``max(refresh_interval,
20 × the last listing's duration)``: listings never take more than ~5% of the time.

Contention. Consumers in other processes hold the same view and race for its head. A
failed claim means another consumer took that message first; the loser moves on to the
next candidate, as the design says, and never skips one. So every consumer claims in id
order: of one producer's messages, each consumer receives the older ones first.
"""

from __future__ import annotations

import bisect
import heapq
import math
import threading
from collections import OrderedDict, deque
from collections.abc import Iterable
from typing import Final

from ._ids import decode_ready
from ._inotify import ANNOUNCEMENT

_REFRESH_FACTOR: Final = 20.0
RECEIPT_CACHE: Final = 4096
"""How many receipts (and superseded receipts) a handle remembers, newest kept."""
_OWN_SLACK: Final = 1024  # dead lease entries tolerated beyond twice the live ones


class Consumer:
    """The bookkeeping of one queue handle's receives (see the module docstring)."""

    def __init__(self, refresh_interval: float) -> None:
        self.refresh_interval = refresh_interval
        self._lock = threading.Lock()
        self._codes: deque[int] = deque()  # the listed candidates, oldest first
        self._returned: list[int] = []  # heap: ids this handle put back (requeues)
        self._listed_leases: list[tuple[int, str]] = []  # heap: (expiry_us, name)
        self._stale_at = -math.inf  # monotonic time after which to list again
        self._receipts: OrderedDict[str, str] = OrderedDict()  # id -> live receipt
        self._superseded: OrderedDict[str, str] = OrderedDict()  # old -> next receipt
        self._own: list[tuple[int, str, str]] = []  # heap: (expiry_us, id, receipt)
        self._ignored: set[str] = set()  # names that are not regular files (planted)
        self._deferred: set[int] = set()  # listed while the listing ran (see load)
        self.claim_misses = 0
        """Claims this handle lost to another consumer (for benchmarks and tests)."""

    # -- the view ---------------------------------------------------------------------

    def stale(self, now: float) -> bool:
        """Whether the listing is old enough to redo before the next claim."""
        return now > self._stale_at

    def invalidate(self) -> None:
        """Make the next claim list the directory again."""
        self._stale_at = -math.inf

    def take(self) -> int | None:
        """The next candidate to claim (a packed id), or ``None`` when the view is used up."""
        if not self._returned:
            # The common case, no requeue of ours to merge: one atomic ``popleft`` (a deque
            # is thread-safe on its own, in free-threaded builds too), no lock.
            # RACE: another thread may put an id back or load a new listing meanwhile:
            # this take then serves the older view once; every name is only a hint.
            try:
                return self._codes.popleft()
            except IndexError:
                return None
        with self._lock:
            codes, returned = self._codes, self._returned
            if returned and (not codes or returned[0] <= codes[0]):
                if self._deferred and min(self._deferred) < returned[0]:
                    # An older message waits for the listing that confirms it (see
                    # load): list first, or a returned lease or delay would pass it.
                    return None
                return heapq.heappop(returned)
            return codes.popleft() if codes else None

    def peek(self) -> int | None:
        """The candidate :meth:`take` would give first (a packed id), left in the view;
        ``None`` when the view is used up."""
        with self._lock:
            codes, returned = self._codes, self._returned
            try:
                if returned and (not codes or returned[0] <= codes[0]):
                    return returned[0]
                return codes[0] if codes else None
            except IndexError:
                return None  # RACE: a lock-free take emptied the view since the test

    def put_back(self, codes: Iterable[int]) -> None:
        """Offer ids that this handle made ready again (requeues, unclaimed wake-ups)."""
        with self._lock:
            for code in codes:
                heapq.heappush(self._returned, code)

    def put_front(self, codes: list[int]) -> None:
        """Offer again, first, the candidates just taken and passed over (*codes*, in the
        order taken: older than every one left in the view)."""
        with self._lock:
            self._codes.extendleft(reversed(codes))

    def miss(self) -> None:
        """Someone else took the candidate: count it; the next take is the next one."""
        with self._lock:
            self.claim_misses += 1

    def named(self, made_ready: list[int]) -> list[int] | None:
        """The messages a waiter saw made ready, to claim without listing: newest first
        (the caller pops from the end), planted names left out.

        ``None`` when they cannot stand for a listing: ids are held back from the last
        one (:meth:`load`). When the view still has candidates, they are merged into it
        instead (FIFO across this handle's own requeues) and the answer is empty.
        Announcements (:data:`~vsqs._inotify.ANNOUNCEMENT`) are dropped; the caller
        checks for them.
        """
        with self._lock:
            if self._deferred:
                return None
            named = sorted((code for code in made_ready if code != ANNOUNCEMENT), reverse=True)
            if self._ignored:
                named = [code for code in named if decode_ready(code) not in self._ignored]
            if self._codes or self._returned:
                for code in named:
                    heapq.heappush(self._returned, code)
                return []
            return named

    def without_ignored(self, codes: list[int]) -> list[int]:
        """*codes* less the planted names this handle ignores (*codes* itself if none)."""
        with self._lock:
            ignored = self._ignored
            if not ignored:
                return codes
            return [code for code in codes if decode_ready(code) not in ignored]

    def ignore(self, message_id: str) -> None:
        """Never offer *message_id* again: it is not a regular file (planted)."""
        with self._lock:
            self._ignored.add(message_id)

    def load(
        self,
        codes: list[int],
        leases: list[tuple[int, str]],
        started_us: int,
        now: float,
        cost: float,
    ) -> None:
        """Replace the view with a listing that started at *started_us* (wall clock) and
        ended at monotonic *now* after *cost* seconds.

        A listing is not a snapshot: a name that becomes ready while ``scandir`` runs may
        or may not be returned, depending on where it lands in the directory. So one
        producer's messages A then B, both made ready during the scan, could show up as
        B without A, and serving B would break FIFO. Every message created before the
        scan began was (if ready at all) ready before it began, and is listed. So only
        those are served; the others wait for the next listing, which sees every older
        message that was ready when they were. A message held back once is served by the
        next listing whatever its id says (unless an older one appeared meanwhile, which
        is held back in turn), so a publisher whose clock runs ahead cannot starve. (On a
        manual clock that stands still, every message published "now" is held back
        once: the same rule, so the model tests exercise it.)
        """
        heapq.heapify(leases)
        with self._lock:
            split = bisect.bisect_left(codes, started_us << 1)
            if split == len(codes):
                self._deferred = set()
            else:
                # Serve the recent ones up to the first that this listing shows for the
                # first time: an older message that a previous listing missed blocks the
                # newer ones behind it until it is confirmed in turn.
                confirmed = split
                while confirmed < len(codes) and codes[confirmed] in self._deferred:
                    confirmed += 1
                self._deferred = set(codes[confirmed:])
                codes = codes[:confirmed]
            self._codes = deque(codes)
            self._returned = []
            self._listed_leases = leases
            self._stale_at = now + max(self.refresh_interval, _REFRESH_FACTOR * cost)

    def deferred(self) -> bool:
        """Whether the last listing held messages back (the next one confirms them)."""
        return bool(self._deferred)

    # -- leases -----------------------------------------------------------------------

    def lease_due(self, now_us: int) -> bool:
        """Whether a known lease has ended by *now_us* (cheap: the claim hot path)."""
        own, listed = self._own, self._listed_leases
        # RACE: read without the lock: another thread may pop the head meanwhile; a
        # wrong answer costs one call to due() that finds nothing, or one claim later.
        try:
            return (bool(own) and own[0][0] <= now_us) or (bool(listed) and listed[0][0] <= now_us)
        except IndexError:
            return True

    def due(self, now_us: int) -> list[str]:
        """Take the held names whose lease ended by *now_us*: listed ones, and those this
        handle handed out and that are still undeleted and unextended."""
        with self._lock:
            listed, own, receipts = self._listed_leases, self._own, self._receipts
            names = []
            while listed and listed[0][0] <= now_us:
                names.append(heapq.heappop(listed)[1])
            while own and own[0][0] <= now_us:
                _, message_id, receipt = heapq.heappop(own)
                if receipts.get(message_id) == receipt:
                    names.append(receipt)
            return names

    def next_expiry(self) -> int | None:
        """The earliest lease or delay known to end (µs), listed or handed out here."""
        with self._lock:
            own, receipts = self._own, self._receipts
            while own and receipts.get(own[0][1]) != own[0][2]:
                heapq.heappop(own)  # deleted, extended or released since
            ends = [heap[0][0] for heap in (own, self._listed_leases) if heap]
            return min(ends) if ends else None

    def claimed(self, message_id: str, receipt: str, expiry_us: int) -> None:
        """Remember a lease this handle just took."""
        lease = (expiry_us, message_id, receipt)
        with self._lock:
            receipts = self._receipts
            if len(receipts) >= RECEIPT_CACHE:
                receipts.popitem(last=False)
            receipts[message_id] = receipt
            if self._superseded:
                # A live receipt is never a superseded one (a coarse clock may give a new
                # lease a receipt an older lease had): chains end at live leases.
                self._superseded.pop(receipt, None)
            own = self._own
            if len(own) > 2 * len(receipts) + _OWN_SLACK:
                # Deleted, extended and released leases stay in the heap until they would
                # have ended (dropped lazily): without this, a fast consumer would keep one
                # entry per message it took in the last visibility timeout (3 million
                # at 50,000 a second and 60 s). Keeping the live ones only, now and then,
                # costs O(1) a claim.
                own[:] = [entry for entry in own if receipts.get(entry[1]) == entry[2]]
                heapq.heapify(own)
            if own and lease < own[(len(own) - 1) >> 1]:
                heapq.heappush(own, lease)
            else:  # not below its parent (leases mostly end in claim order): still a heap
                own.append(lease)

    def extended(self, message_id: str, old: str, new: str, expiry_us: int) -> None:
        """Remember that this handle moved a lease from receipt *old* to *new*."""
        with self._lock:
            self._receipts[message_id] = new
            superseded = self._superseded
            if len(superseded) >= RECEIPT_CACHE:
                superseded.popitem(last=False)
            superseded[old] = new
            superseded.pop(new, None)  # live now: no cycle can form
            heapq.heappush(self._own, (expiry_us, message_id, new))

    def settle(self, message_id: str, receipt: str) -> bool:
        """If *receipt* is the live receipt this handle issued for *message_id*, forget
        it (its lease is being deleted through here) and say so, in one step."""
        with self._lock:
            receipts = self._receipts
            if receipts.get(message_id) != receipt:
                return False
            del receipts[message_id]
            return True

    def receipt(self, message_id: str) -> str | None:
        """The live receipt this handle issued for *message_id*, if any."""
        with self._lock:
            return self._receipts.get(message_id)

    def current(self, receipt: str) -> str:
        """The receipt that this handle's later extensions of *receipt* gave the lease
        (*receipt* itself if it extended none)."""
        with self._lock:
            superseded = self._superseded
            while receipt in superseded:
                receipt = superseded[receipt]
            return receipt

    def ended(self, message_id: str, receipt: str) -> None:
        """Forget the lease *receipt* of *message_id*: deleted, released or moved through
        here (a newer lease of the same id that this handle took since is kept)."""
        with self._lock:
            if self._receipts.get(message_id) == receipt:
                del self._receipts[message_id]
