"""``vsqs receive``: print messages, or run a command per message like xargs."""

from __future__ import annotations

import io
import math
import os
import signal
import subprocess
import sys
import threading
from types import FrameType, TracebackType
from typing import Any, Final

import click

from .. import AnyQueue, LeaseLost, Message, QueueDrained
from ._common import (
    CLOSED,
    EMPTY,
    EXEC_FAILED,
    OK,
    SECONDS,
    CliError,
    Stopped,
    json_line,
    message_json,
    open_queue,
    release,
    stopped_line,
)

_SHELL = "/bin/sh"
_STOP_CODES = (126, 127)  # the command cannot run at all: every later message would fail too
# The signals that stop `receive`: SIGTERM (systemd, docker stop, kill), SIGINT (Ctrl-C)
# and SIGHUP (the terminal went away).
_STOP_SIGNALS: Final = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)

# CMD runs in a process group of its own, so that a signal reaches it exactly once: from
# us (forwarded to the whole group, as a terminal would), not also from the terminal.
_OWN_GROUP: dict[str, Any]
if sys.version_info >= (3, 11):
    _OWN_GROUP = {"process_group": 0}
else:  # pragma: no cover -- the same, before Popen(process_group=) existed
    _OWN_GROUP = {"preexec_fn": os.setpgrp}


class _Signals:
    """What SIGTERM, SIGINT and SIGHUP do while ``receive`` runs.

    While no message is being worked on, a signal stops ``receive`` at once (it raises
    :class:`Stopped`; printed messages not yet deleted are released on the way out).
    While CMD works on a message (``busy``), the signal is passed on to CMD's process
    group and only remembered: ``receive`` waits for CMD to exit, keeps renewing the
    lease meanwhile, settles the message (deleted if CMD exited 0, released otherwise)
    and only then stops. A message is thus never released while CMD may still be
    working on it. Handlers are installed only in the main thread (where Python runs
    them); elsewhere the process's own handling applies.
    """

    def __init__(self) -> None:
        self.signum: int | None = None
        self.busy = False
        self.child: subprocess.Popen[bytes] | None = None
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> _Signals:
        if threading.current_thread() is threading.main_thread():
            for signum in _STOP_SIGNALS:
                self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.signum = signum
        if self.child is not None:
            try:
                os.killpg(self.child.pid, signum)
            except ProcessLookupError:
                pass  # RACE: CMD (and its group) exited just now; we reap it next
            return
        if not self.busy:
            raise Stopped(signum)

    def check(self) -> None:
        """Stop now if a signal arrived while a message was being worked on."""
        if self.signum is not None:
            raise Stopped(self.signum)


def _child_stdout() -> int | None:
    """Our stdout as a file descriptor the command can inherit, or ``None`` to relay it.

    Relaying is for callers that replaced ``sys.stdout`` (click's test runner, an
    embedding program): the command's output then still ends up where ours goes.
    """
    try:
        sys.stdout.flush()
        return sys.stdout.fileno()
    except (AttributeError, ValueError, io.UnsupportedOperation):
        return None


