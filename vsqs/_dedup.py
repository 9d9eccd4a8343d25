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
still the one read is not atomic in POSIX); and on a power loss a message's marker,
which is synced but whose directory entry may not be, can be lost while the message
survives. A batch's record (below) is flushed with its directory entry, if durable.

Chunks. ``publish_batch(..., batch_dedup_id=...)`` deduplicates a whole batch with one
marker (:meth:`Deduplicator.claim_chunk`), named from the digest of ``"chunk\0"`` and
the id so it never meets a per-message one. Its content is a JSON record of the batch:
its message ids (in order) and sizes, its attributes and delay. The publisher writes
every body as ``<id>.new`` first (and flushes them, if durable); creating the marker
is the batch's commit point; the renames that follow only roll it forward. Whoever
finds a marker whose ``.new`` files are still there, the batch is published already:
a duplicate publisher waits for the writer, as above, and after ``IN_PROGRESS_LIMIT``
rolls the rest forward itself (:meth:`Queue.clean` does the same), from the record
alone. So a crash before the marker leaves only invisible ``.new`` debris (a retry
publishes the batch afresh), and a crash after it leaves a batch that the next
duplicate or ``clean`` completes: never a half-published batch, never a copy.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Final

from . import _fs
from ._clock import Clock
from ._ids import parse_decimal
from ._layout import DEDUP, READ_LIMITS, Layout

IN_PROGRESS_LIMIT: Final = 30.0
_POLL: Final = 0.005


def _digest(text: str) -> str:
    """The hex SHA-256 of *text* (lone surrogates kept): a marker's file name."""
    import hashlib  # noqa: PLC0415 -- OpenSSL's 3 ms at import, for queues that deduplicate

    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


class DedupClaim:
    """What :meth:`Deduplicator.claim` decided for one ``dedup_id`` (immutable)."""

    __slots__ = ("created_us", "duplicate_of", "marker")

    def __init__(self, marker: str, created_us: int, duplicate_of: str | None) -> None:
        self.marker: Final = marker  #: the marker file of the ``dedup_id``
        self.created_us: Final = created_us  #: written into it (by this process's clock)
        self.duplicate_of: Final = duplicate_of  #: the id published before, ``None`` if none


class Chunk:
    """A batch's record under one ``batch_dedup_id``: its marker's content (immutable)."""

    __slots__ = ("attributes", "created_us", "delay_us", "entries", "marker")

    def __init__(
        self,
        marker: str,
        created_us: int,
        entries: tuple[tuple[str, int], ...],
        attributes: dict[str, str],
        delay_us: int,
    ) -> None:
        self.marker: Final = marker  #: the marker file of the batch
        self.created_us: Final = created_us  #: written into it (by its writer's clock)
        self.entries: Final = entries  #: each message's id and size, in publish order
        self.attributes: Final = attributes  #: the attributes of every message of the batch
        self.delay_us: Final = delay_us  #: the delay of every message of the batch (µs)

    def record(self, ids: list[str] | None = None) -> bytes:
        """The marker's content: this batch as JSON (its messages under *ids*, if given)."""
        import json  # noqa: PLC0415 -- 2 ms at import: only where records are read or written

        record = {
            "time": self.created_us,
            "ids": [entry[0] for entry in self.entries] if ids is None else ids,
            "sizes": [entry[1] for entry in self.entries],
            "attributes": self.attributes,
            "delay_us": self.delay_us,
        }
        return json.dumps(record, separators=(",", ":")).encode()


