"""The processes of one "host": run as ``python -m tests.multihost._workers <role> <json>``.

Each is a real process started through :func:`spawn` (which can put it under
``faketime``); it reports what it did as JSON lines, appended and flushed one by one, so
a report survives the process being killed with SIGKILL.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import vsqs

ROOT = Path(__file__).resolve().parents[2]


def spawn(
    role: str,
    faketime: str | None = None,
    stdout: int | None = None,
    stdin: int | None = None,
    **args: Any,
) -> subprocess.Popen[bytes]:
    """Start one worker; under ``faketime`` with this offset (``"+5s"``) if given."""
    env = dict(os.environ)
    command = [sys.executable, "-m", "tests.multihost._workers", role, json.dumps(args)]
    if faketime is not None:
        # libfaketime shifts the monotonic clock too (with it left alone, sleeps fail
        # with EINVAL), and a lock or condition wait with a timeout never returns under
        # it: the workers use neither; moments across hosts are taken by the test.
        command = ["faketime", "-f", faketime, *command]
    return subprocess.Popen(command, cwd=ROOT, env=env, stdout=stdout, stdin=stdin)


def _report(path: str, record: list[Any]) -> None:
    with open(path, "a", encoding="utf-8") as out:
        out.write(json.dumps(record) + "\n")


def read_report(path: Path) -> list[list[Any]]:
    """The records of a report; a line cut short by a kill is left out."""
    if not path.exists():
        return []
    records = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return records


def publish(
    *,
    queue: str,
    name: str,
    count: int,
    report: str,
    options: dict[str, Any],
    dedup: bool = False,
    pause: float = 0.0,
    groups: int = 0,
) -> None:
    """Publish ``<name>:<n>`` for n in range(count); report ``[n, id]`` or ``[n, error]``.
    With *groups*, message *n* goes to the group ``<name>.<n % groups>``."""
    q = vsqs.Queue(queue, **options)
    for n in range(count):
        try:
            message_id = q.publish(
                f"{name}:{n}".encode(),
                dedup_id=f"{name}:{n}" if dedup else None,
                group=f"{name}.{n % groups}" if groups else None,
            )
        except Exception as exc:  # noqa: BLE001 - every failure is reported, then judged
            _report(report, [n, f"error: {exc!r}"])
        else:
            _report(report, [n, message_id])
        if pause:
            time.sleep(pause)


def consume(
    *,
    queue: str,
    name: str,
    report: str,
    stop: str,
    options: dict[str, Any],
    idle: float = 1.5,
    hold: float = 0.0,
) -> None:
    """Receive and delete until *stop* exists and nothing came for *idle* seconds.

    Reports ``[body, id, receive_count]`` per message, *before* deleting it (a kill
    between the two is then a redelivery the test can recognise). With *hold*, sleeps
    that long holding each message before deleting it.
    """
    q = vsqs.Queue(queue, **options)
    last = time.monotonic()
    while True:
        message = q.receive(timeout=0.2)
        if message is None:
            if os.path.exists(stop) and time.monotonic() - last > idle:
                return
            continue
        last = time.monotonic()
        _report(report, [message.body.decode(), message.id, message.receive_count])
        if hold:
            time.sleep(hold)
        q.delete(message)


def consume_in_turn(
    *, queue: str, report: str, stop: str, options: dict[str, Any], hold: float, idle: float = 1.5
) -> None:
    """As :func:`consume`, for checking one in flight per group: holds each message *hold*
    seconds, then reports ``[body, group, got, released]`` and deletes it, where *got*
    (right after the receive) and *released* (right before the delete) are read from
    ``time.monotonic()``, one clock for every process of this machine."""
    q = vsqs.Queue(queue, **options)
    last = time.monotonic()
    while True:
        message = q.receive(timeout=0.2)
        got = time.monotonic()
        if message is None:
            if os.path.exists(stop) and got - last > idle:
                return
            continue
        time.sleep(hold)
        last = time.monotonic()
        _report(report, [message.body.decode(), message.group, got, last])
        assert q.delete(message), f"lost the lease of {message.body!r}"


def wake(*, queue: str, report: str, options: dict[str, Any], count: int) -> None:
    """Block in receive *count* times; report when each message came (time.time())."""
    q = vsqs.Queue(queue, **options)
    print("ready", flush=True)
    for _ in range(count):
        message = q.receive(timeout=30)
        assert message is not None, "no message within 30 s"
        _report(report, [message.body.decode(), time.time()])
        q.delete(message)


def hold(*, queue: str, report: str, options: dict[str, Any]) -> None:
    """Claim one message, report it, and exit holding it (as if the host died)."""
    q = vsqs.Queue(queue, **options)
    message = q.receive(timeout=0)
    assert message is not None, "no message ready"
    _report(report, [message.body.decode(), message.receipt])


def stream(*, queue: str, report: str) -> None:
    """Publish one message from stdin, which the test never closes: dies mid-write."""
    q = vsqs.Queue(queue)
    _report(report, ["streaming"])
    q.publish_stream(sys.stdin.buffer, chunk_size=64)
    _report(report, ["published"])


ROLES: dict[str, Callable[..., None]] = {
    "publish": publish,
    "consume": consume,
    "consume_in_turn": consume_in_turn,
    "wake": wake,
    "hold": hold,
    "stream": stream,
}

if __name__ == "__main__":
    ROLES[sys.argv[1]](**json.loads(sys.argv[2]))
