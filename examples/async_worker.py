"""An async worker pool on a queue whose settings are stored with it.

A producer *process* publishes jobs to a queue created with its policies stored
(visibility timeout, dead-letter queue, max_receives); fifty coroutines, which pass no
options at all, work on them in self-renewing leases. A job that keeps failing ends in
the dead-letter queue after two attempts; the others are done exactly once.

Run: ``python examples/async_worker.py``
"""

from __future__ import annotations

import asyncio
import multiprocessing
import shutil
import tempfile

import vsqs
from vsqs.aio import AsyncQueue

JOBS = 20
POISON = b"job 13"


def produce(path: str) -> None:
    """Another program: it knows only the path; the settings come with the queue."""
    queue = vsqs.Queue(path)
    queue.publish_batch([b"job %d" % n for n in range(JOBS)])
    queue.shutdown()  # no more jobs: the workers stop once the queue is drained


async def work(body: bytes) -> None:
    await asyncio.sleep(1.2)  # longer than the 1 s visibility timeout: leases renew
    if body == POISON:
        raise ValueError(f"cannot process {body!r}")


async def worker(queue: AsyncQueue, done: list[bytes]) -> None:
    async for lease in queue.consume_leases():
        try:
            async with lease:  # deleted on success, released at once on failure
                await work(lease.message.body)
        except ValueError:
            continue
        done.append(lease.message.body)


async def main(path: str) -> tuple[list[bytes], list[bytes]]:
    done: list[bytes] = []
    async with AsyncQueue(path) as queue:  # no options: the stored ones apply
        workers = [asyncio.create_task(worker(queue, done)) for _ in range(50)]
        producer = multiprocessing.get_context("spawn").Process(target=produce, args=(path,))
        producer.start()
        await asyncio.gather(*workers)
        await asyncio.to_thread(producer.join)
    dead = vsqs.Queue(path).dead_letter
    assert dead is not None
    return done, [message.body for message in dead.browse()]


if __name__ == "__main__":
    root_dir = tempfile.mkdtemp()
    try:
        root = vsqs.QueueRoot(root_dir)
        dlq = root.create("jobs.dlq")
        jobs = root.create("jobs", visibility_timeout=1.0, dead_letter=dlq.path, max_receives=2)
        print("stored settings:", jobs.settings())
        done, dead = asyncio.run(main(jobs.path))
        assert sorted(done) == sorted(b"job %d" % n for n in range(JOBS) if b"job %d" % n != POISON)
        print(f"done: {len(done)} jobs, each once")
        print(f"dead letters: {dead}")
    finally:
        shutil.rmtree(root_dir)
