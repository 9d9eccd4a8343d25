"""What every ``vsqs`` command shares: exit codes, opening queues, output and progress.

Imported only by :mod:`vsqs.cli` (the ``cli`` extra), never by ``import vsqs``.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any, Final

import click

from .. import (
    MAX_DURATION,
    AnyQueue,
    InvalidSettings,
    LeaseLost,
    Message,
    Queue,
    QueueClosed,
    QueueDrained,
    QueueFull,
    VsqsError,
    _userfiles,
    foreign_entry,
)

# The documented exit codes (the epilog of `vsqs --help` and docs/guides/cli.rst).
OK: Final = 0
ERROR: Final = 1
USAGE: Final = 2  # click's own code for usage errors
EMPTY: Final = 3  # nothing received / ready in the time allowed; a full queue timed out
CLOSED: Final = 4  # publish to a closed queue, receive from a closed and drained one
EXEC_FAILED: Final = 5  # receive --exec: a command failed or a message could not be acked
INTERRUPTED: Final = 130  # Ctrl-C, as a shell reports SIGINT

DEBUG: Final = "vsqs.debug"
"""The key in ``click.Context.meta`` (shared by every nested context) that ``--debug``
after a command sets."""
_FORCE: Final = "vsqs.force"
_LITERAL: Final = re.compile(r"``(.+?)``")

SECONDS: Final = click.FloatRange(min=0, max=MAX_DURATION)
"""A duration option: what the API accepts (:data:`vsqs.MAX_DURATION` at most)."""

EXIT_CODES_HELP: Final = f"""\b
Exit codes:
  {OK}    success
  {ERROR}    error (no queue at the path, a lost lease, an I/O error, ...)
  {USAGE}    usage error (bad option, queue name or receipt)
  {EMPTY}    nothing to receive or peek within --wait; a full queue timed out
  {CLOSED}    the queue is closed (publish) or closed and drained (receive)
  {EXEC_FAILED}    receive --exec: a command failed; its message was released
  126  receive --exec: the command cannot be executed
  127  receive --exec: the command was not found
  {INTERRUPTED}  interrupted (Ctrl-C)
  143  stopped by SIGTERM (in general 128 + the signal number)
