"""The writing processes of the power-loss tests: each runs until the power fails.

``python -m tests.powerloss._producers KIND QUEUE ACKS`` writes to the queue directory
*QUEUE* (on the power-loss filesystem) through one path of vsqs, and after each call
returns appends what it acknowledged to *ACKS* (a file on another filesystem), synced
at once: ``<n> <id>`` per message, ``setting <value>`` per ``configure``. Bodies carry
their own checksum (:func:`body`), so an empty or torn body shows. The process never
ends by itself: the power (a ``crash`` of the filesystem) and a SIGKILL end it.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Final

import vsqs
from vsqs.aio import AsyncQueue

BATCH: Final = 10
PRELOADED: Final = 60  # messages the dead-letter kinds move back and forth


def body(n: int) -> bytes:
    """Message *n*: ``<n>:<payload>:<checksum>``, one line of ASCII, 100 to 300 bytes."""
    payload = hashlib.sha256(b"%d" % n).hexdigest() * (1 + n % 4)
    digest = hashlib.sha256(b"%d:%s" % (n, payload.encode())).hexdigest()[:16]
    return f"{n}:{payload}:{digest}".encode()


def intact(data: bytes) -> int | None:
    """The number of an intact message body, or ``None`` (empty, torn, not ours)."""
    try:
        n = int(data.split(b":", 1)[0])
    except ValueError:
        return None
    return n if data == body(n) else None


class Acks:
    """The acknowledgement log, synced after every line (it is on a real filesystem)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def log(self, lines: list[str]) -> None:
        os.write(self._fd, "".join(line + "\n" for line in lines).encode())
        os.fsync(self._fd)

    def messages(self, first: int, ids: list[str]) -> None:
        self.log([f"{first + k} {message_id}" for k, message_id in enumerate(ids)])


def _singles(queue: vsqs.PlainQueue, acks: Acks, publish: Callable[[int], str]) -> None:
    n = 0
    while True:
        acks.messages(n, [publish(n)])
        n += 1


def _batches(queue: vsqs.PlainQueue, acks: Acks, mode: str) -> None:
    n = 0
    while True:
        bodies = [body(n + k) for k in range(BATCH)]
        if mode == "batch_dedup":
            ids = queue.publish_batch(bodies, batch_dedup_id=f"batch-{n}")
        elif mode == "batch_keys":
            ids = queue.publish_batch(bodies, dedup_ids=[f"m-{n + k}" for k in range(BATCH)])
        else:
            ids = queue.publish_batch(bodies)
        acks.messages(n, ids)
        n += BATCH


def _files(queue: vsqs.PlainQueue, acks: Acks) -> None:
    # The sources sit on the same filesystem (publish_file links, never copies).
    sources = Path(queue.path).parent / "sources"
    sources.mkdir(exist_ok=True)
    n = 0
    while True:
        source = sources / str(n)
        source.write_bytes(body(n))  # not synced: publish_file must flush it
        acks.messages(n, [queue.publish_file(source)])
        n += 1


def _aio(path: str, acks: Acks) -> None:
    async def main() -> None:
        async with AsyncQueue(path) as queue:
            n = 0
            while True:
                jobs = [queue.publish(body(n + k)) for k in range(50)]
                acks.messages(n, list(await asyncio.gather(*jobs)))
                n += 50

    asyncio.run(main())


