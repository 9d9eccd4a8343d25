"""A queue shared by three "hosts": the owner's directory and two sshfs mounts of it.

Method: the multi-host rig of the test suite (``tests/multihost/_rig.py``: a loopback
sshd, two sshfs mounts of one directory; root, sshfs and openssh-server needed, which
``tests/multihost/setup-sshfs.sh`` installs). For each host, on a fresh queue,
non-durable (the cost of the filesystem operations, not of the disk): one process
publishes *N* messages of 100 bytes, then receives and deletes them; msg/s of each.
Wake-up: a process blocked in ``receive`` on that host (``wait="auto"``: inotify on the
owner's disk, polling every 50 ms on the mounts) while the owner publishes one message
every 200 ms; latency from just before the publish to the receiver holding it (one
machine, one clock). Last, the cost of the no-replace rename itself, ``renameat2`` beside
the link-then-unlink fallback that network filesystems get, on tmpfs and on disk (best
of 7 rounds of 2,000 moves each, alternating).

Usage::

    python -m benchmarks.bench_multihost [--messages 500] [--samples 20]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import vsqs
from tests.multihost._rig import CACHE_NO, FINE, rig
from tests.multihost._workers import read_report, spawn
from vsqs import _fs


def _throughput(path: Path, count: int) -> tuple[float, float]:
    queue = vsqs.Queue(path, durable=False)
    body = b"x" * 100
    start = time.perf_counter()
    for _ in range(count):
        queue.publish(body)
    published = time.perf_counter() - start
    start = time.perf_counter()
    for _ in range(count):
        message = queue.receive(timeout=0)
        assert message is not None
        queue.delete(message)
    return count / published, count / (time.perf_counter() - start)


def _wakeup(owner: Path, path: Path, samples: int, report: Path) -> list[float]:
    publisher = vsqs.Queue(owner, durable=False)
    waiter = spawn("wake", queue=str(path), report=str(report), count=samples,
                   options={"poll_interval": 0.05}, stdout=subprocess.PIPE)  # fmt: skip
    assert waiter.stdout is not None
    waiter.stdout.readline()
    sent = []
    for n in range(samples):
        time.sleep(0.2)
        sent.append(time.time())
        publisher.publish(str(n).encode())
    waiter.wait(timeout=120)
    waiter.stdout.close()
    return [(float(rec[1]) - at) * 1000 for rec, at in zip(read_report(report), sent, strict=True)]


def _rename_cost(root: str, count: int, rounds: int = 7) -> tuple[float, float]:
    """µs per move, each the best of *rounds* rounds (the two methods alternate)."""
    best = [float("inf"), float("inf")]
    with tempfile.TemporaryDirectory(dir=root) as where:
        for _ in range(rounds):
            for k in (0, 1):
                for n in range(count):
                    Path(f"{where}/{n}").touch()
                start = time.perf_counter()
                for n in range(count):
                    if k == 0:
                        _fs.rename_noreplace(f"{where}/{n}", f"{where}/{n}.x")
                    else:
                        _fs._link_then_unlink(f"{where}/{n}", f"{where}/{n}.x", None)
                best[k] = min(best[k], (time.perf_counter() - start) / count * 1e6)
                for entry in Path(where).iterdir():
                    entry.unlink()
    return best[0], best[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=500)
    parser.add_argument("--samples", type=int, default=20)
    args = parser.parse_args()
    rows = []
    with rig() as made, tempfile.TemporaryDirectory() as scratch:
        hosts = {
            "owner (local disk, inotify)": made.owner,
            "sshfs ``cache=no`` (polls)": made.mount("b", CACHE_NO),
            "sshfs fine options (polls)": made.mount("c", FINE),
        }
        for n, (label, base) in enumerate(hosts.items()):
            pub, recv = _throughput(base / f"t{n}", args.messages)
            vsqs.Queue(made.owner / f"w{n}")
            lat = _wakeup(made.owner / f"w{n}", base / f"w{n}", args.samples,
                          Path(scratch) / f"wake{n}")  # fmt: skip
            rows.append((label, pub, recv, statistics.median(lat), max(lat)))
    local_pub, local_recv = rows[0][1], rows[0][2]
    print(f"{args.messages} messages of 100 bytes, non-durable; {args.samples} wake-ups\n")
    rule = "=" * 29 + "  =========  =======  ==========  =======  ==========  ========"
    print(f"{rule}\nhost{' ' * 27}publish/s  ratio    receive/s   ratio    wake p50    wake max")
    print(rule)
    for label, pub, recv, p50, worst in rows:
        print(f"{label:<29}  {pub:>9,.0f}  {pub / local_pub:>6.2f}x  {recv:>10,.0f}"
              f"  {recv / local_recv:>6.2f}x  {p50:>7.1f} ms  {worst:>5.0f} ms")  # fmt: skip
    print(f"{rule}\n")
    rule = "==========  ===================  ===================  ====="
    print(f"{rule}\nfilesystem  renameat2 (µs/op)    link+unlink (µs/op)  ratio\n{rule}")
    for label, root in (("tmpfs", "/dev/shm"), ("disk", tempfile.gettempdir())):
        atomic, fallback = _rename_cost(root, 2000)
        print(f"{label:<10}  {atomic:>19.1f}  {fallback:>19.1f}  {fallback / atomic:>4.1f}x")
    print(rule)


if __name__ == "__main__":
    main()