class Deduplicator:
    """The deduplication markers of one queue.

    :param window: seconds a ``dedup_id`` is remembered.
    :param staged: whether a ``<id>.new`` exists (default: in *layout*'s directory); a
        partitioned queue keeps one set of markers for all its partitions and looks in
        each of them.
    """

    def __init__(
        self,
        layout: Layout,
        clock: Clock,
        window: float,
        staged: Callable[[str], bool] | None = None,
    ) -> None:
        self._layout = layout
        # Whether a `<id>.new` is still there: in this queue's directory, or, for the one
        # set of markers of a partitioned queue, in any of its partitions.
        self._staged = staged or (lambda name: _fs.exists(layout.message(name)))
        self._clock = clock
        self._window_us = window * 1e6
        self._window = window
        self._last_sweep = float("-inf")

    @staticmethod
    def _marker(key: str) -> str:
        return _digest(key)

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
                if not other_id or self._staged(other_id + ".new"):
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

    def published(self, key: str) -> str | None:
        """The id published under *key* within the window, if its publish is complete
        (one read; ``None`` if none is, or one is still being written). A bounded
        queue asks before it waits for room: a retry needs none."""
        other_id, created_us = self._read(self._marker(key)) or ("", 0)  # ("", 0): none
        if not other_id or self._clock.time_us() - created_us > self._window_us:
            return None
        return None if self._staged(other_id + ".new") else other_id

    def repoint(self, claim: DedupClaim, message_id: str) -> None:
        """Point a won marker at the id its message was finally published under."""
        content = f"{message_id} {claim.created_us}".encode()
        self._layout.write(DEDUP, claim.marker, content, durable=False)

    def release(self, claim: DedupClaim) -> None:
        """Forget a won marker whose message was not published: a retry must be free."""
        self._layout.remove(DEDUP, claim.marker)

    @staticmethod
    def _chunk_marker(key: str) -> str:
        return _digest("chunk\0" + key)

    def find_chunk(self, key: str) -> Chunk | None:
        """The batch recorded under *key*, if any and within the window (one read)."""
        marker = self._chunk_marker(key)
        chunk = self._read_chunk(marker)
        if chunk is None or self._clock.time_us() - chunk.created_us > self._window_us:
            return None
        return chunk

    def claim_chunk(
        self,
        key: str,
        entries: list[tuple[str, int]],
        attributes: Mapping[str, str],
        delay_us: int,
        durable: bool = False,
    ) -> tuple[Chunk, bool]:
        """Record the staged batch *entries* under *key* (its commit point), unless a batch
        was recorded under it within the window; return the record and whether it is ours.

        Call it once every body is written as ``<id>.new`` (and flushed, if durable).
        Atomic across processes and hosts (one exclusive create): of all the publishers
        of one *key*, exactly one wins. An expired record whose batch is not complete is
        returned (as not ours), to be rolled forward rather than replaced.

        :param durable: flush the record and its directory entry before returning: a
            batch that is visible after a power loss must keep its record, or a retry
            would publish it again. A failed flush removes the record and raises.
        """
        layout, clock = self._layout, self._clock
        marker = self._chunk_marker(key)
        while True:
            now_us = clock.time_us()
            chunk = Chunk(marker, now_us, tuple(entries), dict(attributes), delay_us)
            content = chunk.record()
            if len(content) > READ_LIMITS[DEDUP]:  # it could never be read back
                raise ValueError(
                    f"a batch of {len(entries)} messages is too large for one batch_dedup_id "
                    f"(its record would exceed {READ_LIMITS[DEDUP]} bytes): split it"
                )
            # Written whole under a temporary name, then given the marker's name with a
            # no-replace rename: a reader never sees a partial record.
            tmp = f"{marker}.new-{os.getpid()}-{os.urandom(4).hex()}"
            layout.create(DEDUP, tmp, content, durable=durable)
            try:
                layout.rename_noreplace(DEDUP, tmp, marker)
            except FileExistsError:
                layout.remove(DEDUP, tmp)
            except BaseException:
                layout.remove(DEDUP, tmp)
                raise
            else:
                if durable:
                    self._flush_marker(marker)
                return chunk, True
            found = self._read_chunk(marker)
            if found is None:
                continue  # RACE: expired by another publisher meanwhile
            if now_us - found.created_us > self._window_us and not self.pending(found):
                self._expire(marker, found.created_us)
                continue
            return found, False

    def _flush_marker(self, marker: str) -> None:
        """Make a new record's name durable; on failure remove it (its batch was never
        visible) and raise: a record that may not survive is not a commit point."""
        try:
            self._layout.fsync(DEDUP)
        except BaseException:
            self._layout.remove(DEDUP, marker)
            raise

    def repoint_chunk(self, chunk: Chunk, ids: list[str]) -> None:
        """Record the ids a batch's messages were finally published under (some were
        drawn again), so a duplicate is told those. Atomic (a rename over the marker)."""
        self._layout.write(DEDUP, chunk.marker, chunk.record(ids), durable=False)

    def pending(self, chunk: Chunk) -> list[tuple[str, int]]:
        """The entries of *chunk* still staged (``<id>.new``), in order."""
        return [entry for entry in chunk.entries if self._staged(entry[0] + ".new")]

    def await_chunk(self, chunk: Chunk) -> list[tuple[str, int]]:
        """Wait for the writer of *chunk* to finish it; what is left to roll forward.

        Empty once the writer made every message ready. Waits at most
        ``IN_PROGRESS_LIMIT`` (not at all for a record that old by its own time), so
        a writer that died is taken over.
        """
        clock = self._clock
        since = clock.monotonic()
        while pending := self.pending(chunk):
            stale = clock.time_us() - chunk.created_us > IN_PROGRESS_LIMIT * 1e6
            if stale or clock.monotonic() - since >= IN_PROGRESS_LIMIT:
                return pending
            clock.sleep(_POLL)
        return []

    def unfinished_chunks(self) -> list[tuple[Chunk, list[tuple[str, int]], bool]]:
        """Recorded batches with ``.new`` files left: each with those entries and whether
        its writer is presumed dead (older than ``IN_PROGRESS_LIMIT``). :meth:`Queue.clean`
        rolls the dead ones forward and spares the others' ``.new`` files."""
        now_us = self._clock.time_us()
        found = []
        for name in self._layout.names(DEDUP):
            chunk = None if "." in name else self._read_chunk(name)
            if chunk is not None and (pending := self.pending(chunk)):
                stale = now_us - chunk.created_us > IN_PROGRESS_LIMIT * 1e6
                found.append((chunk, pending, stale))
        return found

    def _read_chunk(self, marker: str) -> Chunk | None:
        """The batch a chunk marker records; ``None`` if it is gone. Anything that is not
        a record (a planted entry, a hand edit) reads as expired long ago, with nothing
        left to finish, so it is replaced rather than blocking the key."""
        try:
            raw = self._layout.read(DEDUP, marker)
        except OSError:
            raw = b"planted"  # not a regular file
        if raw is None:
            return None
        return _parse_chunk(marker, raw) or Chunk(marker, 0, (), {}, 0)

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
        found = self._created(tomb)
        if found is not None and found != created_us:
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

    def clean(self, spared: set[str] | None = None) -> int:
        """Remove the markers older than the window; return how many.

        :param spared: filled with the ``<id>.new`` names that a marker still in force
            points at (its publisher is between marker and rename, or died there less
            than ``IN_PROGRESS_LIMIT`` ago): :meth:`Queue.clean` must not remove them, or
            a retry would find the marker, no ``.new`` to wait for, and take the dead
            publisher's id for a published message (a lost publish).
        """
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
            try:
                raw = layout.read(DEDUP, name)
            except OSError:
                raw = b"planted"  # not a regular file: an unparseable marker (see below)
            if raw is None:
                continue
            chunk = _parse_chunk(name, raw)
            if chunk is not None:
                # A batch's record: kept while its batch is unfinished (rolled forward
                # by `Queue.clean` first), whatever its age.
                if now_us - chunk.created_us > self._window_us and not self.pending(chunk):
                    self._expire(name, chunk.created_us)
                    removed += 1
                continue
            other_id, created_us = _parse_marker(raw)
            age_us = now_us - created_us
            # A publisher that died between its marker and its rename: free the key
            # before `Queue.clean` removes the `.new`, or a retry would be dropped.
            crashed = (
                bool(other_id)
                and age_us > IN_PROGRESS_LIMIT * 1e6
                and self._staged(other_id + ".new")
            )
            if age_us > self._window_us or crashed:
                self._expire(name, created_us)
                removed += 1
            elif spared is not None and other_id:
                spared.add(other_id + ".new")
        return removed

    def _created(self, marker: str) -> int | None:
        """The creation time a marker of either kind records; ``None`` if it is gone."""
        try:
            raw = self._layout.read(DEDUP, marker)
        except OSError:
            raw = b"planted"  # not a regular file: an unparseable marker
        if raw is None:
            return None
        chunk = _parse_chunk(marker, raw)
        return chunk.created_us if chunk is not None else _parse_marker(raw)[1]

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
    when = parse_decimal(parts[1]) if len(parts) == 2 else None
    if when is None or parse_decimal(parts[0]) is None:
        return "0", 0
    return parts[0], when


def _parse_chunk(marker: str, raw: bytes) -> Chunk | None:
    """A chunk marker's record; ``None`` if *raw* is not one (a per-message marker)."""
    if not raw.startswith(b"{"):
        return None
    try:
        import json  # noqa: PLC0415 -- see above

        record = json.loads(raw)
        ids = [str(i) for i in record["ids"]]
        sizes = [int(n) for n in record["sizes"]]
        attributes = {str(k): str(v) for k, v in dict(record["attributes"]).items()}
        entries = tuple(zip(ids, sizes, strict=True))
        return Chunk(marker, int(record["time"]), entries, attributes, int(record["delay_us"]))
    except (ValueError, KeyError, TypeError):
        # A hand edit or a torn write: treated as expired long ago, with nothing to finish.
        return Chunk(marker, 0, (), {}, 0)
