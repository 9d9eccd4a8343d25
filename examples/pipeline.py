"""A three-stage pipeline across processes: bounded queues, close, drain, dead letters.

    python examples/pipeline.py

A producer process feeds numbers into a bounded ``numbers`` queue (it blocks while the
consumers lag), then closes it. Two worker processes square each number and publish the
result to ``squares``; a number that fails three times goes to a dead-letter queue. When
``numbers`` is drained, the last worker closes ``squares``, and the parent sums it.
"""

from __future__ import annotations

import multiprocessing as mp
import shutil
import sys
import tempfile
from pathlib import Path

import vsqs

COUNT = 2_000
POISON = 1_313  # this number always fails, to show the dead-letter queue at work


def producer(root: str) -> None:
    numbers = vsqs.QueueRoot(root).create("numbers", capacity=100, durable=False)
    for n in range(COUNT):
        numbers.publish(str(n).encode(), timeout=60)  # blocks while 100 are waiting
    numbers.shutdown()  # end of stream: consumers stop once everything is consumed


def worker(root: str, done: mp.synchronize.Barrier) -> None:
    queues = vsqs.QueueRoot(root, durable=False)
    numbers = queues.create(
        "numbers",
        capacity=100,
        visibility_timeout=0.2,  # a failed message comes back quickly
        dead_letter=queues.create("numbers.dlq"),
        max_receives=3,
    )
    squares = queues.create("squares")
    for message in numbers.consume():
        n = int(message.body)
        if n == POISON:
            continue  # "crash": never deleted, so it is received again, then dead-lettered
        squares.publish(str(n * n).encode())
        numbers.delete(message)
    if done.wait() == 0:  # the last worker to finish closes the next stage
        squares.shutdown()


def main() -> int:
    root = str(Path(tempfile.mkdtemp(prefix="vsqs-pipeline-")))
    try:
        return run(root)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def run(root: str) -> int:
    done = mp.Barrier(2)
    processes = [mp.Process(target=producer, args=(root,))]
    processes += [mp.Process(target=worker, args=(root, done)) for _ in range(2)]
    for process in processes:
        process.start()
    queues = vsqs.QueueRoot(root)
    squares = queues.create("squares")
    total = 0
    for message in squares.consume():
        total += int(message.body)
        squares.delete(message)
    for process in processes:
        process.join()
    dead = [int(m.body) for m in queues.get("numbers.dlq").browse()]
    expected = sum(n * n for n in range(COUNT) if n != POISON)
    print(f"sum of squares: {total} (expected {expected}); dead letters: {dead}")
    return 0 if total == expected and dead == [POISON] else 1


if __name__ == "__main__":
    sys.exit(main())
