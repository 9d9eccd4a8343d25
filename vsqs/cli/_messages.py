"""``vsqs publish``, ``delete`` and ``peek`` (``receive`` is in _receive)."""

from __future__ import annotations

import hashlib
import os
import sys
from collections.abc import Iterator
from typing import IO

import click

from .. import InvalidId, _units, _userfiles, validate_group, validate_receipt
from ._common import (
    EMPTY,
    ERROR,
    SECONDS,
    json_line,
    message_json,
    open_queue,
    plain,
    progress,
    publish_batch,
    stdout_is_terminal,
)


def _attributes(
    _ctx: click.Context, _param: click.Parameter, values: tuple[str, ...]
) -> dict[str, str]:
    attributes = {}
    for value in values:
        key, eq, text = value.partition("=")
        if not eq or not key:
            raise click.BadParameter(f"{value!r} is not KEY=VALUE")
        if key in attributes:  # never silently keep one of two values
            raise click.BadParameter(f"attribute {key!r} is given twice")
        attributes[key] = text
    return attributes


def _group(_ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    if value is None:
        return None
    try:
        return validate_group(value)
    except ValueError as exc:
        raise click.BadParameter(plain(str(exc))) from None


def _lines(stream: IO[bytes]) -> Iterator[bytes]:
    for line in stream:
        yield line[:-1] if line.endswith(b"\n") else line


def _bodies(
    messages: tuple[str, ...], files: tuple[str, ...], whole: bool
) -> Iterator[tuple[bytes, int]]:
    """Each body to publish, with how many input bytes it consumed (for the progress bar)."""
    for message in messages:
        if message == "-":
            yield from _from_stream(sys.stdin.buffer, whole)
        else:
            body = os.fsencode(message)  # argv bytes that are not UTF-8 survive as they were
            yield body, 0
    for name in files:
        if name == "-":
            yield from _from_stream(sys.stdin.buffer, whole)
            continue
        with _userfiles.open_input(name) as handle:
            yield from _from_stream(handle, whole)


def _from_stream(stream: IO[bytes], whole: bool) -> Iterator[tuple[bytes, int]]:
    if whole:
        body = stream.read()
        yield body, len(body)
        return
    for line in stream:
        yield (line[:-1] if line.endswith(b"\n") else line), len(line)


def _input_size(files: tuple[str, ...]) -> int | None:
    total = 0
    for name in files:
        size = None if name == "-" else _userfiles.input_size(name)
        if size is None:
            return None
        total += size
    return total


@click.command()
@click.argument("queue", type=click.Path())
@click.argument("messages", nargs=-1)
@click.option(
    "-f",
    "--file",
    "files",
    multiple=True,
    type=click.Path(dir_okay=False, allow_dash=True),
    help="Publish each line of FILE as a message ('-' for stdin). Repeatable.",
)
@click.option("--whole", is_flag=True, help="Publish each file (or stdin) whole, not by line.")
@click.option(
    "--batch",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Messages per write batch (one fsync per batch instead of per message).",
)
@click.option("--delay", type=SECONDS, default=0.0, help="Seconds before delivery.")
@click.option(
    "--attr",
    "attributes",
    multiple=True,
    metavar="KEY=VALUE",
    callback=_attributes,
    help="A message attribute. Repeatable.",
)
@click.option("--dedup-id", help="Deduplication id (a single message only).")
@click.option(
    "--group",
    callback=_group,
    help="The message group of every message: a group keeps its order (one partition of a"
    " partitioned queue; one in flight at a time with fifo).",
)
@click.option(
    "--content-dedup", is_flag=True, help="Deduplicate by body: the SHA-256 of each body."
)
@click.option(
    "--capacity",
    type=click.IntRange(min=1),
    help="The queue's bound: wait while it holds this many (give every producer the same).",
)
@click.option(
    "--timeout",
    type=SECONDS,
    help="On a bounded queue (--capacity, or a stored capacity): seconds to wait for room"
    " (default: forever; exit 3 when still full).",
)
@click.option("-q", "--quiet", is_flag=True, help="Print nothing (no ids, no progress).")
def publish(
    *,
    queue: str,
    messages: tuple[str, ...],
    files: tuple[str, ...],
    whole: bool,
    batch: int,
    delay: float,
    attributes: dict[str, str],
    dedup_id: str | None,
    group: str | None,
    content_dedup: bool,
    capacity: int | None,
    timeout: float | None,
    quiet: bool,
) -> None:
    """Publish messages to QUEUE and print their ids.

    QUEUE is a directory, created if missing.
    Each MESSAGE argument is one message; '-' reads stdin and publishes each line.
    Each message is atomic; a batch is not (an interrupted batch leaves a prefix).
    On a terminal, publishing from a file or stdin shows a progress bar instead of ids.

    \b
      vsqs publish /tmp/jobs 'resize cat.jpg' 'resize dog.jpg'
      find . -name '*.jpg' | vsqs publish /tmp/jobs - --batch 100
      vsqs publish /tmp/orders --group customer-42 'order 1' 'order 2'
    """
    if not messages and not files:
        raise click.UsageError("nothing to publish: give MESSAGE arguments, '-' or --file")
    if dedup_id is not None:
        singles = [m for m in messages if m != "-"]
        streams = len(messages) - len(singles) + len(files)
        if not ((len(singles) == 1 and streams == 0) or (not singles and streams == 1 and whole)):
            raise click.UsageError("--dedup-id needs exactly one message")
    if timeout is not None and capacity is None and not _userfiles.names_anything(queue):
        raise click.UsageError("--timeout only applies to a bounded queue: add --capacity")
    target = open_queue(queue, create=True, capacity=capacity)
    bound = target.config.capacity  # the stored capacity binds, --capacity only tightens
    if timeout is not None and bound is None:
        raise click.UsageError(
            "--timeout only applies to a bounded queue: add --capacity"
            " (or store one: vsqs config QUEUE --capacity N)"
        )
    if bound is not None:
        batch = min(batch, bound)  # a batch is published whole, so it must fit
    bulk = bool(files) or "-" in messages
    show = bulk and not quiet and stdout_is_terminal()
    published = 0
    with progress(f"publishing to {queue}", _input_size(files), show=show) as advance:
        pending: list[bytes] = []
        size = 0

        def flush() -> None:
            nonlocal published, size
            keys: list[str | None]
            if content_dedup:
                keys = [hashlib.sha256(body).hexdigest() for body in pending]
            else:
                keys = [dedup_id] * len(pending)
            ids = publish_batch(
                target, pending, delay=delay, attributes=attributes, dedup_ids=keys,
                timeout=timeout, group=group,
            )  # fmt: skip
            published += len(ids)
            if not (quiet or show):
                click.echo("\n".join(ids))
            advance(size)
            pending.clear()
            size = 0

        for body, consumed in _bodies(messages, files, whole):
            pending.append(body)
            size += consumed
            if len(pending) >= batch:
                flush()
        if pending:
            flush()
    if show:
        click.echo(f"published {_units.count_of(published, 'message')} to {queue}")


def _check_receipt(receipt: str) -> str:
    try:
        return validate_receipt(receipt)
    except InvalidId:
        raise click.BadParameter(
            f"{receipt!r} is not a receipt or message id", param_hint="RECEIPT"
        ) from None


@click.command()
@click.argument("queue", type=click.Path())
@click.argument("receipts", nargs=-1, required=True)
def delete(queue: str, receipts: tuple[str, ...]) -> None:
    """Delete received messages by RECEIPT.

    '-' reads receipts from stdin, one a line.
    A receipt is what `vsqs receive --keep --json` prints; each delete is one atomic
    unlink. A receipt whose lease already ended deletes nothing (exit status 1): the
    message went back to the queue, and another consumer's copy is never touched.
    A bare message id deletes the message in whatever state it is.
    """
    wanted: list[str] = []
    for receipt in receipts:
        if receipt == "-":
            wanted += [line.decode().strip() for line in _lines(sys.stdin.buffer)]
        else:
            wanted.append(receipt)
    wanted = [_check_receipt(r) for r in wanted if r]
    target = open_queue(queue)
    missed = [receipt for receipt in wanted if not target.delete(receipt)]
    for receipt in missed:
        click.echo(f"vsqs: not deleted: {receipt} (already deleted, or its lease ended)", err=True)
    if missed:
        click.get_current_context().exit(ERROR)


@click.command()
@click.argument("queue", type=click.Path())
@click.option(
    "-n", "--max-messages", "limit", type=click.IntRange(min=1), default=1, show_default=True
)
@click.option("--json", "as_json", is_flag=True, help="Write each message as a JSON line.")
def peek(queue: str, limit: int, as_json: bool) -> None:
    """Print the oldest ready messages without receiving them.

    Read-only: nothing is claimed or changed. Exit status 3 if no message is ready.
    """
    source = open_queue(queue)
    shown = 0
    for message in source.browse():
        click.echo(json_line(message_json(message)) if as_json else message.body, nl=not as_json)
        shown += 1
        if shown >= limit:
            break
    if not shown:
        click.get_current_context().exit(EMPTY)
