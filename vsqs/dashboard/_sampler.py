"""The dashboard's memory: one thread that samples every queue of a root, and the last
hour of each queue's depth and counters, kept in memory only (nothing is written).

Every page and every refresh of the overview is served from the latest round of samples
(:class:`Snapshot`), serialised once per round: a refresh costs the server the same
whatever the number of queues or messages (one dictionary look-up and a write of bytes
it already has). The cost is in the sampling, one :meth:`vsqs.Queue.stats` per queue
(one listing of its directory and one read per process's counter file), so a queue whose
sample took long is sampled less often (at most 1/:data:`DUTY` of the time), and the
receive counts are read at most once a minute, :data:`REDELIVERED_BUDGET` per queue.
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
from array import array
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Final

from .. import AnyQueue, QueueNotFound, QueueRoot, Stats, VsqsError, partitions_of
from ._receives import Receives, count_redelivered

_log = logging.getLogger("vsqs.dashboard")

HOUR: Final = 3600.0
POINTS: Final = 240
"""Chart points kept per queue (the last hour): one every ``max(sample_every, 15 s)``."""
DUTY: Final = 10.0
"""A queue whose sample took *d* seconds is sampled again ``DUTY * d`` seconds later at
the soonest (a million messages: about 1 s to list, so one sample every ~10 s)."""
REDELIVERED_EVERY: Final = 60.0
_FAULTS: Final = (VsqsError, OSError, ValueError)


@dataclass(frozen=True, slots=True)
class Row:
    """One queue at one sample: what the overview shows."""

    name: str
    ready: int = 0
    held: int = 0
    delayed: int = 0
    new: int = 0
    oldest_sent: float | None = None
    """When the oldest ready message was published (unix seconds), if one is ready."""
    produced: int = 0
    consumed: int = 0
    produced_bytes: int = 0
    consumed_bytes: int = 0
    shutdown: bool = False
    dead_letter: str | None = None
    partitions: int = 1
    fifo: bool = False
    redelivered: int | None = None
    """Messages now in the queue received before without a delete (receive count >= 1);
    ``None`` until first counted."""
    redelivered_capped: bool = False
    """Whether the count stopped at the budget (then it is a lower bound)."""
    receive_histogram: tuple[int, ...] = ()
    """Of the redelivered, how many have each receive count of ``_receives.BUCKETS``."""
    in_rate: float | None = None
    """Messages published per second between the last two samples."""
    out_rate: float | None = None
    """Messages consumed (deleted after a receive) per second between the last two samples."""
    sampled_at: float = 0.0
    sample_seconds: float = 0.0
    """How long the last sample of this queue took (its listing, mostly)."""
    error: str | None = None
    """Why the queue could not be sampled (its numbers are then zero here, and ``None``
    in the JSON the pages read: unknown)."""
    parts: tuple[dict[str, Any], ...] = ()
    """Of a partitioned queue, each partition's ready, held, delayed, new and oldest age."""

    @property
    def depth(self) -> int:
        return self.ready + self.held + self.delayed + self.new


