"""Scaling out: K consumer (or producer) processes on one directory, on K directories, on vsqs.

Method, on each filesystem (tmpfs ``/dev/shm`` and a disk directory), for K = 1, 2, 4, ...
up to ``max(os.cpu_count(), 8)``, four columns side by side in one run:

* ``bare, 1 dir``: the bare strict-FIFO rename consumer, all K on one directory: each
  lists the directory once, then for each name, oldest first, ``rename`` ``<id>`` to
  ``<id>.<expiry>`` (a lost race, ``ENOENT``, moves it to the next name), ``open``,
  ``read``, ``close``, ``unlink``. The bare producer: ``open(<id>.new, O_CREAT|O_EXCL)``,
  ``write``, ``close``, ``rename`` to ``<id>``, with ids known in advance (producer i of
  K writes the ids that are i modulo K);
* ``bare, K dirs``: the same, process i on directory i of K (the backlog split evenly);
* ``vsqs, p=1``: ``vsqs.Queue(path)``, the unpartitioned queue: ``receive(timeout=0)`` and
  ``delete`` until ``receive`` returns ``None``, or ``publish`` one message at a time;
* ``vsqs, p=K``: the same calls on ``vsqs.Queue(path, partitions=K)``: consumers find their
  own home partitions, producers publish without a group (each spreads its messages by
  itself).

Consumers drain a backlog of N small messages (100 bytes each; N is ``--messages`` on
tmpfs, ``--disk-messages`` on the disk, where 100,000 files take minutes on a shared
machine) made beforehand (untimed), written straight into the (partition) directories as
ready files, in id order spread evenly over the directories. Producers publish N
messages in total, N/K each, into empty directories. Before each run the filesystem's
dirty data is written back (``syncfs``, untimed), so a run does not pay for the backlog
or the run before it. Every process of a run is started first (spawned, imports done,
queue opened) and then released by one barrier; a run's throughput is N
divided by the wall time from the earliest release to the last process's end. Each run
checks its result: every message delivered once (the counts add up to N and no message
file is left) or, for producers, N ready files. vsqs handles are ``durable=False``, like
the bare rows (no ``fsync``).

Each cell is the median of ``--rounds`` rounds (the order of the columns rotates from one
round to the next), ``±`` half the spread between the slowest and the fastest round in
percent of the median, and in brackets the ratio to K=1 of the same column. The last two
columns divide vsqs by its bare floor: ``p=1 / 1 dir`` and ``p=K / K dirs``.

Last, the per-message cost of ONE consumer (and one producer) on a queue of 2, 4 and 8
partitions against the unpartitioned queue, the same backlog (or N published), the same
rounds: µs per message and the ratio to partitions=1.

Run it with::

    python -m benchmarks.bench_scale [--quick] [--messages 100000] [--rounds 3]
                                     [--fs shm|disk|both] [--roles consumers|producers|both]
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Final

from benchmarks.backends import PREFILL_BASE_US, body

ROOTS: Final = {"shm": "/dev/shm", "disk": "/var/tmp"}
FS_NAMES: Final = {"shm": "tmpfs, /dev/shm", "disk": "ext4, /var/tmp"}
COLUMNS: Final = ("bare, 1 dir", "bare, K dirs", "vsqs, p=1", "vsqs, p=K")
SINGLE_PARTITIONS: Final = (1, 2, 4, 8)
HOLD_US: Final = 60_000_000  # the bare consumer's lease: longer than any run
BARRIER_S: Final = 300.0


@dataclass(frozen=True)
class Job:
    """What one process of a run does; everything it needs crosses the spawn boundary."""

    role: str  # "consumers" or "producers"
    kind: str  # "bare" or "vsqs"
    dirs: tuple[str, ...]  # bare: the directories (process i uses dirs[i % len]); vsqs: (queue,)
    processes: int
    partitions: int  # vsqs only
    messages: int  # in total, over all processes


@dataclass(frozen=True)
class Outcome:
    start: float
    end: float
    count: int
    misses: int


# ---------------------------------------------------------------- the processes


def _bare_consume(directory: str) -> tuple[int, int]:
    """Drain *directory* in id order, as the bare strict-FIFO rename consumer does."""
    names = sorted(int(n) for n in os.listdir(directory) if n.isdigit())
    count = misses = 0
    for mid in names:
        held = f"{directory}/{mid}.{int(time.time() * 1e6) + HOLD_US}"
        try:
            os.rename(f"{directory}/{mid}", held)
        except FileNotFoundError:  # RACE: another consumer claimed it first: the next one
            misses += 1
            continue
        fd = os.open(held, os.O_RDONLY)
        try:
            os.read(fd, 1 << 16)
        finally:
            os.close(fd)
        os.unlink(held)
        count += 1
    return count, misses


def _bare_produce(directory: str, ids: range) -> int:
    data = body()
    flags = os.O_CREAT | os.O_EXCL | os.O_WRONLY  # EXCL: a name is never written twice
    for mid in ids:
        tmp = f"{directory}/{mid}.new"
        fd = os.open(tmp, flags, 0o644)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)
        os.rename(tmp, f"{directory}/{mid}")
    return len(ids)


def _share(job: Job, index: int) -> int:
    """How many messages producer *index* publishes (N split as evenly as it goes)."""
    return job.messages // job.processes + (index < job.messages % job.processes)


def _open_vsqs(job: Job) -> Any:
    import vsqs

    options: dict[str, Any] = {"durable": False, "visibility_timeout": 60.0}
    if job.partitions > 1:
        options["partitions"] = job.partitions
    return vsqs.Queue(job.dirs[0], **options)


def _vsqs_consume(queue: Any) -> int:
    count = 0
    while (message := queue.receive(timeout=0)) is not None:
        queue.delete(message)
        count += 1
    return count


def _vsqs_produce(queue: Any, count: int) -> int:
    data = body()
    for _ in range(count):
        queue.publish(data)
    return count


def _work(job: Job, index: int) -> Callable[[], tuple[int, int]]:
    """Process *index*'s timed work, everything before it done: () -> (messages, misses)."""
    if job.kind == "vsqs":
        queue = _open_vsqs(job)
        if job.role == "consumers":
            return lambda: (_vsqs_consume(queue), 0)
        share = _share(job, index)
        return lambda: (_vsqs_produce(queue, share), 0)
    directory = job.dirs[index % len(job.dirs)]
    if job.role == "consumers":
        return lambda: _bare_consume(directory)
    # ids i, i + K, i + 2K, ...: disjoint across producers, as if known in advance
    first = PREFILL_BASE_US + index
    ids = range(first, first + _share(job, index) * job.processes, job.processes)
    return lambda: (_bare_produce(directory, ids), 0)


