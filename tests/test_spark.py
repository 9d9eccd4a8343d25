"""The Spark helpers and the ``vsqs`` data source, against a real local Spark."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import Row, SparkSession
from pyspark.sql.streaming.datasource import ReadMaxRows

import vsqs
import vsqs.spark
from tests import spark_helpers
from vsqs._spark_options import SourceOptions
from vsqs._spark_stream import StreamReader

pytestmark = pytest.mark.spark

REPO_DIR = str(Path(__file__).resolve().parent.parent)


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    with pytest.MonkeyPatch.context() as patch:
        # The Python workers import the functions the tests ship from tests.spark_helpers.
        patch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [REPO_DIR, *sys.path])))
        patch.setenv("SPARK_LOCAL_IP", "127.0.0.1")
        patch.setenv("PYSPARK_PYTHON", sys.executable)
        session = spark_helpers.build_session("local[2,4]")
        yield session
        session.stop()


def _bodies(queue: vsqs.Queue) -> list[str]:
    return sorted(m.body.decode() for m in queue.browse())


def test_import_vsqs_does_not_import_pyspark() -> None:
    """The core stays importable without the spark extra."""
    code = "import sys, vsqs; assert 'pyspark' not in sys.modules, 'pyspark imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_publish_partition_task_retry_adds_no_duplicates(
    spark: SparkSession, tmp_path: Path
) -> None:
    """A task that published its rows and then failed is retried; its rows appear once."""
    queue_path = str(tmp_path / "q")
    rows = [Row(body=f"m{i}") for i in range(60)]
    df = spark.createDataFrame(rows).repartition(3)
    publish = functools.partial(spark_helpers.publish_then_fail, queue_path, uuid.uuid4().hex)
    df.foreachPartition(publish)
    assert _bodies(vsqs.Queue(queue_path)) == sorted(f"m{i}" for i in range(60))


def test_publish_dataframe_counts_rows_once_under_retry(
    spark: SparkSession, tmp_path: Path
) -> None:
    """publish_dataframe returns the row count; a failed first attempt is not counted twice."""
    queue_path = str(tmp_path / "q")
    rdd = spark.sparkContext.parallelize([f"r{i}" for i in range(40)], 2).mapPartitions(
        functools.partial(spark_helpers.fail_first_attempt, 0)
    )
    df = spark.createDataFrame(rdd.map(lambda s: Row(body=s)))
    assert vsqs.spark.publish_dataframe(df, queue_path) == 40
    assert _bodies(vsqs.Queue(queue_path)) == sorted(f"r{i}" for i in range(40))


def test_publish_by_key_column_and_json_rows(spark: SparkSession, tmp_path: Path) -> None:
    """With a key column, publishing the same rows twice (two jobs) adds them once."""
    queue_path = str(tmp_path / "q")
    df = spark.createDataFrame([Row(k=i, v=f"v{i}") for i in range(10)])
    for _ in range(2):
        vsqs.spark.publish_dataframe(df, queue_path, key_column="k", json_rows=True)
    got = sorted((json.loads(m.body) for m in vsqs.Queue(queue_path).browse()), key=str)
    assert got == sorted(({"k": i, "v": f"v{i}"} for i in range(10)), key=str)


def test_batch_write_then_browse_then_consume(spark: SparkSession, tmp_path: Path) -> None:
    """Round trip: write bodies and attributes; browse twice; consume empties the queue."""
    queue_path = str(tmp_path / "q")
    rows = [Row(body=f"b{i}", attributes={"n": str(i)}) for i in range(25)]
    spark.createDataFrame(rows).write.format("vsqs").mode("append").save(queue_path)

    for _ in range(2):
        browsed = spark.read.format("vsqs").load(queue_path).collect()
        assert sorted(bytes(r.body).decode() for r in browsed) == sorted(f"b{i}" for i in range(25))
        assert {bytes(r.body).decode(): r.attributes["n"] for r in browsed} == {
            f"b{i}": str(i) for i in range(25)
        }
        assert all(r.receive_count == 0 and r.sent_at is not None for r in browsed)

    consumed = spark.read.format("vsqs").option("mode", "consume").load(queue_path).collect()
    assert sorted(bytes(r.body).decode() for r in consumed) == sorted(f"b{i}" for i in range(25))
    assert all(r.receive_count == 1 for r in consumed)
    assert vsqs.Queue(queue_path).counts().total == 0


def test_batch_write_task_retry_adds_no_duplicates(spark: SparkSession, tmp_path: Path) -> None:
    """The writer is built once on the driver: a retried write task reuses its ids."""
    queue_path = str(tmp_path / "q")
    rdd = spark.sparkContext.parallelize([f"w{i}" for i in range(30)], 3).mapPartitions(
        functools.partial(spark_helpers.fail_first_attempt, 2)
    )
    df = spark.createDataFrame(rdd.map(lambda s: Row(body=s)))
    df.write.format("vsqs").mode("append").save(queue_path)
    assert _bodies(vsqs.Queue(queue_path)) == sorted(f"w{i}" for i in range(30))


def test_consume_respects_max_messages(spark: SparkSession, tmp_path: Path) -> None:
    """Consume mode with maxMessages takes at most that many and leaves the rest."""
    queue = vsqs.Queue(tmp_path / "q")
    queue.publish_batch([f"c{i}".encode() for i in range(10)])
    df = (
        spark.read.format("vsqs")
        .option("mode", "consume")
        .option("maxMessages", "4")
        .load(queue.path)
    )
    assert len(df.collect()) == 4
    assert queue.counts().ready == 6


def test_overwrite_is_refused(spark: SparkSession, tmp_path: Path) -> None:
    df = spark.createDataFrame([Row(body="x")])
    with pytest.raises(Exception, match="only appends"):
        df.write.format("vsqs").mode("overwrite").save(str(tmp_path / "q"))


def test_stream_read_and_stream_write(spark: SparkSession, tmp_path: Path) -> None:
    """A stream from one queue into another moves every message once and empties the source."""
    source = vsqs.Queue(tmp_path / "in")
    source.publish_batch([f"s{i}".encode() for i in range(120)])
    query = (
        spark.readStream.format("vsqs")
        .option("maxMessagesPerBatch", "50")
        .load(source.path)
        .select("body", "attributes")
        .writeStream.format("vsqs")
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(availableNow=True)
        .start(str(tmp_path / "out"))
    )
    query.awaitTermination(120)
    assert _bodies(vsqs.Queue(tmp_path / "out")) == sorted(f"s{i}" for i in range(120))
    assert source.counts().total == 0
    assert not list((tmp_path / "in" / ".vsqs" / "spark" / "default").glob("*.json"))


def test_stream_killed_mid_batch_loses_and_duplicates_nothing(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Kill a driver inside micro-batch 2; restart from the checkpoint here; compare."""
    queue = vsqs.Queue(tmp_path / "q")
    expected = sorted(f"k{i:03d}" for i in range(300))
    queue.publish_batch([body.encode() for body in expected])
    out = tmp_path / "out"
    out.mkdir()
    queue_path, checkpoint = str(tmp_path / "q"), str(tmp_path / "ckpt")
    args = [queue_path, checkpoint, str(out)]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [REPO_DIR, *sys.path])),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYSPARK_PYTHON": sys.executable,
    }
    command = [sys.executable, "-m", "tests.spark_helpers", *args]
    killed = subprocess.run([*command, "--kill-batch", "2"], env=env, check=False)
    assert killed.returncode == -9
    assert sorted(p.name for p in out.glob("*.json")) == ["0.json", "1.json"]
    assert queue.counts().held > 0  # batch 2 (and the uncommitted 1) still leased

    started = time.monotonic()
    spark_helpers.run_stream(spark, queue_path, checkpoint, str(out), kill_batch=-1)
    # The replayed batch 2 is served empty; its messages come back in later batches.
    assert time.monotonic() - started < 100  # not by waiting out the 120 s leases

    seen: list[str] = []
    for path in out.glob("*.json"):
        seen.extend(json.loads(path.read_text()))
    assert sorted(seen) == expected  # nothing lost, nothing twice
    assert queue.counts().total == 0


