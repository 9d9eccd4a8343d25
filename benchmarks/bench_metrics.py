"""What collecting a queue's metrics costs, at 0, 100k and 1M messages.

Method, on each filesystem (tmpfs ``/dev/shm`` and a disk directory): one non-durable
queue filled with *N* 100-byte ready messages (``publish_batch``), then, in the same
process, each row timed as the best of 5 calls (interference only adds time):

* ``listdir``: ``os.listdir`` of the queue directory, the floor of anything that
  counts the messages;
* ``Queue.stats()``: the counters and the counts by state;
* ``collect``: one scrape of a :class:`vsqs.metrics.QueueCollector` over the queue
  rendered by ``prometheus_client.generate_latest`` (``stats()``, the oldest message's
  metadata, the text);

``× listdir`` divides by the listing. No message body is read by any row, so the cost
follows the number of files, not their size. Run it with::

    python -m benchmarks.bench_metrics [--depths 0,100000,1000000] [--shm-dir /dev/shm]
        [--disk-dir /var/tmp]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Final

from prometheus_client import CollectorRegistry, generate_latest

import vsqs
from benchmarks.report import table
from vsqs.metrics import QueueCollector

TIMES: Final = 5
BATCH: Final = 10_000


def _best(call: Callable[[], object]) -> float:
    best = float("inf")
    for _ in range(TIMES):
        start = time.perf_counter()
        call()
        best = min(best, time.perf_counter() - start)
    return best


def measure(base: str, depth: int) -> dict[str, float]:
    work = Path(tempfile.mkdtemp(prefix="bench-metrics-", dir=base))
    try:
        queue = vsqs.Queue(work / "q", durable=False)
        body = b"x" * 100
        for start in range(0, depth, BATCH):
            queue.publish_batch([body] * min(BATCH, depth - start))
        registry = CollectorRegistry(auto_describe=False)
        registry.register(QueueCollector(queue))
        return {
            "listdir": _best(lambda: os.listdir(queue.path)),
            "stats": _best(queue.stats),
            "collect": _best(lambda: generate_latest(registry)),
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--depths", default="0,100000,1000000")
    parser.add_argument("--shm-dir", default="/dev/shm")
    parser.add_argument("--disk-dir", default="/var/tmp")
    args = parser.parse_args()
    rows = []
    for fs, base in (("tmpfs", args.shm_dir), ("disk", args.disk_dir)):
        for depth in (int(d) for d in args.depths.split(",")):
            got = measure(base, depth)
            print(f"{fs} {depth}: {got}", file=sys.stderr)
            rows.append(
                [
                    fs,
                    f"{depth:,}",
                    f"{got['listdir'] * 1e3:,.2f}",
                    f"{got['stats'] * 1e3:,.2f}",
                    f"{got['collect'] * 1e3:,.2f}",
                    f"{got['collect'] / got['listdir']:.1f}",
                ]
            )
    print("Method: see benchmarks/bench_metrics.py; times in ms, best of 5.\n")
    print(table(["fs", "messages", "listdir", "Queue.stats()", "collect", "× listdir"], rows))


if __name__ == "__main__":
    main()
