"""vsqs.metrics on a partitioned queue: the totals as for any queue, plus a breakdown by
partition (Prometheus and OpenTelemetry), none for an unpartitioned queue."""

from __future__ import annotations

from pathlib import Path

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

import vsqs
from vsqs.metrics import QueueCollector, observe
from vsqs.testing import ManualClock


def _orders(tmp_path: Path, clock: ManualClock) -> vsqs.PartitionedQueue:
    """3 partitions: 2 ready in partition 1 (the oldest 5 s old), 1 held in partition 2."""
    queue = vsqs.PartitionedQueue(tmp_path / "orders", partitions=3, durable=False, clock=clock)
    queue.partition_queues[1].publish_batch([b"a", b"b"])
    clock.advance(3)
    queue.partition_queues[2].publish(b"c")
    assert queue.partition_queues[2].receive(timeout=0) is not None
    clock.advance(2)
    return queue


def test_prometheus_breaks_a_partitioned_queue_down_by_partition(tmp_path: Path) -> None:
    clock = ManualClock()
    orders = _orders(tmp_path, clock)
    plain = vsqs.Queue(tmp_path / "plain", durable=False, clock=clock)
    plain.publish(b"x")
    registry = CollectorRegistry()
    registry.register(QueueCollector(("orders", orders), ("plain", plain)))
    values = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(generate_latest(registry).decode())
        for s in family.samples
    }
    assert values["vsqs_messages", (("queue", "orders"), ("state", "ready"))] == 2
    assert values["vsqs_messages", (("queue", "orders"), ("state", "held"))] == 1
    by_part = {
        (dict(labels)["partition"], dict(labels)["state"]): value
        for (name, labels), value in values.items()
        if name == "vsqs_partition_messages"
    }
    assert {key: value for key, value in by_part.items() if value} == {
        ("1", "ready"): 2, ("2", "held"): 1,
    }  # fmt: skip
    assert len(by_part) == 3 * len(vsqs.metrics.STATES)
    ages = {
        dict(labels)["partition"]: value
        for (name, labels), value in values.items()
        if name == "vsqs_partition_oldest_ready_age_seconds"
    }
    assert ages == {"0": 0.0, "1": 5.0, "2": 0.0}
    assert not any(dict(labels).get("queue") == "plain" and "partition" in name
                   for name, labels in values)  # fmt: skip


def test_opentelemetry_breaks_a_partitioned_queue_down_by_partition(tmp_path: Path) -> None:
    clock = ManualClock()
    orders = _orders(tmp_path, clock)
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    observe(provider.get_meter("vsqs-test"), ("orders", orders))
    data = reader.get_metrics_data()
    assert data is not None
    points = {
        (dict(point.attributes)["messaging.vsqs.partition"],  # type: ignore[arg-type]
         dict(point.attributes)["messaging.vsqs.state"]): point.value  # type: ignore[arg-type, union-attr]
        for resource in data.resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
        if metric.name == "messaging.vsqs.partition.messages"
        for point in metric.data.data_points
    }  # fmt: skip
    assert {key: value for key, value in points.items() if value} == {
        ("1", "ready"): 2, ("2", "held"): 1,
    }  # fmt: skip
    assert len(points) == 12
    provider.shutdown()