def _run(
    command: str, queue: AnyQueue, message: Message, as_json: bool, signals: _Signals
) -> tuple[int, Message]:
    """Run *command* for *message*, renewing its lease while it runs.

    Returns the exit status and the message under its latest receipt. Every third of
    the visibility timeout the lease is extended by a whole one, so a command may run
    as long as it needs without the message being delivered to someone else. A stop
    signal meanwhile is passed on to CMD (see :class:`_Signals`), and waited out.
    """
    env = {
        **os.environ,
        "VSQS_QUEUE": queue.path,
        "VSQS_MESSAGE_ID": message.id,
        "VSQS_RECEIPT": message.receipt,
        "VSQS_RECEIVE_COUNT": str(message.receive_count),
    }
    data = json_line(message_json(message)) if as_json else message.body
    fd = _child_stdout()
    # Through /bin/sh, as find -exec sh -c / GNU parallel: pipes and $VSQS_* work in CMD.
    # The body only ever travels on stdin, so it can never be interpreted by the shell.
    lease = queue.visibility_timeout if message.expires_at else 0.0
    lease = max(0.0, message.expires_at - queue.clock.time_us() / 1e6) or lease
    beat = max(0.05, lease / 3) if lease else None
    with subprocess.Popen(
        [_SHELL, "-c", command],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE if fd is None else fd,
        env=env,
        **_OWN_GROUP,
    ) as child:
        signals.child = child
        if signals.signum is not None:
            # The signal came between the receive and the start of CMD: CMD still
            # gets it, and stops (or not) as it would have a moment later.
            os.killpg(child.pid, signals.signum)
        pending: bytes | None = data  # input goes with the first call only
        while True:
            try:
                out, _ = child.communicate(pending, timeout=beat)
            except subprocess.TimeoutExpired:
                pending = None
                try:
                    message = queue.change_visibility(message, lease)  # the heartbeat
                except LeaseLost:
                    beat = None  # deleted or taken meanwhile: nothing left to renew
                continue
            break
        signals.child = None
    if fd is None and out:
        click.echo(out, nl=False)
    return child.returncode, message


def _check_limit(value: int | None) -> int | None:
    # 0 meant "no limit" before 1.0: a script's `-n 0` (or `-n "$N"` with N unset to 0)
    # then received and deleted every message. "Every message" is now said with --all.
    if value is not None and value < 1:
        raise click.BadParameter(
            f"{value} is not a number of messages; for every message, give --all (or no -n)"
        )
    return value


def _refuse_conflicts(*, keep: bool, command: str | None, every: bool, limit: int | None) -> None:
    if keep and command:
        raise click.UsageError("--keep and --exec cannot be combined")
    if every and limit is not None:
        raise click.UsageError("-n/--max-messages and --all cannot be combined")


@click.command()
@click.argument("queue", type=click.Path())
@click.option(
    "-n",
    "--max-messages",
    "limit",
    type=int,
    callback=lambda _ctx, _param, value: _check_limit(value),
    help="Stop after N messages (at least 1; without -n, every message: --all).",
)
@click.option(
    "--all",
    "every",
    is_flag=True,
    help="Every message until none is ready (the default; says so explicitly).",
)
@click.option(
    "--wait",
    type=click.FloatRange(min=0),  # 'inf' is allowed: a wait is never in a name
    default=0.0,
    help="Seconds to wait for a message when none is ready (default 0; 'inf' waits until "
    "the queue is shut down and drained).",
)
@click.option("--visibility-timeout", type=SECONDS, help="Lease seconds.")
@click.option(
    "--exec",
    "command",
    metavar="CMD",
    help="Run CMD (with /bin/sh) per message, body on stdin; delete on exit 0, release otherwise.",
)
@click.option("--keep", is_flag=True, help="Print but do not delete (the lease runs out).")
@click.option("--json", "as_json", is_flag=True, help="Write each message as a JSON line.")
def receive(
    *,
    queue: str,
    limit: int | None,
    every: bool,
    wait: float,
    visibility_timeout: float | None,
    command: str | None,
    keep: bool,
    as_json: bool,
) -> None:
    """Receive, print and delete messages, or --exec a command for each.

    Prints each body on a line, then deletes the message.
    A message is deleted only after its body was written; if the output is closed
    (e.g. `| head -1`) the unwritten message is released and vsqs exits quietly.

    With --exec, like xargs for a queue: CMD runs once per message with the body on
    stdin and VSQS_MESSAGE_ID, VSQS_RECEIPT, VSQS_RECEIVE_COUNT and VSQS_QUEUE in its
    environment. Exit status 0 deletes the message; any other status releases it when
    this command ends (so one run does not retry it in a loop). With --json, CMD gets
    the message as JSON on stdin. While CMD runs, its lease is renewed, however long
    CMD takes.

    SIGTERM, SIGINT (Ctrl-C) or SIGHUP while CMD runs is passed on to CMD; vsqs waits
    for CMD to exit, deletes its message if it exited 0 and releases it at once
    otherwise, then exits with 128 + the signal number (143 for SIGTERM).

    \b
      vsqs receive /tmp/jobs -n 10
      vsqs receive /tmp/jobs --wait inf --exec 'convert-one "$(cat)"'
    """
    _refuse_conflicts(keep=keep, command=command, every=every, limit=limit)
    source = open_queue(queue, visibility_timeout=visibility_timeout)
    timeout = None if math.isinf(wait) else wait
    received = 0
    drained = False
    failed: list[Message] = []
    seen: set[str] = set()
    status = OK
    stopped_by = 0
    try:
        with _Signals() as signals:
            while not limit or received < limit:
                want = 1 if command else min(10, limit - received if limit else 10)
                try:
                    batch = source.receive_batch(want, timeout=timeout)
                except QueueDrained:
                    drained = True
                    break
                if not batch:
                    break
                came_back = False
                if keep:
                    # A kept message whose lease ran out comes back: all were printed
                    # once. It stays held, as the printed ones do, until its lease ends.
                    fresh = [message for message in batch if message.id not in seen]
                    came_back = len(fresh) < len(batch)
                    seen.update(message.id for message in fresh)
                    batch = fresh
                received += len(batch)
                if command is None:
                    _print(source, batch, keep=keep, as_json=as_json)
                    if came_back:
                        break
                    continue
                outcome = _exec(
                    command, source, batch[0], as_json=as_json, signals=signals, failed=failed
                )
                status = outcome or status
    except Stopped as stopped:
        stopped_by = stopped.signum
    finally:
        for message in failed:
            release(source, message)
    if stopped_by:
        click.echo(stopped_line(stopped_by), err=True)
        click.get_current_context().exit(128 + stopped_by)
    if status == OK and received == 0:
        status = CLOSED if drained else EMPTY
    click.get_current_context().exit(status)


