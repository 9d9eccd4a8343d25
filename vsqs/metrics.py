"""Queue metrics for Prometheus and OpenTelemetry (the ``metrics`` extra).

What is measured, per queue, is what an SQS user alarms on: messages by state
(``ApproximateNumberOfMessagesVisible``, ``...NotVisible``, ``...Delayed``), the age of the
oldest ready message (``ApproximateAgeOfOldestMessage``), the produced and consumed
counters, the depth of the dead-letter queue and the receives of the oldest message.
One :class:`Sample` is taken from :meth:`Queue.stats <vsqs.Queue.stats>` (the counters
and listings of the directory) and one metadata read; never a message body, so a
collection costs the same whatever the size of the messages (``benchmarks/bench_metrics.py``).

Prometheus (names and labels are stable; see ``docs/guides/metrics.rst``)::

    from prometheus_client import REGISTRY, start_http_server
    REGISTRY.register(vsqs.metrics.QueueCollector(vsqs.QueueRoot("/srv/queues")))

OpenTelemetry::

    vsqs.metrics.observe(meter, vsqs.QueueRoot("/srv/queues"))

A collection is a snapshot taken from any process at any time; it changes nothing in
the queue (the caller's own counters are flushed to its stats file first).

A partitioned queue's series are its totals; ``vsqs_partition_messages{partition,state}``
and ``vsqs_partition_oldest_ready_age_seconds{partition}`` break them down (same sample).

One bad queue never takes down the others: a queue that cannot be opened or sampled
(its ``settings.json`` corrupt, its directory unreadable) is a :class:`Down` whose
series are replaced by ``vsqs_queue_up{queue=...} 0``, logged once when it goes down
(and once when it is back); a queue removed from a root while served leaves the
export with one log line.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, cast

from ._extras import missing_extra

try:
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
    from prometheus_client.registry import Collector
except ModuleNotFoundError as error:
    raise missing_extra(error, "metrics", "vsqs.metrics") from None

from . import AnyQueue, QueueNotFound, QueueRoot, QueueSet, Stats, VsqsError

if TYPE_CHECKING:
    from opentelemetry.metrics import CallbackOptions, Meter, Observation

__all__ = [
    "STATES",
    "Down",
    "QueueCollector",
    "Sample",
    "Source",
    "families",
    "observe",
    "sample",
    "samples",
    "targets",
]

Source = AnyQueue | QueueRoot | QueueSet | tuple[str, AnyQueue]
"""What metrics are taken of: a queue (labelled by its path), every queue of a root
(labelled by name, found anew at each collection), each queue of a set, or a
``(label, queue)`` pair."""

STATES: Final = ("ready", "held", "delayed", "new")
SYSTEM: Final = "vsqs"
NS: Final = f"messaging.{SYSTEM}"  # the conventions' namespace for a system's own names


@dataclass(frozen=True, slots=True)
class Sample:
    """One queue's numbers at one moment."""

    queue: str
    """The label: the name under a root, the path otherwise."""
    stats: Stats
    dead_letter: int | None
    """Ready messages in the queue's dead-letter queue (``None``: it has none)."""
    oldest_receive_count: int
    """Receives so far of the oldest ready message (0 if none is ready or it never was)."""

    @property
    def oldest_ready_age(self) -> float:
        """Seconds since the oldest ready message was published; 0 when none is ready."""
        return self.stats.oldest_ready_age or 0.0


@dataclass(frozen=True, slots=True)
class Down:
    """A queue that could not be opened or sampled: exported as ``vsqs_queue_up 0``."""

    queue: str
    """The label, as a :class:`Sample`'s."""
    error: str
    """Why (the error's type and message, which names the file at fault)."""


_log = logging.getLogger("vsqs.metrics")
_FAULTS: Final = (VsqsError, OSError, ValueError)
"""What makes one queue :class:`Down` (a corrupt settings file is an
:class:`~vsqs.InvalidSettings`, a ``ValueError``); anything else is a bug, and raised."""


