"""Functions the Spark tests ship to executors, and a driver the crash test runs and kills.

They live in a module of their own because Spark pickles functions by reference to their
module: the workers import ``tests.spark_helpers`` (the repository is on their
``PYTHONPATH``), which is lighter than importing a test module.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from collections.abc import Iterable, Iterator
from typing import Any

from pyspark import TaskContext
from pyspark.sql import Column, DataFrame, Row, SparkSession
from pyspark.sql.functions import udf

import vsqs.spark


def build_session(master: str = "local[2,4]") -> SparkSession:
    """A small local session; ``local[2,4]`` runs 2 threads and allows 4 task attempts."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    session = (
        SparkSession.builder.master(master)
        .appName("vsqs-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.task.maxFailures", "4")
        # A worker per task that exits normally: coverage then records what ran in it.
        .config("spark.python.worker.reuse", "false")
        .config("spark.sql.streaming.forceDeleteTempCheckpointLocation", "true")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    vsqs.spark.register(session)
    return session


def _task() -> TaskContext:
    context = TaskContext.get()
    assert context is not None, "not in a Spark task"
    return context


def fail_first_attempt(partition: int, rows: Iterable[Any]) -> Iterator[Any]:
    """Yield *rows*; on the first attempt of *partition*, fail after the last one."""
    yield from rows
    context = _task()
    if context.partitionId() == partition and context.attemptNumber() == 0:
        raise RuntimeError("injected failure of the first attempt")


def publish_then_fail(queue_path: str, run_id: str, rows: Iterable[Row]) -> None:
    """Publish a partition, then fail the first attempt of partition 1 (after publishing)."""
    vsqs.spark.publish_partition(rows, queue_path, run_id=run_id, batch_size=7)
    context = _task()
    if context.partitionId() == 1 and context.attemptNumber() == 0:
        raise RuntimeError("injected failure after publishing")


def publish_killed_midway(queue_path: str, run_id: str, rows: Iterable[Row]) -> None:
    """Publish a partition in batches of 7; the first attempt of partition 0 is killed
    (``os._exit``, no cleanup) right after the 10th message became ready: three
    messages into its second batch, past that batch's commit point."""
    context = _task()
    if context.partitionId() == 0 and context.attemptNumber() == 0:
        real = vsqs._fs.rename_noreplace
        made_ready = [0]

        def rename(src: str, dst: str, dir_fd: int = -100) -> None:  # AT_FDCWD
            real(src, dst, dir_fd)
            if src.endswith(".new") and not dst.endswith(".new"):
                made_ready[0] += 1
                if made_ready[0] == 10:
                    os._exit(137)

        vsqs._fs.rename_noreplace = rename
    vsqs.spark.publish_partition(rows, queue_path, run_id=run_id, batch_size=7)


def _write_json(path: str, data: object) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(data, fh)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def run_stream(spark: SparkSession, queue: str, checkpoint: str, out: str, kill_batch: int) -> None:
    """Stream *queue* into ``<out>/<batch>.json`` (idempotent by batch id) until drained.

    With *kill_batch* >= 0, the driver SIGKILLs itself while processing that batch,
    before its output is written: a crash in the middle of a micro-batch.
    """
    stream = (
        spark.readStream.format("vsqs")
        .option("maxMessagesPerBatch", "50")
        .option("visibilityTimeout", "120")
        .option("heartbeatInterval", "1")
        .option("lockTimeout", "30")
        .load(queue)
    )

    def sink(batch: DataFrame, batch_id: int) -> None:
        bodies = sorted(bytes(row.body).decode() for row in batch.select("body").collect())
        if batch_id == kill_batch:
            os.kill(os.getpid(), signal.SIGKILL)
        _write_json(os.path.join(out, f"{batch_id}.json"), bodies)

    query = (
        stream.writeStream.foreachBatch(sink)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)


def killer(out: str, kill_batch: int, driver_pid: int, threshold: int) -> Column:
    """``body`` unchanged, except that partition 1 of batch *kill_batch* waits until
    *threshold* messages are in the queue *out* (partition 0 of that batch has published
    its rows) and then SIGKILLs the driver: a crash after part of a batch was written."""

    def passthrough(body: bytes) -> bytes:
        context = _task()
        if (
            context.getLocalProperty("streaming.sql.batchId") == str(kill_batch)
            and context.partitionId() == 1
        ):
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                published = [n for n in os.listdir(out) if n[0] != "." and "." not in n]
                if len(published) >= threshold:
                    os.kill(driver_pid, signal.SIGKILL)
                    time.sleep(60)
                time.sleep(0.05)
            raise RuntimeError("partition 0 of the batch never published")
        return body

    return udf(passthrough, "binary")("body")


def run_copy(
    spark: SparkSession, queue: str, checkpoint: str, out: str, kill_batch: int, *, batch: int = 50
) -> None:
    """Stream *queue* into the queue *out* with the vsqs sink, until drained.

    With *kill_batch* >= 0, the driver is killed once half of that batch is published.
    """
    os.makedirs(out, exist_ok=True)
    stream = (
        spark.readStream.format("vsqs")
        .option("maxMessagesPerBatch", str(batch))
        .option("visibilityTimeout", "120")
        .option("heartbeatInterval", "1")
        .option("lockTimeout", "30")
        .load(queue)
    )
    if kill_batch >= 0:
        kill = killer(out, kill_batch, os.getpid(), kill_batch * batch + batch // 2)
        stream = stream.select(kill.alias("body"))
    query = (
        stream.select("body")
        .writeStream.format("vsqs")
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start(out)
    )
    query.awaitTermination(120)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("queue")
    parser.add_argument("checkpoint")
    parser.add_argument("out")
    parser.add_argument("--kill-batch", type=int, default=-1)
    parser.add_argument("--copy", action="store_true", help="into the queue out, vsqs sink")
    args = parser.parse_args(argv)
    spark = build_session("local[2]")
    if args.copy:
        run_copy(spark, args.queue, args.checkpoint, args.out, args.kill_batch)
    else:
        run_stream(spark, args.queue, args.checkpoint, args.out, args.kill_batch)
    spark.stop()


if __name__ == "__main__":
    main()
