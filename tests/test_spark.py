"""The Spark helpers and the ``vsqs`` data source, against a real local Spark."""

from __future__ import annotations

import functools
import json
import os
import pickle
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.errors import AnalysisException
from pyspark.sql import Row, SparkSession
from pyspark.sql.datasource import InputPartition
from pyspark.sql.streaming.datasource import ReadMaxRows

import vsqs
import vsqs.spark
from tests import spark_helpers
from vsqs.spark._options import Planned, SourceOptions
from vsqs.spark._publish import publish_arrow, publish_rows, resolve_format
from vsqs.spark._read import plan_slices, read_planned, split
from vsqs.spark._stream import StreamReader

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


def _rows(reader: StreamReader, partition: InputPartition) -> list[tuple[Any, ...]]:
    """What the executor hands Spark for *partition* (Arrow record batches), as tuples."""
    rows: list[tuple[Any, ...]] = []
    for batch in reader.read(partition):
        rows.extend(zip(*(column.to_pylist() for column in batch.columns), strict=True))
    return rows


def _bodies(queue: vsqs.PlainQueue) -> list[str]:
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
    assert _bodies(vsqs.PlainQueue(queue_path)) == sorted(f"m{i}" for i in range(60))


def test_publish_task_killed_mid_batch_publishes_each_row_once(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Issue 15.9: one marker per batch. The Python worker is killed in the middle of a
    batch (after its marker, three of its seven messages ready); the retried task
    finds the marker, waits for the dead writer (up to ``IN_PROGRESS_LIMIT``), makes
    the other four ready and publishes the rest: every row exactly once, in order."""
    queue_path = str(tmp_path / "q")
    rows = [Row(body=f"m{i:03d}") for i in range(40)]
    df = spark.createDataFrame(rows).coalesce(1)
    publish = functools.partial(spark_helpers.publish_killed_midway, queue_path, uuid.uuid4().hex)
    df.foreachPartition(publish)
    queue = vsqs.PlainQueue(queue_path)
    assert [m.body.decode() for m in queue.browse()] == [f"m{i:03d}" for i in range(40)]
    markers = os.listdir(os.path.join(queue_path, ".vsqs", "dedup"))
    assert len(markers) == 6  # one per batch of 7 (40 rows), none per message


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
    assert _bodies(vsqs.PlainQueue(queue_path)) == sorted(f"r{i}" for i in range(40))


def test_publish_by_key_column_and_json_rows(spark: SparkSession, tmp_path: Path) -> None:
    """With a key column, publishing the same rows twice (two jobs) adds them once."""
    queue_path = str(tmp_path / "q")
    df = spark.createDataFrame([Row(k=i, v=f"v{i}") for i in range(10)])
    for _ in range(2):
        vsqs.spark.publish_dataframe(df, queue_path, key_column="k", json_rows=True)
    got = sorted((json.loads(m.body) for m in vsqs.PlainQueue(queue_path).browse()), key=str)
    assert got == sorted(({"k": i, "v": f"v{i}"} for i in range(10)), key=str)


def test_a_mistyped_path_is_refused_not_read_as_a_new_empty_queue(
    spark: SparkSession, tmp_path: Path
) -> None:
    """The batch and stream readers never create a queue (they once read 0 rows and left
    an empty queue at the typo); the error names the path."""
    from pyspark.errors import StreamingQueryException

    missing = str(tmp_path / "mistyped")
    with pytest.raises(AnalysisException, match=f"no queue at {missing}"):
        spark.read.format("vsqs").load(missing).collect()
    query = spark.readStream.format("vsqs").load(missing).writeStream.format("noop").start()
    try:
        with pytest.raises(StreamingQueryException, match=f"no queue at {missing}"):
            query.awaitTermination(120)  # the stream's reader is made as the query starts
    finally:
        query.stop()
    assert not os.path.exists(missing)


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

    with vsqs.spark.consume(spark, queue_path) as df:
        consumed = df.collect()
        assert sorted(bytes(r.body).decode() for r in consumed) == sorted(
            f"b{i}" for i in range(25)
        )
        assert {bytes(r.body).decode(): r.attributes["n"] for r in consumed}["b7"] == "7"
        assert all(r.receive_count == 1 for r in consumed)
        assert vsqs.PlainQueue(queue_path).counts().held == 25  # nothing deleted before the end
    assert vsqs.PlainQueue(queue_path).counts().total == 0


def test_consume_with_a_failing_task_loses_nothing(spark: SparkSession, tmp_path: Path) -> None:
    """Issue 15.1: a task that fails on attempt 0 used to leave 0 of 2,000 rows written
    and the queue empty. Now every row reaches the parquet output, then the queue empties."""
    queue = vsqs.PlainQueue(tmp_path / "q", durable=False)
    queue.publish_batch([f"c{i:04d}".encode() for i in range(2000)])
    out = str(tmp_path / "out")
    with vsqs.spark.consume(spark, queue.path, num_partitions=4) as df:
        failing = df.rdd.mapPartitions(functools.partial(spark_helpers.fail_first_attempt, 0))
        spark.createDataFrame(failing, df.schema).select("id", "body").write.parquet(out)
    written = spark.read.parquet(out).collect()
    assert len(written) == 2000
    assert sorted(bytes(r.body).decode() for r in written) == [f"c{i:04d}" for i in range(2000)]
    assert queue.counts().total == 0


def test_consume_reads_the_same_messages_on_every_action(
    spark: SparkSession, tmp_path: Path
) -> None:
    """show() and count() before the final action read the planned messages and delete
    nothing; a block that raises releases every message to the queue at once."""
    queue = vsqs.PlainQueue(tmp_path / "q", durable=False)
    queue.publish_batch([f"a{i}".encode() for i in range(50)])

    def fail_after_reading() -> None:
        with vsqs.spark.consume(spark, queue.path, max_messages=30) as df:
            df.show(3)
            assert df.count() == 30
            first = sorted(r.id for r in df.collect())
            assert sorted(r.id for r in df.collect()) == first
            assert queue.counts().ready == 20
            raise RuntimeError("the sink failed")

    with pytest.raises(RuntimeError, match="the sink failed"):
        fail_after_reading()
    assert queue.counts().ready == 50
    assert queue.counts().held == 0


def test_format_consume_mode_is_refused_and_deletes_nothing(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Issue 15.1: .show(3) on a consume read deleted all 5,000 messages. The format no
    longer consumes: it says to use vsqs.spark.consume, and the queue is untouched."""
    queue = vsqs.PlainQueue(tmp_path / "q", durable=False)
    queue.publish_batch([f"m{i}".encode() for i in range(5000)])
    with pytest.raises(Exception, match=r"vsqs\.spark\.consume"):
        spark.read.format("vsqs").option("mode", "consume").load(queue.path).show(3)
    assert queue.counts().ready == 5000


def test_batch_write_task_retry_adds_no_duplicates(spark: SparkSession, tmp_path: Path) -> None:
    """The writer is built once on the driver: a retried write task reuses its ids."""
    queue_path = str(tmp_path / "q")
    rdd = spark.sparkContext.parallelize([f"w{i}" for i in range(30)], 3).mapPartitions(
        functools.partial(spark_helpers.fail_first_attempt, 2)
    )
    df = spark.createDataFrame(rdd.map(lambda s: Row(body=s)))
    df.write.format("vsqs").mode("append").save(queue_path)
    assert _bodies(vsqs.PlainQueue(queue_path)) == sorted(f"w{i}" for i in range(30))


def test_consume_respects_max_messages(spark: SparkSession, tmp_path: Path) -> None:
    """consume(max_messages=4) takes at most that many and leaves the rest."""
    queue = vsqs.PlainQueue(tmp_path / "q")
    queue.publish_batch([f"c{i}".encode() for i in range(10)])
    with vsqs.spark.consume(spark, queue.path, max_messages=4) as df:
        assert len(df.collect()) == 4
    assert queue.counts().ready == 6
    assert queue.counts().held == 0


def test_overwrite_is_refused(spark: SparkSession, tmp_path: Path) -> None:
    df = spark.createDataFrame([Row(body="x")])
    with pytest.raises(Exception, match="only appends"):
        df.write.format("vsqs").mode("overwrite").save(str(tmp_path / "q"))


def test_save_without_a_mode_says_to_append(spark: SparkSession, tmp_path: Path) -> None:
    """Issue 15.7: Spark refuses its default mode (ErrorIfExists) for a Python data
    source before vsqs runs; the error the user sees names mode('append'), and other
    formats' errors are untouched."""
    df = spark.createDataFrame([Row(body="x")])
    for writer in (df.write.format("vsqs"), df.write.format("vsqs").mode("ignore")):
        with pytest.raises(ValueError, match=r"only appends.*\.mode\('append'\)"):
            writer.save(str(tmp_path / "q"))
    (tmp_path / "p").mkdir()
    with pytest.raises(AnalysisException, match="PATH_ALREADY_EXISTS"):
        df.write.format("parquet").save(str(tmp_path / "p"))
    assert not (tmp_path / "q").exists() or vsqs.PlainQueue(tmp_path / "q").counts().total == 0


def test_stream_read_and_stream_write(spark: SparkSession, tmp_path: Path) -> None:
    """A stream from one queue into another moves every message once and empties the source."""
    source = vsqs.PlainQueue(tmp_path / "in")
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
    assert _bodies(vsqs.PlainQueue(tmp_path / "out")) == sorted(f"s{i}" for i in range(120))
    assert source.counts().total == 0
    states = list((tmp_path / "in" / ".vsqs" / "spark" / "streams").iterdir())
    assert len(states) == 1  # one epoch: this checkpoint's
    assert sorted(p.name for p in states[0].glob("*.json")) == ["epoch.json"]
    # Issue 15.8: the progress reports the queue's backlog next to the offset.
    latest = query.recentProgress[0]["sources"][0]["latestOffset"]
    assert {"epoch", "seq", "ready", "held", "oldestReadyAgeMs"} <= set(json.loads(latest))


def test_stream_killed_mid_batch_loses_and_duplicates_nothing(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Kill a driver inside micro-batch 2; restart from the checkpoint here; compare."""
    queue = vsqs.PlainQueue(tmp_path / "q")
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
    # The replayed batch 2 is served again with the same messages (renewed leases).
    assert time.monotonic() - started < 100  # not by waiting out the 120 s leases

    seen: list[str] = []
    for path in out.glob("*.json"):
        seen.extend(json.loads(path.read_text()))
    assert sorted(seen) == expected  # nothing lost, nothing twice
    assert queue.counts().total == 0


def test_stream_vsqs_to_vsqs_killed_mid_batch_publishes_each_once(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Issue 15.2: kill -9 of the driver after half of batch 2 reached the vsqs sink,
    then restart from the checkpoint. The replayed batch has the same messages in the
    same partitions, so the sink's ids match and nothing is published twice (the old
    code released the batch and published its first half again under later ids)."""
    queue = vsqs.PlainQueue(tmp_path / "q", durable=False)
    expected = sorted(f"v{i:03d}" for i in range(300))
    queue.publish_batch([body.encode() for body in expected])
    out, checkpoint = str(tmp_path / "out"), str(tmp_path / "ckpt")
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [REPO_DIR, *sys.path])),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYSPARK_PYTHON": sys.executable,
    }
    command = [sys.executable, "-m", "tests.spark_helpers", queue.path, checkpoint, out]
    killed = subprocess.run([*command, "--copy", "--kill-batch", "2"], env=env, check=False)
    assert killed.returncode == -9
    assert 125 <= vsqs.PlainQueue(out).counts().ready < 150  # batches 0, 1 and half of 2

    spark_helpers.run_copy(spark, queue.path, checkpoint, out, kill_batch=-1)
    bodies = [m.body.decode() for m in vsqs.PlainQueue(out).browse()]
    assert sorted(bodies) == expected  # each once
    assert queue.counts().total == 0


