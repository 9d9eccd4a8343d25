"""Idempotent publishing: the same ``dedup_id`` within the window publishes once.

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
from typing import TYPE_CHECKING, Final

from . import _fs

if TYPE_CHECKING:
    from ._queue import Queue

IN_PROGRESS_LIMIT: Final = 30.0
_POLL: Final = 0.005


class Deduplicator:
    """The deduplication markers of one queue."""

    def __init__(self, queue: Queue) -> None:
        self._queue = queue
        self._dir = queue._meta.path("dedup")
        self._last_sweep = float("-inf")

    def _marker(self, key: str) -> str:
        digest = hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()
        return os.path.join(self._dir, digest)

    def publish(
        self, view: memoryview, attrs: dict[str, str], delay_us: int, key: str, *, sync: bool
    ) -> str:
        new, size = self._queue._stage(view, sync=sync)
        return self.commit_staged(new, size, attrs, delay_us, key)

    def commit_staged(
        self,
        new: str,
        size: int,
        attrs: dict[str, str],
        delay_us: int,
        key: str,
        *,
        sync_marker: bool = True,
    ) -> str:
        """Make a staged ``<id>.new`` ready unless *key* was published within the window.

        :param sync_marker: fsync the marker (durable queues). A batch passes ``False``
            and syncs the whole filesystem once after its last marker instead.
        """
        queue = self._queue
        clock = queue.clock
        self._queue._meta.ensure(self._queue._meta.root)
        self._queue._meta.ensure(self._dir)
        marker = self._marker(key)
        message_id = new[:-4]
        waited_since = None
        while True:
            now_us = clock.time_us()
            try:
                fd = _fs.create_exclusive(marker, queue._file_mode or 0o666)
            except FileExistsError:
                found = _read_marker(marker)
                if found is None:
                    continue  # RACE: the marker was just expired by another publisher
                other_id, created_us = found
                if other_id and now_us - created_us > queue.dedup_window * 1e6:
                    self._expire(marker, created_us)
                    continue
                if not other_id or _fs.exists(queue._file(other_id + ".new")):
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
                _fs.unlink(queue._file(new))  # a duplicate: drop our copy, never visible
                return other_id
            try:
                if queue._file_mode is not None:
                    _fs.fchmod(fd, queue._file_mode)  # whatever the process umask
                _fs.write_all(fd, memoryview(f"{message_id} {now_us}".encode()))
                if queue.durable and sync_marker:
                    _fs.fsync(fd)
            finally:
                _fs.close(fd)
            break
        try:
            final_id = queue._commit(new, size, attrs, delay_us)
        except BaseException:
            _fs.unlink(marker)  # not published: a retry must be free to publish
            raise
        if final_id != message_id:
            # The id collided and was re-drawn: point the marker at the published id.
            queue._meta.write_file(
                self._dir, os.path.basename(marker), f"{final_id} {now_us}".encode(), durable=False
            )
        if clock.monotonic() - self._last_sweep > queue.dedup_window:
            self._last_sweep = clock.monotonic()
            self.clean()
        return final_id

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
        queue = self._queue
        now_us = queue.clock.time_us()
        removed = 0
        try:
            names = os.listdir(self._dir)
        except FileNotFoundError:
            return 0
        for name in names:
            path = os.path.join(self._dir, name)
            if "." in name:
                # An interrupted expiry (tomb) or a temporary file: debris once old.
                found = None
            else:
                found = _read_marker(path)
                if found is None:
                    continue
                other_id, created_us = found
                age_us = now_us - created_us
                expired = age_us > queue.dedup_window * 1e6
                # A publisher that died between its marker and its rename: free the key
                # before `Queue.clean` removes the `.new`, or a retry would be dropped.
                crashed = (
                    bool(other_id)
                    and age_us > IN_PROGRESS_LIMIT * 1e6
                    and _fs.exists(queue._file(other_id + ".new"))
                )
                if expired or crashed:
                    self._expire(path, created_us)
                    removed += 1
                continue
            try:
                age = queue.clock.time_us() / 1e6 - os.lstat(path).st_mtime
            except FileNotFoundError:
                continue  # RACE: removed by a concurrent sweep
            if age > max(queue.dedup_window, IN_PROGRESS_LIMIT) and _fs.unlink(path):
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
