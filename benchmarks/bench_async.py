"""vsqs.aio: wake-up latency beside the sync API and the raw inotify floor, and
throughput with 1, 10 and 1,000 waiting tasks.

Method, latency: three consumer processes, each blocked on its own empty directory on
the same filesystem: ``bare`` (one inotify descriptor, ``poll(2)``, then ``listdir``,
``rename`` and ``read``: the floor; as in ``bench_wakeup``), ``sync``
(``Queue.receive(timeout=None)``) and ``async`` (``await AsyncQueue.receive(timeout=
None)`` on an asyncio loop). The parent makes one message ready in each directory
(write ``<id>.new``, rename to ``<id>``; the order rotates) every 25 ms; each consumer
reports when it holds the body. Latency is from just before the publishing rename to
the report, one clock.

Method, throughput: one consumer process whose N tasks (or threads, for the sync rows)
each loop ``receive(timeout=None)`` and ``delete``; they are all waiting before a
producer process starts publishing *messages* bodies (``durable=False``, batches of
100). The figure is messages over the time from the first receive to the last delete,
in the consumer. Both processes share the machine's cores.

Usage::

    python -m benchmarks.bench_async [--samples 150] [--messages 20000] [--fs shm|disk|both]
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import shutil
import statistics
import tempfile
import threading
import time
from typing import Any

import vsqs
from vsqs.aio import AsyncQueue

from .bench_wakeup import _bare, _publish
from .bench_wakeup import _vsqs as _sync

_ROOTS = {"shm": "/dev/shm", "disk": "/var/tmp"}
_NAMES = ("bare", "sync", "async")


def _async(path: str, count: int, results: Any, ready: Any) -> None:
    async def main() -> None:
        async with AsyncQueue(path, durable=False, poll_interval=3600) as queue:
            await queue.receive(timeout=0.01)  # the watch exists before the first message
            ready.set()
            for _ in range(count):
                message = await queue.receive(timeout=None)
                assert message is not None
                results.put(("async", int(message.body), time.perf_counter_ns()))
                await queue.delete(message)

    asyncio.run(main())


def latency(root: str, samples: int) -> dict[str, list[float]]:
    """Wake-up latencies in ms per consumer, published side by side."""
    base = tempfile.mkdtemp(prefix="vsqs-async-", dir=root)
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    paths = {name: f"{base}/{name}" for name in _NAMES}
    for path in paths.values():
        os.mkdir(path)
    readies = {name: ctx.Event() for name in _NAMES}
    targets = {"bare": _bare, "sync": _sync, "async": _async}
    workers = [
        ctx.Process(target=targets[name], args=(paths[name], samples, results, readies[name]))
        for name in _NAMES
    ]
    for worker in workers:
        worker.start()
    for event in readies.values():
        event.wait(60)
    time.sleep(0.2)
    sent: dict[tuple[str, int], int] = {}
    for serial in range(samples):
        shift = serial % len(_NAMES)
        for name in _NAMES[shift:] + _NAMES[:shift]:
            sent[(name, serial)] = _publish(paths[name], serial)
            time.sleep(0.025)
    found: dict[str, list[float]] = {name: [] for name in _NAMES}
    for _ in range(len(_NAMES) * samples):
        name, serial, got = results.get(timeout=60)
        name = "sync" if name == "vsqs" else name  # bench_wakeup's consumer says "vsqs"
        found[name].append((got - sent[(name, serial)]) / 1e6)
    for worker in workers:
        worker.join(60)
    shutil.rmtree(base, ignore_errors=True)
    return found


def _consume_async(path: str, tasks: int, total: int, ready: Any, out: Any) -> None:
    async def main() -> None:
        async with AsyncQueue(path, durable=False) as queue:
            done = 0
            first = 0

            async def worker() -> None:
                nonlocal done, first
                while done < total:
                    message = await queue.receive(timeout=None)
                    assert message is not None
                    first = first or time.perf_counter_ns()
                    await queue.delete(message)
                    done += 1
                    if done == total:
                        out.put((first, time.perf_counter_ns()))
                        await queue.shutdown()

            running = [asyncio.create_task(worker()) for _ in range(tasks)]
            while len(queue._receivers) < tasks:
                await asyncio.sleep(0.001)
            ready.set()
            await asyncio.gather(*running, return_exceptions=True)

    asyncio.run(main())


def _consume_sync(path: str, threads: int, total: int, ready: Any, out: Any) -> None:
    queue = vsqs.Queue(path, durable=False)
    lock = threading.Lock()
    state = {"done": 0, "first": 0}

    def worker() -> None:
        for message in queue.consume():
            with lock:
                state["first"] = state["first"] or time.perf_counter_ns()
            queue.delete(message)
            with lock:
                state["done"] += 1
                if state["done"] == total:
                    out.put((state["first"], time.perf_counter_ns()))
                    queue.shutdown()

    running = [threading.Thread(target=worker) for _ in range(threads)]
    for thread in running:
        thread.start()
    time.sleep(0.3)  # every thread blocked in its receive
    ready.set()
    for thread in running:
        thread.join()


def _produce(path: str, total: int) -> None:
    queue = vsqs.Queue(path, durable=False)
    for start in range(0, total, 100):
        queue.publish_batch([b"x"] * min(100, total - start))


def throughput(root: str, kind: str, waiters: int, total: int) -> float:
    """Messages per second consumed by *waiters* tasks (or threads) of one process."""
    path = tempfile.mkdtemp(prefix="vsqs-async-tp-", dir=root)
    ctx = mp.get_context("spawn")
    ready, out = ctx.Event(), ctx.Queue()
    target = _consume_async if kind == "async" else _consume_sync
    consumer = ctx.Process(target=target, args=(path, waiters, total, ready, out))
    consumer.start()
    ready.wait(120)
    producer = ctx.Process(target=_produce, args=(path, total))
    producer.start()
    first, last = out.get(timeout=600)
    producer.join(60)
    consumer.join(60)
    shutil.rmtree(path, ignore_errors=True)
    return total / ((last - first) / 1e9)


def _table(header: tuple[str, ...], rows: list[tuple[str, ...]], width: int = 13) -> None:
    rule = "  ".join("=" * width for _ in header)
    print(rule)
    print("  ".join(h.rjust(width) if i else h.ljust(width) for i, h in enumerate(header)))
    print(rule)
    for row in rows:
        print("  ".join(c.rjust(width) if i else c.ljust(width) for i, c in enumerate(row)))
    print(rule)
    print()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=150)
    parser.add_argument("--messages", type=int, default=20000)
    parser.add_argument("--fs", choices=("shm", "disk", "both"), default="both")
    args = parser.parse_args()
    for fs in ("shm", "disk") if args.fs == "both" else (args.fs,):
        root = _ROOTS[fs]
        print(f".. rubric:: {fs} ({root})\n")
        found = latency(root, args.samples)
        p50 = {name: statistics.median(values) for name, values in found.items()}
        p99 = {name: sorted(values)[int(len(values) * 0.99) - 1] for name, values in found.items()}
        print(f"Wake-up latency, {args.samples} samples per consumer\n")
        _table(
            ("consumer", "p50, ms", "p99, ms", "p50 / bare"),
            [
                (name, f"{p50[name]:.3f}", f"{p99[name]:.3f}", f"{p50[name] / p50['bare']:.2f}")
                for name in _NAMES
            ],
        )
        rows = []
        for kind, waiters in (("sync", 1), ("sync", 10), ("async", 1), ("async", 10),
                              ("async", 1000)):  # fmt: skip
            rate = throughput(root, kind, waiters, args.messages)
            unit = ("thread" if kind == "sync" else "task") + ("s" if waiters > 1 else "")
            rows.append((f"{kind}, {waiters} {unit}", f"{rate:,.0f}"))
        print(f"Throughput, {args.messages:,} messages published while consumers wait\n")
        _table(("consumer", "msg/s"), rows, width=18)


if __name__ == "__main__":
    main()
