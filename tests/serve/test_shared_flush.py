"""Concurrent ``SendMessageBatch`` requests flush in parallel and share a ``syncfs``
(issue 36: "concurrent batches share a flush").

A real server in this process on a root on a disk filesystem (where ``syncfs`` is a
barrier; on tmpfs the server runs a send on its event loop, see
:mod:`vsqs.serve._inline`, so batches never overlap there), real boto3 clients in
threads; libc's ``syncfs`` is wrapped as in ``tests/flushes.py``. The
first batch's ``syncfs`` is held: the other batches reach the shared flush while it
runs, in threads of the server's pool, and are answered by one more ``syncfs`` that
started after they asked; each batch is stored whole, in its order.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import pytest

import vsqs
from vsqs import _flush
from vsqs._userfiles import filesystem_type
from vsqs.serve._inline import MEMORY_FILESYSTEMS

from ..flushes import Events, Syncfs, held_then_joined, record_callers
from .conftest import Start, client

SENDERS = 4


def test_concurrent_send_batches_share_one_syncfs(
    start: Start, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if filesystem_type(str(tmp_path)) in MEMORY_FILESYSTEMS:
        pytest.skip(f"{tmp_path} is in memory: the server sends from its event loop there")
    if not _flush.syncfs_is_barrier(str(tmp_path)):
        pytest.skip(f"syncfs is no barrier on {tmp_path} (Linux before 5.8?)")
    server = start(vsqs.QueueRoot(tmp_path / "root"))
    url = client(server.url).create_queue(QueueName="orders")["QueueUrl"]
    clients = [client(server.url) for _ in range(SENDERS)]
    for sqs in clients:  # each connection made before the clock starts
        sqs.get_queue_url(QueueName="orders")
    events = Events()
    syncfs = Syncfs(monkeypatch, events, hold=True)
    record_callers(monkeypatch, events)

    def send(sqs: Any, tag: int) -> Any:
        entries = [{"Id": f"m{n}", "MessageBody": f"{tag}-{n}"} for n in range(10)]
        return sqs.send_message_batch(QueueUrl=url, Entries=entries)

    calls = [functools.partial(send, sqs, tag) for tag, sqs in enumerate(clients)]
    answers = held_then_joined(syncfs, calls[0], calls[1:])
    for answer in answers:
        assert isinstance(answer, dict), answers
        assert len(answer["Successful"]) == 10 and not answer.get("Failed"), answer
    assert events.uncovered() == []
    assert len(events.syncfs) == 2  # the held one, then one for the three others
    queue = server.service.root.get("orders")
    assert queue.counts().ready == SENDERS * 10
    bodies = [m.body.decode() for m in queue.receive_batch(SENDERS * 10, timeout=0)]
    for tag in range(SENDERS):  # each batch whole and in its order
        assert [b for b in bodies if b.startswith(f"{tag}-")] == [f"{tag}-{n}" for n in range(10)]
