"""Operator commands: ``create``, ``stats``, ``purge``, ``clean``, ``requeue``, ``redrive``,
``shutdown``, ``queues``."""

from __future__ import annotations

import dataclasses
import functools
import os
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click

from .. import (
    AnyQueue,
    Queue,
    QueueRoot,
    Stats,
    VsqsError,
    _units,
    _userfiles,
    partitions_of,
    validate_name,
)
from ._common import (
    SECONDS,
    CliError,
    json_line,
    open_queue,
    plain,
    progress,
    stdout_is_terminal,
)

if TYPE_CHECKING:
    from rich.table import Table


_PARTITIONS_HELP = (
    "Keep the messages in N partition directories (consumers scale with them); fixed when"
    " the queue is created. Default: 1, or 8 with --fifo."
)
_FIFO_HELP = (
    "SQS FIFO's one in flight per group: a group's next message waits while an earlier"
    " one is held. Stored with the queue."
)


def _shape(partitions: int | None, fifo: bool) -> dict[str, Any]:
    """The shape options given (none given: whatever the queue stores, or the defaults)."""
    shape: dict[str, Any] = {}
    if partitions is not None:
        shape["partitions"] = partitions
    if fifo:
        shape["fifo"] = True
    return shape


def _keep_shape(path: str, shape: dict[str, Any]) -> None:
    """Refuse to give an existing queue (one with settings, messages, a count of messages
    ever published, or shut down) another partition count or fifo setting than it has:
    ``create`` never changes a queue. An empty directory is no queue yet."""
    if not shape or not _userfiles.is_dir(path):
        return
    existing = Queue(path)
    stats = existing.stats()
    if not (existing.settings() or stats.is_shutdown or stats.produced_messages or len(existing)):
        existing.close()
        return
    has = {"partitions": len(partitions_of(existing)), "fifo": existing.fifo}
    existing.close()
    asked = {"partitions": shape.get("partitions", has["partitions"]), "fifo": shape.get("fifo")}
    changed = [key for key in has if asked[key] is not None and asked[key] != has[key]]
    if changed:
        old = ", ".join(f"{key}={has[key]}" for key in changed)
        new = ", ".join(f"{key}={asked[key]}" for key in changed)
        raise click.UsageError(
            f"queue {path!r} exists with {old}; vsqs create never changes an existing "
            f"queue (asked: {new}). Create a new queue with it and move the messages "
            "there: vsqs redrive OLD --to NEW"
        )


def _describe(queue: AnyQueue) -> str:
    shown = queue.path
    count = len(partitions_of(queue))
    if count > 1 or queue.fifo:
        shown += f"  (partitions={count}{', fifo' if queue.fifo else ''})"
    return shown


@click.command()
@click.argument("queues", nargs=-1, required=True, type=click.Path())
@click.option("--partitions", type=click.IntRange(min=1), metavar="N", help=_PARTITIONS_HELP)
@click.option("--fifo", is_flag=True, help=_FIFO_HELP)
def create(queues: tuple[str, ...], partitions: int | None, fifo: bool) -> None:
    """Create the queue directories QUEUES (existing ones are opened and kept).

    The partition count and --fifo are stored with each queue, so every process that
    opens it later uses them. An existing queue that stores another count (or fifo
    setting) is refused, naming both: the count is fixed when a queue is created.

    \b
      vsqs create /srv/queues/orders --partitions 8 --fifo
    """
    shape = _shape(partitions, fifo)
    for path in queues:
        _keep_shape(os.path.abspath(path), shape)
        made = open_queue(path, create=True, **shape)
        click.echo(_describe(made))


def _confirm(what: str, yes: bool) -> None:
    """Ask before destroying messages; refuse without --yes when nobody can answer."""
    if yes:
        return
    if not sys.stdin.isatty():
        raise click.UsageError(f"{what}: pass --yes to confirm (stdin is not a terminal)")
    click.confirm(f"{what}?", abort=True)


@click.command()
@click.argument("queue", type=click.Path())
@click.option("-y", "--yes", is_flag=True, help="Do not ask for confirmation.")
def purge(queue: str, yes: bool) -> None:
    """Delete every ready, held and delayed message of QUEUE.

    Messages being written are left alone, so a concurrent publish is never cut short;
    a message received during the purge may survive it.
    """
    target = open_queue(queue)
    _confirm(f"delete every message in {queue}", yes)
    with progress(f"purging {queue}", None, show=stdout_is_terminal()) as advance:
        removed = target.purge()
        advance(removed)
    click.echo(f"purged {_units.count_of(removed, 'message')}")


@click.command()
@click.argument("queue", type=click.Path())
@click.option(
    "--older-than",
    type=SECONDS,
    default=3600.0,
    show_default=True,
    help="Only debris older than this many seconds.",
)
def clean(queue: str, older_than: float) -> None:
    """Remove the debris of crashed processes from QUEUE.

    Debris is unfinished publishes (never visible, so nothing is lost), orphaned
    metadata and expired deduplication markers. Young entries are never touched.
    """
    removed = open_queue(queue).clean(older_than)
    click.echo(f"removed {_units.count_of(removed, 'entry', 'entries')}")


