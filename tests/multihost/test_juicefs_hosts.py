"""Whole hosts on JuiceFS: ``vsqs serve`` on each, and a host whose filesystem client dies.

The three mounts of :mod:`.test_juicefs` are three hosts; a fourth mount, made for the
test, is the host that dies: its ``juicefs mount`` process (supervisor and FUSE server)
gets SIGKILL in the middle of the run, so its processes see ``ENOTCONN`` and its session
(with any ``flock`` it held) lingers in Redis until another client expires it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import vsqs
from tests.serve.clients import boto3_client, served
from vsqs import _fs
from vsqs.testing import assert_consistent

from ._juicefs import JuiceRig
from ._runs import (
    check_after_death,
    finish_survivors,
    start_dying_host,
    start_survivors,
    wait_until_dying_host_holds,
)

LEASE = 3.0
SESSION_EXPIRY = 5.0  # JuiceFS expires a silent session after 5 heartbeats (1 s here)


def test_serve_on_every_host_exactly_once(
    juicefs_hosts: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    """A ``vsqs serve`` per host on one root: boto3 sends 300 messages through host A's
    server and receives through B's and C's at once, two clients each: each message
    received once, each delete accepted."""
    roots = [path.parent / f"root-{path.name}" for path in juicefs_hosts]
    roots[0].mkdir()
    with served(roots[0]) as a, served(roots[1]) as b, served(roots[2]) as c:
        sender = boto3_client(a.url)
        sender.create_queue(QueueName="jobs", Attributes={"VisibilityTimeout": "60"})
        url = sender.get_queue_url(QueueName="jobs")["QueueUrl"]
        for batch in range(30):
            sender.send_message_batch(
                QueueUrl=url,
                Entries=[{"Id": str(n), "MessageBody": f"m{batch * 10 + n}"} for n in range(10)],
            )
        got: dict[str, list[str]] = {}
        errors: list[BaseException] = []

        def drain(server_url: str, who: str) -> None:
            try:
                sqs = boto3_client(server_url)
                queue = sqs.get_queue_url(QueueName="jobs")["QueueUrl"]
                mine = got.setdefault(who, [])
                empty = 0
                while empty < 3:
                    answer = sqs.receive_message(
                        QueueUrl=queue, MaxNumberOfMessages=10, WaitTimeSeconds=1
                    )
                    messages: list[dict[str, Any]] = answer.get("Messages", [])
                    empty = 0 if messages else empty + 1
                    for message in messages:
                        mine.append(message["Body"])
                        sqs.delete_message(QueueUrl=queue, ReceiptHandle=message["ReceiptHandle"])
            except BaseException as exc:  # noqa: BLE001 - reported by the test below
                errors.append(exc)

        threads = [
            threading.Thread(target=drain, args=(server.url, f"{name}{k}"))
            for name, server in (("b", b), ("c", c))
            for k in range(2)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
    assert errors == []
    bodies = Counter(body for mine in got.values() for body in mine)
    assert set(bodies) == {f"m{n}" for n in range(300)}
    assert [body for body, n in bodies.items() if n > 1] == []
    assert all(got[f"{host}0"] + got[f"{host}1"] for host in "bc")  # both servers served
    with vsqs.Queue(roots[0] / "jobs") as queue:
        assert_consistent(queue)
    assert sorted(p.name for p in (roots[0] / "jobs").iterdir() if p.name != ".vsqs") == []


def test_a_host_whose_client_is_killed_loses_nothing_acknowledged(
    juicefs_rig: JuiceRig, juicefs_hosts: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    """Host D publishes and consumes (its consumers hold what they got) beside A and B;
    its JuiceFS client gets SIGKILL. A and B go on; every publish D was told succeeded is
    received; what D held comes back once after its lease; nothing else twice."""
    a, b, _ = juicefs_hosts
    name = a.name
    dying = juicefs_rig.mount(f"dying-{name}")
    vsqs.Queue(a).close()
    doomed = start_dying_host(dying / name, tmp_path, LEASE)
    stop = tmp_path / "stop"
    publishers, consumers = start_survivors([("a", a), ("b", b)], tmp_path, stop, LEASE)
    wait_until_dying_host_holds(tmp_path, published=5)  # then its client dies
    juicefs_rig.kill(dying)  # its filesystem client dies, its processes go on a moment
    time.sleep(0.5)
    for proc in doomed:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    finish_survivors(publishers, consumers, stop)

    told, dead = check_after_death(tmp_path, "ab")
    assert len(told) >= 5
    assert len(dead) == 2
    with vsqs.Queue(a) as queue:
        queue.clean(older_than=0)  # what D was writing when its client died
        assert_consistent(queue)
    assert sorted(p.name for p in a.iterdir() if p.name != ".vsqs") == []


def test_a_fifo_lock_held_by_a_killed_client_is_released_with_its_session(
    juicefs_rig: JuiceRig, juicefs_hosts: tuple[Path, Path, Path]
) -> None:
    """A host's client dies while a process of it holds a ``fifo`` partition's lock: the
    partition delivers nothing until JuiceFS expires that client's session (5
    heartbeats), then delivers again, from any host."""
    a, b, _ = juicefs_hosts
    dying = juicefs_rig.mount(f"dying-{a.name}")
    with vsqs.Queue(a, fifo=True, partitions=1, durable=False) as queue:
        queue.publish(b"after the lock", group="g")
    lock = os.open(dying / a.name / ".vsqs" / "fifo.lock", os.O_RDWR | os.O_CREAT)
    assert _fs.try_lock(lock)  # as a consumer of host D in the middle of a claim
    juicefs_rig.kill(dying)
    began = time.monotonic()
    with vsqs.Queue(b, durable=False) as queue:
        message = queue.receive(timeout=60)
        waited = time.monotonic() - began
        assert message is not None
        assert message.body == b"after the lock"
        assert queue.delete(message)
    assert SESSION_EXPIRY - 2 < waited < SESSION_EXPIRY + 20
    with contextlib.suppress(OSError):  # ENOTCONN: its client is gone
        os.close(lock)
