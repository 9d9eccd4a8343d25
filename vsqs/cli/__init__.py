"""The ``vsqs`` command (the ``cli`` extra: click and rich).

Every command takes queue *paths*; only ``publish`` and ``pump`` create a missing queue
directory, so a typo in ``vsqs stats /tmp/jbos`` is an error rather than a new queue.
Errors are one line on stderr with a documented exit status (see
:data:`~vsqs.cli._common.EXIT_CODES_HELP`); ``--debug`` shows the traceback instead.

``import vsqs`` never imports this module, click or rich.
"""

from __future__ import annotations

import sys
from typing import Any

import click

from .. import __version__, _host
from ._admin import clean, create, purge, queues, redrive, requeue, shutdown, stats
from ._common import (
    DEBUG,
    EXIT_CODES_HELP,
    INTERRUPTED,
    OK,
    CliError,
    Stopped,
    debug_option,
    describe,
    force_option,
    install_stop_handlers,
    stopped_line,
)
from ._config import config
from ._load import demo, pump, sink
from ._messages import delete, peek, publish
from ._metrics import metrics
from ._receive import receive
from ._serve import serve

__all__ = ["cli", "main"]


def _silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's last flush cannot fail again."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, ValueError, OSError):
        return  # a replaced sys.stdout (click's test runner): nothing will flush to a pipe
    _host.silence(fd)


class _Group(click.Group):
    """Maps every error of a command to one line on stderr and an exit status."""

    def invoke(self, ctx: click.Context) -> Any:
        ctx.meta[DEBUG] = bool(ctx.params.get("debug"))  # `--debug` after the command too
        try:
            return super().invoke(ctx)
        except (click.exceptions.Exit, click.ClickException, click.Abort):
            raise  # click's own: usage errors, ctx.exit(status), a declined prompt
        except BrokenPipeError:
            # The reader went away (`vsqs receive q | head -1`): that is its choice, not
            # an error. Unwritten messages were already released by the command.
            _silence_stdout()
            raise click.exceptions.Exit(OK) from None
        except KeyboardInterrupt:
            if ctx.meta[DEBUG]:
                raise
            click.echo("vsqs: interrupted", err=True)
            raise click.exceptions.Exit(INTERRUPTED) from None
        except Stopped as stopped:
            if ctx.meta[DEBUG]:
                raise
            click.echo(stopped_line(stopped.signum), err=True)
            raise click.exceptions.Exit(128 + stopped.signum) from None
        except Exception as exc:  # the one place every error becomes a line
            if ctx.meta[DEBUG]:
                raise
            code, text = describe(exc)
            raise CliError(text, code) from None


@click.group(
    cls=_Group,
    epilog=EXIT_CODES_HELP,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
@click.version_option(__version__, "-V", "--version", prog_name="vsqs")
@click.option(
    "--debug",
    is_flag=True,
    envvar="VSQS_DEBUG",
    help="Show the traceback of an error instead of one line.",
)
def cli(debug: bool) -> None:
    """vsqs: a message queue that is just a directory.

    A QUEUE argument is the queue's directory; any number of processes and hosts may
    use it at once.
    """


for _command in (publish, receive, delete, peek, stats, purge, clean, requeue, redrive, shutdown):
    cli.add_command(_command)
for _command in (create, queues, config, pump, sink, demo, metrics, serve):
    cli.add_command(_command)


# Every command that opens a QUEUE refuses a directory that is not a queue unless told
# `--force`; every command takes `--debug` after its name too.
def _leaves(command: click.Command) -> list[click.Command]:
    """*command*, or the commands of a group, all the way down."""
    if isinstance(command, click.Group):
        return [leaf for sub in command.commands.values() for leaf in _leaves(sub)]
    return [command]


for _command in (publish, receive, delete, peek, stats, purge, clean, requeue, redrive, shutdown,
                 create, config, pump, sink, metrics):  # fmt: skip
    for _leaf in _leaves(_command):
        _leaf.params.append(force_option())
for _leaf in _leaves(cli):
    _leaf.params.append(debug_option())


def main(argv: list[str] | None = None, prog_name: str | None = "vsqs") -> None:
    """The console script: run the command line and exit with its status.

    SIGINT and SIGTERM end every command through its clean-up code, even when SIGINT
    was inherited ignored (a background job): see :func:`~vsqs.cli._common.install_stop_handlers`.
    """
    install_stop_handlers()
    cli.main(args=argv, prog_name=prog_name)
