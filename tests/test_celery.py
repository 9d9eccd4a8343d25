"""A stock Celery worker on vsqs (the kombu transport in vsqs.kombu), in real subprocesses.

Each test starts real ``celery worker`` processes on a vsqs root and talks to them with
a Celery app in this process, as a user's code would. Results go through Celery's
file-system result backend (``file://``), which needs no server.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from celery import Celery

import vsqs

from .celery_app import make_app
from .celery_workers import REPO, Worker, celery_env, workers

pytestmark = pytest.mark.timeout(240)


_APPS: list[Celery] = []


@pytest.fixture(autouse=True)
def _close_apps() -> Iterator[None]:
    """Close each test's app connections (and so their queue-watching threads)."""
    yield
    while _APPS:
        _APPS.pop().pool.force_close_all()


def _app(root: Path, vt: float = 30.0, durable: bool = True) -> Celery:
    made = make_app(f"vsqs://{root}", str(root), vt=vt, durable=durable)
    _APPS.append(made)
    return made


def _starts(marker_dir: Path) -> list[str]:
    return sorted(p.name for p in marker_dir.iterdir() if p.name.startswith("start-"))


def _wait_for(predicate: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def _stopped_cleanly(started: list[Worker]) -> None:
    """Each worker's warm shutdown ended with status 0 and logged no traceback (a
    thread per queue used to print ``Exception in thread vsqs-kombu-watch`` there)."""
    for worker in started:
        log = worker.log.read_text(errors="replace")
        assert "Traceback" not in log and "Exception in thread" not in log, log[-3000:]
        assert worker.process.returncode == 0, log[-3000:]


def test_a_thousand_tasks_with_results(tmp_path: Path) -> None:
    """1,000 tasks through two prefork workers; every result comes back, nothing is left;
    both workers stop cleanly."""
    root = tmp_path / "root"
    env = celery_env(f"vsqs://{root}", root, CELERY_TEST_DURABLE="0")
    app = _app(root, durable=False)
    with workers(env, tmp_path, "w1", "w2", args=("--concurrency", "2")) as started:
        results = [app.send_task("tests.celery_app.add", args=(n, n)) for n in range(1000)]
        assert [r.get(timeout=120) for r in results] == [2 * n for n in range(1000)]
    _stopped_cleanly(started)
    app.pool.force_close_all()  # closes the producer's channel, which flushes its counters
    tasks = vsqs.QueueRoot(root).get("celery")
    assert tasks.counts().total == 0
    stats = tasks.stats()  # both workers closed their channels at their warm shutdown
    assert (stats.produced_messages, stats.consumed_messages) == (1000, 1000)


def test_a_worker_killed_mid_task_has_its_task_run_by_another(tmp_path: Path) -> None:
    """acks_late + SIGKILL of the whole worker: the held message comes back after the
    visibility timeout and the second worker runs the task to completion."""
    root = tmp_path / "root"
    markers = tmp_path / "markers"
    markers.mkdir()
    env = celery_env(f"vsqs://{root}", root, CELERY_TEST_VT="2")
    app = _app(root, vt=2.0)
    with workers(env, tmp_path, "doomed") as (doomed,):
        result = app.send_task("tests.celery_app.slow", args=(str(markers), 3.0))
        _wait_for(lambda: _starts(markers), 60, "the first start")
        doomed.kill()
    assert vsqs.QueueRoot(root).get("celery").counts().held == 1  # held by the dead worker
    with workers(env, tmp_path, "rescuer"):
        pid = result.get(timeout=60)
    starts = _starts(markers)
    assert len(starts) == 2 and f"start-{pid}" in starts
    assert vsqs.QueueRoot(root).get("celery").counts().total == 0


def test_a_task_longer_than_the_visibility_timeout_runs_once(tmp_path: Path) -> None:
    """The lease renews itself while the task runs: a second worker never gets it."""
    root = tmp_path / "root"
    markers = tmp_path / "markers"
    markers.mkdir()
    env = celery_env(f"vsqs://{root}", root, CELERY_TEST_VT="1")
    app = _app(root, vt=1.0)
    with workers(env, tmp_path, "w1", "w2"):
        result = app.send_task("tests.celery_app.slow", args=(str(markers), 4.0))
        result.get(timeout=60)
    assert len(_starts(markers)) == 1


def test_celery_inspect_ping_answers(tmp_path: Path) -> None:
    """``celery inspect ping``: remote control over the fanout exchange, replies routed
    to the client's reply queue through the bindings shared on disk."""
    root = tmp_path / "root"
    env = celery_env(f"vsqs://{root}", root)
    with workers(env, tmp_path, "w1", "w2") as started:
        done = subprocess.run(
            [sys.executable, "-m", "celery", "-A", "tests.celery_app", "inspect", "ping",
             "--timeout", "5"],
            check=False, env=env, cwd=REPO, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("pong") == 2
    assert "w1@" in done.stdout and "w2@" in done.stdout
    _stopped_cleanly(started)


def test_a_broadcast_reaches_every_worker(tmp_path: Path) -> None:
    """A broadcast (fanout) command runs once on each of three workers."""
    root = tmp_path / "root"
    seen = tmp_path / "seen"
    seen.mkdir()
    env = celery_env(f"vsqs://{root}", root)
    app = _app(root)
    with workers(env, tmp_path, "w1", "w2", "w3") as started:
        replies = app.control.broadcast(
            "touch", arguments={"path": str(seen)}, reply=True, timeout=5, limit=3
        )
        hostnames = sorted(next(iter(reply)) for reply in replies)
        assert len(hostnames) == 3
        assert sorted(os.listdir(seen)) == hostnames
        assert {name.split("@")[0] for name in hostnames} == {w.name for w in started}
    _stopped_cleanly(started)


def test_a_poison_message_does_not_stop_a_worker(tmp_path: Path) -> None:
    """A body that is not kombu's (anyone who can write to the root can plant one) is
    set aside in ``celery.poison``, logged once; the worker keeps going and the 20 tasks
    behind it run (issue 26, item 1: a stock worker used to exit with JSONDecodeError)."""
    root = tmp_path / "root"
    env = celery_env(f"vsqs://{root}", root, CELERY_TEST_DURABLE="0")
    app = _app(root, durable=False)
    vsqs.QueueRoot(root).create("celery").publish(b"garbage")
    results = [app.send_task("tests.celery_app.add", args=(n, 1)) for n in range(20)]
    with workers(env, tmp_path, "w1") as (worker,):
        assert [r.get(timeout=60) for r in results] == [n + 1 for n in range(20)]
        assert worker.process.poll() is None
    log = worker.log.read_text()
    assert "Unrecoverable error" not in log
    (line,) = [line for line in log.splitlines() if "not a kombu message" in line]
    assert str(root / "celery.poison") in line
    assert [m.body for m in vsqs.QueueRoot(root).get("celery.poison").browse()] == [b"garbage"]
    assert vsqs.QueueRoot(root).get("celery").counts().total == 0


def test_an_expired_task_never_reaches_the_worker(tmp_path: Path) -> None:
    """``expires=`` already past when the worker looks: the transport drops the message
    (Celery would otherwise receive it and record it REVOKED); the task after it runs."""
    root = tmp_path / "root"
    env = celery_env(f"vsqs://{root}", root, CELERY_TEST_DURABLE="0")
    app = _app(root, durable=False)
    expired = app.send_task("tests.celery_app.add", args=(1, 1), expires=0.0)
    fine = app.send_task("tests.celery_app.add", args=(2, 2), expires=3600.0)
    with workers(env, tmp_path, "w1"):
        assert fine.get(timeout=60) == 4
    assert expired.state == "PENDING"  # never received: no result of any kind
    assert vsqs.QueueRoot(root).get("celery").counts().total == 0


def test_groups_on_a_partitioned_fifo_queue_run_in_order(tmp_path: Path) -> None:
    """The task queue is partitioned (4) with ``fifo=True``; tasks sent with Celery's
    ``MessageGroupId`` option (kombu's SQS name) by two prefork workers of two processes
    each: every task runs once, and each group's tasks run one at a time, in order."""
    root = tmp_path / "root"
    vsqs.QueueRoot(root).create("celery", partitions=4, fifo=True)
    out = tmp_path / "out"
    out.mkdir()
    env = celery_env(f"vsqs://{root}", root, CELERY_TEST_DURABLE="0")
    app = _app(root, durable=False)
    groups = [f"customer-{n}" for n in range(6)]
    with workers(env, tmp_path, "w1", "w2", args=("--concurrency", "2")) as started:
        results = [
            app.send_task(
                "tests.celery_app.record",
                args=(str(out / group), str(n), 0.01),
                MessageGroupId=group,
            )
            for n in range(15)
            for group in groups
        ]
        for result in results:
            result.get(timeout=120)
    _stopped_cleanly(started)
    for group in groups:
        lines = (out / group).read_text().split()
        assert lines == [str(n) for n in range(15)], group
    assert vsqs.QueueRoot(root).get("celery").counts().total == 0