def _process(job: Job, index: int, barrier: Any, results: Any) -> None:
    """One process of a run: get ready, wait at the barrier, work, report."""
    work = _work(job, index)
    barrier.wait(BARRIER_S)
    start = time.perf_counter()
    count, misses = work()
    end = time.perf_counter()
    results.put((index, asdict(Outcome(start, end, count, misses))))


# ---------------------------------------------------------------- one run


def _prefill(directory: str, ids: range) -> None:
    """Ready files named by *ids* in *directory*: the backlog, in the seeds' format."""
    os.makedirs(directory, exist_ok=True)
    data = body()
    for mid in ids:
        fd = os.open(f"{directory}/{mid}", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)


def _message_dirs(job: Job) -> list[str]:
    """Every directory that holds the run's messages."""
    if job.kind == "bare":
        return list(job.dirs)
    queue = _open_vsqs(job)
    return [str(q.path) for q in getattr(queue, "partition_queues", (queue,))]


def _settle(directory: str) -> None:
    """Write back the filesystem's dirty data (untimed), so that a run on a disk does not
    pay for the backlog just made, or for the files of the run before it."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        if ctypes.CDLL(None, use_errno=True).syncfs(fd) != 0:
            raise OSError(ctypes.get_errno(), "syncfs failed", directory)
    finally:
        os.close(fd)


def _count_files(directories: Sequence[str]) -> tuple[int, int]:
    """(ready messages, any other message files) across *directories*."""
    ready = other = 0
    for directory in directories:
        for name in os.listdir(directory):
            if name.isdigit():
                ready += 1
            elif name[:1].isdigit():
                other += 1
    return ready, other


def run_once(job: Job) -> float:
    """Run *job* once (its directories fresh); return its messages per second."""
    import multiprocessing

    dirs = _message_dirs(job)  # makes the queue (and stores partitions=) for vsqs
    for directory in dirs:
        os.makedirs(directory, exist_ok=True)
    if job.role == "consumers":
        # Ids in order, dealt round the directories: each holds an even, interleaved share.
        for i, directory in enumerate(dirs):
            _prefill(
                directory, range(PREFILL_BASE_US + i, PREFILL_BASE_US + job.messages, len(dirs))
            )
    _settle(dirs[0])
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(job.processes)
    results = context.Queue()
    children = [
        context.Process(target=_process, args=(job, i, barrier, results))
        for i in range(job.processes)
    ]
    for child in children:
        child.start()
    outcomes = [Outcome(**results.get(timeout=900)[1]) for _ in children]
    for child in children:
        child.join(60)
        if child.exitcode != 0:
            raise RuntimeError(f"{job}: a process failed with exit status {child.exitcode}")
    total = sum(o.count for o in outcomes)
    ready, other = _count_files(dirs)
    expected = (0, 0) if job.role == "consumers" else (job.messages, 0)
    if total != job.messages or (ready, other) != expected:
        raise RuntimeError(f"{job}: {total} counted, {ready} ready and {other} other files left")
    wall = max(o.end for o in outcomes) - min(o.start for o in outcomes)
    return job.messages / wall


def make_job(role: str, column: str, base: Path, *, k: int, messages: int, tag: str) -> Job:
    path = base / f"{role}-{column.replace(', ', '-').replace('=', '')}-{k}-{tag}"
    if column == "bare, 1 dir":
        return Job(role, "bare", (str(path),), k, 1, messages)
    if column == "bare, K dirs":
        return Job(role, "bare", tuple(f"{path}/{i}" for i in range(k)), k, 1, messages)
    partitions = 1 if column == "vsqs, p=1" else k
    return Job(role, "vsqs", (str(path),), k, partitions, messages)


def partitions_supported() -> bool:
    try:
        import vsqs
    except ImportError:  # pragma: no cover - the benchmarks run from the repository
        return False
    return hasattr(vsqs, "PartitionedQueue")


# ---------------------------------------------------------------- tables


def _k_values(max_k: int) -> list[int]:
    ks, k = [], 1
    while k <= max_k:
        ks.append(k)
        k *= 2
    return ks


def _rate(value: float) -> str:
    return f"{value / 1000:.1f}k"


def _cell(samples: Sequence[float], first: Sequence[float] | None) -> str:
    mid = statistics.median(samples)
    spread = (max(samples) - min(samples)) / 2 / mid
    ratio = mid / statistics.median(first) if first else 1.0
    return f"{_rate(mid)} ±{spread:.0%} ({ratio:.2f}x)"


def _rst(head: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]
    rule = "  ".join("=" * w for w in widths)

    def line(cells: Sequence[str]) -> str:
        return "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()

    return "\n".join([rule, line(head), rule, *(line(r) for r in rows), rule])


def scaling_table(samples: dict[tuple[str, int], list[float]], ks: Sequence[int]) -> str:
    """One filesystem and role: K down, the columns across, msg/s."""
    columns = [c for c in COLUMNS if (c, 1) in samples]
    head = ["K", *columns]
    if "vsqs, p=1" in columns:
        head.append("p=1 / 1 dir")
    if "vsqs, p=K" in columns:
        head.append("p=K / K dirs")
    rows = []
    for k in ks:
        row = [str(k)] + [_cell(samples[(c, k)], samples[(c, 1)]) for c in columns]
        for vsqs_col, bare_col in (("vsqs, p=1", "bare, 1 dir"), ("vsqs, p=K", "bare, K dirs")):
            if vsqs_col in columns:
                ratio = statistics.median(samples[(vsqs_col, k)]) / statistics.median(
                    samples[(bare_col, k)]
                )
                row.append(f"{ratio:.2f}")
        rows.append(row)
    return _rst(head, rows)


def single_table(samples: dict[int, list[float]]) -> str:
    """One process on P partitions: µs per message against P=1."""
    base = statistics.median(samples[1])
    rows = []
    for partitions, rates in sorted(samples.items()):
        us = [1e6 / r for r in rates]
        mid = statistics.median(us)
        spread = (max(us) - min(us)) / 2 / mid
        rows.append(
            [str(partitions), f"{mid:.1f} ±{spread:.0%}", f"{base / statistics.median(rates):.2f}"]
        )
    return _rst(["partitions", "µs per message", "× partitions=1"], rows)


def floors(found: dict[str, Any]) -> list[str]:
    """The issue's floors for this 2-core machine, each with its measured figure."""
    lines = []
    for fs, by_role in found.items():
        for role, runs in by_role.items():
            scaling = runs["scaling"]
            if ("vsqs, p=K", 2) not in scaling:
                continue
            two = statistics.median(scaling[("vsqs, p=K", 2)])
            one = statistics.median(scaling[("vsqs, p=K", 1)])
            bare = statistics.median(scaling[("bare, K dirs", 2)])
            lines.append(
                f"{fs}, {role}: 2 on p=2 / 1 = {two / one:.2f}x (floor 1.6x), "
                f"/ bare 2 dirs = {two / bare:.2f}x (floor 0.9x)"
            )
            single = runs.get("single")
            if single and 2 in single:
                cost = statistics.median(single[1]) / statistics.median(single[2])
                lines.append(f"{fs}, one of {role} on p=2: {cost:.2f}x per message (ceiling 1.1x)")
    return lines