def test_two_queries_never_settle_each_others_batches(spark: SparkSession, tmp_path: Path) -> None:
    """Issue 15.3: query A is killed holding a batch; query B, run again later, used to
    take A's batch for one of its own completed ones and delete it (lost). Now each
    checkpoint has its own state; A's restart serves its batch again."""
    queue = vsqs.PlainQueue(tmp_path / "q", durable=False)
    out_a, out_b = tmp_path / "out_a", tmp_path / "out_b"
    out_a.mkdir()
    out_b.mkdir()
    ckpt_a, ckpt_b = str(tmp_path / "ckpt_a"), str(tmp_path / "ckpt_b")
    queue.publish_batch([f"b{i:03d}".encode() for i in range(100)])
    spark_helpers.run_stream(spark, queue.path, ckpt_b, str(out_b), kill_batch=-1)  # 2 batches

    queue.publish_batch([f"a{i:03d}".encode() for i in range(50)])
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [REPO_DIR, *sys.path])),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYSPARK_PYTHON": sys.executable,
    }
    command = [sys.executable, "-m", "tests.spark_helpers", queue.path, ckpt_a, str(out_a)]
    killed = subprocess.run([*command, "--kill-batch", "0"], env=env, check=False)
    assert killed.returncode == -9
    assert queue.counts().held == 50  # A's batch 0, claimed and logged, not committed

    queue.publish_batch([f"c{i:03d}".encode() for i in range(50)])
    spark_helpers.run_stream(spark, queue.path, ckpt_b, str(out_b), kill_batch=-1)
    assert queue.counts().held == 50  # B left A's batch alone
    spark_helpers.run_stream(spark, queue.path, ckpt_a, str(out_a), kill_batch=-1)

    seen: list[str] = []
    for path in [*out_a.glob("*.json"), *out_b.glob("*.json")]:
        seen.extend(json.loads(path.read_text()))
    expected = [f"{p}{i:03d}" for p, n in (("a", 50), ("b", 100), ("c", 50)) for i in range(n)]
    assert sorted(seen) == sorted(expected)
    assert json.loads((out_a / "0.json").read_text()) == [f"a{i:03d}" for i in range(50)]
    assert queue.counts().total == 0


