"""A process killed before or after *any* filesystem call of a transition loses nothing.

For each transition, a child process first runs it once to record its ``vsqs._fs`` calls;
then, for every call *k*, a fresh queue is prepared, and a child runs the transition and
dies (``os._exit``, no cleanup) right before, or right after, call *k*. The parent checks
the directory it left: no partial message visible, the receipt still works or reports
``LeaseLost``, and after the upkeep (``requeue_expired``, ``clean(older_than=0)``) the
queue is consistent and holds exactly the messages it must.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import vsqs
from vsqs._ids import State, parse_name
from vsqs.testing import assert_consistent, drain

from ._harness import forkserver
from ._killpoints import ACTIONS, BATCH, BODY, KILLED, child, open_queue

PUBLISHES = ("publish", "publish_nondurable", "publish_attributes", "publish_delayed")
RECEIPT_USERS = ("delete", "change_visibility", "release", "requeue", "dead_letter")
CHUNKS = ("chunk_publish", "chunk_publish_clean")
KNOWN_BODIES = {BODY, *BATCH}


def _prepare(root: Path, scenario: str, now: float) -> str:
    """A fresh queue in the state the transition starts from; the receipt it needs."""
    q = open_queue(root, scenario, now)
    if scenario in (*PUBLISHES, *CHUNKS, "publish_batch", "dedup_publish"):
        return ""
    # Attributes give the message metadata, so every transition also updates `.vsqs/`.
    q.publish(BODY, attributes={"a": "b"})
    if scenario == "receive":
        return ""
    message = q.receive(timeout=0)
    assert message is not None
    return message.receipt


def _run(scenario: str, root: Path, now: float, receipt: str, *, k: int, after: bool) -> int:
    process = forkserver().Process(
        target=child,
        args=(scenario, str(root), now, receipt),
        kwargs={"k": k, "after": after},
        daemon=True,
    )
    process.start()
    process.join(timeout=120)
    assert process.exitcode is not None, f"{scenario}: the child hung at call {k}"
    return process.exitcode


def _commit_calls(calls: list[list[str]]) -> list[int]:
    """1-based indexes of the renames that made a message visible in the queue."""
    return [
        index
        for index, (name, *args) in enumerate(calls, 1)
        if name == "rename_noreplace"
        and args[0].endswith(".new")
        and not args[1].endswith(".new")
        and args[1].startswith("/q/")  # paths are relative to the test root
    ]


def _visible_bodies(q: vsqs.PlainQueue) -> list[bytes]:
    """The bodies of every ready or held file, read directly."""
    bodies = []
    for entry in os.scandir(q.path):
        parsed = parse_name(entry.name)
        if parsed is not None and parsed.state is not State.NEW:
            bodies.append(Path(entry.path).read_bytes())
    return bodies


def _upkeep_and_drain(q: vsqs.QueueLike) -> list[bytes]:
    q.requeue_expired()
    q.clean(older_than=0)
    assert_consistent(q)
    bodies = [m.body for m in drain(q)]
    assert_consistent(q)
    assert q.counts().total == 0
    return bodies


def _expected(scenario: str, calls: list[list[str]], k: int, after: bool) -> list[bytes]:
    def done(index: int) -> bool:  # did the kill come after call *index* completed?
        return k > index or (k == index and after)

    if scenario in PUBLISHES:
        (commit,) = _commit_calls(calls)
        return [BODY] if done(commit) else []
    if scenario == "publish_batch":
        commits = _commit_calls(calls)
        assert len(commits) == len(BATCH)
        return [body for body, index in zip(BATCH, commits, strict=True) if done(index)]
    if scenario == "dedup_publish":
        return [BODY]  # the child's copy, or else the parent's retry: exactly one
    if scenario in CHUNKS:
        return list(BATCH)  # the child's batch, completed, or else the retry's: once
    if scenario == "delete":
        unlinks = [i for i, (name, *args) in enumerate(calls, 1) if name == "unlink"]
        return [] if done(unlinks[0]) else [BODY]
    return [BODY]  # receive, visibility changes, requeue, dead letter: never lose it


@pytest.fixture
def workdir(tmp_path: Path) -> Iterator[Path]:
    """A scratch directory in memory where possible: a process crash does not depend on
    the filesystem, and hundreds of durable setups are much faster without disk flushes."""
    if not os.path.isdir("/dev/shm"):
        yield tmp_path
        return
    path = Path(tempfile.mkdtemp(prefix="vsqs-killpoints-", dir="/dev/shm"))
    yield path
    shutil.rmtree(path)


@pytest.mark.parametrize("scenario", sorted(ACTIONS))
def test_kill_before_and_after_every_fs_call(scenario: str, workdir: Path) -> None:
    """Every kill point of the transition leaves a recoverable, consistent queue."""
    tmp_path = workdir
    now = time.time()  # real time: clean() judges debris by its mtime too
    counted = tmp_path / "count"
    receipt = _prepare(counted, scenario, now)
    assert _run(scenario, counted, now, receipt, k=0, after=False) == 0
    calls = json.loads((counted / "trace.json").read_text())
    assert calls, f"{scenario} made no filesystem call"
    for k in range(1, len(calls) + 1):
        for after in (False, True):
            root = tmp_path / f"k{k}{'after' if after else 'before'}"
            where = f"{scenario}: killed {'after' if after else 'before'} call {k} {calls[k - 1]}"
            receipt = _prepare(root, scenario, now)
            assert _run(scenario, root, now, receipt, k=k, after=after) == KILLED, where
            q = open_queue(root, scenario, now + 1)
            assert set(_visible_bodies(q)) <= KNOWN_BODIES, f"{where}: a partial body is visible"
            if receipt:
                try:
                    q.change_visibility(receipt, 10)  # the old receipt works...
                except vsqs.LeaseLost:
                    pass  # ...or says clearly that the lease is gone
            if scenario == "dedup_publish":
                # The publisher retries within the window: one copy, whatever happened.
                retry = open_queue(root, scenario, now + 60).publish(BODY, dedup_id="once")
                assert retry in {e.partition(".")[0] for e in os.listdir(q.path)}, where
            if scenario in CHUNKS:
                # The task is retried (after an upkeep run, in the second scenario): the
                # batch ends up whole and once, whichever call the child died at.
                task = open_queue(root, scenario, now + 60)
                if scenario == "chunk_publish_clean":
                    task.clean(older_than=0)
                ids = task.publish_batch(BATCH, batch_dedup_id="chunk")
                assert [m.id for m in task.browse()] == ids, where
            late = open_queue(root, scenario, now + 3600)
            bodies = _upkeep_and_drain(late)
            if late.dead_letter is not None:
                assert bodies == [], f"{where}: left in the source queue"
                bodies = _upkeep_and_drain(late.dead_letter)
            expected = _expected(scenario, calls, k, after)
            assert sorted(bodies) == sorted(expected), where
            if scenario in CHUNKS:
                assert bodies == expected, f"{where}: out of order"
