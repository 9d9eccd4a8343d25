"""The cost of one publish and one receive+delete: two versions of vsqs in one process.

Method: the package of this checkout and the ``vsqs/`` of another checkout (``--before``,
e.g. ``git worktree add --detach /tmp/before <commit>``) are imported side by side under
two names (``vsqs_before``, ``vsqs_after``: the package imports itself relatively). Each
round runs both, in alternating order, on one filesystem; each side, for a plain queue and
for ``partitions=2``, ``durable=False``, ``visibility_timeout=60``:

* ``publish``: N publishes of 100 bytes, one at a time;
* ``receive+delete``: ``receive(timeout=0)`` then ``delete`` until that backlog is empty;
* ``receive_batch(10)+delete_batch``: the same backlog again, ten at a time;
* with ``--durable`` the queues are durable, and ``publish_batch(10)`` (N messages in
  batches of ten) is timed too: what a durable publish costs in Python and system calls.

Each figure is this thread's CPU time (``time.thread_time``: user and system) divided by
N, with the garbage collector off during the timed loops (a collection lands on whichever
side happens to run then); on a disk, the page cache is written back (``sync``) before each
timed loop. Time spent waiting for the CPU is not counted: on a shared machine, CPU time
moves far less than wall time. The table gives each side's fastest round, their ratio,
and the median of the per-round ratios (a side's round against the other side's round
run right next to it).

Usage::

    python -m benchmarks.bench_hotpath --before /tmp/before [--dir /dev/shm] [--rounds 10]
        [--durable]
"""

from __future__ import annotations

import argparse
import functools
import gc
import importlib
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

BODY = b"x" * 100
HERE = Path(__file__).resolve().parent.parent
SIDES = ("before", "after")


def _load(before: Path, links: Path) -> dict[str, ModuleType]:
    """Both packages, imported under their side's name from *links*, a directory of
    symlinks made here."""
    (links / "vsqs_before").symlink_to(before / "vsqs")
    (links / "vsqs_after").symlink_to(HERE / "vsqs")
    sys.path.insert(0, str(links))
    return {side: importlib.import_module(f"vsqs_{side}") for side in SIDES}


def _timed(loop: Callable[[], int], count: int) -> float:
    """µs of this thread's CPU per message of *loop* (which returns how many it did)."""
    started = time.thread_time()
    done = loop()
    spent = time.thread_time() - started
    if done != count:
        raise AssertionError(f"{done} messages, expected {count}")
    return spent / count * 1e6


def _one(
    package: ModuleType, where: str, label: str, count: int, *, durable: bool, **options: int
) -> dict[str, float]:
    path = os.path.join(where, f"hotpath-{os.getpid()}-{label}")
    shutil.rmtree(path, ignore_errors=True)
    queue = package.Queue(path, durable=durable, visibility_timeout=60.0, **options)
    on_disk = not where.startswith("/dev/shm")

    def publish() -> int:
        for _ in range(count):
            queue.publish(BODY)
        return count

    def publish_batch() -> int:
        for _ in range(count // 10):
            queue.publish_batch([BODY] * 10)
        return count // 10 * 10

    def receive() -> int:
        done = 0
        while (message := queue.receive(timeout=0)) is not None:
            queue.delete(message)
            done += 1
        return done

    def batches() -> int:
        done = 0
        while messages := queue.receive_batch(10):
            done += queue.delete_batch(messages)
        return done

    out = {}
    loops = [("publish", publish), ("receive+delete", receive), ("fill", publish)]
    loops.append(("receive_batch(10)+delete_batch", batches))
    if durable:
        loops += [("publish_batch(10)", publish_batch), ("receive+delete", receive)]
    for name, loop in loops:
        if on_disk:
            os.sync()  # the previous loop's dirty pages are not this one's cost
        cost = _timed(loop, count // 10 * 10 if name == "publish_batch(10)" else count)
        if name != "fill" and f"{label} {name}" not in out:
            out[f"{label} {name}"] = cost
    queue.close()
    shutil.rmtree(path, ignore_errors=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, required=True, help="the other checkout")
    parser.add_argument("--dir", default="/dev/shm", help="where the queues go")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--durable", action="store_true", help="durable queues, and batches")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="vsqs-hotpath-") as links:
        packages = _load(args.before.resolve(), Path(links))  # imported: links can go
    results: dict[str, list[dict[str, float]]] = {side: [] for side in SIDES}
    load = os.getloadavg()[0]
    gc.disable()
    for number in range(args.rounds):
        for side in SIDES if number % 2 == 0 else SIDES[::-1]:
            one = functools.partial(_one, packages[side], args.dir, durable=args.durable)
            figures = one("plain", args.messages)
            figures |= one("2 partitions", args.messages, partitions=2)
            results[side].append(figures)
            gc.collect()
    gc.enable()
    print(
        f"{args.rounds} rounds of {args.messages:,} messages in {args.dir}"
        f"{', durable' if args.durable else ''}, "
        f"{time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC, "
        f"load average {load:.2f} at the start, {os.getloadavg()[0]:.2f} at the end\n"
    )
    rows = []
    for key in results["after"][0]:
        before = [figures[key] for figures in results["before"]]
        after = [figures[key] for figures in results["after"]]
        pairs = statistics.median(b / a for a, b in zip(before, after, strict=True))
        rows.append((key, min(before), min(after), min(after) / min(before), pairs))
    head = ("path", "before, µs", "after, µs", "after / before", "median of rounds")
    widths = [max(len(head[0]), *(len(row[0]) for row in rows)), *(len(h) for h in head[1:])]
    rule = "  ".join("=" * width for width in widths)
    print(rule)
    print("  ".join(h.ljust(w) for h, w in zip(head, widths, strict=True)).rstrip())
    print(rule)
    for key, before_us, after_us, ratio, median in rows:
        cells = (key, f"{before_us:.2f}", f"{after_us:.2f}", f"{ratio:.2f}", f"{median:.2f}")
        print("  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip())
    print(rule)


if __name__ == "__main__":
    main()
