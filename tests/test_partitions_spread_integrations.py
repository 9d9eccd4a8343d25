"""The integrations that publish without a group spread over a partitioned queue's
partitions too (issue 38, item 1): kombu's producer and Spark's ``publish_dataframe``
(batches keyed by their ``batch_dedup_id``); each test counts the message files in each
partition directory (SQS ``SendMessageBatch``: ``tests/serve/test_partitions_spread.py``)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from kombu.connection import Connection
from kombu.entity import Exchange
from kombu.entity import Queue as KombuQueue

import vsqs
import vsqs.kombu
from vsqs import PartitionedQueue

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


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    """A local session, or the one another test module has running (stopped only if made
    here: a Spark session is one per process, shared)."""
    from pyspark.sql import SparkSession

    from tests import spark_helpers

    running = SparkSession.getActiveSession()
    with pytest.MonkeyPatch.context() as patch:
        # The Python workers import vsqs from this checkout.
        patch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [REPO_DIR, *sys.path])))
        session = running or spark_helpers.build_session()
        yield session
        if running is None:
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
