"""Load generators (``pump``, ``sink``; vsqs 0.3 shipped them as vsqspump/vsqssink) and
``demo``."""

from __future__ import annotations

import subprocess
import sys
import time

import click

from .. import QueueDrained, _units
from ._common import (
    EMPTY,
    SECONDS,
    open_queue,
    progress,
    publish_batch,
    stdout_is_terminal,
)


@click.command()
@click.argument("queue", type=click.Path())
@click.option("-n", "--count", type=click.IntRange(min=1), default=10_000, show_default=True)
@click.option(
    "--size", type=click.IntRange(min=0), default=100, show_default=True, help="Body bytes."
)
@click.option(
    "--batch", type=click.IntRange(min=1), default=100, show_default=True, help="Per write batch."
)
@click.option(
    "--durable/--no-durable",
    default=True,
    show_default=True,
    help="fsync each batch (crash-safe) or not.",
)
def pump(queue: str, count: int, size: int, batch: int, durable: bool) -> None:
    """Load generator: publish COUNT messages, print the rate.

    Publishes COUNT messages of SIZE bytes to QUEUE (created if missing).

    Bodies are numbered ('000042...') so a sink can tell them apart. Run several at
    once, in several shells or hosts, to load a shared queue.
    """
    target = open_queue(queue, create=True, durable=durable)
    batch = min(batch, target.config.capacity or batch)  # a stored bound: a batch must fit
    published = 0
    started = time.perf_counter()
    with progress(f"pumping into {queue}", count, show=stdout_is_terminal()) as advance:
        while published < count:
            n = min(batch, count - published)
            bodies = [
                str(published + i).zfill(12).encode().ljust(size, b".")[:size] for i in range(n)
            ]
            publish_batch(target, bodies)  # Ctrl-C never leaves a half-written batch
            published += n
            advance(n)
    elapsed = time.perf_counter() - started
    click.echo(f"published {_units.throughput(published, published * size, elapsed)}")


@click.command()
@click.argument("queue", type=click.Path())
@click.option(
    "-n", "--count", type=click.IntRange(min=0), default=0, help="Stop after N (0: no limit)."
)
@click.option(
    "--wait",
    type=SECONDS,
    default=1.0,
    show_default=True,
    help="Stop after this many seconds without a message.",
)
@click.option(
    "--batch", type=click.IntRange(min=1), default=10, show_default=True, help="Per receive."
)
def sink(queue: str, count: int, wait: float, batch: int) -> None:
    """Load generator: consume messages fast, print the rate.

    Receives and deletes messages from QUEUE as fast as it can.

    Stops after COUNT messages, after --wait seconds without one, or when the queue is
    shut down and drained. Exit status 3 if nothing came.
    """
    source = open_queue(queue)
    consumed = 0
    nbytes = 0
    started = time.perf_counter()
    last = started
    with progress(f"sinking {queue}", count or None, show=stdout_is_terminal()) as advance:
        while not count or consumed < count:
            want = batch if not count else min(batch, count - consumed)
            try:
                messages = source.receive_batch(want, timeout=wait)
            except QueueDrained:
                break
            if not messages:
                break
            last = time.perf_counter()
            consumed += source.delete_batch(messages)
            nbytes += sum(len(message.body) for message in messages)
            advance(len(messages))
    # The throughput is over the time messages were flowing, not the final idle --wait.
    click.echo(f"consumed {_units.throughput(consumed, nbytes, last - started)}")
    if not consumed:
        click.get_current_context().exit(EMPTY)


@click.command()
@click.option("--producers", type=click.IntRange(min=1), default=3, show_default=True)
@click.option("--consumers", type=click.IntRange(min=1), default=3, show_default=True)
@click.option("--messages", type=click.IntRange(min=1), default=20_000, show_default=True)
def demo(producers: int, consumers: int, messages: int) -> None:
    """Run producer and consumer processes on one queue.

    What `make demo` runs.

    Checks that every message was delivered exactly once; exit status 1 if not.
    """
    # The demo is a program of its own (`make demo` runs it with the core alone): run
    # as one, not imported, so that no integration reaches into another's private module.
    options = {"--producers": producers, "--consumers": consumers, "--messages": messages}
    command = [sys.executable, "-m", "vsqs._demo", *(f"{k}={v}" for k, v in options.items())]
    done = subprocess.run(command, check=False)
    click.get_current_context().exit(done.returncode)
