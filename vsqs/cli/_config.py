"""``vsqs config``: show or change the settings stored with a queue."""

from __future__ import annotations

import json
import os
from typing import Any

import click

from .. import InvalidSettings, PartitionedQueue, PlainQueue, reset_settings
from ._common import SECONDS, CliError, open_queue, plain

# Every setting a queue stores, its option and its vsqs default ("none": no limit).
_SETTINGS: dict[str, tuple[str, str]] = {
    "visibility_timeout": ("--visibility-timeout", "30 s"),
    "delay": ("--delay", "0 s"),
    "capacity": ("--capacity", "none"),
    "dead_letter": ("--dead-letter", "none"),
    "max_receives": ("--max-receives", "none"),
    "retention": ("--retention", "none"),
    "dedup_window": ("--dedup-window", "300 s"),
    "fifo": ("--fifo/--no-fifo", "false"),
}
# Shown with them, but fixed when the queue is created (vsqs create --partitions N).
_SHOWN: dict[str, str] = {**{key: default for key, (_, default) in _SETTINGS.items()},
                          "partitions": "1"}  # fmt: skip


def _dead_letter_path(queue: str, value: str) -> str:
    """A bare name is a queue beside QUEUE; anything with a ``/`` is a path."""
    return value if "/" in value else os.path.join(os.path.dirname(os.path.abspath(queue)), value)


def _show(stored: dict[str, Any]) -> None:
    width = max(len(key) for key in _SHOWN)
    for key, default in _SHOWN.items():
        value = stored.get(key)
        shown = f"{value:g} s" if isinstance(value, float) else value
        if isinstance(value, bool):
            shown = "true" if value else "false"
        text = f"{shown}" if key in stored else f"{default}  (default)"
        click.echo(f"{key:<{width}}  {text}")


@click.command()
@click.argument("queue", type=click.Path())
@click.option("--visibility-timeout", type=SECONDS, help="Seconds a received message is hidden.")
@click.option("--delay", type=SECONDS, help="Seconds every publish is delayed by default.")
@click.option("--capacity", type=click.IntRange(min=1), help="Bound the number of messages.")
@click.option("--dead-letter", help="The dead-letter queue: a name beside QUEUE, or its path.")
@click.option("--max-receives", type=click.IntRange(min=1), help="Receives before dead-lettering.")
@click.option("--retention", type=SECONDS, help="Seconds before an unconsumed message is dropped.")
@click.option("--dedup-window", type=SECONDS, help="Seconds a dedup id is remembered.")
@click.option(
    "--fifo/--no-fifo",
    default=None,
    help="SQS FIFO's one in flight per group: a group's next message waits while an"
    " earlier one is held (every partition of a partitioned queue).",
)
@click.option(
    "--partitions",
    type=click.IntRange(min=1),
    metavar="N",
    help="Refused: the partition count is fixed when a queue is created (the error says"
    " how to move the messages to a new queue).",
)
@click.option(
    "--unset",
    "unset",
    multiple=True,
    type=click.Choice(list(_SETTINGS)),
    help="Remove a stored setting (back to the default); repeatable.",
)
@click.option(
    "--reset",
    is_flag=True,
    help="Move the settings file aside (even one that cannot be read): back to the defaults.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the stored settings as JSON.")
def config(queue: str, unset: tuple[str, ...], reset: bool, as_json: bool, **changes: Any) -> None:
    """Show the settings stored with QUEUE, or change them.

    Every process that opens QUEUE without options of its own uses these. With no
    option, print them; with options, store them (in one atomic write; the settings not
    named are kept) and print the result. The partition count is shown but fixed when
    the queue is created (vsqs create QUEUE --partitions N); --fifo/--no-fifo changes
    every partition of a partitioned queue.

    --reset repairs a settings file that cannot be read (every command refuses such a
    queue): it renames the file to .vsqs/settings.json.bad-<UTC time>, kept for you to
    look at, and the queue is back to the defaults (plus the settings given with it).
    """
    if reset:
        try:
            aside = reset_settings(queue)
        except (FileNotFoundError, NotADirectoryError):
            raise CliError(f"no queue at {queue}") from None
        if aside is not None:
            click.echo(f"vsqs: moved the settings file aside to {aside}", err=True)
    target = open_queue(queue)
    given = {key: value for key, value in changes.items() if value is not None}
    overlap = set(given) & set(unset)
    if overlap:
        raise click.UsageError(f"--unset {sorted(overlap)[0]} conflicts with setting it")
    if "dead_letter" in given:
        given["dead_letter"] = _dead_letter_path(queue, given["dead_letter"])
    if given or unset:
        try:
            if isinstance(target, PlainQueue) and given.get("partitions") is not None:
                # A plain queue is partitioned in place only while it holds nothing.
                target = PartitionedQueue(queue, partitions=given.pop("partitions"))
            stored: dict[str, Any] = dict(target.configure(**given, **dict.fromkeys(unset)))
        except InvalidSettings:
            raise  # the stored file is at fault, not the arguments
        except (TypeError, ValueError) as exc:
            raise click.UsageError(plain(str(exc))) from None
    else:
        stored = dict(target.settings())
    if as_json:
        click.echo(json.dumps(stored, sort_keys=True))
    else:
        _show(stored)
