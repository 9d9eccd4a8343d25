"""Spark benchmarks, side by side in one run: publishing, streaming read, large bodies.

Method: one local Spark session (``local[2]``, started before any timing). Every figure
comes from this one run, on ``--dir``.

* Publishing ``--rows`` rows of ``--body`` bytes in ``--partitions`` partitions, cached
  so every run publishes the same rows; each run writes into a fresh directory,
  removed and flushed (``os.sync``, untimed) before the next run starts; the runs are
  interleaved round by round, the order rotated by one each round (so with
  ``--repeat 4`` each run goes first once), ``--repeat`` rounds, median shown:

  - *bare O_EXCL+rename*: what one would hand-write with ``foreachPartition``: per
    row, create a temporary file with ``O_CREAT|O_EXCL``, write, close, rename. No
    sync, no deduplication.
  - *bare, sync per 500*: the same plus one ``os.sync()`` and one directory fsync
    every 500 rows: the durability of ``durable=True``.
  - *vsqs, durable=False* / *durable=True*: :func:`vsqs.spark.partition_publisher`
    (batches of ``--batch``, deduplication ids from run, stage, partition, index).
    The floor is ≥ 0.8× the bare loop of equal durability.

* Streaming read of ``--rows`` messages of ``--body`` bytes into parquet
  (``trigger(availableNow=True)``, ``maxMessagesPerBatch`` = ``--stream-batch``), from
  ``start()`` to termination, against Spark's own file source reading the same number
  of one-line JSON files (``maxFilesPerTrigger`` = ``--stream-batch``) into parquet.
* Large bodies: ``--big`` messages of 64 KiB read by the streaming source at its
  default settings into the ``noop`` sink; rate and the peak resident memory of the
  driver (the Python driver, its JVM and the JVM's Python workers, sampled every
  50 ms).

Usage::

    python -m benchmarks.bench_spark                     # 200k rows; several minutes
    python -m benchmarks.bench_spark --rows 20000 --big 2000 --repeat 1 --dir /dev/shm
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import threading
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


def bare_publish_synced(directory: str, rows: Iterable[Any]) -> None:
    """The baseline with one sync per 500 rows: what durable=True promises."""
    prefix = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        for index, row in enumerate(rows):
            name = f"{time.time_ns()}-{prefix}-{index}"
            tmp = os.path.join(directory, name + ".new")
            fd = os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666)
            try:
                os.write(fd, row.body)
            finally:
                os.close(fd)
            os.rename(tmp, os.path.join(directory, name))
            if index % 500 == 499:
                os.sync()
                os.fsync(dir_fd)
        os.sync()
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


class PeakMemory:
    """Peak RSS of this process tree, sampled by a thread: in total, and of the JVM alone."""

    def __init__(self) -> None:
        import psutil

        self.root = psutil.Process()
        self.peak = 0
        self.jvm_peak = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        import psutil

        while not self.stop.wait(0.05):
            total = jvm = 0
            for proc in [self.root, *self.root.children(recursive=True)]:
                try:
                    rss = proc.memory_info().rss
                    total += rss
                    if proc.name() == "java":
                        jvm += rss
                except psutil.Error:
                    pass  # RACE: a worker exited between the listing and the read
            self.peak = max(self.peak, total)
            self.jvm_peak = max(self.jvm_peak, jvm)

    def __enter__(self) -> PeakMemory:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()


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
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--body", type=int, default=200)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--stream-batch", type=int, default=10_000)
    parser.add_argument("--big", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--dir", default=tempfile.gettempdir())
    parser.add_argument("--publish-only", action="store_true", help="skip the streams")
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

    def timed(runs: dict[str, Callable[[str], None]]) -> dict[str, float]:
        """The median rate of each run; the runs interleaved round by round, so that a
        slow spell of a shared machine hits them all alike, and the order rotated each
        round, so that no run always follows the same one (or always goes first, on a
        disk still fresh)."""
        rates: dict[str, list[float]] = {name: [] for name in runs}
        order = list(runs.items())
        for round_ in range(args.repeat):
            shift = round_ % len(order)
            for name, run in order[shift:] + order[:shift]:
                target = tempfile.mkdtemp(dir=root)
                started = time.perf_counter()
                run(target)
                rates[name].append(args.rows / (time.perf_counter() - started))
                assert len(os.listdir(target)) >= args.rows, "rows went missing"
                shutil.rmtree(target)
                # Untimed: flush the removal (and the disk's discards), so that no run
                # pays for the files of the run before it.
                os.sync()
        return {name: float(statistics.median(values)) for name, values in rates.items()}

    def bare(target: str) -> None:
        df.foreachPartition(lambda rows: bare_publish(target, rows))

    def bare_synced(target: str) -> None:
        df.foreachPartition(lambda rows: bare_publish_synced(target, rows))

    def vsqs_run(durable: bool) -> Callable[[str], None]:
        def run(target: str) -> None:
            df.foreachPartition(
                vsqs.spark.partition_publisher(
                    target, batch_size=args.batch, queue_options={"durable": durable}
                )
            )

        return run

    def run_stream(reader: Any, name: str) -> tuple[float, Any]:
        started = time.perf_counter()
        query = (
            reader.writeStream.format("parquet")
            .option("path", os.path.join(root, name + "-out"))
            .option("checkpointLocation", os.path.join(root, name + "-ckpt"))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        return args.rows / (time.perf_counter() - started), query

    try:
        results = timed(
            {
                "bare O_EXCL+rename": bare,
                "vsqs, durable=False": vsqs_run(False),
                "bare, sync per 500": bare_synced,
                "vsqs, durable=True": vsqs_run(True),
            }
        )
        if args.publish_only:
            return _report(args, results, None)
        queue = vsqs.Queue(os.path.join(root, "stream"), durable=False)
        files = os.path.join(root, "json")
        os.mkdir(files)
        line = b'{"body":"' + body + b'"}\n'
        for start in range(0, args.rows, 10_000):
            queue.publish_batch([body] * min(10_000, args.rows - start))
        for index in range(args.rows):
            with open(os.path.join(files, f"{index:08d}.json"), "wb") as fh:
                fh.write(line)
        vsqs_rate, _ = run_stream(
            spark.readStream.format("vsqs")
            .option("maxMessagesPerBatch", str(args.stream_batch))
            .load(queue.path),
            "vsqs",
        )
        left = queue.counts().total
        file_rate, _ = run_stream(
            spark.readStream.format("json")
            .schema("body string")
            .option("maxFilesPerTrigger", str(args.stream_batch))
            .load(files),
            "files",
        )
        big = vsqs.Queue(os.path.join(root, "big"), durable=False)
        big_body = b"y" * 65536
        for start in range(0, args.big, 1000):
            big.publish_batch([big_body] * min(1000, args.big - start))
        with PeakMemory() as memory:
            started = time.perf_counter()
            query = (
                spark.readStream.format("vsqs")
                .load(big.path)
                .writeStream.format("noop")
                .option("checkpointLocation", os.path.join(root, "big-ckpt"))
                .trigger(availableNow=True)
                .start()
            )
            query.awaitTermination()
            big_rate = args.big / (time.perf_counter() - started)
        left += big.counts().total
    finally:
        shutil.rmtree(root, ignore_errors=True)
        spark.stop()

    return _report(args, results, (vsqs_rate, file_rate, big_rate, memory, left))


def _report(
    args: argparse.Namespace,
    results: dict[str, float],
    streams: tuple[float, float, float, PeakMemory, int] | None,
) -> int:
    """Print the table (and the floors); the exit status says whether they hold."""
    rows = []
    for name, rate in results.items():
        synced = "True" in name or "sync" in name
        base = results["bare, sync per 500" if synced else "bare O_EXCL+rename"]
        rows.append([name, f"{rate:,.0f}", f"{rate / base:.2f}×"])
    if streams is not None:
        vsqs_rate, file_rate, big_rate, _, _ = streams
        rows.append(["stream read into parquet, vsqs", f"{vsqs_rate:,.0f}", ""])
        rows.append(["stream read into parquet, JSON files", f"{file_rate:,.0f}", ""])
        rows.append([f"stream read, {args.big:,} × 64 KiB", f"{big_rate:,.0f}", ""])
    print(f"{args.rows:,} rows of {args.body} B, {args.partitions} partitions, local[2],")
    print(f"batches of {args.batch}, stream batches of {args.stream_batch}, on {args.dir},")
    print(f"median of {args.repeat} interleaved rounds")
    print()
    print(table(["run", "rows/s", "vs bare of equal durability"], rows))
    print()
    left = 0
    if streams is not None:
        memory, left = streams[3], streams[4]
        print(
            f"peak RSS during the 64 KiB stream: {memory.peak / 2**20:,.0f} MiB in all (driver,"
            f" its JVM, Python workers), of which the JVM {memory.jvm_peak / 2**20:,.0f} MiB"
        )
    fast = results["vsqs, durable=False"] / results["bare O_EXCL+rename"]
    slow = results["vsqs, durable=True"] / results["bare, sync per 500"]
    ok = fast >= FLOOR and slow >= FLOOR and left == 0
    print(f"floor durable=False: {fast:.2f}, durable=True: {slow:.2f} (need ≥ {FLOOR}): ", end="")
    print("PASS" if fast >= FLOOR and slow >= FLOOR else "FAIL")
    if left:
        print(f"streams left {left} messages in the queues: FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