@click.command()
@click.argument("queue", type=click.Path())
def requeue(queue: str) -> None:
    """Return every expired lease of QUEUE to the queue now.

    Consumers do this as they go; this is for a queue nobody is consuming.
    """
    count = open_queue(queue).requeue_expired()
    click.echo(f"requeued {_units.count_of(count, 'message')}")


def _redrive(dead: AnyQueue, to: AnyQueue | None, limit: int | None) -> int:
    return dead.redrive(to=to, limit=limit)


@click.command()
@click.argument("dead_letter_queue", type=click.Path())
@click.option("--to", "to", type=click.Path(), help="Move to this queue instead of each source.")
@click.option("--limit", type=click.IntRange(min=1), help="Move at most this many messages.")
def redrive(dead_letter_queue: str, to: str | None, limit: int | None) -> None:
    """Move dead-lettered messages back to their source queues.

    Each message moves in one rename and keeps its attributes; its receive count starts
    again. Messages with no recorded source stay unless --to is given.
    """
    dead = open_queue(dead_letter_queue)
    target = open_queue(to) if to is not None else None
    total = dead.counts().ready if limit is None else min(limit, dead.counts().ready)
    chunk = 100
    moved = 0
    with progress(f"redriving {dead_letter_queue}", total, show=stdout_is_terminal()) as advance:
        while limit is None or moved < limit:
            want = chunk if limit is None else min(chunk, limit - moved)
            count = _redrive(dead, target, want)
            moved += count
            advance(count)
            if count < want:
                break  # the rest has no recorded source, or was taken by a consumer
    click.echo(f"redrove {_units.count_of(moved, 'message')}")


@click.command()
@click.argument("queue", type=click.Path())
def shutdown(queue: str) -> None:
    """Shut QUEUE down: publishing ends, consumers stop once drained.

    Persistent and seen by every process. Shutting down twice is harmless.
    """
    open_queue(queue).shutdown()
    click.echo(f"shut down {queue}")


def _row(name: str, stats: Stats) -> dict[str, Any]:
    """A queue's stats as one JSON object; a partitioned queue's ``partitions`` is a
    list of its partitions' (each with its ``partition`` number)."""
    row = {"queue": name, **dataclasses.asdict(stats)}
    row["partitions"] = [
        {"partition": index, **{k: v for k, v in part.items() if k != "partitions"}}
        for index, part in enumerate(row["partitions"])
    ]
    return row


def _with_partitions(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each queue's row, followed by one row per partition of a partitioned queue."""
    flat: list[dict[str, Any]] = []
    for row in rows:
        flat.append(row)
        flat.extend(
            {**part, "queue": f"  partition-{part['partition']}"}
            for part in row.get("partitions", ())
        )
    return flat


def _table(rows: list[dict[str, Any]]) -> Table:
    from rich import box  # noqa: PLC0415 -- rich costs ~60 ms; only stats needs it
    from rich.table import Table  # noqa: PLC0415

    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    table.add_column("queue", overflow="fold")
    for name in ("ready", "held", "delayed", "new", "oldest", "produced", "consumed"):
        table.add_column(name, justify="right")
    table.add_column("shutdown")
    for row in _with_partitions(rows):
        table.add_row(
            row["queue"],
            *(f"{row[key]:,}" for key in ("ready", "held", "delayed", "new")),
            _units.age(row["oldest_ready_age"], second_decimals=1),
            f"{row['produced_messages']:,}",
            f"{row['consumed_messages']:,}",
            "yes" if row["is_shutdown"] else "no",
        )
    return table


@click.command()
@click.argument("queues", nargs=-1, required=True, type=click.Path())
@click.option("--json", "as_json", is_flag=True, help="One JSON object per queue per line.")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["table", "json", "prometheus"]),
    default="table",
    show_default=True,
    help="json: as --json; prometheus: the text exposition format (metrics extra).",
)
@click.option("--watch", is_flag=True, help="Refresh until interrupted (Ctrl-C).")
@click.option(
    "--interval",
    type=click.FloatRange(min=0.05),
    default=2.0,
    show_default=True,
    help="Seconds between refreshes with --watch.",
)
@click.option("--count", type=click.IntRange(min=1), help="With --watch: stop after N refreshes.")
def stats(
    queues: tuple[str, ...],
    *,
    as_json: bool,
    fmt: str,
    watch: bool,
    interval: float,
    count: int | None,
) -> None:
    """Show message counts by state, oldest age, throughput totals.

    For each QUEUE: messages ready, held (received, not deleted), delayed and new (being
    written), the age of the oldest ready message, and the messages produced and
    consumed (by every process, ever). A partitioned queue's totals are followed by a
    row per partition (in JSON: its "partitions" list, one object per partition).

    Read-only. A table by default; --json for scripts; --format prometheus for
    node_exporter's textfile collector (names in the metrics guide); --watch for a live
    view.
    """
    explicit = click.get_current_context().get_parameter_source("fmt")
    if as_json and fmt != "json" and explicit is not click.core.ParameterSource.DEFAULT:
        raise click.UsageError(f"--json conflicts with --format {fmt}: give one of them")
    from rich.console import Console  # noqa: PLC0415 -- see _table

    opened = [(name, open_queue(name)) for name in queues]
    console = Console(highlight=False)
    if not console.is_terminal:
        console.width = 1000  # a file or pipe has no width: never fold a long queue path

    def snapshot() -> list[dict[str, Any]]:
        return [_row(name, queue.stats()) for name, queue in opened]

    as_json = as_json or fmt == "json"
    if fmt == "prometheus":
        from ._metrics import prometheus_text  # noqa: PLC0415 -- the metrics extra

        def snapshot() -> list[dict[str, Any]]:
            return [{"text": prometheus_text(opened)}]

    def show(rows: list[dict[str, Any]]) -> None:
        if fmt == "prometheus":
            click.echo(rows[0]["text"], nl=False)
        elif as_json:
            for row in rows:
                click.echo(json_line(row), nl=False)
        else:
            console.print(_table(rows))

    if not watch:
        show(snapshot())
        return
    refreshes = 0
    if console.is_terminal and fmt == "table" and not as_json:
        from rich.live import Live  # noqa: PLC0415 -- see _table

        with Live(_table(snapshot()), console=console, auto_refresh=False) as live:
            while True:
                refreshes += 1
                if count is not None and refreshes >= count:
                    break
                time.sleep(interval)
                live.update(_table(snapshot()), refresh=True)
        return
    while True:  # not a terminal: one table (or JSON lines) per refresh, as vmstat
        show(snapshot())
        refreshes += 1
        if count is not None and refreshes >= count:
            return
        time.sleep(interval)