def _exec(
    command: str,
    queue: AnyQueue,
    message: Message,
    *,
    as_json: bool,
    signals: _Signals,
    failed: list[Message],
) -> int:
    """Run CMD for one held message and settle it; the exit status it calls for (0: none).

    From the receive until the message is settled, a stop signal only marks the stop
    (see :class:`_Signals`): the message is deleted if CMD exited 0 and released at once
    otherwise, and ``receive`` stops after that.
    """
    signals.busy = True
    try:
        code, message = _run(command, queue, message, as_json, signals)
    except BaseException:
        signals.busy = False
        release(queue, message)  # CMD never ran, or was already waited for: give it back
        raise
    try:
        if code == 0:
            if queue.delete(message):
                return OK
            click.echo(
                f"vsqs: the lease of message {message.id} ended while CMD ran; "
                "it will be delivered again",
                err=True,
            )
            return EXEC_FAILED
        if signals.signum is not None:
            release(queue, message)  # stopping: CMD has exited, so give it back now
            return EXEC_FAILED
        failed.append(message)  # released when receive ends, so one run does not loop
        if code in _STOP_CODES:
            what = "not found" if code == 127 else "cannot be executed"
            raise CliError(f"command {what} (exit status {code}): {command}", code)
        click.echo(f"vsqs: CMD exited with status {code} for message {message.id}", err=True)
        return EXEC_FAILED
    finally:
        signals.busy = False
        signals.check()


def _print(queue: AnyQueue, batch: list[Message], *, keep: bool, as_json: bool) -> None:
    """Write each message, deleting it once written; release whatever was not written."""
    pending = list(batch)
    try:
        while pending:
            message = pending[0]
            click.echo(
                json_line(message_json(message)) if as_json else message.body, nl=not as_json
            )
            pending.pop(0)
            if not keep:
                queue.delete(message)
    finally:
        for message in pending:
            release(queue, message)
