"""What a lease renewal costs: the renewal thread next to a bare rename.

Method, on each filesystem (tmpfs ``/dev/shm`` and a disk directory), in one process,
non-durable queues (a renewal never fsyncs, durable or not):

* ``rename (bare)``: ``renameat2(RENAME_NOREPLACE)`` of one file back and forth, names
  known in advance: the floor, what the *extend* arrow is;
* ``change_visibility``: ``Queue.change_visibility(message, 30)`` on one held message,
  each call passed the message the previous one returned (a heartbeat by hand);
* ``renewal thread``: 1,000 open leases on one handle, with a visibility timeout so
  short (3 ms) that every lease is always due: the one renewal thread renews flat out,
  and renewals/s is what it sustains (its bookkeeping over 1,000 leases included).

Each row is the best of several windows (interference on a shared machine only adds
time); ``× rename`` divides its µs by the bare rename's. Run it with::

    python -m benchmarks.bench_leases [--shm-dir /dev/shm] [--disk-dir /var/tmp]
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Final

import vsqs
from vsqs import _fs

OPS: Final = 2000  # operations per window of the single-thread rows
WINDOWS: Final = 5
LEASES: Final = 1000
THREAD_WINDOW: Final = 1.0  # seconds per window of the renewal thread


def _best(window: Callable[[], float]) -> float:
    """The least seconds per operation over WINDOWS windows."""
    return min(window() for _ in range(WINDOWS))


def bare_rename(root: Path) -> float:
    first, second = str(root / "1"), str(root / "1.2")
    Path(first).write_bytes(b"x")

    def window() -> float:
        start = time.perf_counter()
        for _ in range(OPS // 2):
            _fs.rename_noreplace(first, second)
            _fs.rename_noreplace(second, first)
        return (time.perf_counter() - start) / OPS

    return _best(window)


def change_visibility(root: Path) -> float:
    queue = vsqs.Queue(root / "cv", durable=False)
    queue.publish(b"x")
    message = queue.receive(timeout=0)
    assert message is not None

    def window() -> float:
        nonlocal message
        assert message is not None
        start = time.perf_counter()
        for _ in range(OPS):
            message = queue.change_visibility(message, 30)
        return (time.perf_counter() - start) / OPS

    return _best(window)


def renewal_thread(root: Path) -> float:
    queue = vsqs.Queue(root / "leases", durable=False, visibility_timeout=0.003)
    queue.publish_batch([b"x"] * LEASES)
    leases = [queue.lease(m) for m in queue.receive_batch(LEASES)]
    assert len(leases) == LEASES

    def window() -> float:
        before = sum(lease.renewals for lease in leases)
        start = time.perf_counter()
        time.sleep(THREAD_WINDOW)
        done = sum(lease.renewals for lease in leases) - before
        return (time.perf_counter() - start) / max(done, 1)

    try:
        return _best(window)
    finally:
        queue.close()


def table(rows: list[tuple[str, float]]) -> str:
    floor = rows[0][1]
    rule = "=" * 20 + "  " + "=" * 12 + "  " + "=" * 14 + "  " + "=" * 10
    lines = [rule, f"{'method':<20}  {'µs per op':>12}  {'per second':>14}  {'× rename':>10}", rule]
    lines += [
        f"{name:<20}  {per * 1e6:>12.1f}  {1 / per:>14,.0f}  {per / floor:>10.1f}"
        for name, per in rows
    ]
    lines.append(rule)
    return "\n".join(lines)


def fs_type(path: Path) -> str:
    best = ("", "?")
    with open("/proc/mounts", encoding="utf-8") as mounts:
        for line in mounts:
            _, point, kind, *_ = line.split()
            if str(path.resolve()).startswith(point) and len(point) > len(best[0]):
                best = (point, kind)
    return best[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shm-dir", default=Path("/dev/shm"), type=Path)
    parser.add_argument("--disk-dir", default=Path("/var/tmp"), type=Path)
    args = parser.parse_args()
    for label, base in (("tmpfs", args.shm_dir), ("disk", args.disk_dir)):
        root = Path(tempfile.mkdtemp(prefix="vsqs-bench-leases-", dir=base))
        try:
            rows = [
                ("rename (bare)", bare_rename(root)),
                ("change_visibility", change_visibility(root)),
                ("renewal thread", renewal_thread(root)),
            ]
        finally:
            shutil.rmtree(root, ignore_errors=True)
        print(f".. rubric:: On {label} ({fs_type(base)}, {base})\n\n::\n")
        print("\n".join("   " + line for line in table(rows).splitlines()))
        print()
    print(f"({os.cpu_count()} CPUs; best of {WINDOWS} windows)")


if __name__ == "__main__":
    main()
