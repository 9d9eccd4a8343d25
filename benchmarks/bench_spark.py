"""Spark benchmarks: publishing from ``foreachPartition``, and the streaming source.

Method: one local Spark session (``local[2]``, started before any timing), ``--rows``
rows of ``--body`` bytes in ``--partitions`` partitions, cached so that every run
publishes the same rows. Each publish run writes into a fresh directory on ``--dir``
and is repeated ``--repeat`` times; the table shows the median rate.

* *bare O_EXCL+rename*: what one would hand-write: per row, create a temporary file
  with ``O_CREAT|O_EXCL``, write, close, rename it to its final name. No fsync, no
  deduplication.
* *vsqs, durable=False*: :func:`vsqs.spark.partition_publisher`, batches of
  ``--batch``, deduplication ids from (run, stage, partition, index): the same
  durability as the bare loop, plus exactly-once under task retries. The floor of
  issue 6 is ≥ 0.8× the bare rate.
* *vsqs, durable=True*: the default: one filesystem sync and one directory fsync per
  batch.
* *stream*: ``--rows`` messages already in a queue, read by
  ``spark.readStream.format("vsqs")`` (``maxMessagesPerBatch`` = ``--stream-batch``,
  ``trigger(availableNow=True)``) into the ``noop`` sink; from ``start()`` to
  termination, so it includes claiming, the per-batch state file, Spark's
  planning and checkpointing, and deleting; and the same without the first
  micro-batch, which also pays for starting the Python workers.

Usage::

    python -m benchmarks.bench_spark                 # 100k rows, about a minute
    python -m benchmarks.bench_spark --rows 20000 --repeat 1 --dir /dev/shm
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, Final

HERE: Final = Path(__file__).resolve().parent
FLOOR: Final = 0.8


def bare_publish(directory: str, rows: Iterable[Any]) -> None:
    """The hand-written baseline: O_EXCL-create a temporary name, write, rename."""
    prefix = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
    for index, row in enumerate(rows):
        name = f"{time.time_ns()}-{prefix}-{index}"
        tmp = os.path.join(directory, name + ".new")
        fd = os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666)
        try:
            os.write(fd, row.body)
        finally:
            os.close(fd)
        os.rename(tmp, os.path.join(directory, name))


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A reST simple table."""
    widths = [max(len(c) for c in col) for col in zip(headers, *rows, strict=True)]
    rule = "  ".join("=" * w for w in widths)
    lines = [rule, "  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)), rule]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    lines.append(rule)
    return "\n".join(line.rstrip() for line in lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--body", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--stream-batch", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--dir", default=tempfile.gettempdir())
    args = parser.parse_args(argv)

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    # The workers import this module (and vsqs) by name.
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE.parent), *sys.path]))

    from pyspark.sql import SparkSession

    import vsqs
    import vsqs.spark

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("vsqs-bench-spark")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    vsqs.spark.register(spark)
    body = b"x" * args.body
    df = spark.createDataFrame(
        spark.sparkContext.parallelize(range(args.rows), args.partitions).map(lambda _: (body,)),
        "body binary",
    ).cache()
    df.count()

    root = tempfile.mkdtemp(prefix="vsqs-bench-spark-", dir=args.dir)

    def timed(run: Callable[[str], None]) -> float:
        rates = []
        for _ in range(args.repeat):
            target = tempfile.mkdtemp(dir=root)
            started = time.perf_counter()
            run(target)
            rates.append(args.rows / (time.perf_counter() - started))
            assert len(os.listdir(target)) >= args.rows, "rows went missing"
            shutil.rmtree(target)
        return float(statistics.median(rates))

    def bare(target: str) -> None:
        df.foreachPartition(lambda rows: bare_publish(target, rows))

    def vsqs_run(durable: bool) -> Callable[[str], None]:
        def run(target: str) -> None:
            df.foreachPartition(
                vsqs.spark.partition_publisher(
                    target, batch_size=args.batch, queue_options={"durable": durable}
                )
            )

        return run

    try:
        results = {
            "bare O_EXCL+rename": timed(bare),
            "vsqs, durable=False": timed(vsqs_run(False)),
            "vsqs, durable=True": timed(vsqs_run(True)),
        }
        queue = vsqs.Queue(os.path.join(root, "stream"), durable=False)
        for start in range(0, args.rows, 10_000):
            queue.publish_batch([body] * min(10_000, args.rows - start))
        started = time.perf_counter()
        query = (
            spark.readStream.format("vsqs")
            .option("maxMessagesPerBatch", str(args.stream_batch))
            .option("numPartitions", "2")
            .load(queue.path)
            .writeStream.format("noop")
            .option("checkpointLocation", os.path.join(root, "ckpt"))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        stream_rate = args.rows / (time.perf_counter() - started)
        # Without the first micro-batch, which also starts the Python workers.
        later = [p for p in query.recentProgress if p["batchId"] > 0]
        steady_rate = sum(p["numInputRows"] for p in later) / max(
            1e-9, sum(p["durationMs"]["triggerExecution"] for p in later) / 1000
        )
        left = queue.counts().total
    finally:
        shutil.rmtree(root, ignore_errors=True)
        spark.stop()

    base = results["bare O_EXCL+rename"]
    rows = [[name, f"{rate:,.0f}", f"{rate / base:.2f}×"] for name, rate in results.items()]
    rows.append(["stream read, start to end", f"{stream_rate:,.0f}", ""])
    rows.append(["stream read, after batch 0", f"{steady_rate:,.0f}", ""])
    print(f"{args.rows:,} rows of {args.body} B, {args.partitions} partitions, local[2],")
    print(f"batches of {args.batch}, stream batches of {args.stream_batch}, on {args.dir}")
    print()
    print(table(["run", "rows/s", "vs bare"], rows))
    ratio = results["vsqs, durable=False"] / base
    ok = ratio >= FLOOR and left == 0
    print()
    print(f"floor: vsqs (durable=False) / bare = {ratio:.2f} (need ≥ {FLOOR}): ", end="")
    print("PASS" if ratio >= FLOOR else "FAIL")
    if left:
        print(f"stream left {left} messages in the queue: FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
