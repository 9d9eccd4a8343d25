"""A consumer's in-memory view of the queue: the sorted ready ids and the known leases.

The seed lists the whole directory before every receive. At a deep backlog that listing
dominates everything, so a consumer lists once and then claims from the sorted list it
got, oldest first, until the list is used up or *stale*. Any name in the view is only a
hint: the atomic rename decides who gets a message.

Freshness. New publishes carry newer ids than everything in the view, so serving the
view first is FIFO. Only messages that come *back* with old ids (a lease that expired in
another process, a delayed publish coming due, a clock-skewed publisher) can be missed,
and only until the next listing, which happens at least every ``max(refresh_interval,
20 × the last listing's duration)``: listings never take more than ~5% of the time.

Contention. Consumers in other processes hold the same view and race for its head. A
failed claim means another consumer took that message first; the loser moves on to the
next candidate, as the design says, and never skips one. So every consumer claims in id
order: of one producer's messages, each consumer receives the older ones first (strict
FIFO; messages that come *back* are served again in id order from the next listing on).
The price is failed claims, each one ``rename`` that finds no file; ``docs/benchmarks``
measures them with 1 to 8 consumers.
"""

from __future__ import annotations

import heapq
from collections import deque
from typing import Final

_REFRESH_FACTOR: Final = 20.0


class ReadyView:
    """Sorted candidates plus a heap of known leases.

    :meth:`take` is safe to call from several threads without a lock: the candidates
    are a deque, whose ``popleft`` is atomic. Everything else is called under the
    queue's lock.
    """

    def __init__(self, refresh_interval: float) -> None:
        self.refresh_interval = refresh_interval
        self.codes: deque[int] = deque()
        """The listed candidates, oldest first (read it; change it through the methods)."""
        self.returned: list[int] = []
        """A heap of the ids this process put back (requeues), merged into :meth:`take`."""
        self._held: list[tuple[int, str]] = []  # heap: (expiry_us, name)
        self.stale_at = float("-inf")
        """The monotonic time after which the listing should be redone."""
        self.claim_misses = 0  # all failed claims, for benchmarks and tests

    def load(self, codes: list[int], held: list[tuple[int, str]], now: float, cost: float) -> None:
        """Replace the view with a fresh listing taken at monotonic time *now*."""
        self.codes = deque(codes)
        self.returned = []
        heapq.heapify(held)
        self._held = held
        self.stale_at = now + max(self.refresh_interval, _REFRESH_FACTOR * cost)

    def stale(self, now: float) -> bool:
        """Whether the listing is old enough to redo before the next claim."""
        return now > self.stale_at

    def invalidate(self) -> None:
        self.stale_at = float("-inf")

    def take(self) -> int | None:
        """The next candidate to claim, or ``None`` when the view is used up."""
        if self.returned:
            return self._take_merged()
        try:
            return self.codes.popleft()
        except IndexError:
            return None

    def _take_merged(self) -> int | None:
        codes, returned = self.codes, self.returned
        try:
            if not codes or returned[0] <= codes[0]:
                return heapq.heappop(returned)
            return codes.popleft()
        except IndexError:
            return None  # RACE: another thread took the last candidate meanwhile

    def miss(self) -> None:
        """Someone else took the candidate: count it; the next take is the next one."""
        self.claim_misses += 1

    def put_back(self, code: int) -> None:
        """Offer an id that this process returned to the queue."""
        heapq.heappush(self.returned, code)

    def lease_due(self, now_us: int) -> bool:
        """Whether a known lease has expired by *now_us* (cheap: the claim hot path)."""
        held = self._held
        return bool(held) and held[0][0] <= now_us

    def due_leases(self, now_us: int) -> list[tuple[int, str]]:
        """Pop the known leases that have expired by *now_us*."""
        due = []
        while self._held and self._held[0][0] <= now_us:
            due.append(heapq.heappop(self._held))
        return due

    def next_expiry(self) -> int | None:
        """The earliest known lease or delay expiry (µs), to bound a wait."""
        return self._held[0][0] if self._held else None
