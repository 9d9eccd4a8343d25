"""``fifo=True``: which ready messages of a directory may be claimed, group by group.

SQS FIFO promises one message in flight *per group*, nothing more, and so does vsqs:
a ready message waits only for its own group. From one listing (taken under the
directory's claim lock, see ``Queue._claim_in_flight_one``) a :class:`Gate` closes

* the whole of every group with a message *held* (a live lease, or a requeue's hold):
  its next message comes when that one is deleted or its lease ends;
* the part of a group published after a *delayed* message of it (``<id>.<due>``,
  marked in ``.vsqs/delayed``): the delayed message holds back nothing but itself and
  what must follow it, so ready messages published before it are delivered meanwhile.

Every other ready message may be claimed at once, several of one group in one batch
(in id order, as SQS's batches do). A message's group is read from its metadata
(``.vsqs/meta/<id>``, the attribute :data:`vsqs._meta.GROUP`) once per handle.

What is listed when. A handle keeps its last listing between claim steps: the ready
ids in its :class:`~vsqs._consumer.Consumer` view, the held and delayed names in a
:class:`Held`, to which it adds its own claims and from which its own deletes remove
them. A claim step lists afresh (under the claim lock) only when that listing is
stale (``max(refresh_interval, 20 x`` its cost``)``, or invalidated by any other
transition of the handle: extend, release, requeue, purge, a lost claim), when a held
or delayed name of it has reached its end (a fresh listing, never the cached end,
decides whether it returns), when the view has nothing left to offer, and always when
retention is configured. A stale snapshot is safe because claims go in id order per
group and the first failed claim closes its group: it can only make the handle claim
less (a group shown held that was freed since) or fail a rename (a message taken since
by another consumer), never pass a message held elsewhere.

A message without a group (no ``group=``, a vsqs 0.3 producer's) belongs to the
directory's one *ungrouped* group: ungrouped messages keep the strict order and the
one-in-flight of a ``fifo`` queue without groups, as before groups existed, and never
hold back a named group (nor one of them an ungrouped message).
"""

from __future__ import annotations

import heapq
import threading
from collections.abc import Iterable, Set
from typing import Final

from ._ids import encode_ready, id_of, parse_id
from ._meta import MetaStore, split_group

UNGROUPED: Final = ""
"""The key of messages without a group (a group's name is never empty)."""
_EVERYTHING: Final = -1  # a barrier below every code: the whole group is held
_HEAP_SLACK: Final = 1024  # deleted names a Held keeps beyond twice the live ones
_REMEMBERED: Final = 1 << 16  # ids whose group a handle remembers before starting afresh


class Groups:
    """The groups of one directory's messages, as this handle has read them.

    Not thread-safe: used under the directory's claim lock, which serialises the
    threads of a handle too.
    """

    def __init__(self, meta: MetaStore) -> None:
        self._meta = meta
        self._known: dict[str, str] = {}

    def group_of(self, message_id: str) -> str:
        """The group of *message_id* (:data:`UNGROUPED` if it has none, or no metadata).

        A message's group never changes, so it is read once.
        """
        known = self._known
        # RACE: a peer whose clock runs behind may reuse the id of a deleted message
        # (metadata is created exclusively, so never the id of one that exists): the
        # group remembered is then the old one's, and the new message waits for, or is
        # not held back by, that group; each message is still claimed once.
        group = known.get(message_id)
        if group is None:
            meta = self._meta.read(message_id) if self._meta.possible else None
            group = UNGROUPED
            if meta is not None and meta.attributes:
                group = split_group(meta.attributes)[1] or UNGROUPED
            if len(known) >= _REMEMBERED:
                known.clear()  # deleted messages' entries go too; the live are read again
            known[message_id] = group
        return group

    def gate(self, waiting: Iterable[tuple[int, str]], delayed: Set[str] | None = None) -> Gate:
        """The gate of a listing whose live leases and delays are *waiting* (``(end,
        name)`` pairs, as ``Queue._relist`` returns them), *delayed* the ids marked
        delayed (read now if not given)."""
        waiting = list(waiting)
        if delayed is None:
            delayed = self._meta.delayed_ids() if waiting else set()
        barriers: dict[str, int] = {}
        for _, name in waiting:
            message_id = id_of(name)
            group = self.group_of(message_id)
            value = parse_id(message_id) if message_id in delayed else None
            barrier = _EVERYTHING if value is None else encode_ready(value)
            barriers[group] = min(barriers.get(group, barrier), barrier)
        return Gate(self, barriers)