def _cli(path: str, acks: Acks) -> None:
    """``vsqs publish QUEUE - --batch 10``, fed line by line; each id it prints is one
    acknowledged line (in order)."""
    cli = subprocess.Popen(
        [sys.executable, "-m", "vsqs", "publish", path, "-", "--batch", str(BATCH)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        cwd="/",  # `-m` puts the working directory first on sys.path: no checkout's vsqs
    )
    assert cli.stdin is not None
    assert cli.stdout is not None
    n = 0
    while True:
        cli.stdin.write(b"".join(body(n + k) + b"\n" for k in range(BATCH)))
        cli.stdin.flush()
        ids = [cli.stdout.readline().decode().strip() for _ in range(BATCH)]
        if not all(ids):
            raise SystemExit(f"vsqs publish ended: {cli.wait()}")
        acks.messages(n, ids)
        n += BATCH


def _consume(path: str, acks: Acks) -> None:
    """A consumer beside the producer: receive, log ``deleted <id>``, delete (logged
    first: the power may fail between the two, and a message may go only if logged)."""
    queue = vsqs.PlainQueue(path, visibility_timeout=30)
    while True:
        message = queue.receive(timeout=0.05)
        if message is not None:
            acks.log([f"deleted {message.id}"])
            queue.delete(message)


def _with_consumer(path: str, acks: Acks) -> None:
    """Batches of 10 while another process consumes them (both die with the power: the
    harness kills the process group)."""
    subprocess.Popen([sys.executable, __file__, "consumer", path, acks.path])
    _batches(vsqs.PlainQueue(path), acks, "batch")


def _kombu(path: str, acks: Acks) -> None:
    """Through the kombu transport (``vsqs://``, durable by default), under a root
    beside the queue: ``<root>/tasks``. kombu does not say the id: ``<n>`` alone."""
    # The celery extra; only this kind needs it.
    from kombu.connection import Connection
    from kombu.entity import Exchange, Queue

    import vsqs.kombu  # noqa: F401 - registers the vsqs:// transport

    tasks = Queue("tasks", Exchange("tasks", "direct"), routing_key="tasks")
    root = Path(path).parent / "kombu"
    with Connection(f"vsqs://{root}") as conn, conn.Producer() as producer:
        n = 0
        while True:
            producer.publish(body(n).decode(), exchange=tasks.exchange, routing_key="tasks",
                             declare=[tasks])  # fmt: skip
            acks.log([f"{n} "])
            n += 1


def _spark(path: str, acks: Acks) -> None:
    """``vsqs.spark.publish_dataframe`` of DataFrames of 10 rows, from a local Spark
    (its JVM and Python workers in this process group: the power ends them all)."""
    # The spark extra; only this kind needs it.
    from pyspark.sql import SparkSession

    import vsqs.spark

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    spark = (
        SparkSession.builder.master("local[1]")
        .appName("vsqs-powerloss")
        .config("spark.ui.enabled", "false")
        .getOrCreate()
    )
    n = 0
    while True:
        rows = [(body(n + k).decode(),) for k in range(BATCH)]
        frame = spark.createDataFrame(rows, "payload string").coalesce(1)
        vsqs.spark.publish_dataframe(frame, path, column="payload", batch_size=BATCH)
        acks.log([f"{n + k} " for k in range(BATCH)])
        n += BATCH


def _configure(queue: vsqs.PlainQueue, acks: Acks) -> None:
    n = 1
    while True:
        queue.configure(visibility_timeout=float(n), max_receives=n, dead_letter="dlq")
        acks.log([f"setting {n}"])
        n += 1


def _dead_letters(queue: vsqs.PlainQueue) -> None:
    """Receive each message once and release it: its last receive, so it moves to the
    dead-letter queue (``max_receives=1``)."""
    while True:
        message = queue.receive(timeout=0)
        if message is None:
            return
        queue.change_visibility(message, 0)


def _redrive(dead: vsqs.PlainQueue, to: vsqs.PlainQueue) -> None:
    while dead.redrive(to=to, limit=1):
        pass


def run(kind: str, path: str, acks_path: str) -> None:
    acks = Acks(acks_path)
    if kind == "aio":
        _aio(path, acks)
    elif kind == "cli":
        _cli(path, acks)
    elif kind == "consumer":
        _consume(path, acks)
    elif kind == "consume":
        _with_consumer(path, acks)
    elif kind == "kombu":
        _kombu(path, acks)
    elif kind == "spark":
        _spark(path, acks)
    queue = vsqs.PlainQueue(path)
    dead = Path(path).parent / "dlq"
    if kind == "publish":
        _singles(queue, acks, lambda n: queue.publish(body(n)))
    elif kind == "attributes":
        _singles(queue, acks, lambda n: queue.publish(body(n), attributes={"n": str(n)}))
    elif kind == "stream":
        _singles(queue, acks, lambda n: queue.publish_stream(io.BytesIO(body(n))))
    elif kind == "file":
        _files(queue, acks)
    elif kind in {"batch", "batch_dedup", "batch_keys"}:
        _batches(queue, acks, kind)
    elif kind == "configure":
        _configure(queue, acks)
    elif kind == "dead_letter":
        _dead_letters(vsqs.PlainQueue(path, dead_letter=dead, max_receives=1))
    elif kind == "redrive":
        _redrive(vsqs.PlainQueue(dead), queue)
    else:
        raise SystemExit(f"unknown kind {kind!r}")
    acks.log(["done"])  # the dead-letter kinds end when there is nothing left to move


if __name__ == "__main__":
    run(*sys.argv[1:])