def test_heartbeat_extends_leases_until_commit(tmp_path: Path) -> None:
    """A claimed batch outlives its visibility timeout while the heartbeat runs."""
    queue = vsqs.Queue(tmp_path / "q")
    queue.publish_batch([b"a", b"b", b"c"])
    options = SourceOptions.parse(
        {"path": queue.path, "visibilityTimeout": "1", "heartbeatInterval": "0.2"}
    )
    reader = StreamReader(options)
    try:
        assert reader.latestOffset({"seq": 0}, ReadMaxRows(10)) == {"seq": 1}
        time.sleep(1.6)  # the only way to see a real lease outlive its timeout
        assert queue.receive_batch(10, timeout=0) == []
        assert queue.counts().held == 3
        reader.commit({"seq": 1})
        assert queue.counts().total == 0
    finally:
        reader.stop()


def test_restarted_reader_releases_uncompleted_and_deletes_completed(tmp_path: Path) -> None:
    """Recovery: batches up to the start offset are deleted, later ones released."""
    queue = vsqs.Queue(tmp_path / "q")
    queue.publish_batch([f"r{i}".encode() for i in range(6)])
    options = SourceOptions.parse(
        {"path": queue.path, "visibilityTimeout": "300", "maxMessagesPerBatch": "3"}
    )
    first = StreamReader(options)
    assert first.latestOffset({"seq": 0}, ReadMaxRows(3)) == {"seq": 1}
    assert len(first.partitions({"seq": 0}, {"seq": 1})) == 2
    assert first.latestOffset({"seq": 1}, ReadMaxRows(3)) == {"seq": 2}  # no commit call yet
    first.stop()  # the process "dies": batch 1 completed, batch 2 did not

    second = StreamReader(options)
    try:
        assert second.partitions({"seq": 1}, {"seq": 2}) == []  # replay of batch 2: released
        assert queue.counts().ready == 3
        assert queue.counts().held == 0  # batch 1 deleted
        assert second.latestOffset({"seq": 2}, ReadMaxRows(3)) == {"seq": 3}
        parts = second.partitions({"seq": 2}, {"seq": 3})
        assert sorted(row[1] for part in parts for row in part.value) == [b"r3", b"r4", b"r5"]
    finally:
        second.stop()


def test_bad_options_are_named() -> None:
    with pytest.raises(ValueError, match="mode"):
        SourceOptions.parse({"path": "/tmp/x", "mode": "peek"})
    with pytest.raises(ValueError, match="queue path"):
        SourceOptions.parse({})
    with pytest.raises(ValueError, match="consumer"):
        SourceOptions.parse({"path": "/tmp/x", "consumer": "../up"})