\b
Run with --debug (or VSQS_DEBUG=1) to see the traceback of an error.
Shell completion: eval "$(_VSQS_COMPLETE=bash_source vsqs)" (zsh_source, fish_source)."""


# The signals that stop a command cleanly (SIGINT: Ctrl-C; SIGTERM: kill, systemd, docker).
STOP_SIGNALS: Final = (signal.SIGINT, signal.SIGTERM)
# How long a publish to a bounded queue waits for room between two looks at a stop signal.
_ROOM_SLICE: Final = 0.25


class Stopped(BaseException):
    """A stop signal arrived (SIGTERM; during ``receive``, SIGINT and SIGHUP too): the
    command ends, cleaning up on the way.

    A ``BaseException``, as :class:`KeyboardInterrupt` is, so that no ``except
    Exception`` on the way swallows it. The command line exits ``128 + signum``.
    """

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def stopped_line(signum: int) -> str:
    """The one line printed when a signal stops a command."""
    if signum == signal.SIGINT:
        return "vsqs: interrupted"
    return f"vsqs: stopped by {signal.Signals(signum).name}"


def _raise_stopped(signum: int, frame: FrameType | None) -> None:
    raise Stopped(signum)


def install_stop_handlers() -> None:
    """Make SIGINT and SIGTERM end every command through its clean-up code.

    A shell starts a background job (``cmd &``, ``nohup cmd &``) with SIGINT ignored,
    and a process inherits that: ``vsqs metrics serve`` then ignored Ctrl-C and the
    ``kill -INT`` of a test harness for ever. So SIGINT always raises
    :class:`KeyboardInterrupt` here. SIGTERM, whose default kills the process on the
    spot (a server left listening, a receive's message held until its lease ends),
    raises :class:`Stopped` instead, unless it was deliberately ignored. Only the main
    thread can install handlers (an embedding program calling ``main`` from another
    thread keeps its own).
    """
    if threading.current_thread() is not threading.main_thread():
        return
    signal.signal(signal.SIGINT, signal.default_int_handler)
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _raise_stopped)


@contextlib.contextmanager
def stops_deferred() -> Iterator[None]:
    """Hold SIGINT and SIGTERM back while the block runs; they take effect after it.

    A signal handler's exception lands between two bytecodes, and one that lands just
    after the ``open`` that created a ``<id>.new`` and before the code that removes it on
    failure leaves the file behind (Ctrl-C during ``vsqs pump`` did so in 3 tries out of
    4: most of a publish is spent in that ``open``). Meanwhile a signal is only noted,
    and delivered again, to the usual handler, once the block is over. (Python runs
    handlers in the main thread whichever thread the kernel picked, so this holds with
    other threads running, where masking the signal in this thread would not.) Main
    thread only; elsewhere, or under a handler Python did not install, a no-op.
    """
    handlers = {signum: signal.getsignal(signum) for signum in STOP_SIGNALS}
    if threading.current_thread() is not threading.main_thread() or None in handlers.values():
        yield
        return
    caught: list[int] = []

    def note(signum: int, frame: FrameType | None) -> None:
        caught.append(signum)

    try:
        for signum in STOP_SIGNALS:
            signal.signal(signum, note)
        yield
    finally:
        for signum, handler in handlers.items():
            signal.signal(signum, handler)
        if caught:
            signal.raise_signal(caught[0])  # the usual handler runs now


def publish_batch(
    queue: AnyQueue, bodies: list[bytes], *, timeout: float | None = None, **options: Any
) -> list[str]:
    """:meth:`Queue.publish_batch` with stop signals held back while it writes.

    A batch is written whole or not at all when Ctrl-C comes (see :func:`stops_deferred`).
    On a bounded queue (its capacity given or stored), the wait for room is cut into
    short waits with the signals let through between them, so a full queue never makes
    the command deaf to Ctrl-C; *timeout* (``None``: for ever) bounds the whole wait.
    """
    if queue.config.capacity is None:
        with stops_deferred():
            return queue.publish_batch(bodies, timeout=timeout, **options)
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        left = _ROOM_SLICE if deadline is None else max(0.0, deadline - time.monotonic())
        try:
            with stops_deferred():
                return queue.publish_batch(bodies, timeout=min(left, _ROOM_SLICE), **options)
        except QueueFull:
            if deadline is not None and time.monotonic() >= deadline:
                raise


class CliError(click.ClickException):
    """A one-line error with its exit code; click prints it as ``Error: <message>``."""

    def __init__(self, message: str, exit_code: int = ERROR) -> None:
        super().__init__(plain(message))
        # click declares exit_code a class variable; an instance value overrides it fine.
        self.exit_code = exit_code  # type: ignore[misc]

    def show(self, file: Any = None) -> None:
        click.echo(f"vsqs: {self.format_message()}", err=True)


def describe(exc: BaseException) -> tuple[int, str]:
    """The exit code and one-line message for an error that ended a command."""
    if isinstance(exc, (QueueClosed, QueueDrained)):
        return CLOSED, str(exc)
    if isinstance(exc, QueueFull):
        return EMPTY, str(exc)
    if isinstance(exc, VsqsError):
        # InvalidId, InvalidName, InvalidAttributes: a bad argument; but a stored file
        # that cannot be used is the queue's fault, not the command line's.
        bad_argument = isinstance(exc, ValueError) and not isinstance(exc, InvalidSettings)
        return (USAGE if bad_argument else ERROR), _with_hint(exc)
    if isinstance(exc, OSError) and exc.strerror:
        where = f": {exc.filename}" if exc.filename else ""
        return ERROR, f"{exc.strerror}{where}"
    return ERROR, f"{type(exc).__name__}: {exc} (run with --debug for the traceback)"


def _with_hint(exc: VsqsError) -> str:
    """The error's text, with how to repair a queue's unusable settings file."""
    if not isinstance(exc, InvalidSettings):
        return str(exc)
    queue = os.path.dirname(os.path.dirname(exc.path))  # <queue>/.vsqs/settings.json
    return (
        f"{exc}; fix the file, or move it aside (back to the defaults) with:"
        f" vsqs config {queue} --reset"
    )


def queue_options(**options: Any) -> dict[str, Any]:
    """Drop unset (``None``) options so that :class:`Queue` keeps its own defaults."""
    return {key: value for key, value in options.items() if value is not None}


def open_queue(path: str, *, create: bool = False, **options: Any) -> AnyQueue:
    """Open the queue at *path*, detached when the command ends.

    Only commands that publish may *create* the directory: a typo in the path of
    ``stats`` or ``receive`` must be an error, not a new empty queue. A directory that
    is not a queue (:func:`not_a_queue`) is refused unless the command was given
    ``--force``.
    """
    if not path or "\0" in path:
        raise click.BadParameter(f"{path!r} is not a queue path", param_hint="QUEUE")
    if not create and not _userfiles.names_anything(path):
        raise CliError(f"no queue at {path}")
    context = click.get_current_context()
    why = None if context.meta.get(_FORCE) else not_a_queue(path)
    if why is not None:
        raise CliError(why)
    try:
        queue = Queue(path, **queue_options(**options))
    except InvalidSettings:
        raise  # the stored file is at fault, not the command line (see describe)
    except (TypeError, ValueError) as exc:
        if isinstance(exc, VsqsError):
            raise
        raise click.UsageError(plain(str(exc))) from None  # an option the queue refuses
    context.with_resource(queue)
    return queue


def release(queue: AnyQueue, message: Message) -> None:
    """Make a held message visible again now (its lease may already have ended)."""
    try:
        queue.change_visibility(message, 0)
    except LeaseLost:
        pass  # RACE: its lease ran out and the queue or another consumer took it back


def message_json(message: Message) -> dict[str, Any]:
    """A message as a JSON object; a body that is not UTF-8 is given in base64."""
    data: dict[str, Any] = {"id": message.id, "receipt": message.receipt}
    try:
        data["body"] = message.body.decode()
    except UnicodeDecodeError:
        data["body_base64"] = base64.b64encode(message.body).decode()
    data["receive_count"] = message.receive_count
    data["sent_at"] = message.sent_at
    if message.expires_at:
        data["expires_at"] = message.expires_at
    data["attributes"] = dict(message.attributes)
    if message.group is not None:
        data["group"] = message.group
    return data


def json_line(data: object) -> bytes:
    return json.dumps(data, ensure_ascii=False, sort_keys=False).encode() + b"\n"


def stdout_is_terminal() -> bool:
    return sys.stdout.isatty()


@contextlib.contextmanager
def progress(
    description: str, total: float | None, *, show: bool
) -> Iterator[Callable[[float], None]]:
    """Yield an ``advance(n)`` callable that drives a rich progress bar, if *show*.

    Callers pass ``show=stdout_is_terminal()`` (and not ``--quiet``): progress is for a
    person watching, and would be noise in a pipe or a log file.
    """
    if not show:
        yield lambda amount: None
        return
    from rich.progress import (  # noqa: PLC0415 -- rich costs ~60 ms; load it when drawn
        BarColumn,
        MofNCompleteColumn,
        Progress,
        SpinnerColumn,
        TextColumn,
        TimeElapsedColumn,
    )

    with Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn() if total is not None else TextColumn("{task.completed:,.0f}"),
        TimeElapsedColumn(),
        transient=True,
    ) as bar:
        task = bar.add_task(description, total=total)
        yield lambda amount: bar.advance(task, amount)


def plain(text: str) -> str:
    """*text* with its reST literals (in double backquotes) in single backquotes, as
    in `vsqs redrive`: library errors are written for the docs, and a terminal would
    show the markup as is."""
    return _LITERAL.sub(r"`\1`", text)


def not_a_queue(path: str) -> str | None:
    """Why the existing directory *path* does not look like a queue, or ``None``
    (:func:`vsqs.foreign_entry` finds a name no queue holds). The library opens any
    directory, as VSQS does; the command line refuses such a one, unless told
    ``--force``, before a ``receive`` renames a user's file named ``123``.
    """
    name = foreign_entry(path)
    if name is None:
        return None
    return (
        f"{path} is not a queue: it has no vsqs metadata and holds {name!r}, which is not"
        " a message; pass --force to use it as a queue anyway"
    )


def _set_force(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    ctx.meta[_FORCE] = value


def _set_debug(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value:  # given after the command; `vsqs --debug CMD` sets the group's own
        ctx.meta[DEBUG] = True


def force_option() -> click.Option:
    """``--force``, for a command that opens a QUEUE: see :func:`not_a_queue`."""
    return _meta_flag(
        "--force",
        _set_force,
        "Use a directory that is not a queue (no vsqs metadata, files that are not messages).",
    )


def debug_option() -> click.Option:
    """``--debug`` after the command, as ``vsqs --debug`` before it."""
    return _meta_flag("--debug", _set_debug, "Show the traceback of an error instead of one line.")


def _meta_flag(
    name: str, callback: Callable[[click.Context, click.Parameter, bool], None], text: str
) -> click.Option:
    """A flag that the command's function never sees: *callback* notes it in the
    context's ``meta`` (shared by the group and the command)."""
    return click.Option([name], is_flag=True, expose_value=False, callback=callback, help=text)
