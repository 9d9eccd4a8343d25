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
from collections.abc import Iterable, Iterator
from typing import Any

from pyspark import TaskContext
from pyspark.sql import DataFrame, Row, SparkSession

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


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("queue")
    parser.add_argument("checkpoint")
    parser.add_argument("out")
    parser.add_argument("--kill-batch", type=int, default=-1)
    args = parser.parse_args(argv)
    spark = build_session("local[2]")
    run_stream(spark, args.queue, args.checkpoint, args.out, args.kill_batch)
    spark.stop()


if __name__ == "__main__":
    main()
