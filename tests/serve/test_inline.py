"""Which requests run on the event loop (:mod:`vsqs.serve._inline`): the short message
actions on a queue this server has opened, on a memory filesystem; everything else in
the pool. Shown with a pool of one thread held by a dashboard page: what needs the pool
waits for it, what runs on the loop is answered meanwhile."""

from __future__ import annotations

import os
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from vsqs._userfiles import filesystem_type

from .conftest import Start
from .http import json_call, request

SHM = "/dev/shm"  # the memory filesystem under test


@pytest.fixture
def memory_root() -> Iterator[Path]:
    if not os.path.isdir(SHM) or filesystem_type(SHM) != "tmpfs":
        pytest.skip("no tmpfs at /dev/shm")
    with tempfile.TemporaryDirectory(dir=SHM, prefix="vsqs-test-inline-") as path:
        yield Path(path) / "root"


class HeldPool:
    """A server whose one pool thread a dashboard page holds until :meth:`release`."""

    def __init__(self, start: Start, root: Path) -> None:
        self.entered, self._release = threading.Event(), threading.Event()

        def pages(*args: Any) -> tuple[int, list[tuple[str, str]], bytes]:
            self.entered.set()
            assert self._release.wait(30)
            return 200, [], b"page"

        self.server = start(root, threads=1, pages=pages)
        self.url = self.server.url
        self._page = threading.Thread(target=request, args=(self.url, "GET", "/"))

    def hold(self) -> None:
        self._page.start()
        assert self.entered.wait(10)

    def release(self) -> None:
        self._release.set()
        self._page.join(10)

    def call(self, action: str, params: dict[str, Any]) -> dict[str, Any]:
        status, _, answer = json_call(self.url, action, params)
        assert status == 200, answer
        return dict(answer or {})

    def later(self, action: str, params: dict[str, Any]) -> tuple[threading.Thread, list[Any]]:
        """*action* called in a thread: (the thread, its answer once it ends)."""
        answers: list[Any] = []
        thread = threading.Thread(target=lambda: answers.append(self.call(action, params)))
        thread.start()
        return thread, answers


def test_short_actions_on_tmpfs_run_on_the_loop(start: Start, memory_root: Path) -> None:
    """Sends, deletes and visibility changes are answered while the pool's one thread is
    held; a queue not yet opened by this server, a receive and a queue-level action wait
    for the pool (opening a handle reads the queue's settings; a receive may move a
    message to a dead-letter queue on another filesystem)."""
    held = HeldPool(start, memory_root)
    url = held.call("CreateQueue", {"QueueName": "q"})["QueueUrl"]
    other = held.call("CreateQueue", {"QueueName": "other"})["QueueUrl"]
    held.call("SendMessage", {"QueueUrl": url, "MessageBody": "first"})  # opens q (pool)
    got = held.call("ReceiveMessage", {"QueueUrl": url, "MaxNumberOfMessages": 1})
    receipt = got["Messages"][0]["ReceiptHandle"]
    held.hold()
    try:
        held.call("SendMessage", {"QueueUrl": url, "MessageBody": "on the loop"})
        entries = [{"Id": str(i), "MessageBody": f"m{i}"} for i in range(10)]
        batch = held.call("SendMessageBatch", {"QueueUrl": url, "Entries": entries})
        assert len(batch["Successful"]) == 10 and not batch.get("Failed")
        held.call(
            "ChangeMessageVisibility",
            {"QueueUrl": url, "ReceiptHandle": receipt, "VisibilityTimeout": 60},
        )
        held.call("DeleteMessage", {"QueueUrl": url, "ReceiptHandle": receipt})
        waiting = [
            held.later("SendMessage", {"QueueUrl": other, "MessageBody": "to a new handle"}),
            held.later("ReceiveMessage", {"QueueUrl": url, "MaxNumberOfMessages": 10}),
            held.later("ListQueues", {}),
        ]
        for thread, _ in waiting:
            thread.join(0.5)
            assert thread.is_alive()  # waits for the pool
    finally:
        held.release()
    for thread, answers in waiting:
        thread.join(10)
        assert not thread.is_alive() and answers
    assert len(waiting[1][1][0]["Messages"]) == 10  # "on the loop" and the batch, less one
    assert held.server.service.root.get("q").counts().total == 11


def test_on_disk_every_action_waits_for_the_pool(start: Start, tmp_path: Path) -> None:
    """The same send on a root on a disk filesystem: never on the loop (a write may wait
    for the device there)."""
    if filesystem_type(str(tmp_path)) in {"tmpfs", "ramfs"}:
        pytest.skip("the temporary directory is on a memory filesystem")
    held = HeldPool(start, tmp_path / "root")
    url = held.call("CreateQueue", {"QueueName": "q"})["QueueUrl"]
    held.call("SendMessage", {"QueueUrl": url, "MessageBody": "first"})  # the handle is open
    held.hold()
    try:
        thread, answers = held.later("SendMessage", {"QueueUrl": url, "MessageBody": "waits"})
        thread.join(0.5)
        assert thread.is_alive()
    finally:
        held.release()
    thread.join(10)
    assert answers and held.server.service.root.get("q").counts().total == 2
