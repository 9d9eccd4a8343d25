"""The integrations that publish without a group spread over a partitioned queue's
partitions too (issue 38, item 1): kombu's producer, Spark's ``publish_dataframe``
(batches keyed by their ``batch_dedup_id``) and SQS ``SendMessageBatch`` through
``vsqs serve``; each test counts the message files in each partition directory."""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import boto3
import pytest
from botocore.config import Config
from kombu.connection import Connection
from kombu.entity import Exchange
from kombu.entity import Queue as KombuQueue

import vsqs
import vsqs.kombu
from vsqs import PartitionedQueue
from vsqs.serve import make_server

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

REPO_DIR = str(Path(__file__).resolve().parent.parent)
PARTITIONS = 4


def _per_partition(queue: vsqs.AnyQueue) -> list[int]:
    """Ready message files in each partition directory, by listing it."""
    assert isinstance(queue, PartitionedQueue) and queue.partitions == PARTITIONS
    return [sum(1 for name in os.listdir(p.path) if name.isdigit()) for p in queue.partition_queues]


def _assert_spread(counts: list[int], total: int) -> None:
    """Every partition got a fair share: none empty, none with half or more."""
    assert sum(counts) == total, counts
    assert min(counts) > 0 and max(counts) < total // 2, counts


def test_a_kombu_producer_spreads_over_the_partitions(fast_tmp_path: Path) -> None:
    """400 messages without ``MessageGroupId`` from one kombu producer land in every
    partition of a 4-partition queue, none holding half of them."""
    root = fast_tmp_path / "root"
    vsqs.QueueRoot(root).create("tasks", partitions=PARTITIONS)
    # kombu's entities and Connection are unannotated (pyproject lists the older kombu
    # test files for this; a new file says so here, line by line).
    exchange = Exchange("tasks", "direct")  # type: ignore[no-untyped-call]
    tasks = KombuQueue("tasks", exchange, routing_key="tasks")  # type: ignore[no-untyped-call]
    options = {"durable": False}
    with (
        Connection(f"vsqs://{root}", transport_options=options) as conn,  # type: ignore[no-untyped-call]
        conn.Producer() as producer,
    ):
        for n in range(400):
            producer.publish(
                {"n": n}, exchange=tasks.exchange, routing_key="tasks", declare=[tasks]
            )
    _assert_spread(_per_partition(vsqs.QueueRoot(root).get("tasks")), 400)


def test_send_message_batch_spreads_over_the_partitions(fast_tmp_path: Path) -> None:
    """100 ``SendMessageBatch`` calls of 10 entries, without ``MessageGroupId``, through
    a real ``vsqs serve`` and boto3: each call is one ``publish_batch``; the 1,000
    messages land in every partition, none holding half of them."""
    root = vsqs.QueueRoot(fast_tmp_path / "root")
    root.create("q", partitions=PARTITIONS)
    server = make_server(root, port=0, quiet=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        sqs = boto3.client(
            "sqs",
            endpoint_url=server.url,
            region_name="us-east-1",
            aws_access_key_id="AKIATEST",
            aws_secret_access_key="secret",  # noqa: S106 - a test key
            config=Config(retries={"max_attempts": 1}, read_timeout=30, connect_timeout=5),
        )
        url = sqs.get_queue_url(QueueName="q")["QueueUrl"]
        for call in range(100):
            entries = [{"Id": str(i), "MessageBody": f"{call}/{i}"} for i in range(10)]
            answer = sqs.send_message_batch(QueueUrl=url, Entries=entries)
            assert len(answer["Successful"]) == 10 and not answer.get("Failed")
    finally:
        server.shutdown()
        thread.join(10)
    _assert_spread(_per_partition(root.get("q")), 1000)


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    from tests import spark_helpers

    with pytest.MonkeyPatch.context() as patch:
        # The Python workers import vsqs from this checkout.
        patch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [REPO_DIR, *sys.path])))
        patch.setenv("SPARK_LOCAL_IP", "127.0.0.1")
        patch.setenv("PYSPARK_PYTHON", sys.executable)
        session = spark_helpers.build_session("local[2,4]")
        yield session
        session.stop()


@pytest.mark.spark
def test_publish_dataframe_spreads_over_the_partitions(spark: SparkSession, tmp_path: Path) -> None:
    """``publish_dataframe`` of 2,000 rows in batches of 50 (each a ``publish_batch``
    with its own ``batch_dedup_id``, for exactly once under task retries) into a
    4-partition queue: the 40 batches land in every partition, none holding half."""
    from pyspark.sql import Row

    import vsqs.spark

    path = str(tmp_path / "q")
    PartitionedQueue(path, partitions=PARTITIONS)
    df = spark.createDataFrame([Row(body=f"m{i}") for i in range(2000)]).repartition(4)
    published = vsqs.spark.publish_dataframe(df, path, batch_size=50, run_id="spread")
    assert published == 2000
    _assert_spread(_per_partition(vsqs.Queue(path)), 2000)