@dataclass(slots=True)
class _Series:
    """The chart points of one queue: a ring of (time, depth, produced, consumed)."""

    data: array[float] = field(default_factory=lambda: array("d", bytes(8 * 4 * POINTS)))
    start: int = 0
    size: int = 0

    def add(self, t: float, depth: int, produced: int, consumed: int) -> None:
        index = (self.start + self.size) % POINTS
        if self.size == POINTS:
            self.start = (self.start + 1) % POINTS
        else:
            self.size += 1
        self.data[4 * index : 4 * index + 4] = array("d", (t, depth, produced, consumed))

    def last_time(self) -> float:
        return (
            -math.inf if not self.size else self.data[4 * ((self.start + self.size - 1) % POINTS)]
        )

    def points(self) -> Iterator[tuple[float, float, float, float]]:
        for i in range(self.size):
            j = 4 * ((self.start + i) % POINTS)
            yield self.data[j], self.data[j + 1], self.data[j + 2], self.data[j + 3]


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The latest round: every queue's :class:`Row`, and the overview's JSON, made once."""

    version: int
    taken_at: float
    rows: dict[str, Row]
    body: bytes
    """The overview as JSON (what ``/ui/api/overview`` sends)."""
    round_seconds: float
    """How long the round took (the sampler thread's CPU, mostly)."""


class Sampler:
    """Samples every queue of *root* every *every* seconds on one daemon thread.

    Thread-safe: the thread replaces the current :class:`Snapshot` in one assignment;
    readers take whichever is current. Queue handles are opened once and kept (a queue
    whose stored settings change is opened again).

    :param root: the queues.
    :param every: seconds between two rounds.
    :param clock: ``time.time`` (tests may pass another).
    """

    def __init__(
        self, root: QueueRoot, every: float, clock: Callable[[], float] = time.time
    ) -> None:
        if not (isinstance(every, (int, float)) and math.isfinite(every) and every > 0):
            raise ValueError(f"sample_every must be a positive number of seconds, not {every!r}")
        self.root = root
        self.every = float(every)
        self.step = max(self.every, HOUR / POINTS)
        self._clock = clock
        self._lock = threading.Lock()  # the handles, series and due times
        self._round = threading.Lock()  # one round at a time
        self._handles: dict[str, tuple[str, AnyQueue]] = {}
        self._series: dict[str, _Series] = {}
        self._rows: dict[str, Row] = {}
        self._due: dict[str, float] = {}
        self._redelivered: dict[str, tuple[float, Receives]] = {}
        self._version = 0
        self.snapshot: Snapshot | None = None
        self._ready = threading.Event()
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start the thread (its first round begins at once)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="vsqs-dashboard", daemon=True)
            self._thread.start()

    def close(self) -> None:
        """Stop the thread (waits for the round under way) and close the queue handles."""
        self._stop.set()
        self._wake.set()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join()
        with self._lock:
            handles = [queue for _, queue in self._handles.values()]
            self._handles.clear()
        for queue in handles:
            queue.close()

    def wait_first(self, timeout: float) -> Snapshot:
        """The current snapshot, taking one now if the thread has none yet."""
        if not self._ready.wait(timeout) or self.snapshot is None:
            return self.sample_round()
        return self.snapshot

    def refresh_soon(self, name: str | None = None) -> None:
        """Sample again now (after an action changed a queue): *name*, or every queue."""
        with self._lock:
            for key in [name] if name is not None else list(self._due):
                self._due[key] = 0.0
                self._redelivered.pop(key, None)
        self._wake.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.sample_round()
            except Exception:  # noqa: BLE001 - the thread outlives a bug in one round: logged
                _log.exception("a round of dashboard samples failed")
            self._wake.wait(self.every)
            self._wake.clear()

    def handle(self, name: str) -> AnyQueue:
        """The kept handle of the queue *name*, opened again if its stored settings
        changed since (one read of them); for the rounds alone (requests open their own).

        :raises QueueNotFound:"""
        with self._lock:
            kept = self._handles.get(name)
        if kept is not None:
            if kept[0] == repr(kept[1].settings()):
                return kept[1]
            kept[1].close()
        queue = self.root.get(name)
        with self._lock:
            self._handles[name] = (repr(queue.settings()), queue)
        return queue

    def sample_round(self) -> Snapshot:
        """Sample every queue that is due; publish the new :class:`Snapshot`. One round
        at a time (the kept handles are the rounds' own)."""
        with self._round:
            return self._sample_round()

    def _sample_round(self) -> Snapshot:
        started = time.perf_counter()
        now = self._clock()
        names = self.root.list()
        with self._lock:
            for gone in set(self._rows) - set(names):
                self._forget(gone)
        rows: dict[str, Row] = {}
        for name in names:
            with self._lock:
                previous = self._rows.get(name)
                due = self._due.get(name, 0.0)
            if previous is not None and due > now and previous.error is None:
                rows[name] = previous
                continue
            row = self._sample(name, previous, now)
            if row is None:
                continue  # RACE: removed since the listing
            rows[name] = row
        with self._lock:
            self._rows = rows
            self._version += 1
            version = self._version
        elapsed = time.perf_counter() - started
        snapshot = Snapshot(
            version=version,
            taken_at=now,
            rows=rows,
            body=self._render(version, now, rows, elapsed),
            round_seconds=elapsed,
        )
        self.snapshot = snapshot
        self._ready.set()
        return snapshot

    def _forget(self, name: str) -> None:
        """Drop a queue that is gone (under the lock)."""
        self._rows.pop(name, None)
        self._series.pop(name, None)
        self._due.pop(name, None)
        self._redelivered.pop(name, None)
        kept = self._handles.pop(name, None)
        if kept is not None:
            kept[1].close()

    def _sample(self, name: str, previous: Row | None, now: float) -> Row | None:
        began = time.perf_counter()
        queue = None
        try:
            queue = self.handle(name)
            stats = queue.stats()
            settings = queue.settings()
            redelivered = self._redelivered_of(name, queue, now)
        except (QueueNotFound, FileNotFoundError):
            return None  # RACE: another process deleted the queue
        except _FAULTS as exc:
            return Row(name=name, sampled_at=now, error=f"{type(exc).__name__}: {exc}")
        finally:
            if queue is not None:
                # Its descriptors of the metadata directories, until the next round: a
                # root of 2,000 queues would otherwise hold 6,000 of them.
                queue.close()
        took = time.perf_counter() - began
        in_rate = out_rate = None
        if previous is not None and previous.error is None and now > previous.sampled_at:
            dt = now - previous.sampled_at
            in_rate = max(0, stats.produced_messages - previous.produced) / dt
            out_rate = max(0, stats.consumed_messages - previous.consumed) / dt
        row = Row(
            name=name,
            ready=stats.ready,
            held=stats.held,
            delayed=stats.delayed,
            new=stats.new,
            oldest_sent=None if stats.oldest_ready_age is None else now - stats.oldest_ready_age,
            produced=stats.produced_messages,
            consumed=stats.consumed_messages,
            produced_bytes=stats.produced_bytes,
            consumed_bytes=stats.consumed_bytes,
            shutdown=stats.is_shutdown,
            dead_letter=settings.get("dead_letter"),
            partitions=len(partitions_of(queue)),
            fifo=queue.fifo,
            parts=_parts(stats),
            redelivered=redelivered.redelivered,
            redelivered_capped=redelivered.capped,
            receive_histogram=redelivered.histogram,
            in_rate=in_rate,
            out_rate=out_rate,
            sampled_at=now,
            sample_seconds=took,
        )
        with self._lock:
            self._due[name] = now + max(self.every, DUTY * took) - self.every / 10
            series = self._series.setdefault(name, _Series())
            if now - series.last_time() >= self.step * 0.95:
                series.add(now, row.depth, row.produced, row.consumed)
        return row

    def _redelivered_of(self, name: str, queue: AnyQueue, now: float) -> Receives:
        with self._lock:
            kept = self._redelivered.get(name)
        if kept is not None and now - kept[0] < REDELIVERED_EVERY:
            return kept[1]
        receives = count_redelivered(queue)
        with self._lock:
            self._redelivered[name] = (now, receives)
        return receives

    def chart(self, name: str) -> list[list[float]]:
        """The last hour of *name*: ``[time, depth, published/s, consumed/s]`` per point
        (the rates over the interval before the point; 0 for the first)."""
        with self._lock:
            series = self._series.get(name)
            points = list(series.points()) if series is not None else []
        out: list[list[float]] = []
        previous: tuple[float, float, float, float] | None = None
        for point in points:
            t, depth, produced, consumed = point
            if previous is None or t <= previous[0]:
                rates = (0.0, 0.0)
            else:
                dt = t - previous[0]
                rates = (
                    max(0.0, produced - previous[2]) / dt,
                    max(0.0, consumed - previous[3]) / dt,
                )
            out.append([round(t, 3), depth, round(rates[0], 3), round(rates[1], 3)])
            previous = point
        return out

    def detail(self, name: str) -> dict[str, Any] | None:
        """Everything the last round knows of *name* (what ``/ui/api/queue/NAME``
        sends); ``None`` if it was not in that round."""
        snapshot = self.snapshot
        row = None if snapshot is None else snapshot.rows.get(name)
        if snapshot is None or row is None:
            return None
        data = asdict(row)
        data.update(_derived(row, snapshot.rows, snapshot.taken_at))
        data["sources"] = sorted(r.name for r in snapshot.rows.values() if r.dead_letter == name)
        return _unknown(data)

    @staticmethod
    def _render(version: int, now: float, rows: dict[str, Row], elapsed: float) -> bytes:
        """The overview's JSON: per queue, only what its row shows (about 300 bytes)."""
        sources: dict[str, list[str]] = {}
        for row in rows.values():
            if row.dead_letter is not None:
                sources.setdefault(row.dead_letter, []).append(row.name)
        queues = []
        for row in rows.values():
            data = {key: getattr(row, key) for key in _OVERVIEW}
            data.update(_derived(row, rows, now))
            for key in ("in_rate", "out_rate"):
                if data[key] is not None:
                    data[key] = round(data[key], 2)
            data["sources"] = sorted(sources.get(row.name, ()))
            queues.append(_unknown(data))
        document = {"version": version, "taken_at": now, "round_seconds": elapsed, "queues": queues}
        return json.dumps(document, separators=(",", ":")).encode()


