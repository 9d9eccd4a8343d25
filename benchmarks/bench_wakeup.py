"""Wake-up latency of a blocked receive, beside the floor: a bare inotify consumer.

Method: two consumer processes, each blocked on its own empty directory on the same
filesystem: ``vsqs`` (``Queue.receive(timeout=None)``) and ``bare`` (one inotify
descriptor, ``poll(2)``, then ``listdir``, ``rename`` and ``read`` of the file, which is
the least a consumer must do to claim a message). The parent makes one message ready in
each directory (write ``<id>.new``, rename to ``<id>``; the two in alternating order)
every 50 ms, and each consumer reports when it holds the body. Latency is the time from
just before the publishing rename to the consumer's report, one clock (one host).

Usage::

    python -m benchmarks.bench_wakeup [--samples 200] [--fs shm|disk|both]
"""

from __future__ import annotations

import argparse
import ctypes
import multiprocessing as mp
import os
import select
import shutil
import statistics
import tempfile
import time
from typing import Any

import vsqs

_IN_MOVED_TO = 0x00000080
_ROOTS = {"shm": "/dev/shm", "disk": tempfile.gettempdir()}


def _bare(path: str, count: int, results: Any, ready: Any) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
    libc.inotify_add_watch(fd, os.fsencode(path), _IN_MOVED_TO)
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    ready.set()
    got = 0
    while got < count:
        poller.poll()
        try:
            while os.read(fd, 65536):
                pass
        except BlockingIOError:
            pass
        for name in os.listdir(path):
            if not name.isdigit():
                continue
            held = f"{path}/{name}.1"
            try:
                os.rename(f"{path}/{name}", held)
            except FileNotFoundError:
                continue
            with open(held, "rb") as handle:
                body = handle.read()
            results.put(("bare", int(body), time.perf_counter_ns()))
            os.unlink(held)
            got += 1


def _vsqs(path: str, count: int, results: Any, ready: Any) -> None:
    queue = vsqs.Queue(path, durable=False, poll_interval=3600)
    queue.receive(timeout=0.01)  # the watch exists before the first message
    ready.set()
    for _ in range(count):
        message = queue.receive(timeout=None)
        assert message is not None
        results.put(("vsqs", int(message.body), time.perf_counter_ns()))
        queue.delete(message)


def _publish(path: str, serial: int) -> int:
    name = f"{path}/{time.time_ns() // 1000}"  # a real publisher's id: its time, now
    with open(f"{name}.new", "wb") as handle:
        handle.write(str(serial).encode())
    started = time.perf_counter_ns()
    os.rename(f"{name}.new", name)
    return started


def measure(root: str, samples: int) -> dict[str, list[float]]:
    """Latencies in ms for each consumer, *samples* each, published side by side."""
    base = tempfile.mkdtemp(prefix="vsqs-wakeup-", dir=root)
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    paths = {"bare": f"{base}/bare", "vsqs": f"{base}/vsqs"}
    for path in paths.values():
        os.mkdir(path)
    readies = {name: ctx.Event() for name in paths}
    workers = [
        ctx.Process(target=_bare, args=(paths["bare"], samples, results, readies["bare"])),
        ctx.Process(target=_vsqs, args=(paths["vsqs"], samples, results, readies["vsqs"])),
    ]
    for worker in workers:
        worker.start()
    for event in readies.values():
        event.wait(60)
    time.sleep(0.2)
    sent: dict[tuple[str, int], int] = {}
    for serial in range(samples):
        order = ("bare", "vsqs") if serial % 2 else ("vsqs", "bare")
        for name in order:
            sent[(name, serial)] = _publish(paths[name], serial)
            time.sleep(0.025)
    latencies: dict[str, list[float]] = {"bare": [], "vsqs": []}
    for _ in range(2 * samples):
        name, serial, got = results.get(timeout=60)
        latencies[name].append((got - sent[(name, serial)]) / 1e6)
    for worker in workers:
        worker.join(60)
    shutil.rmtree(base, ignore_errors=True)
    return latencies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--fs", choices=("shm", "disk", "both"), default="both")
    args = parser.parse_args()
    rows = []
    for fs in ("shm", "disk") if args.fs == "both" else (args.fs,):
        found = measure(_ROOTS[fs], args.samples)
        p50 = {name: statistics.median(values) for name, values in found.items()}
        p99 = {name: sorted(values)[int(len(values) * 0.99) - 1] for name, values in found.items()}
        ratio = p50["vsqs"] / p50["bare"]
        rows.append((fs, p50["bare"], p50["vsqs"], ratio, p99["bare"], p99["vsqs"]))
    header = ("fs", "bare p50, ms", "vsqs p50, ms", "vsqs / bare", "bare p99", "vsqs p99")
    widths = [14] * len(header)
    rule = "  ".join("=" * w for w in widths)
    print(f"Wake-up latency, {args.samples} samples per consumer\n")
    print(rule)
    print("  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)))
    print(rule)
    for fs, bare50, vsqs50, ratio, bare99, vsqs99 in rows:
        cells = (
            fs,
            f"{bare50:.3f}",
            f"{vsqs50:.3f}",
            f"{ratio:.2f}",
            f"{bare99:.2f}",
            f"{vsqs99:.2f}",
        )
        print("  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)))
    print(rule)


if __name__ == "__main__":
    main()