_ROOT_HELP = "The directory of named queues (or $VSQS_ROOT)."


@click.group()
@click.option("--root", envvar="VSQS_ROOT", type=click.Path(file_okay=False), help=_ROOT_HELP)
@click.pass_context
def queues(ctx: click.Context, root: str | None) -> None:
    """List, create and remove named queues under a root directory.

    Names are letters, digits, '-', '_' and single inner dots, up to 80 characters.
    --root may come before or after the subcommand: `vsqs queues --root R list` and
    `vsqs queues list --root R` are the same.
    """
    ctx.obj = root


def _root_option(command: Callable[..., None]) -> Callable[..., None]:
    """Give a ``queues`` subcommand its own ``--root`` (the group's is the fallback)."""

    @click.option("--root", "root", type=click.Path(file_okay=False), help=_ROOT_HELP)
    @functools.wraps(command)
    def with_root(*args: Any, root: str | None, **kwargs: Any) -> None:
        root = root or click.get_current_context().obj
        if root is None:
            raise click.UsageError("Missing option '--root' (or set $VSQS_ROOT).")
        command(*args, root=root, **kwargs)

    return with_root


def _existing_root(root: str) -> QueueRoot:
    if not _userfiles.is_dir(root):
        raise CliError(f"no queue root at {root}")
    return QueueRoot(root)


@queues.command("list")
@_root_option
def list_queues(root: str) -> None:
    """Print the name of each queue under the root, sorted."""
    for name in _existing_root(root).list():
        click.echo(name)


@queues.command("create")
@click.argument("names", nargs=-1, required=True)
@click.option("--partitions", type=click.IntRange(min=1), metavar="N", help=_PARTITIONS_HELP)
@click.option("--fifo", is_flag=True, help=_FIFO_HELP)
@_root_option
def create_queues(root: str, names: tuple[str, ...], partitions: int | None, fifo: bool) -> None:
    """Create the queues NAMES (existing ones are kept as they are; one that stores
    another partition count or fifo setting than given is refused)."""
    for name in names:
        validate_name(name)  # all or nothing: check every name before creating any
    parent = QueueRoot(root)
    shape = _shape(partitions, fifo)
    for name in names:
        _keep_shape(os.path.join(parent.path, name), shape)
        try:
            made = parent.create(name, **shape)
        except ValueError as exc:
            if isinstance(exc, VsqsError):
                raise
            raise click.UsageError(plain(str(exc))) from None
        click.echo(_describe(made))
        made.close()


@queues.command()
@click.argument("names", nargs=-1, required=True)
@click.option("-y", "--yes", is_flag=True, help="Do not ask for confirmation.")
@_root_option
def remove(root: str, names: tuple[str, ...], yes: bool) -> None:
    """Remove the queues NAMES and every message in them."""
    parent = _existing_root(root)
    for name in names:
        if name not in parent:
            parent.get(name)  # raises QueueNotFound, or InvalidName for a bad name
    _confirm(f"remove {', '.join(names)} and every message in them", yes)
    for name in names:
        parent.delete(name)
