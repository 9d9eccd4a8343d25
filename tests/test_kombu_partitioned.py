"""The kombu transport on a partitioned queue: ``MessageGroupId`` (kombu's SQS name) is the
message's group, every message is delivered once with each group in order, and a
blocked consumer is woken by a publish into any partition."""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from kombu.asynchronous import Hub
from kombu.connection import Connection
from kombu.entity import Exchange
from kombu.entity import Queue as KombuQueue
from kombu.message import Message

import vsqs
import vsqs.kombu

TASKS = KombuQueue("tasks", Exchange("tasks", "direct"), routing_key="tasks")
GROUPS = [f"customer-{n}" for n in range(5)]


@pytest.fixture
def tasks_root(fast_tmp_path: Path) -> Path:
    root = fast_tmp_path / "root"
    vsqs.QueueRoot(root).create("tasks", partitions=4)
    return root


def _connect(root: Path, **options: Any) -> Connection:
    return Connection(f"vsqs://{root}", transport_options={"durable": False, **options})


def _publish(conn: Connection, body: str, group: str | None) -> None:
    extra = {} if group is None else {"MessageGroupId": group}
    with conn.Producer() as producer:
        producer.publish(
            body, exchange=TASKS.exchange, routing_key="tasks", declare=[TASKS], **extra
        )


def test_message_group_id_is_the_group_and_each_group_stays_in_order(tasks_root: Path) -> None:
    """5 groups x 20 messages (and 10 without a group) from two connections: each group
    is in its own partition, every message is delivered exactly once, each group in
    publish order, with its ``MessageGroupId`` back in the properties."""
    with _connect(tasks_root) as one, _connect(tasks_root) as two:
        for n in range(20):
            for index, group in enumerate(GROUPS):
                _publish(one if index % 2 else two, f"{group}/{n}", group)
        for n in range(10):
            _publish(one, f"none/{n}", None)
    queue = vsqs.QueueRoot(tasks_root).get("tasks")
    assert isinstance(queue, vsqs.PartitionedQueue) and queue.partitions == 4
    for group in GROUPS:
        part = queue.partition_for(group)
        held = [m for m in part.browse() if m.group == group]
        assert len(held) == 20, group
    seen: defaultdict[str, list[int]] = defaultdict(list)
    with _connect(tasks_root) as conn:
        got: list[Message] = []
        with conn.Consumer(TASKS, callbacks=[lambda _body, message: got.append(message)]):
            while True:
                try:
                    conn.drain_events(timeout=0.2)
                except TimeoutError:
                    break
                message = got.pop()
                group, n = message.payload.split("/")
                assert message.properties.get("MessageGroupId") == (
                    None if group == "none" else group
                )
                seen[group].append(int(n))
                message.ack()
    assert {group: seen[group] for group in GROUPS} == {g: list(range(20)) for g in GROUPS}
    assert sorted(seen["none"]) == list(range(10))
    assert queue.counts().total == 0


def test_message_deduplication_id_is_the_dedup_id(tasks_root: Path) -> None:
    with _connect(tasks_root) as conn:
        for _ in range(3):
            with conn.Producer() as producer:
                producer.publish(
                    "once", exchange=TASKS.exchange, routing_key="tasks", declare=[TASKS],
                    MessageGroupId="g", MessageDeduplicationId="order-7",
                )  # fmt: skip
    assert vsqs.QueueRoot(tasks_root).get("tasks").counts().ready == 1


def test_a_bad_group_is_refused_at_publish(tasks_root: Path) -> None:
    with _connect(tasks_root) as conn, pytest.raises(ValueError, match="group"):
        _publish(conn, "x", "")


def _publish_into_partition_3(root: Path) -> str:
    """A group of partition 3, published from another connection."""
    queue = vsqs.QueueRoot(root).get("tasks")
    assert isinstance(queue, vsqs.PartitionedQueue)
    group = next(
        f"g{n}" for n in range(1000) if queue.partition_for(f"g{n}") is queue.partition_queues[3]
    )
    with _connect(root) as publisher:
        _publish(publisher, "late", group)
    return group


def test_a_blocked_drain_wakes_for_a_publish_into_any_partition(tasks_root: Path) -> None:
    """With the periodic re-check an hour away, only the waiter can end the wait: a
    publish into partition 3 (not the queue's own directory) does, promptly."""
    got: list[str] = []
    with (
        _connect(tasks_root, polling_interval=3600) as conn,
        conn.Consumer(TASKS, callbacks=[lambda body, message: got.append(body)]),
    ):
        timer = threading.Timer(0.3, _publish_into_partition_3, (tasks_root,))
        timer.start()
        started = time.monotonic()
        try:
            conn.drain_events(timeout=10)
        finally:
            timer.join()
        assert time.monotonic() - started < 5
    assert got == ["late"]


def test_kombus_event_loop_delivers_a_publish_into_any_partition(tasks_root: Path) -> None:
    """The same in kombu's event loop (a Celery worker's): the waiter's descriptor,
    registered with the hub, sees the partition directories too."""
    hub = Hub()
    got: list[str] = []
    with _connect(tasks_root, polling_interval=3600) as conn:
        conn.register_with_event_loop(hub)
        with conn.Consumer(TASKS, callbacks=[lambda body, message: got.append(body)]):
            hub.call_later(0.3, _publish_into_partition_3, tasks_root)
            loop = hub.create_loop()
            deadline = time.monotonic() + 10
            while not got and time.monotonic() < deadline:
                next(loop)
            assert got == ["late"]
    hub.close()
