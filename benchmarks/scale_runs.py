"""One timed run of K processes on bare directories or on a vsqs queue, checked.

A :class:`Job` says what the processes of a run do; :func:`run_once` makes the run's
backlog (untimed), spawns the processes, releases them together through one barrier
once each is ready (interpreter started, imports done, queue opened), times them, and
checks that every message was delivered, or published, exactly once. The method of the
benchmark that uses it is in ``benchmarks/bench_scale.py``.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Final

from benchmarks.backends import PREFILL_BASE_US, body

HOLD_US: Final = 60_000_000  # the bare consumer's lease: longer than any run
BARRIER_S: Final = 300.0
FILES: Final = 0
"""``Job.batch`` of a backlog written straight into the directories as ready files."""


@dataclass(frozen=True)
class Job:
    """What the processes of one run do; everything they need crosses the spawn boundary."""

    role: str  # "consumers" or "producers"
    kind: str  # "bare" or "vsqs"
    dirs: tuple[str, ...]  # bare: the directories (process i uses dirs[i % len]); vsqs: (queue,)
    processes: int
    partitions: int  # vsqs only
    messages: int  # in total, over all processes
    batch: int = FILES
    """vsqs producers: messages per call (1: ``publish``, else ``publish_batch``); vsqs
    consumers: how their backlog was published, the same way by one handle, or
    :data:`FILES` for ready files written straight into the (partition) directories."""


@dataclass(frozen=True)
class Outcome:
    start: float
    end: float
    count: int
    misses: int
    home: str = ""
    """A vsqs consumer's main partition: the directory most of its messages came from."""


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


def share(job: Job, index: int) -> int:
    """How many messages producer *index* publishes (N split as evenly as it goes)."""
    return job.messages // job.processes + (index < job.messages % job.processes)


def open_vsqs(job: Job) -> Any:
    """The job's queue, as each of its processes opens it (``durable=False``, as the bare
    loops never ``fsync``; a lease longer than any run)."""
    import vsqs

    options: dict[str, Any] = {"durable": False, "visibility_timeout": 60.0}
    if job.partitions > 1:
        options["partitions"] = job.partitions
    return vsqs.Queue(job.dirs[0], **options)


def _vsqs_consume(queue: Any) -> tuple[int, int, str]:
    """Drain *queue*; (messages, 0, the directory most of them came from)."""
    count = 0
    seen: Counter[str] = Counter()  # one message in 64: a sample costs nothing measurable
    while (message := queue.receive(timeout=0)) is not None:
        queue.delete(message)
        if not count & 63:
            seen[message.queue] += 1
        count += 1
    return count, 0, seen.most_common(1)[0][0] if seen else ""


def publish(queue: Any, count: int, batch: int) -> int:
    """Publish *count* messages on *queue*: one ``publish`` each if *batch* is 1, else
    ``publish_batch`` calls of *batch* (the last one shorter)."""
    data = body()
    if batch <= 1:
        for _ in range(count):
            queue.publish(data)
        return count
    bodies = [data] * batch
    for first in range(0, count, batch):
        queue.publish_batch(bodies[: min(batch, count - first)])
    return count


def _work(job: Job, index: int) -> Callable[[], tuple[int, int, str]]:
    """Process *index*'s timed work, everything before it done: () -> (messages, misses,
    home) (see :class:`Outcome`)."""
    if job.kind == "vsqs":
        queue = open_vsqs(job)  # opened before the barrier; homes are taken on first use
        if job.role == "consumers":
            return lambda: _vsqs_consume(queue)
        count = share(job, index)
        return lambda: (publish(queue, count, job.batch), 0, "")
    directory = job.dirs[index % len(job.dirs)]
    if job.role == "consumers":
        return lambda: (*_bare_consume(directory), "")
    # ids i, i + K, i + 2K, ...: disjoint across producers, as if known in advance
    first = PREFILL_BASE_US + index
    ids = range(first, first + share(job, index) * job.processes, job.processes)
    return lambda: (_bare_produce(directory, ids), 0, "")


def _process(job: Job, index: int, barrier: Any, results: Any) -> None:
    """One process of a run: get ready, wait at the barrier, work, report."""
    work = _work(job, index)
    barrier.wait(BARRIER_S)
    start = time.perf_counter()
    count, misses, home = work()
    end = time.perf_counter()
    results.put((index, asdict(Outcome(start, end, count, misses, home))))


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


def message_dirs(job: Job) -> list[str]:
    """The directories that hold the run's messages: the bare ones, or the queue's
    (plain) partitions."""
    if job.kind == "bare":
        return list(job.dirs)
    import vsqs

    queue = open_vsqs(job)  # makes the queue (and stores partitions=)
    try:
        return [str(q.path) for q in vsqs.partitions_of(queue)]
    finally:
        queue.close()


def _backlog(job: Job, dirs: Sequence[str]) -> None:
    """The consumers' backlog of ``job.messages``, untimed."""
    if job.kind == "vsqs" and job.batch != FILES:
        queue = open_vsqs(job)
        try:
            publish(queue, job.messages, job.batch)
        finally:
            queue.close()  # gives up its publisher home
        return
    # Ids in order, dealt round the directories: each holds an even, interleaved share.
    for i, directory in enumerate(dirs):
        _prefill(directory, range(PREFILL_BASE_US + i, PREFILL_BASE_US + job.messages, len(dirs)))


def _settle(directory: str) -> None:
    """Write back the filesystem's dirty data (untimed), so that a run on a disk does not
    pay for the backlog just made, or for the files of the run before it."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        if ctypes.CDLL(None, use_errno=True).syncfs(fd) != 0:
            raise OSError(ctypes.get_errno(), "syncfs failed", directory)
    finally:
        os.close(fd)


def count_files(directories: Sequence[str]) -> tuple[int, int]:
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
    """Run *job* once (its directories fresh); return its messages per second.

    :raises RuntimeError: a process failed, or a message was lost, doubled or left over.
    """
    return run_outcomes(job)[0]


def run_outcomes(job: Job) -> tuple[float, list[Outcome]]:
    """Run *job* once (its directories fresh); its messages per second and what each
    process reported.

    :raises RuntimeError: a process failed, or a message was lost, doubled or left over.
    """
    dirs = message_dirs(job)
    for directory in dirs:
        os.makedirs(directory, exist_ok=True)
    if job.role == "consumers":
        _backlog(job, dirs)
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
    # a partitioned queue's own directory too (nothing should land there)
    ready, other = count_files([*dirs, job.dirs[0]] if job.partitions > 1 else dirs)
    expected = (0, 0) if job.role == "consumers" else (job.messages, 0)
    if total != job.messages or (ready, other) != expected:
        raise RuntimeError(f"{job}: {total} counted, {ready} ready and {other} other files left")
    wall = max(o.end for o in outcomes) - min(o.start for o in outcomes)
    return job.messages / wall, outcomes


def rst(head: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A reStructuredText simple table."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]
    rule = "  ".join("=" * w for w in widths)

    def line(cells: Sequence[str]) -> str:
        return "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()

    return "\n".join([rule, line(head), rule, *(line(r) for r in rows), rule])
