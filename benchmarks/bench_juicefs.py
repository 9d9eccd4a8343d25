"""Publish and drain rates on JuiceFS (one host, three hosts at once) beside the local disk.

Method: the JuiceFS rig of the test suite (``tests/multihost/_juicefs.py``: Redis on a
loopback port for the metadata, a local directory as the object store, the volume
mounted three times, each mount its own client; root, ``redis-server`` and the
``juicefs`` client needed, which ``tests/multihost/setup-juicefs.sh`` installs). Every
figure is a rate of real processes, each on a fresh queue, messages of 100 bytes:

- *publish*: each process publishes *N* messages (``durable=False``: the cost of the
  filesystem's operations; ``durable=True``, one host only: with its ``fsync``);
- *drain*: then each receives and deletes until the queue is empty.

"One host" is one process, on the local disk or on mount A; "three hosts" is three
processes at once on one queue, one per mount (on the local disk: three processes on one
directory). The rate of a run is all its messages over the time from the moment every
process was ready to the last one's last operation. The configurations alternate within
each trial, so that the load of the machine falls on all of them alike; each cell is the
best (max) and the median rate of the trials, and the ratios compare the best rates (on a
shared machine interference only ever lowers a rate). A run checks that every message was
received once and exits 1 otherwise.

Usage::

    python -m benchmarks.bench_juicefs [--messages 500] [--trials 5]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import vsqs
from tests.multihost._juicefs import juice_rig

BODY = b"x" * 100


def _publish(path: str, count: int, durable: bool, sync: tuple[Any, Any, Any]) -> None:
    ready, go, out = sync
    queue = vsqs.Queue(path, durable=durable)
    ready.release()
    go.wait()
    for _ in range(count):
        queue.publish(BODY)
    out.put((time.perf_counter(), count))


def _drain(path: str, count: int, durable: bool, sync: tuple[Any, Any, Any]) -> None:
    ready, go, out = sync
    queue = vsqs.Queue(path, durable=durable)
    ready.release()
    go.wait()
    got, last = 0, time.perf_counter()
    while (message := queue.receive(timeout=0.3)) is not None:
        queue.delete(message)
        got, last = got + 1, time.perf_counter()
    out.put((last, got))


def _rate(role: Callable[..., None], paths: list[Path], count: int, durable: bool) -> float:
    """Messages per second of one process per path, started together (see the method)."""
    ctx = mp.get_context("spawn")
    ready, go, out = ctx.Semaphore(0), ctx.Event(), ctx.Queue()
    sync = (ready, go, out)
    procs = [ctx.Process(target=role, args=(str(p), count, durable, sync)) for p in paths]
    for proc in procs:
        proc.start()
    for _ in procs:
        assert ready.acquire(timeout=120)
    start = time.perf_counter()
    go.set()
    ends = [out.get(timeout=600) for _ in procs]
    for proc in procs:
        proc.join(60)
        assert proc.exitcode == 0
    done = sum(n for _, n in ends)
    if done != count * len(paths):
        sys.exit(f"{role.__name__}: {done} messages, expected {count * len(paths)}")
    return done / (max(t for t, _ in ends) - start)


def _trial(mounts: list[Path], local: Path, count: int, n: int) -> dict[str, float]:
    """One of each configuration, in a fixed order, each on fresh queues."""
    rates: dict[str, float] = {}
    for label, bases, durable in (
        ("local disk, 1 process", [local], False),
        ("JuiceFS, 1 host", mounts[:1], False),
        ("local disk, 3 processes", [local] * 3, False),
        ("JuiceFS, 3 hosts", mounts, False),
        ("local disk, 1 process, durable", [local], True),
        ("JuiceFS, 1 host, durable", mounts[:1], True),
    ):
        paths = [base / f"{label.replace(' ', '').replace(',', '-')}-{n}" for base in bases]
        vsqs.Queue(paths[0]).close()
        rates[f"{label}|publish"] = _rate(_publish, paths, count, durable)
        rates[f"{label}|drain"] = _rate(_drain, paths, count, durable)
    return rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=500, help="per process")
    parser.add_argument("--trials", type=int, default=5)
    args = parser.parse_args()
    samples: dict[str, list[float]] = {}
    load = os.getloadavg()[0]
    with juice_rig() as rig, tempfile.TemporaryDirectory(prefix="vsqs-bench-") as local:
        mounts = [rig.mount(name) for name in "abc"]
        for n in range(args.trials):
            for key, rate in _trial(mounts, Path(local), args.messages, n).items():
                samples.setdefault(key, []).append(rate)
    labels = list(dict.fromkeys(key.split("|")[0] for key in samples))
    base = {op: max(samples[f"{labels[0]}|{op}"]) for op in ("publish", "drain")}
    print(f"{args.messages} messages of 100 bytes per process; {args.trials} trials; "
          "msg/s, best and median of the trials; ratio: the best against the best of one "
          f"local process. Load average {load:.1f} at the start, {os.getloadavg()[0]:.1f} at the "
          f"end ({os.cpu_count()} CPUs).\n")  # fmt: skip
    rule = f"{'=' * 30}  {'=' * 15}  {'=' * 15}  {'=' * 5}  {'=' * 15}  {'=' * 15}  {'=' * 5}"
    print(rule)
    print(f"{'where':<30}  {'publish best':>15}  {'publish median':>15}  {'ratio':>5}"
          f"  {'drain best':>15}  {'drain median':>15}  {'ratio':>5}")  # fmt: skip
    print(rule)
    for label in labels:
        cells = []
        for op in ("publish", "drain"):
            runs = samples[f"{label}|{op}"]
            median = statistics.median(runs)
            cells.append(f"{max(runs):>15,.0f}  {median:>15,.0f}  {max(runs) / base[op]:>5.2f}")
        print(f"{label:<30}  {'  '.join(cells)}")
    print(rule)


if __name__ == "__main__":
    main()
