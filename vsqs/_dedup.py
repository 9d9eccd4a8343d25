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
from ._layout import Layout

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

    def _marker(self, key: str) -> str:
        digest = hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()
        return self._layout.dedup(digest)

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
        layout.ensure(layout.dedup_dir)
        marker = self._marker(key)
        waited_since = None
        while True:
            now_us = clock.time_us()
            try:
                fd = _fs.create_exclusive(marker, layout.create_mode)
            except FileExistsError:
                found = _read_marker(marker)
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
            layout.fill(fd, marker, f"{message_id} {now_us}".encode(), durable=durable)
            return DedupClaim(marker, now_us, None)

    def repoint(self, claim: DedupClaim, message_id: str) -> None:
        """Point a won marker at the id its message was finally published under."""
        self._layout.write_atomic(
            claim.marker, f"{message_id} {claim.created_us}".encode(), durable=False
        )

    def release(self, claim: DedupClaim) -> None:
        """Forget a won marker whose message was not published: a retry must be free."""
        _fs.unlink(claim.marker)

    def sweep_if_due(self) -> None:
        """Remove expired markers, once per window (called by deduplicating publishers)."""
        now = self._clock.monotonic()
        if now - self._last_sweep > self._window:
            self._last_sweep = now
            self.clean()

    def _expire(self, marker: str, created_us: int) -> None:
        """Remove an expired marker, unless someone replaced it meanwhile."""
        tomb = f"{marker}.expired-{os.getpid()}-{os.urandom(4).hex()}"
        try:
            _fs.rename_noreplace(marker, tomb)
        except FileNotFoundError:
            return  # RACE: another publisher expired it first
        found = _read_marker(tomb)
        if found is not None and found[1] != created_us:
            # RACE: between our read and our rename another publisher expired the old
            # marker and made a fresh one; put the fresh one back.
            try:
                _fs.rename_noreplace(tomb, marker)
            except FileExistsError:
                pass  # yet another marker took the name; it is equally valid
            else:
                return
        _fs.unlink(tomb)

    def clean(self) -> int:
        """Remove the markers older than the window; return how many."""
        layout = self._layout
        now_us = self._clock.time_us()
        removed = 0
        for name in _fs.list_all(layout.dedup_dir):
            path = layout.dedup(name)
            if "." in name:
                # An interrupted expiry (tomb) or a temporary file: debris once old.
                age = now_us / 1e6 - _fs.mtime(path)
                if age > max(self._window, IN_PROGRESS_LIMIT) and _fs.unlink(path):
                    removed += 1
                continue
            found = _read_marker(path)
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
                self._expire(path, created_us)
                removed += 1
        return removed


def _read_marker(path: str) -> tuple[str, int] | None:
    try:
        raw = _fs.read_regular(path)
    except FileNotFoundError:
        return None
    parts = raw.decode("ascii", "replace").split()
    if len(parts) != 2 or not (parts[0].isdigit() and parts[1].isdigit()):
        # Empty: created a moment ago, its content not written yet (or its writer died
        # right there). The caller waits for it like for a message still being written.
        return ("", 1 << 62) if not raw else None
    return parts[0], int(parts[1])