_OVERVIEW: Final = (
    "name", "ready", "held", "delayed", "new", "redelivered", "redelivered_capped", "in_rate",
    "out_rate", "dead_letter", "partitions", "fifo", "shutdown", "error",
)  # fmt: skip


_UNREAD: Final = (
    "ready", "held", "delayed", "new", "depth", "oldest_age", "redelivered", "in_rate",
    "out_rate", "produced", "consumed", "produced_bytes", "consumed_bytes", "partitions",
    "fifo", "shutdown",
)  # fmt: skip
"""The fields of a row that say nothing when its queue could not be sampled."""


def _derived(row: Row, rows: Mapping[str, Row], now: float) -> dict[str, Any]:
    """The fields computed from the round: depth, the oldest's age, the DLQ's depth
    (``None`` if the dead-letter queue is absent or could not be sampled)."""
    dlq = rows.get(row.dead_letter) if row.dead_letter else None
    age = None if row.oldest_sent is None else round(max(0.0, now - row.oldest_sent), 1)
    return {
        "depth": row.depth,
        "oldest_age": age,
        "dead_letter_depth": None if dlq is None or dlq.error else dlq.depth,
    }


def _unknown(data: dict[str, Any]) -> dict[str, Any]:
    """*data* (a row as JSON) with its numbers ``None`` if its queue could not be
    sampled: unknown, never a 0 that reads as real."""
    if data.get("error"):
        for key in _UNREAD:
            if key in data:
                data[key] = None
    return data


def _parts(stats: Stats) -> tuple[dict[str, Any], ...]:
    """Each partition's counts, from ``stats().partitions`` (none for a plain queue)."""
    return tuple(
        {
            "ready": part.ready,
            "held": part.held,
            "delayed": part.delayed,
            "new": part.new,
            "oldest_age": part.oldest_ready_age,
        }
        for part in stats.partitions
    )