class Gate:
    """Which ready messages of one listing may be claimed now (see the module)."""

    def __init__(self, groups: Groups, barriers: dict[str, int]) -> None:
        self._groups = groups
        self._barriers = barriers  # group -> codes above this one wait

    def admits(self, code: int, message_id: str) -> str | None:
        """The group of the ready message *message_id* (packed as *code*) if it may be
        claimed now; ``None`` if it waits for an earlier message of its group."""
        group = self._groups.group_of(message_id)
        barrier = self._barriers.get(group)
        return group if barrier is None or code <= barrier else None

    def close(self, group: str) -> None:
        """Hold back the rest of *group* (its next message could not be claimed)."""
        self._barriers[group] = _EVERYTHING


class Held:
    """The held and delayed names of a handle's last listing, with the claims it made
    and less the leases it deleted since (``fifo=True``; see the module).

    Thread-safe: each method takes the object's lock for its whole update (deletes run
    outside the claim lock). Only ever a hint that errs towards holding: a name is
    dropped only by :meth:`discard` (this handle deleted exactly that file) or a new
    listing.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ends: dict[str, int] = {}  # name -> end (µs) of its lease or delay
        self._heap: list[tuple[int, str]] = []  # (end, name), stale entries skipped lazily
        self._delayed: frozenset[str] = frozenset()

    def load(self, waiting: list[tuple[int, str]], delayed: Set[str]) -> None:
        """Replace the names with a listing's *waiting* (``(end, name)``) and the ids
        then marked *delayed*."""
        with self._lock:
            self._ends = {name: end for end, name in waiting}
            self._heap = sorted(waiting)
            self._delayed = frozenset(delayed)

    def add(self, name: str, end: int) -> None:
        """This handle just claimed *name* (its lease ends at *end*)."""
        with self._lock:
            ends, heap = self._ends, self._heap
            ends[name] = end
            if len(heap) > 2 * len(ends) + _HEAP_SLACK:
                # Deleted names stay in the heap until they reach its head (behind a
                # longer lease of another consumer, that can be a while): keep the live.
                heap[:] = [(end, name) for name, end in ends.items()]
                heapq.heapify(heap)
            else:
                heapq.heappush(heap, (end, name))

    def discard(self, name: str) -> None:
        """This handle deleted the file *name*: its group is no longer held by it."""
        with self._lock:
            self._ends.pop(name, None)

    def due(self, now_us: int) -> bool:
        """Whether a name's lease or delay has reached its end by *now_us* (only a
        fresh listing may then say what became of it)."""
        with self._lock:
            heap, ends = self._heap, self._ends
            while heap and ends.get(heap[0][1]) != heap[0][0]:
                heapq.heappop(heap)  # deleted by this handle, or a stale duplicate
            return bool(heap) and heap[0][0] <= now_us

    def snapshot(self) -> tuple[list[tuple[int, str]], frozenset[str]]:
        """The names (``(end, name)``) and the delayed ids, for :meth:`Groups.gate`."""
        with self._lock:
            return [(end, name) for name, end in self._ends.items()], self._delayed


CLAIM_WAIT: Final = 0.1
"""Seconds a ``fifo`` claim waits for the directory's claim lock (held by another
consumer for one claim step: a listing and a few renames) before finding nothing; a
non-blocking receive may take this long, a blocked one looks again after
:data:`CLAIM_RETRY`, so a stopped holder costs it no more than its own timeout."""
CLAIM_RETRY: Final = 0.01
"""Seconds before a blocked ``fifo`` receive that found the claim lock held looks again
(the lock's release makes no file event to wake it)."""
