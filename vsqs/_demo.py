"""``make demo`` / ``vsqs demo``: producers and consumers in separate processes share a queue.

Each producer process publishes numbered messages; consumer processes receive and delete
them until the last producer has closed the queue and it is drained. The parent then
checks that every message was delivered exactly once and prints the throughput.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import sys
import time

from . import Queue, _userfiles


def _produce(path: str, producer: int, count: int) -> None:
    queue = Queue(path, durable=False)
    batch = 100
    for start in range(0, count, batch):
        queue.publish_batch(
            f"{producer}:{n}".encode() for n in range(start, min(start + batch, count))
        )
    queue.detach()


def _consume(path: str, report: str) -> None:
    queue = Queue(path, visibility_timeout=60)
    seen = []
    for message in queue.consume():
        seen.append(message.body.decode())
        queue.delete(message)
    queue.detach()
    _userfiles.write_text(report, "\n".join(seen))


def run(producers: int = 3, consumers: int = 3, messages: int = 20_000, path: str = "") -> int:
    """Run the demo; return 0 if every message was delivered exactly once."""
    workdir = _userfiles.make_temp_dir("vsqs-demo-")
    path = path or os.path.join(workdir, "queue")
    queue = Queue(path)
    per_producer = messages // producers
    total = per_producer * producers
    print(f"queue        {path}")
    print(f"workload     {producers} producer and {consumers} consumer processes, {total} messages")
    ctx = mp.get_context("spawn")
    reports = [os.path.join(workdir, f"consumer-{n}.txt") for n in range(consumers)]
    started = time.perf_counter()
    workers = [ctx.Process(target=_consume, args=(path, report)) for report in reports]
    workers += [
        ctx.Process(target=_produce, args=(path, n, per_producer)) for n in range(producers)
    ]
    for worker in workers:
        worker.start()
    for worker in workers[consumers:]:
        worker.join()
    queue.shutdown()  # the producers are done: consumers stop once the queue is drained
    for worker in workers[:consumers]:
        worker.join()
    elapsed = time.perf_counter() - started
    delivered: list[str] = []
    per_consumer = []
    for report in reports:
        lines = [line for line in _userfiles.read_text(report).splitlines() if line]
        per_consumer.append(len(lines))
        delivered += lines
    expected = {f"{p}:{n}" for p in range(producers) for n in range(per_producer)}
    duplicates = len(delivered) - len(set(delivered))
    missing = expected - set(delivered)
    stats = queue.stats()
    print(f"elapsed      {elapsed:.2f} s (process start-up included)")
    print(f"throughput   {total / elapsed:,.0f} messages/s published and consumed")
    print(f"stats        produced {stats.produced_messages}, consumed {stats.consumed_messages}")
    print(f"per consumer {', '.join(str(n) for n in per_consumer)}")
    ok = not missing and not duplicates and queue.counts().total == 0
    print(
        f"result       {'OK' if ok else 'FAILED'}: {len(missing)} missing, {duplicates} duplicated"
    )
    _userfiles.remove_temp_dir(workdir)
    return 0 if ok else 1


def _at_least_one(text: str) -> int:
    value = int(text)
    if value < 1:
        raise ValueError(text)
    return value


def main(argv: list[str] | None = None) -> int:
    """``python -m vsqs._demo [--producers N] [--consumers N] [--messages N]``: what
    ``make demo`` runs (with the core alone installed) and ``vsqs demo`` starts."""
    import argparse  # noqa: PLC0415 -- only the program parses arguments

    parser = argparse.ArgumentParser(prog="python -m vsqs._demo", description=__doc__)
    for option, default in (("producers", 3), ("consumers", 3), ("messages", 20_000)):
        parser.add_argument(f"--{option}", type=_at_least_one, default=default)
    args = parser.parse_args(argv)
    return run(args.producers, args.consumers, args.messages)


if __name__ == "__main__":
    sys.exit(main())