def targets(
    sources: Iterable[Source],
    opened: dict[str, AnyQueue] | None = None,
    down: list[Down] | None = None,
) -> Iterator[tuple[str, AnyQueue]]:
    """The ``(label, queue)`` pairs of *sources*; *opened* caches a root's queue objects
    (those no longer listed are dropped from it). A root's queue that cannot be opened
    is appended to *down* (if given) instead."""
    cache = {} if opened is None else opened
    for source in sources:
        if isinstance(source, QueueRoot):
            prefix = f"{source.path}\0"
            listed = {prefix + name: name for name in source.list()}
            for key in [key for key in cache if key.startswith(prefix) and key not in listed]:
                del cache[key]  # removed since the last collection
            for key, name in listed.items():
                queue = cache.get(key)
                if queue is None:
                    try:
                        queue = cache[key] = source.get(name)
                    except QueueNotFound:  # pragma: no cover -- a race a test cannot time
                        continue  # RACE: removed by another process since the listing
                    except _FAULTS as exc:
                        if down is not None:
                            down.append(Down(name, _describe(exc)))
                        continue
                yield name, queue
        elif isinstance(source, QueueSet):
            yield from ((queue.path, queue) for queue in source.queues)
        elif isinstance(source, AnyQueue):
            yield source.path, source
        else:
            label, queue = source
            yield label, queue


def samples(pairs: Iterable[tuple[str, AnyQueue]]) -> Iterator[Sample | Down]:
    """One :class:`Sample` per ``(label, queue)``, leaving out queues removed meanwhile;
    a :class:`Down` for a queue that cannot be sampled (the others are, all the same)."""
    for label, queue in pairs:
        try:
            yield sample(label, queue)
        except FileNotFoundError:
            continue  # RACE: another process removed the queue directory
        except _FAULTS as exc:
            yield Down(label, _describe(exc))


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


