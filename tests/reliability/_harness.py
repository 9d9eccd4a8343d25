"""Crash injection: real publishers and consumers, killed with SIGKILL at random moments.

Every body carries its tag (``<process>:<sequence>``) and a SHA-256 of itself, so a torn
message cannot pass for a whole one. Each process keeps an append-only log in which every
line is written with one ``write`` (atomic for a small ``O_APPEND`` write, so a kill never
tears a line):

* publishers log ``A <tag> <id>`` once ``publish`` returned, and fsync the log;
* consumers log ``D <tag> <receipt>`` on delivery, then ``X <tag>`` when ``delete`` returned
  ``True``, ``L <tag>`` when the lease was lost, ``R <tag>`` after a deliberate release.

A delivery with no closing line as the last line of a consumer's log is one its process
was killed while holding: its lease expires and the message comes back. That is the
only way (besides ``L`` and ``R``) a message may legitimately be delivered twice.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import random
import signal
import time
import traceback
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from multiprocessing.context import ForkServerContext
from multiprocessing.process import BaseProcess
from pathlib import Path

import vsqs
from vsqs.testing import ManualClock, assert_consistent

_DIGEST = 32
VISIBILITY_TIMEOUT = 1.0  # short, so leases of killed consumers come back within the run


def forkserver() -> ForkServerContext:
    """A context whose children are forked from a clean, single-threaded server process.

    Cheap to start (the server has vsqs imported), and safe even when the test process has
    threads (a JVM gateway from the Spark tests), which plain ``fork`` is not.
    """
    ctx = multiprocessing.get_context("forkserver")
    package = __name__.rpartition(".")[0]
    children = [f"{package}._harness", f"{package}._killpoints", f"{package}._faultchild"]
    ctx.set_forkserver_preload(["vsqs", *children])
    return ctx


def make_body(tag: str, rng: random.Random) -> bytes:
    """``<tag>\\n<random bytes><sha256 of everything before>``; sizes up to 192 KiB."""
    size = rng.choice((0, 10, 1000, 4096, 65_536, 196_608))
    head = tag.encode() + b"\n" + rng.randbytes(size)
    return head + hashlib.sha256(head).digest()


def check_body(body: bytes) -> str | None:
    """The tag of an intact body, ``None`` for a torn or foreign one."""
    head, digest = body[:-_DIGEST], body[-_DIGEST:]
    if len(body) < _DIGEST or hashlib.sha256(head).digest() != digest:
        return None
    return head.partition(b"\n")[0].decode()


def _log(fd: int, line: str, *, sync: bool = False) -> None:
    os.write(fd, line.encode())
    if sync:
        os.fsync(fd)


def _open_log(logs: str, name: str) -> int:
    return os.open(os.path.join(logs, name + ".log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND)


def _guard(logs: str, name: str) -> None:
    """Record the traceback of a worker that failed on its own (not by a kill)."""
    with open(os.path.join(logs, name + ".err"), "w", encoding="utf-8") as handle:
        handle.write(traceback.format_exc())


def publisher(queue: str, logs: str, name: str, seed: int, durable: bool) -> None:
    """Publish tagged bodies forever (single, batched, with attributes); log each ack."""
    try:
        q = vsqs.Queue(queue, visibility_timeout=VISIBILITY_TIMEOUT, durable=durable)
        fd = _open_log(logs, name)
        rng = random.Random(seed)
        seq = 0
        while True:
            count = 1 if rng.random() < 0.75 else rng.randint(2, 4)
            tags = [f"{name}:{seq + n}" for n in range(count)]
            bodies = [make_body(tag, rng) for tag in tags]
            if count == 1 and rng.random() < 0.3:
                ids = [q.publish(bodies[0], attributes={"tag": tags[0]})]
            elif count == 1:
                ids = [q.publish(bodies[0])]
            else:
                ids = q.publish_batch(bodies)
            _log(fd, "".join(f"A {t} {i}\n" for t, i in zip(tags, ids, strict=True)), sync=True)
            seq += count
    except BaseException:
        _guard(logs, name)
        raise


def consumer(queue: str, logs: str, name: str, seed: int, durable: bool) -> None:
    """Receive, verify, sometimes heartbeat or release, delete; log every step."""
    try:
        q = vsqs.Queue(queue, visibility_timeout=VISIBILITY_TIMEOUT, durable=durable)
        fd = _open_log(logs, name)
        rng = random.Random(seed)
        while True:
            message = q.receive(timeout=0.2)
            if message is None:
                continue
            tag = check_body(message.body)
            if tag is None or message.attributes.get("tag", tag) != tag:
                _log(fd, f"C {message.id}\n")
                continue
            _log(fd, f"D {tag} {message.receipt}\n")
            roll = rng.random()
            try:
                if roll < 0.05:
                    q.change_visibility(message, 0)
                    _log(fd, f"R {tag}\n")
                    continue
                if roll < 0.15:
                    message = q.change_visibility(message, VISIBILITY_TIMEOUT)
            except vsqs.LeaseLost:
                _log(fd, f"L {tag}\n")
                continue
            _log(fd, f"{'X' if q.delete(message) else 'L'} {tag}\n")
    except BaseException:
        _guard(logs, name)
        raise


@dataclass
class Summary:
    """The figures of one crash-injection run (saved as JSON for the docs)."""

    kills: int = 0
    acknowledged: int = 0
    messages: int = 0
    deliveries: int = 0
    losses: int = 0
    duplicates: int = 0
    unexplained_duplicates: int = 0
    corrupt: int = 0
    debris_cleaned: int = 0
    seconds: float = 0.0
    faults: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def line(self) -> str:
        return (
            f"crash injection: {self.kills} kills, {self.messages} messages "
            f"({self.acknowledged} acknowledged), {self.deliveries} deliveries, "
            f"{self.losses} losses, {self.duplicates} duplicates (all explained: "
            f"{self.unexplained_duplicates == 0}), {self.corrupt} corrupt, "
            f"{self.seconds:.1f} s"
        )

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        data = asdict(self) | {"finished": time.strftime("%Y-%m-%d %H:%M:%S %Z")}
        path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


def run(
    workdir: Path,
    kills: int,
    *,
    publishers: int = 2,
    consumers: int = 2,
    seed: int = 0,
    partitions: int = 1,
) -> Summary:
    """Run workers, kill one at random every few tens of ms until *kills*, then check.

    With *partitions* > 1 the queue is partitioned (the workers open it by its stored
    count)."""
    started = time.monotonic()
    queue, logs = workdir / "queue", workdir / "logs"
    logs.mkdir(parents=True)
    vsqs.Queue(queue, partitions=partitions)  # create it once, before any worker races to
    ctx = forkserver()
    rng = random.Random(seed)
    roles = {f"p{n}": publisher for n in range(publishers)}
    roles |= {f"c{n}": consumer for n in range(consumers)}
    generation: Counter[str] = Counter()
    workers: dict[str, BaseProcess] = {}
    summary = Summary()

    def start(role: str) -> None:
        name = f"{role}g{generation[role]}"
        generation[role] += 1
        durable = generation[role] % 2 == 0  # half the lives durable, half not
        args = (str(queue), str(logs), name, rng.getrandbits(32), durable)
        workers[role] = ctx.Process(target=roles[role], args=args, daemon=True)
        workers[role].start()

    for role in roles:
        start(role)
    try:
        while summary.kills < kills:
            time.sleep(rng.uniform(0.01, 0.2))
            role = rng.choice(sorted(roles))
            process = workers[role]
            if _kill(process):
                summary.kills += 1
            process.join()
            if process.exitcode != -signal.SIGKILL:
                summary.problems.append(f"{process.name} exited with {process.exitcode}")
            start(role)
    finally:
        for process in workers.values():
            _kill(process)
            process.join()
    for err in sorted(logs.glob("*.err")):
        summary.problems.append(f"{err.stem} failed on its own:\n{err.read_text()}")
    _check(queue, logs, summary)
    summary.seconds = time.monotonic() - started
    return summary


def _kill(process: BaseProcess) -> bool:
    """SIGKILL *process*; ``False`` if it had already ended."""
    if process.pid is None or not process.is_alive():
        return False
    try:
        os.kill(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        return False  # it died on its own a moment ago; join() shows how
    return True


def _check(queue: Path, logs: Path, summary: Summary) -> None:
    """Upkeep after every process is dead, then the invariants of the module docstring."""
    # Every lease has ended for a clock past the last possible expiry.
    clock = ManualClock(time.time() + VISIBILITY_TIMEOUT + 60)
    q = vsqs.Queue(queue, visibility_timeout=VISIBILITY_TIMEOUT, clock=clock)
    q.requeue_expired()
    summary.debris_cleaned = q.clean(older_than=0)
    assert_consistent(q)
    acknowledged: dict[str, str] = {}
    outcomes: defaultdict[str, list[str]] = defaultdict(list)
    for path in sorted(logs.glob("*.log")):
        lines = path.read_text(encoding="utf-8").splitlines()
        for index, line in enumerate(lines):
            kind, _, rest = line.partition(" ")
            if kind == "A":
                tag, message_id = rest.split()
                acknowledged[tag] = message_id
            elif kind == "C":
                summary.corrupt += 1
            elif kind == "D":
                tag = rest.split()[0]
                closing = lines[index + 1] if index + 1 < len(lines) else ""
                if closing.startswith(("X ", "L ", "R ")) and closing.split()[1] == tag:
                    outcomes[tag].append(closing[0])
                elif closing:
                    summary.problems.append(f"{path.name}: delivery of {tag} never closed")
                else:
                    outcomes[tag].append("K")  # killed while holding it
    while (message := q.receive(timeout=0)) is not None:
        final = check_body(message.body)
        if final is None:
            summary.corrupt += 1
        else:
            outcomes[final].append("X")
        assert q.delete(message)
    assert_consistent(q)
    assert q.counts().total == 0, q.counts()
    summary.acknowledged = len(acknowledged)
    summary.messages = len(outcomes.keys() | acknowledged.keys())
    summary.deliveries = sum(len(o) for o in outcomes.values())
    lost = sorted(acknowledged.keys() - outcomes.keys())
    summary.losses = len(lost)
    if lost:
        summary.problems.append(f"lost acknowledged publishes: {lost[:10]}")
    for tag, seen in outcomes.items():
        summary.duplicates += len(seen) - 1
        # Two successful deletes mean two copies of the file existed: never allowed.
        # Every other extra delivery follows a lease that ended without a delete (K, L, R).
        if seen.count("X") > 1:
            summary.unexplained_duplicates += seen.count("X") - 1
            summary.problems.append(f"{tag} was deleted {seen.count('X')} times: {seen}")