def test_stream_on_a_shut_down_queue_is_no_new_data(spark: SparkSession, tmp_path: Path) -> None:
    """Issue 15.4: once a shut-down queue is drained, a running query (processing-time
    trigger) keeps running with no new data instead of dying of QueueDrained."""
    queue = vsqs.PlainQueue(tmp_path / "q", durable=False)
    queue.publish_batch([f"d{i}".encode() for i in range(30)])
    queue.shutdown()
    out = str(tmp_path / "out")
    query = (
        spark.readStream.format("vsqs")
        .load(queue.path)
        .select("body")
        .writeStream.format("vsqs")
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(processingTime="200 milliseconds")
        .start(out)
    )
    try:
        query.processAllAvailable()
        done = len(query.recentProgress)
        deadline = time.monotonic() + 60
        while len(query.recentProgress) < done + 3 and time.monotonic() < deadline:
            query.awaitTermination(1)  # triggers that find the queue drained
        assert query.exception() is None
        assert query.isActive
        assert len(query.recentProgress) >= done + 3
    finally:
        query.stop()
    assert _bodies(vsqs.PlainQueue(out)) == sorted(f"d{i}" for i in range(30))
    assert queue.counts().total == 0


def test_a_drained_shut_down_queue_is_no_new_data_for_the_reader(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 15.4: QueueDrained from the claim is the end of input, not an error."""
    queue = vsqs.PlainQueue(tmp_path / "q")
    queue.publish_batch([b"x", b"y"])
    queue.shutdown()
    reader = StreamReader(SourceOptions.parse({"path": queue.path}))
    try:
        start = reader.initialOffset()
        end = reader.latestOffset(start, ReadMaxRows(10))
        assert end["seq"] == 1
        reader.commit(end)

        def drained(self: vsqs.PlainQueue, *args: object, **kwargs: object) -> list[vsqs.Message]:
            raise vsqs.QueueDrained(self.path)

        # Once the shutdown grace has passed, every claim raises QueueDrained.
        monkeypatch.setattr(vsqs.PlainQueue, "receive_batch", drained)
        assert reader.latestOffset(end, ReadMaxRows(10)) == end
    finally:
        reader.stop()
    assert queue.counts().total == 0


def test_stream_large_bodies_are_read_on_the_executors(spark: SparkSession, tmp_path: Path) -> None:
    """Issue 15.5: 64 KiB bodies. Partitions carry receipts, not bodies, and a byte limit
    per micro-batch (maxBytesPerBatch) bounds each batch besides the message limit."""
    queue = vsqs.PlainQueue(tmp_path / "q", durable=False)
    body = b"x" * 65536
    queue.publish_batch([body] * 200)
    query = (
        spark.readStream.format("vsqs")
        .option("maxBytesPerBatch", str(4 * 1024 * 1024))
        .load(queue.path)
        .select("body")
        .writeStream.format("vsqs")
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .option("durable", "false")
        .trigger(availableNow=True)
        .start(str(tmp_path / "out"))
    )
    query.awaitTermination(120)
    sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    assert sum(sizes) == 200
    assert max(sizes) <= 64  # 4 MiB of 64 KiB bodies
    assert all(m.body == body for m in vsqs.PlainQueue(tmp_path / "out").browse())
    assert queue.counts().total == 0


def test_partitions_carry_receipts_and_survive_renewal(tmp_path: Path) -> None:
    """A planned partition holds no body; a heartbeat that renames the lease after
    planning does not make it unreadable."""
    queue = vsqs.PlainQueue(tmp_path / "q")
    queue.publish_batch([b"p" * 10_000 for _ in range(4)])
    options = SourceOptions.parse({"path": queue.path, "heartbeatInterval": "3600"})
    reader = StreamReader(options)
    try:
        start = reader.initialOffset()
        end = reader.latestOffset(start, ReadMaxRows(10))
        parts = reader.partitions(start, end)
        assert len(pickle.dumps(parts)) < 2000  # 40 kB of bodies are not in there
        reader._extend(queue, 1, reader._pending[1])  # a heartbeat: new receipts
        rows = [row for part in parts for row in _rows(reader, part)]
        assert [row[1] for row in rows] == [b"p" * 10_000] * 4
        queue.delete(rows[0][0])
        with pytest.raises(LookupError, match="failOnDataLoss"):
            _rows(reader, parts[0])
    finally:
        reader.stop()


def test_heartbeat_extends_leases_until_commit(tmp_path: Path) -> None:
    """A claimed batch outlives its visibility timeout while the heartbeat runs."""
    queue = vsqs.PlainQueue(tmp_path / "q")
    queue.publish_batch([b"a", b"b", b"c"])
    options = SourceOptions.parse(
        {"path": queue.path, "visibilityTimeout": "1", "heartbeatInterval": "0.2"}
    )
    reader = StreamReader(options)
    try:
        start = reader.initialOffset()
        end = reader.latestOffset(start, ReadMaxRows(10))
        assert end["seq"] == 1
        time.sleep(1.6)  # the only way to see a real lease outlive its timeout
        assert queue.receive_batch(10, timeout=0) == []
        assert queue.counts().held == 3
        reader.commit(end)
        reader.flush()
        assert queue.counts().total == 0
    finally:
        reader.stop()


def test_restarted_reader_replays_logged_and_releases_unlogged(tmp_path: Path) -> None:
    """Recovery: completed batches are deleted, a logged batch is served again with the
    same messages, a batch Spark never logged is released."""
    queue = vsqs.PlainQueue(tmp_path / "q")
    queue.publish_batch([f"r{i}".encode() for i in range(9)])
    options = SourceOptions.parse(
        {"path": queue.path, "visibilityTimeout": "300", "maxMessagesPerBatch": "3"}
    )
    first = StreamReader(options)
    o0 = first.initialOffset()
    o1 = first.latestOffset(o0, ReadMaxRows(3))
    assert len(first.partitions(o0, o1)) == 2
    o2 = first.latestOffset(o1, ReadMaxRows(3))  # batch 1 completed
    planned = [m for part in first.partitions(o1, o2) for m in part.value[1]]
    first.stop()  # the driver dies while Spark runs batch 2, which it logged

    second = StreamReader(options)
    try:
        parts = second.partitions(o1, o2)  # Spark runs batch 2 again
        replayed = [row for part in parts for row in _rows(second, part)]
        assert [row[0] for row in replayed] == [m[0] for m in planned]
        assert [row[1] for row in replayed] == [b"r3", b"r4", b"r5"]
        second.flush()
        assert queue.counts().held == 3  # batch 1 deleted; batch 2 renewed
        o3 = second.latestOffset(o2, ReadMaxRows(3))  # batch 2 completed; 3 claimed
    finally:
        second.stop()  # the driver dies before Spark logs batch 3

    third = StreamReader(options)
    try:
        assert third.latestOffset(o2, ReadMaxRows(3)) == o3  # 3 released and claimed anew
        third.flush()
        assert queue.counts().held == 3
        parts = third.partitions(o2, o3)
        assert [row[1] for part in parts for row in _rows(third, part)] == [b"r6", b"r7", b"r8"]
        third.commit(o3)
        third.flush()
        assert queue.counts().total == 0
    finally:
        third.stop()


def test_state_mismatch_fails_loudly(tmp_path: Path) -> None:
    """Issue 15.3: a checkpoint whose epoch has no state here is refused, with what to do."""
    queue = vsqs.PlainQueue(tmp_path / "q")
    queue.publish(b"m")
    reader = StreamReader(SourceOptions.parse({"path": queue.path}))
    try:
        with pytest.raises(RuntimeError, match="new checkpointLocation"):
            reader.latestOffset({"epoch": "feed", "seq": 4}, ReadMaxRows(1))
        with pytest.raises(RuntimeError, match="no epoch"):
            reader.latestOffset({"seq": 4}, ReadMaxRows(1))
    finally:
        reader.stop()
    assert queue.counts().ready == 1


def test_one_value_column_and_kafka_columns(spark: SparkSession, tmp_path: Path) -> None:
    """Issue 15.6: spark.read.text gives one column 'value'; publish_dataframe and the
    format take it. 'key' is the deduplication id and a 'headers' map the attributes."""
    text = tmp_path / "lines.txt"
    text.write_text("".join(f"line{i}\n" for i in range(20)))
    lines = spark.read.text(str(text))
    assert vsqs.spark.publish_dataframe(lines, str(tmp_path / "a")) == 20
    lines.write.format("vsqs").mode("append").save(str(tmp_path / "b"))
    for name in ("a", "b"):
        assert _bodies(vsqs.PlainQueue(tmp_path / name)) == sorted(f"line{i}" for i in range(20))

    kafka = spark.createDataFrame(
        [(f"k{i % 5}", f"v{i}", {"h": str(i)}) for i in range(10)],
        "key string, value string, headers map<string,string>",
    )
    kafka.write.format("vsqs").mode("append").save(str(tmp_path / "c"))
    got = list(vsqs.PlainQueue(tmp_path / "c").browse())
    assert len(got) == 5  # one per key within the dedup window
    assert all(m.attributes["h"] == m.body.decode()[1:] for m in got)


def test_bad_columns_fail_on_the_driver(spark: SparkSession, tmp_path: Path) -> None:
    """Columns are checked against df.schema before any task runs, with a clear error."""
    numbers = spark.createDataFrame([(1, 2)], "a int, b int")
    with pytest.raises(ValueError, match="'value' or 'body'"):
        vsqs.spark.publish_dataframe(numbers, str(tmp_path / "q"))
    with pytest.raises(Exception, match="'value' or 'body'"):
        numbers.write.format("vsqs").mode("append").save(str(tmp_path / "q"))
    with pytest.raises(ValueError, match="must be binary or string, not int"):
        vsqs.spark.publish_dataframe(numbers.select("a"), str(tmp_path / "q"))
    assert vsqs.PlainQueue(tmp_path / "q").counts().total == 0


def test_unknown_option_is_named_with_the_known_ones(spark: SparkSession, tmp_path: Path) -> None:
    """Issue 15.7: .option("modee", "consume") used to browse quietly."""
    queue = vsqs.PlainQueue(tmp_path / "q")
    with pytest.raises(Exception, match=r"unknown option 'modee'.*known: batchSize"):
        spark.read.format("vsqs").option("modee", "consume").load(queue.path).collect()
    with pytest.raises(ValueError, match="unknown option 'maxoffsetspertrigger'"):
        SourceOptions.parse({"path": "/tmp/x", "maxOffsetsPerTrigger": "5"})
    with pytest.raises(ValueError, match="'visibilityTimeout' must be a number, not 'abc'"):
        SourceOptions.parse({"path": "/tmp/x", "visibilityTimeout": "abc"})
    with pytest.raises(ValueError, match="'numPartitions' must be an integer"):
        SourceOptions.parse({"path": "/tmp/x", "numPartitions": "2.5"})
    with pytest.raises(ValueError, match="'consumer' was removed"):
        SourceOptions.parse({"path": "/tmp/x", "consumer": "a"})


def test_bad_options_are_named() -> None:
    with pytest.raises(ValueError, match="mode"):
        SourceOptions.parse({"path": "/tmp/x", "mode": "peek"})
    with pytest.raises(ValueError, match="queue path"):
        SourceOptions.parse({})
    with pytest.raises(ValueError, match="maxBytesPerBatch"):
        SourceOptions.parse({"path": "/tmp/x", "maxBytesPerBatch": "0"})


def test_column_conventions_and_their_errors() -> None:
    """The body, key and attributes columns by Spark's Kafka conventions, or by name."""
    kafka = resolve_format(["key", "value", "headers", "topic"])
    assert (kafka.column, kafka.key_column, kafka.attributes_column) == ("value", "key", "headers")
    assert resolve_format(["payload"]).column == "payload"
    assert resolve_format(["key"]).key_column is None  # the only column is the body
    named = resolve_format(["a", "b"], column="b", key_column="a", attributes_column="b")
    assert (named.column, named.key_column, named.attributes_column) == ("b", "a", "b")
    with pytest.raises(ValueError, match="both 'value' and 'body'"):
        resolve_format(["value", "body"])
    with pytest.raises(ValueError, match="both 'attributes' and 'headers'"):
        resolve_format(["value", "attributes", "headers"])
    with pytest.raises(ValueError, match="key column 'k' is not among"):
        resolve_format(["value"], key_column="k")
    types = {"value": "string", "key": "array<int>", "headers": "map<string,int>"}
    with pytest.raises(ValueError, match="key column 'key' must be a simple type"):
        resolve_format(list(types), types)
    types["key"] = "bigint"
    with pytest.raises(ValueError, match="attributes column 'headers' must be map"):
        resolve_format(list(types), types)
    types["headers"] = "array<struct<key:string,value:binary>>"
    assert resolve_format(list(types), types).attributes_column == "headers"


def test_arrow_record_batches_publish_the_batches_rows_do(tmp_path: Path) -> None:
    """The Arrow writer cuts the same batches, under the same ids, as the Row path,
    whatever the record batches' sizes: a retry by either path adds nothing."""
    fmt = resolve_format(["value"], {"value": "string"})
    rows = [{"value": f"m{i:02d}"} for i in range(23)]
    by_rows = vsqs.PlainQueue(tmp_path / "rows")
    assert publish_rows(by_rows, rows, fmt, "p:", batch_size=5) == 23
    cuts = ((0, 3), (3, 17), (17, 23))
    batches = [
        pa.RecordBatch.from_pydict({"value": [r["value"] for r in rows[a:b]]}) for a, b in cuts
    ]
    by_arrow = vsqs.PlainQueue(tmp_path / "arrow")
    assert publish_arrow(by_arrow, batches, fmt, "p:", batch_size=5) == 23
    dedup = ".vsqs/dedup"
    assert sorted(os.listdir(by_rows.path + "/" + dedup)) == sorted(
        os.listdir(by_arrow.path + "/" + dedup)
    )
    assert publish_rows(by_arrow, rows, fmt, "p:", batch_size=5) == 23  # a retry: no-op
    assert [m.body for m in by_arrow.browse()] == [r["value"].encode() for r in rows]
    nulls = pa.RecordBatch.from_pydict({"value": ["a", None]})
    with pytest.raises(ValueError, match="row 1 has a null 'value'"):
        publish_arrow(vsqs.PlainQueue(tmp_path / "n"), [nulls], fmt, "p:", batch_size=5)


def test_kafka_headers_become_attributes(tmp_path: Path) -> None:
    """Kafka's headers (a list of key/value pairs, values as bytes) are attributes."""
    queue = vsqs.PlainQueue(tmp_path / "q")
    rows = [{"value": b"v", "headers": [("h", b"1"), ("g", "2")]}]
    fmt = resolve_format(["value", "headers"])
    assert publish_rows(queue, rows, fmt, "test:") == 1
    message = queue.receive(timeout=0)
    assert message is not None
    assert dict(message.attributes) == {"h": "1", "g": "2"}


def test_read_planned_skips_deleted_messages_when_told(tmp_path: Path) -> None:
    """failOnDataLoss=false: a message deleted by someone else is skipped, not fatal."""
    queue = vsqs.PlainQueue(tmp_path / "q")
    queue.publish_batch([b"a", b"b"])
    held = queue.receive_batch(2, timeout=0)
    plan: list[Planned] = [(m.id, m.receipt, {}, 1, m.sent_at, "") for m in held]
    queue.delete(held[0])
    rows = list(read_planned(queue.path, plan, fail_on_data_loss=False))
    assert [row[1] for row in rows] == [b"b"]
    assert split([], 3) == []


def test_consume_checks_its_arguments(spark: SparkSession, tmp_path: Path) -> None:
    queue_path = str(tmp_path / "q")
    for bad in ({"max_messages": 0}, {"visibility_timeout": 0.5}, {"heartbeat_interval": 400}):
        with pytest.raises(ValueError, match=next(iter(bad))):  # noqa: SIM117 (the block is the call)
            with vsqs.spark.consume(spark, queue_path, **bad):
                pass


# -- partitioned queues (issue 27, item 5) ----------------------------------------------


def _partitioned(path: Path, groups: int, each: int) -> vsqs.PartitionedQueue:
    """A 4-partition queue holding *each* messages of every group ``g<n>``, in rounds."""
    queue = vsqs.PartitionedQueue(path, partitions=4, durable=False)
    for seq in range(each):
        for g in range(groups):
            queue.publish(f"g{g}:{seq:03d}".encode(), group=f"g{g}")
    return queue


def _by_input_partition(df: Any) -> dict[int, list[str]]:
    """The ids each Spark input partition of *df* read, in its order."""
    return dict(enumerate(df.rdd.map(lambda row: row.id).glom().collect()))


def test_batch_read_and_consume_give_one_input_partition_per_queue_partition(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Issue 27.5: a 4-partition queue is read in 4 input partitions, each exactly one
    partition's directory in its FIFO order; every message once, by the browse and by
    the consume, which deletes them all when its block succeeds."""
    queue = _partitioned(tmp_path / "q", groups=12, each=10)
    expected = {
        index: [m.id for m in part.browse()] for index, part in enumerate(queue.partition_queues)
    }
    assert sum(len(ids) for ids in expected.values()) == 120
    assert sum(1 for ids in expected.values() if ids) >= 2  # the groups really spread

    df = spark.read.format("vsqs").load(queue.path)
    assert df.rdd.getNumPartitions() == 4
    assert _by_input_partition(df) == expected
    assert queue.counts().ready == 120  # browsing claims nothing

    with vsqs.spark.consume(spark, queue.path) as consumed:
        assert consumed.rdd.getNumPartitions() == 4
        seen = _by_input_partition(consumed)
        # A consume claims from every partition: each slice is one directory's messages.
        assert {i: sorted(ids) for i, ids in seen.items()} == {
            i: sorted(ids) for i, ids in expected.items()
        }
        assert all(ids == sorted(ids) for ids in seen.values())  # FIFO per partition
        assert queue.counts().held == 120
    assert queue.counts().total == 0


def test_plan_slices_keep_each_directory_to_its_own_input_partitions() -> None:
    """More parts than partitions split each directory; a 0.3 producer's messages in the
    queue's own directory get slices of their own; an unpartitioned queue is as before."""
    names = ["partition-0", "partition-1"]
    plan: list[Planned] = [
        (str(i), str(i), {}, 1, float(i), names[i % 2] if i < 8 else "") for i in range(10)
    ]
    slices = plan_slices(plan, 4, names)
    assert [(name, [m[0] for m in part]) for name, part in slices] == [
        ("partition-0", ["0", "2"]),
        ("partition-0", ["4", "6"]),
        ("partition-1", ["1", "3"]),
        ("partition-1", ["5", "7"]),
        ("", ["8"]),
        ("", ["9"]),
    ]
    assert plan_slices(plan[:1], 1, names) == [("partition-0", plan[:1]), ("partition-1", [])]
    flat = [(m[0], m[1], m[2], m[3], m[4], "") for m in plan]
    assert plan_slices(flat, 3, [""]) == [("", part) for part in split(flat, 3)]


def test_stream_over_a_partitioned_queue_delivers_every_message_once(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Issue 27.5: a stream from a 4-partition queue moves every message once, in
    micro-batches of 4 input partitions, and empties the source."""
    source = _partitioned(tmp_path / "in", groups=8, each=15)
    query = (
        spark.readStream.format("vsqs")
        .option("maxMessagesPerBatch", "80")
        .load(source.path)
        .select("body", "attributes")
        .writeStream.format("vsqs")
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(availableNow=True)
        .start(str(tmp_path / "out"))
    )
    query.awaitTermination(120)
    out = [m.body.decode() for m in vsqs.PlainQueue(tmp_path / "out").browse()]
    assert sorted(out) == sorted(f"g{g}:{s:03d}" for g in range(8) for s in range(15))
    assert source.counts().total == 0
    assert [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]] == [80, 40]


def test_stream_reader_plans_replays_and_settles_per_partition(tmp_path: Path) -> None:
    """The stream's plans carry each message's partition: its input partitions each read
    one directory, a restarted reader serves a logged batch again from the same
    directories, and the commit deletes in every partition."""
    queue = _partitioned(tmp_path / "q", groups=8, each=3)
    options = SourceOptions.parse({"path": queue.path, "maxMessagesPerBatch": "100"})
    first = StreamReader(options)
    o0 = first.initialOffset()
    o1 = first.latestOffset(o0, ReadMaxRows(100))
    parts = first.partitions(o0, o1)
    assert len(parts) == 4
    served = {part.value[0]: [row[0] for row in _rows(first, part)] for part in parts}
    planned = {part.value[0]: part.value[1] for part in parts}
    for index, part in enumerate(queue.partition_queues):
        name = f"partition-{index}"
        assert sorted(served[name]) == served[name]  # FIFO within the partition
        assert all(os.path.exists(os.path.join(part.path, m[1])) for m in planned[name])
    first.stop()  # the driver dies while Spark runs batch 1, which it logged

    second = StreamReader(options)
    try:
        again = second.partitions(o0, o1)
        assert {p.value[0]: [r[0] for r in _rows(second, p)] for p in again} == served
        assert queue.counts().held == 24
        second.commit(o1)
        second.flush()
        assert queue.counts().total == 0
    finally:
        second.stop()


def test_publish_dataframe_group_column_keeps_each_groups_order(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Issue 27.5: publish_dataframe(group_column=...) (and the format's groupColumn)
    gives each row the group of its column, like Kafka's key: each group lands in one
    partition and is received in the order its rows were published; a null group
    publishes without one."""
    rows = [Row(group=f"c{g}", seq=s, body=f"c{g}:{s:03d}") for s in range(30) for g in range(6)]
    # Each group in one Spark partition (3 of them, several groups each), ordered by seq.
    df = spark.createDataFrame(rows).repartition(3, "group").sortWithinPartitions("seq")
    queue = vsqs.PartitionedQueue(tmp_path / "q", partitions=4, durable=False)
    assert (
        vsqs.spark.publish_dataframe(
            df.select("group", "body"),
            queue.path,
            group_column="group",
            queue_options={"durable": False},
        )
        == 180
    )
    (
        spark.createDataFrame([Row(g=None, value="loose"), Row(g="c9", value="c9:000")])
        .write.format("vsqs")
        .option("groupColumn", "g")
        .mode("append")
        .save(queue.path)
    )
    received: dict[str | None, list[str]] = {}
    where: dict[str | None, set[str]] = {}
    consumer = vsqs.Queue(queue.path, durable=False)  # the partitioned queue, every partition
    while batch := consumer.receive_batch(25, timeout=0):
        for message in batch:
            received.setdefault(message.group, []).append(message.body.decode())
            where.setdefault(message.group, set()).add(message.queue)
        consumer.delete_batch(batch)
    assert received.pop(None) == ["loose"]
    assert received.pop("c9") == ["c9:000"]
    assert received == {f"c{g}": [f"c{g}:{s:03d}" for s in range(30)] for g in range(6)}
    assert all(len(where[f"c{g}"]) == 1 for g in range(6))
    types = {"body": "string", "g": "array<int>"}
    with pytest.raises(ValueError, match="group column 'g' must be a string"):
        resolve_format(list(types), types, group_column="g")
    with pytest.raises(ValueError, match="group column 'h' is not among"):
        resolve_format(list(types), group_column="h")