class _Health:
    """Which queues a collector found, and found down, so that each change is logged
    once (a queue going down, coming back, or gone), not on every scrape."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._down: dict[str, str] = {}
        self._seen: set[str] = set()

    def collect(
        self, sources: Iterable[Source], opened: dict[str, AnyQueue]
    ) -> list[Sample | Down]:
        """One sample (or :class:`Down`) per queue of *sources*; changes logged once."""
        down: list[Down] = []
        got = [*samples(targets(sources, opened, down)), *down]
        with self._lock:
            now_down = {one.queue: one.error for one in got if isinstance(one, Down)}
            for label, error in now_down.items():
                if self._down.get(label) != error:
                    _log.error("queue %s is down for metrics (vsqs_queue_up 0): %s", label, error)
            sampled = {one.queue for one in got if isinstance(one, Sample)}
            for label in self._down.keys() - now_down.keys():
                if label in sampled:
                    _log.warning("queue %s is up again for metrics", label)
            labels = {one.queue for one in got}
            for label in sorted(self._seen - labels):
                _log.warning("queue %s is gone (removed?): no longer exported", label)
            self._down, self._seen = now_down, labels
        return got


def sample(label: str, queue: AnyQueue) -> Sample:
    """Take one :class:`Sample` of *queue*: its stats, dead-letter depth, oldest receives.

    Read-only, from any process; reads counter files, lists the directory once (and the
    dead-letter queue's once) and reads the metadata of one message, never a body. A
    snapshot: the numbers may be a few microseconds apart.
    """
    stats = queue.stats()
    dead = cast("AnyQueue | None", queue.dead_letter)
    oldest = stats.oldest_ready_id
    return Sample(
        queue=label,
        stats=stats,
        dead_letter=None if dead is None else dead.counts().ready,
        oldest_receive_count=0 if oldest is None else queue.history(oldest).receive_count,
    )


class QueueCollector(Collector):
    """A ``prometheus_client`` collector over queues, roots and sets.

    Register it (``REGISTRY.register(QueueCollector(root))``); each scrape takes one
    :class:`Sample` per queue. Metric names (``vsqs_`` prefix), all labelled ``queue``:

    ``vsqs_messages{state}``, ``vsqs_oldest_ready_age_seconds``,
    ``vsqs_oldest_receive_count``, ``vsqs_dead_letter_messages``, ``vsqs_shutdown``,
    ``vsqs_held_back_messages``,
    ``vsqs_produced_messages_total``, ``vsqs_produced_bytes_total``,
    ``vsqs_consumed_messages_total``, ``vsqs_consumed_bytes_total``; and
    ``vsqs_queue_up``: 1, or 0 for a queue that could not be sampled (then alone).
    """

    def __init__(self, *sources: Source) -> None:
        self.sources = sources
        self._opened: dict[str, AnyQueue] = {}
        self._health = _Health()

    def collect(self) -> Iterator[Metric]:
        return families(self._health.collect(self.sources, self._opened))

    def describe(self) -> Iterator[Metric]:
        return families(())  # the names, without listing anything at registration


def families(samples: Iterable[Sample | Down]) -> Iterator[Metric]:
    """The Prometheus metric families of *samples* (also what ``vsqs stats`` prints)."""
    up = GaugeMetricFamily(
        "vsqs_queue_up", "1 if the queue could be sampled, 0 if not (see the log).",
        labels=["queue"],
    )  # fmt: skip
    messages = GaugeMetricFamily(
        "vsqs_messages", "Messages in the queue by state.", labels=["queue", "state"]
    )
    gauges = {
        "age": GaugeMetricFamily(
            "vsqs_oldest_ready_age_seconds",
            "Seconds since the oldest ready message was published (0 if none is ready).",
            labels=["queue"],
        ),
        "receives": GaugeMetricFamily(
            "vsqs_oldest_receive_count",
            "Receives so far of the oldest ready message.",
            labels=["queue"],
        ),
        "dead": GaugeMetricFamily(
            "vsqs_dead_letter_messages",
            "Ready messages in the queue's dead-letter queue (queues that have one).",
            labels=["queue"],
        ),
        "shutdown": GaugeMetricFamily(
            "vsqs_shutdown", "1 if the queue was shut down, else 0.", labels=["queue"]
        ),
        "held_back": GaugeMetricFamily(
            "vsqs_held_back_messages",
            "Held messages waiting for room in their dead-letter queue (or a dead requeuer's).",
            labels=["queue"],
        ),
    }
    counters = {
        field: CounterMetricFamily(
            f"vsqs_{field}",
            f"{what} (all processes, ever).",
            labels=["queue"],
        )
        for field, what in (
            ("produced_messages", "Messages published"),
            ("produced_bytes", "Bytes of the messages published"),
            ("consumed_messages", "Messages deleted after being received"),
            ("consumed_bytes", "Bytes of the messages consumed"),
        )
    }
    parts = GaugeMetricFamily("vsqs_partition_messages", "Messages by partition and state.",
                              labels=["queue", "partition", "state"])  # fmt: skip
    parts_age = GaugeMetricFamily("vsqs_partition_oldest_ready_age_seconds",
                                  "Age of each partition's oldest ready message (0 if none).",
                                  labels=["queue", "partition"])  # fmt: skip
    for one in samples:
        up.add_metric([one.queue], 0 if isinstance(one, Down) else 1)
        if isinstance(one, Down):
            continue
        stats, labels = one.stats, [one.queue]
        for state in STATES:
            messages.add_metric([one.queue, state], getattr(stats, state))
        gauges["age"].add_metric(labels, one.oldest_ready_age)
        gauges["receives"].add_metric(labels, one.oldest_receive_count)
        if one.dead_letter is not None:
            gauges["dead"].add_metric(labels, one.dead_letter)
        gauges["shutdown"].add_metric(labels, 1 if stats.is_shutdown else 0)
        gauges["held_back"].add_metric(labels, stats.held_back)
        for field, family in counters.items():
            family.add_metric(labels, getattr(stats, field))
        for number, part in ((str(i), p) for i, p in enumerate(stats.partitions)):
            for state in STATES:
                parts.add_metric([one.queue, number, state], getattr(part, state))
            parts_age.add_metric([one.queue, number], part.oldest_ready_age or 0.0)
    yield up
    yield messages
    yield from gauges.values()
    yield from counters.values()
    if parts.samples:  # only where a queue is partitioned: no empty families otherwise
        yield parts
        yield parts_age


# -- OpenTelemetry ------------------------------------------------------------------------


class _Snapshots:
    """One sample of every queue per collection, shared by all the instruments' callbacks
    (the SDK calls each callback in turn; *max_age* seconds apart is one collection)."""

    def __init__(self, sources: tuple[Source, ...], max_age: float) -> None:
        self._sources = sources
        self._max_age = max_age
        self._lock = threading.Lock()
        self._taken = -float("inf")
        self._samples: list[Sample] = []
        self._down: list[Down] = []
        self._opened: dict[str, AnyQueue] = {}
        self._health = _Health()

    def get(self) -> list[Sample]:
        """The samples of the queues that are up."""
        self._take()
        return self._samples

    def down(self) -> list[Down]:
        """The queues that are down (in the same collection as :meth:`get`)."""
        self._take()
        return self._down

    def _take(self) -> None:
        with self._lock:
            if time.monotonic() - self._taken > self._max_age:
                got = self._health.collect(self._sources, self._opened)
                self._samples = [one for one in got if isinstance(one, Sample)]
                self._down = [one for one in got if isinstance(one, Down)]
                self._taken = time.monotonic()


def observe(meter: Meter, *sources: Source, max_age: float = 1.0) -> None:
    """Register OpenTelemetry observable instruments for *sources* on *meter*.

    Named after the OpenTelemetry messaging semantic conventions: every observation has
    ``messaging.system="vsqs"`` and ``messaging.destination.name`` (the queue's label);
    the produced and consumed totals are ``messaging.client.sent.messages`` and
    ``messaging.client.consumed.messages`` (observable counters); the rest, which the
    conventions do not define, are gauges in the system's own namespace
    ``messaging.vsqs.*`` (see ``docs/guides/metrics.rst``). Queues are sampled at most
    once per *max_age* seconds, however many instruments the reader collects.
    """
    from opentelemetry.metrics import Observation  # noqa: PLC0415 -- the extra's API only

    snapshots = _Snapshots(sources, max_age)

    def attrs(one: Sample, **more: str) -> dict[str, str]:
        return {"messaging.system": SYSTEM, "messaging.destination.name": one.queue, **more}

    def by_state(options: CallbackOptions) -> Iterable[Observation]:
        return [
            Observation(getattr(one.stats, state), attrs(one, **{f"{NS}.state": state}))
            for one in snapshots.get()
            for state in STATES
        ]

    def each(value: str) -> CallbackT:
        def callback(options: CallbackOptions) -> Iterable[Observation]:
            return [
                Observation(got, attrs(one))
                for one in snapshots.get()
                if (got := _VALUES[value](one)) is not None
            ]

        return callback

    def by_partition(options: CallbackOptions) -> Iterable[Observation]:
        return [
            Observation(
                getattr(part, state),
                attrs(one, **{f"{NS}.partition": str(index), f"{NS}.state": state}),
            )
            for one in snapshots.get()
            for index, part in enumerate(one.stats.partitions)
            for state in STATES
        ]

    def up(options: CallbackOptions) -> Iterable[Observation]:
        return [Observation(1, attrs(one)) for one in snapshots.get()] + [
            Observation(0, {"messaging.system": SYSTEM, "messaging.destination.name": one.queue})
            for one in snapshots.down()
        ]

    meter.create_observable_gauge(
        f"{NS}.queue.messages", [by_state], "{message}", "Messages by state."
    )
    meter.create_observable_gauge(
        f"{NS}.queue.up", [up], "1", "1 if the queue could be sampled, 0 if not."
    )
    meter.create_observable_gauge(
        f"{NS}.partition.messages", [by_partition], "{message}",
        "Messages by partition (of a partitioned queue) and state.",
    )  # fmt: skip
    for name, value, unit, text in _GAUGES:
        meter.create_observable_gauge(name, [each(value)], unit, text)
    for name, value, unit, text in _COUNTERS:
        meter.create_observable_counter(name, [each(value)], unit, text)


if TYPE_CHECKING:
    from collections.abc import Callable

    CallbackT = Callable[[CallbackOptions], Iterable[Observation]]

_VALUES: Final = {
    "age": lambda one: one.oldest_ready_age,
    "receives": lambda one: one.oldest_receive_count,
    "dead": lambda one: one.dead_letter,
    "held_back": lambda one: one.stats.held_back,
    "produced": lambda one: one.stats.produced_messages,
    "produced_bytes": lambda one: one.stats.produced_bytes,
    "consumed": lambda one: one.stats.consumed_messages,
    "consumed_bytes": lambda one: one.stats.consumed_bytes,
}
_GAUGES: Final = (
    (f"{NS}.queue.oldest_ready.age", "age", "s", "Age of the oldest ready message."),
    (f"{NS}.queue.oldest_ready.receives", "receives", "{receive}", "Its receives."),
    (f"{NS}.queue.dead_letter.messages", "dead", "{message}", "Dead-letter depth."),
    (f"{NS}.queue.held_back.messages", "held_back", "{message}", "Waiting for room."),
)
_COUNTERS: Final = (
    ("messaging.client.sent.messages", "produced", "{message}", "Messages published."),
    (f"{NS}.sent.bytes", "produced_bytes", "By", "Bytes published."),
    ("messaging.client.consumed.messages", "consumed", "{message}", "Messages consumed."),
    (f"{NS}.consumed.bytes", "consumed_bytes", "By", "Bytes consumed."),
)
