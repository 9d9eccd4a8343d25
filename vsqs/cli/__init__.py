"""The ``vsqs`` command (the ``cli`` extra: click and rich).

Every command takes queue *paths*; only ``publish`` and ``pump`` create a missing queue
directory, so a typo in ``vsqs stats /tmp/jbos`` is an error rather than a new queue.
Errors are one line on stderr with a documented exit status (see
:data:`~vsqs.cli._common.EXIT_CODES_HELP`); ``--debug`` shows the traceback instead.

``import vsqs`` never imports this module, click or rich.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any, Final

import click

from .. import __version__, _userfiles
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

__all__ = ["cli", "main"]

# Each command's module, imported when the command is run or listed: `vsqs publish`
# never loads the server (`serve`), the metrics extra or the dashboard.
_COMMANDS: Final = {
    "clean": "_admin",
    "config": "_config",
    "create": "_admin",
    "delete": "_messages",
    "demo": "_load",
    "metrics": "_metrics",
    "peek": "_messages",
    "publish": "_messages",
    "pump": "_load",
    "purge": "_admin",
    "queues": "_admin",
    "receive": "_receive",
    "redrive": "_admin",
    "requeue": "_admin",
    "serve": "_serve",
    "shutdown": "_admin",
    "sink": "_load",
    "stats": "_admin",
}
# The commands that open a QUEUE: each refuses a directory that is not a queue unless told
# `--force`. Every command takes `--debug` after its name too.
_FORCED: Final = frozenset(_COMMANDS) - {"demo", "queues", "serve"}


def _silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's last flush cannot fail again."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, ValueError, OSError):
        return  # a replaced sys.stdout (click's test runner): nothing will flush to a pipe
    _userfiles.silence(fd)


class _Group(click.Group):
    """Maps every error of a command to one line on stderr and an exit status; loads
    each command's module when the command is first needed (:data:`_COMMANDS`)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *_COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in _COMMANDS:
            module = importlib.import_module(f"{__name__}.{_COMMANDS[cmd_name]}")
            command: click.Command = getattr(module, cmd_name)
            for leaf in _leaves(command):
                if cmd_name in _FORCED:
                    leaf.params.append(force_option())
                leaf.params.append(debug_option())
            self.add_command(command)
        return super().get_command(ctx, cmd_name)

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


def _leaves(command: click.Command) -> list[click.Command]:
    """*command*, or the commands of a group, all the way down."""
    if isinstance(command, click.Group):
        return [leaf for sub in command.commands.values() for leaf in _leaves(sub)]
    return [command]


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


def main(argv: list[str] | None = None, prog_name: str | None = "vsqs") -> None:
    """The console script: run the command line and exit with its status.

    SIGINT and SIGTERM end every command through its clean-up code, even when SIGINT
    was inherited ignored (a background job): see :func:`~vsqs.cli._common.install_stop_handlers`.
    """
    install_stop_handlers()
    cli.main(args=argv, prog_name=prog_name)
