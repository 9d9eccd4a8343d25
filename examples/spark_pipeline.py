"""A Spark pipeline around two vsqs queues.

1. Spark publishes work items from a DataFrame into the ``work`` queue
   (:func:`vsqs.spark.publish_dataframe`, exactly once under task retries), then
   closes it: the end of the stream.
2. Plain worker processes, no Spark in them, consume ``work``, compute, publish into
   ``results`` (with the work id as deduplication id, so a redelivered item adds no
   second result) and delete the work item.
3. Spark streams ``results`` back with the ``vsqs`` source into an in-memory table and
   checks that every item came back exactly once.

Run it (after ``pip install '.[spark]'`` in a clone of vsqs; PySpark needs Java 17 or 21)::

    python examples/spark_pipeline.py [--items 2000] [--workers 3]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shutil
import sys
import tempfile
import time

from pyspark.sql import SparkSession
from pyspark.sql import functions as fn

import vsqs
import vsqs.spark


def worker(work_path: str, results_path: str) -> None:
    """Square numbers until the work queue is closed and drained."""
    with vsqs.Queue(work_path) as work, vsqs.Queue(results_path) as results:
        for message in work.consume(visibility_timeout=60):
            item = json.loads(message.body)
            answer = {"item": item["item"], "square": item["n"] * item["n"], "pid": os.getpid()}
            results.publish(json.dumps(answer).encode(), dedup_id=f"result-of-{message.id}")
            work.delete(message)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--items", type=int, default=2000)
    parser.add_argument("--workers", type=int, default=3)
    args = parser.parse_args()

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # workers use this interpreter

    root = tempfile.mkdtemp(prefix="vsqs-spark-pipeline-")
    work_path, results_path = os.path.join(root, "work"), os.path.join(root, "results")
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("vsqs-spark-pipeline")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    vsqs.spark.register(spark)
    started = time.perf_counter()

    # 1. Spark publishes the work; the key column makes each item's id its identity.
    items = spark.range(args.items).select(
        fn.col("id").alias("item"), (fn.col("id") % 97).alias("n")
    )
    published = vsqs.spark.publish_dataframe(items, work_path, json_rows=True, key_column="item")
    vsqs.Queue(work_path).shutdown()
    vsqs.Queue(results_path).close()  # created before Spark reads it: a reader never creates one

    # 2. Workers outside Spark.
    context = multiprocessing.get_context("spawn")
    workers = [
        context.Process(target=worker, args=(work_path, results_path)) for _ in range(args.workers)
    ]
    for process in workers:
        process.start()

    # 3. Spark streams the results back while the workers run.
    query = (
        spark.readStream.format("vsqs")
        .option("maxMessagesPerBatch", "500")
        .load(results_path)
        .select(fn.col("body").cast("string").alias("json"))
        .writeStream.format("memory")
        .queryName("results")
        .option("checkpointLocation", os.path.join(root, "checkpoint"))
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    deadline = time.monotonic() + 120
    while spark.table("results").count() < args.items and time.monotonic() < deadline:
        time.sleep(0.5)
    query.stop()
    for process in workers:
        process.join(30)

    schema = "item long, square long, pid int"
    results = spark.table("results").select(fn.from_json("json", schema).alias("r")).select("r.*")
    summary = results.agg(
        fn.count("*").alias("rows"),
        fn.countDistinct("item").alias("items"),
        fn.countDistinct("pid").alias("workers"),
        fn.sum("square").alias("sum_of_squares"),
    ).first()
    assert summary is not None  # an aggregate always has one row
    expected_sum = sum((i % 97) ** 2 for i in range(args.items))
    elapsed = time.perf_counter() - started
    spark.stop()
    shutil.rmtree(root, ignore_errors=True)

    print(f"published {published} work items")
    print(
        f"{summary.workers} worker processes answered; Spark streamed back {summary.rows} results"
    )
    print(f"distinct items {summary.items}, sum of squares {summary.sum_of_squares}")
    print(f"({elapsed:.1f} s)")
    ok = (
        published == args.items
        and summary.rows == summary.items == args.items
        and summary.sum_of_squares == expected_sum
        and all(process.exitcode == 0 for process in workers)
    )
    print("OK" if ok else "MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
