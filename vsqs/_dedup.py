"""Idempotent publishing: the same ``dedup_id`` within the window publishes once.

The queue asks this helper, between writing a body and making it ready, whether the
body's ``dedup_id`` is new (:meth:`Deduplicator.claim`); the helper never publishes.

A marker ``.vsqs/dedup/<sha256 of the dedup id>`` is created with ``O_EXCL`` after the
body is written and before it becomes ready; it holds the message id and its creation
time. Exclusive creation is atomic on every local filesystem and on NFSv3+, so across
processes and hosts exactly one publisher wins and the others return the winner's id.

Crash safety: the marker is written only once the body is on disk (as ``<id>.new``), and
a duplicate that finds a marker whose message is still ``<id>.new`` waits for it to
become ready. If that ``.new`` is left by a crashed publisher, the duplicate takes over
and publishes its own copy: at once if the marker is older than ``IN_PROGRESS_LIMIT``
seconds (by the marker's own timestamp), else after waiting that long itself (in case
the marker's writer has a clock that runs behind). A crash can never turn a
deduplicated publish into a lost one. Markers older than the window are ignored and
removed by the next publisher that meets them, and swept by :meth:`Queue.clean` and
every window by the deduplicating publishers themselves; the sweep lists only the
markers directory, so its cost does not grow with the backlog.

Exactness. The window is measured from the first publish, by the clocks of the
publishers (a marker records its writer's time; the reader compares it with its own).
Within the window exactly one message is published per ``dedup_id``, across processes
and hosts. Two limits, both at the edges of the window: duplicates that race with the
*expiry* of the previous marker may each publish once (removing a file only if it is
still the one read is not atomic in POSIX); and on a power loss the marker, which is
synced but whose directory entry may not be, can be lost while the message survives.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from typing import Final

from . import _fs
from ._clock import Clock
from ._layout import DEDUP, Layout

IN_PROGRESS_LIMIT: Final = 30.0
_POLL: Final = 0.005


@dataclass(frozen=True, slots=True)
class DedupClaim:
    """What :meth:`Deduplicator.claim` decided for one ``dedup_id``."""

    marker: str
    """The marker file of the ``dedup_id``."""
    created_us: int
    """The time written into the marker (by this process's clock)."""
    duplicate_of: str | None
    """The id already published under this ``dedup_id``; ``None`` if this publish won."""


class Deduplicator:
    """The deduplication markers of one queue.

    :param window: seconds a ``dedup_id`` is remembered.
    """

    def __init__(self, layout: Layout, clock: Clock, window: float) -> None:
        self._layout = layout
        self._clock = clock
        self._window_us = window * 1e6
        self._window = window
        self._last_sweep = float("-inf")

    @staticmethod
    def _marker(key: str) -> str:
        return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()

    def claim(self, key: str, message_id: str, *, durable: bool) -> DedupClaim:
        """Record that *message_id* publishes *key*, unless another id did within the window.

        Call it once the body is written (as ``<message_id>.new``) and before it becomes
        ready. Atomic across processes and hosts (one exclusive create): of all the
        publishers of one *key*, exactly one wins. A loser is told the winner's id; if the
        winner is still writing, this waits for it (up to ``IN_PROGRESS_LIMIT``), and takes
        over from one that crashed.

        :param durable: fsync the marker (a batch passes ``False`` and syncs once).
        """
        layout, clock = self._layout, self._clock
        marker = self._marker(key)
        waited_since = None
        while True:
            now_us = clock.time_us()
            content = f"{message_id} {now_us}".encode()
            if not layout.create(DEDUP, marker, content, durable=durable):
                found = self._read(marker)
                if found is None:
                    continue  # RACE: the marker was just expired by another publisher
                other_id, created_us = found
                if other_id and now_us - created_us > self._window_us:
                    self._expire(marker, created_us)
                    continue
                if not other_id or _fs.exists(layout.message(other_id + ".new")):
                    # The first publisher is still writing (or crashed mid-way). Between
                    # its marker and its rename there are only a few syscalls, so a
                    # marker that old with its `.new` still there belongs to a dead one.
                    waited_since = clock.monotonic() if waited_since is None else waited_since
                    stale = bool(other_id) and now_us - created_us > IN_PROGRESS_LIMIT * 1e6
                    if not stale and clock.monotonic() - waited_since < IN_PROGRESS_LIMIT:
                        clock.sleep(_POLL)
                        continue
                    self._expire(marker, created_us)  # it crashed: take over
                    continue
                return DedupClaim(marker, created_us, other_id)
            return DedupClaim(marker, now_us, None)

    def repoint(self, claim: DedupClaim, message_id: str) -> None:
        """Point a won marker at the id its message was finally published under."""
        content = f"{message_id} {claim.created_us}".encode()
        self._layout.write(DEDUP, claim.marker, content, durable=False)

    def release(self, claim: DedupClaim) -> None:
        """Forget a won marker whose message was not published: a retry must be free."""
        self._layout.remove(DEDUP, claim.marker)

    def sweep_if_due(self) -> None:
        """Remove expired markers, once per window (called by deduplicating publishers)."""
        now = self._clock.monotonic()
        if now - self._last_sweep > self._window:
            self._last_sweep = now
            self.clean()

    def _expire(self, marker: str, created_us: int) -> None:
        """Remove an expired marker, unless someone replaced it meanwhile."""
        layout = self._layout
        tomb = f"{marker}.expired-{os.getpid()}-{os.urandom(4).hex()}"
        try:
            layout.rename_noreplace(DEDUP, marker, tomb)
        except FileNotFoundError:
            return  # RACE: another publisher expired it first
        found = self._read(tomb)
        if found is not None and found[1] != created_us:
            # RACE: between our read and our rename another publisher expired the old
            # marker and made a fresh one; put the fresh one back.
            try:
                layout.rename_noreplace(DEDUP, tomb, marker)
            except FileExistsError:
                pass  # yet another marker took the name; it is equally valid
            else:
                return
        try:
            layout.remove(DEDUP, tomb)
        except OSError:
            pass  # a planted directory: it stays, as a tomb that no key ever names

    def clean(self) -> int:
        """Remove the markers older than the window; return how many."""
        layout = self._layout
        now_us = self._clock.time_us()
        removed = 0
        for name in layout.names(DEDUP):
            if "." in name:
                # An interrupted expiry (tomb) or a temporary file: debris once old.
                age = now_us / 1e6 - layout.mtime(DEDUP, name)
                if age > max(self._window, IN_PROGRESS_LIMIT) and layout.remove(DEDUP, name):
                    removed += 1
                continue
            found = self._read(name)
            if found is None:
                continue
            other_id, created_us = found
            age_us = now_us - created_us
            # A publisher that died between its marker and its rename: free the key
            # before `Queue.clean` removes the `.new`, or a retry would be dropped.
            crashed = (
                bool(other_id)
                and age_us > IN_PROGRESS_LIMIT * 1e6
                and _fs.exists(layout.message(other_id + ".new"))
            )
            if age_us > self._window_us or crashed:
                self._expire(name, created_us)
                removed += 1
        return removed

    def _read(self, marker: str) -> tuple[str, int] | None:
        """The id and time a marker records; ``None`` if it is gone."""
        try:
            raw = self._layout.read(DEDUP, marker)
        except OSError:
            raw = b"planted"  # not a regular file: an unparseable marker (see below)
        return None if raw is None else _parse_marker(raw)


def _parse_marker(raw: bytes) -> tuple[str, int]:
    """A marker's id and time. Empty: created a moment ago, its content not written yet
    (or its writer died right there): the caller waits for it like for a message still
    being written. Anything else unparseable (a hand edit, a planted entry) is treated
    as expired long ago, so it is replaced rather than blocking the key forever."""
    if not raw:
        return "", 1 << 62
    parts = raw.decode("ascii", "replace").split()
    if len(parts) != 2 or not (parts[0].isdigit() and parts[1].isdigit()):
        return "0", 0
    return parts[0], int(parts[1])