# ---------------------------------------------------------------- main


def measure(
    fs: str,
    *,
    roles: Sequence[str],
    ks: Sequence[int],
    columns: Sequence[str],
    messages: int,
    rounds: int,
) -> dict[str, Any]:
    """Every sample of one filesystem: {role: {"scaling": ..., "single": ...}}."""
    found: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="vsqs-scale-", dir=ROOTS[fs]) as tmp:
        base = Path(tmp)
        for role in roles:
            scaling: dict[tuple[str, int], list[float]] = {}
            single: dict[int, list[float]] = {}
            for rnd in range(rounds):
                order = list(columns[rnd % len(columns) :]) + list(columns[: rnd % len(columns)])
                for k in ks:
                    for column in order:
                        job = make_job(role, column, base, k=k, messages=messages, tag=f"r{rnd}")
                        rate = run_once(job)
                        scaling.setdefault((column, k), []).append(rate)
                        shutil.rmtree(base / Path(job.dirs[0]).relative_to(base).parts[0])
                        print(f"  {fs} {role} K={k} {column}: {rate:,.0f} msg/s", flush=True)
                if "vsqs, p=K" in columns:
                    for partitions in SINGLE_PARTITIONS:
                        path = base / f"single-{role}-{partitions}-r{rnd}"
                        job = Job(role, "vsqs", (str(path),), 1, partitions, messages)
                        rate = run_once(job)
                        single.setdefault(partitions, []).append(rate)
                        shutil.rmtree(path)
                        print(f"  {fs} one of {role}, p={partitions}: {1e6 / rate:.1f} µs/msg")
            found[role] = {"scaling": scaling, "single": single}
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=100_000, help="backlog / published")
    parser.add_argument("--disk-messages", type=int, default=20_000, help="the same, on the disk")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="10,000 messages, one round")
    parser.add_argument("--fs", choices=("shm", "disk", "both"), default="both")
    parser.add_argument("--roles", choices=("consumers", "producers", "both"), default="both")
    parser.add_argument(
        "--max-k", type=int, default=max(os.cpu_count() or 1, 8), help="the largest K"
    )
    parser.add_argument("--bare-only", action="store_true", help="only the bare columns")
    parser.add_argument("--json", type=Path, help="write every sample here")
    args = parser.parse_args(argv)
    if args.quick:
        args.messages, args.disk_messages, args.rounds = 10_000, 5_000, 1
    columns = list(COLUMNS)
    if args.bare_only or not partitions_supported():
        columns = columns[:2] if args.bare_only else columns[:3]
    ks = _k_values(args.max_k)
    roles = ("consumers", "producers") if args.roles == "both" else (args.roles,)
    filesystems = ("shm", "disk") if args.fs == "both" else (args.fs,)
    messages = {"shm": args.messages, "disk": args.disk_messages}
    found = {
        fs: measure(
            fs, roles=roles, ks=ks, columns=columns, messages=messages[fs], rounds=args.rounds
        )
        for fs in filesystems
    }
    cores = os.cpu_count()
    print(
        f"\n{args.rounds} round(s), {cores} cores, "
        f"{time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC\n"
    )
    for fs, by_role in found.items():
        for role, runs in by_role.items():
            print(
                f".. rubric:: {role.capitalize()}, on {FS_NAMES[fs]}, "
                f"{messages[fs]:,} messages: msg/s\n"
            )
            print(scaling_table(runs["scaling"], ks), end="\n\n")
            if runs["single"]:
                print(f".. rubric:: One of the {role}, on {FS_NAMES[fs]}\n")
                print(single_table(runs["single"]), end="\n\n")
    for line in floors(found):
        print(line)
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    fs: {
                        role: {
                            "scaling": {f"{c} K={k}": v for (c, k), v in r["scaling"].items()},
                            "single": r["single"],
                        }
                        for role, r in by_role.items()
                    }
                    for fs, by_role in found.items()
                },
                indent=1,
            )
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
