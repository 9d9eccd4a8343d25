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
failed claim means someone else is working here, so after one the consumer jumps ahead
by a random distance that doubles with each consecutive miss (capped), spreading
consumers over the list instead of letting them fail on the same file over and over.
One consumer alone never misses, and so reads in strict order.
"""

from __future__ import annotations

import heapq
import random
from typing import Final

_MAX_JUMP: Final = 256
_REFRESH_FACTOR: Final = 20.0


class ReadyView:
    """Sorted candidates plus a heap of known leases (not thread-safe; the queue locks)."""

    def __init__(self, refresh_interval: float) -> None:
        self.refresh_interval = refresh_interval
        self._codes: list[int] = []
        self._pos = 0
        self._returned: list[int] = []  # heap: ids this process put back (requeues)
        self._held: list[tuple[int, str]] = []  # heap: (expiry_us, name)
        self._listed_at = float("-inf")
        self._listing_cost = 0.0
        self._misses = 0  # consecutive failed claims
        self.claim_misses = 0  # all failed claims, for benchmarks and tests

    def load(self, codes: list[int], held: list[tuple[int, str]], now: float, cost: float) -> None:
        """Replace the view with a fresh listing taken at monotonic time *now*."""
        self._codes = codes
        self._pos = 0
        self._returned = []
        heapq.heapify(held)
        self._held = held
        self._listed_at = now
        self._listing_cost = cost

    def stale(self, now: float) -> bool:
        """Whether the listing is old enough to redo before the next claim."""
        limit = max(self.refresh_interval, _REFRESH_FACTOR * self._listing_cost)
        return now - self._listed_at > limit

    def invalidate(self) -> None:
        self._listed_at = float("-inf")

    def take(self) -> int | None:
        """The next candidate to claim, or ``None`` when the view is used up."""
        if self._returned and (
            self._pos >= len(self._codes) or self._returned[0] <= self._codes[self._pos]
        ):
            return heapq.heappop(self._returned)
        if self._pos < len(self._codes):
            code = self._codes[self._pos]
            self._pos += 1
            return code
        return None

    def peek_all(self) -> list[int]:
        """The remaining candidates in order (for browsing)."""
        return sorted(self._returned + self._codes[self._pos :])

    def hit(self) -> None:
        self._misses = 0

    def miss(self) -> None:
        """Someone else took the candidate: jump ahead, further after each miss."""
        self.claim_misses += 1
        self._misses += 1
        jump = min(1 << min(self._misses, 16), _MAX_JUMP)
        self._pos = min(len(self._codes), self._pos + random.randrange(jump))

    def put_back(self, code: int) -> None:
        """Offer an id that this process returned to the queue."""
        heapq.heappush(self._returned, code)

    def add_held(self, expiry_us: int, name: str) -> None:
        heapq.heappush(self._held, (expiry_us, name))

    def due_leases(self, now_us: int) -> list[tuple[int, str]]:
        """Pop the known leases that have expired by *now_us*."""
        due = []
        while self._held and self._held[0][0] <= now_us:
            due.append(heapq.heappop(self._held))
        return due

    def next_expiry(self) -> int | None:
        """The earliest known lease or delay expiry (µs), to bound a wait."""
        return self._held[0][0] if self._held else None

    def remaining(self) -> int:
        return len(self._codes) - self._pos + len(self._returned)
