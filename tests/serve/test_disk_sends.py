"""Durable sends to a queue on a disk, from concurrent clients (issue 36).

A real server in this process, its root on a disk filesystem (where the server sends
from its pool's threads, concurrently; on tmpfs it sends from its event loop), real
boto3 clients in threads. What each test guards:

* concurrent clients' sends are all answered, each message is stored exactly once,
  under the ``MessageId`` its answer gave, and each client's messages keep its order;
* a failed flush or a full disk is answered per entry, for every entry it covered
  (also a batch already visible whose last flush failed: it is not durable),
  never as a success and never as a 500;
* a shutdown with sends in flight answers each of them, and every message stored was
  answered as sent; no thread of the server's pool is left.
"""

from __future__ import annotations

import errno
import functools
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import vsqs
from vsqs import _flush, _fs
from vsqs._userfiles import filesystem_type
from vsqs.serve import Server
from vsqs.serve._inline import MEMORY_FILESYSTEMS
from vsqs.serve._sending import vsqs_id_of

from ..fixtures_core import CHILD_TIMEOUT, patch_fs, wait_until
from ..flushes import Events, Syncfs, held_then_joined
from .conftest import Start, client

CLIENTS = 6
BATCHES = 12


@pytest.fixture
def disk(tmp_path: Path) -> Path:
    """A root on a disk filesystem with a ``syncfs`` barrier (else the test is moot)."""
    if filesystem_type(str(tmp_path)) in MEMORY_FILESYSTEMS:
        pytest.skip(f"{tmp_path} is in memory: the server sends from its event loop there")
    if not _flush.syncfs_is_barrier(str(tmp_path)):
        pytest.skip(f"syncfs is no barrier on {tmp_path} (Linux before 5.8?)")
    return tmp_path / "root"


def _stored(server: Server, name: str) -> dict[str, bytes]:
    """Every ready message of queue *name*: vsqs id -> body (browsed, not claimed)."""
    found: dict[str, bytes] = {}
    for message in server.service.root.get(name).browse():
        assert message.id not in found, f"{message.id} listed twice"
        found[message.id] = message.body
    return found


@pytest.mark.parametrize("fifo", [False, True], ids=["standard", "fifo"])
def test_concurrent_clients_exactly_once_in_order(start: Start, disk: Path, fifo: bool) -> None:
    """Six clients, each sending batches of 10 and single messages at once: every entry
    answered Successful, every message stored once under its answer's MessageId, each
    client's in its order (FIFO: two clients share each group)."""
    server = start(vsqs.QueueRoot(disk))
    name = "orders.fifo" if fifo else "orders"
    # Content-based deduplication: with an explicit MessageDeduplicationId (kept as an
    # attribute of its message) each entry of a batch would be published on its own.
    attributes = {"FifoQueue": "true", "ContentBasedDeduplication": "true"} if fifo else {}
    url = client(server.url).create_queue(QueueName=name, Attributes=attributes)["QueueUrl"]
    sent: dict[str, str] = {}  # MessageId -> body
    order: list[list[str]] = [[] for _ in range(CLIENTS)]  # each client's bodies, in order
    lock = threading.Lock()
    gate = threading.Barrier(CLIENTS)

    def options(tag: str, number: int) -> dict[str, str]:
        if not fifo:
            return {}
        del tag
        return {"MessageGroupId": f"g{number % 2}"}

    def sender(number: int) -> None:
        sqs = client(server.url)
        sqs.get_queue_url(QueueName=name)  # connected before the others start
        gate.wait(CHILD_TIMEOUT)
        for batch in range(BATCHES):
            tags = [f"{number}-{batch}-{n}" for n in range(10)]
            entries = [
                {"Id": f"e{n}", "MessageBody": tag, **options(tag, number)}
                for n, tag in enumerate(tags)
            ]
            answer = sqs.send_message_batch(QueueUrl=url, Entries=entries)
            assert not answer.get("Failed"), answer
            by_entry = {e["Id"]: e["MessageId"] for e in answer["Successful"]}
            single = f"{number}-{batch}-single"
            one = sqs.send_message(QueueUrl=url, MessageBody=single, **options(single, number))
            with lock:
                for entry in entries:
                    sent[by_entry[entry["Id"]]] = entry["MessageBody"]
                sent[one["MessageId"]] = single
                order[number] += [*tags, single]

    threads = [threading.Thread(target=sender, args=(n,)) for n in range(CLIENTS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(CHILD_TIMEOUT)
        assert not thread.is_alive()
    assert len(sent) == CLIENTS * BATCHES * 11, "an answer was lost or a MessageId repeated"
    stored = _stored(server, name)
    assert {vsqs_id_of(m): body.encode() for m, body in sent.items()} == stored
    by_id = [stored[message_id].decode() for message_id in sorted(stored, key=int)]
    for number in range(CLIENTS):
        mine = [body for body in by_id if body.startswith(f"{number}-")]
        assert mine == order[number], f"client {number}'s messages out of order"


def _entries(tag: int) -> list[dict[str, str]]:
    return [{"Id": f"m{n}", "MessageBody": f"{tag}-{n}"} for n in range(10)]


@pytest.mark.parametrize("failure", ["syncfs EIO", "create ENOSPC"])
def test_a_failure_answered_per_entry(
    start: Start, disk: Path, monkeypatch: pytest.MonkeyPatch, failure: str
) -> None:
    """The first send's flush is held while three others are written and wait for the
    shared one; then the shared ``syncfs`` fails (all three, nothing of them stored), or
    the disk is full at the first create after the held send's (one of them, nothing of
    it stored). Every entry of a failed send is answered ``Failed`` (InternalError, the
    server's fault, "It was not sent"), none as sent; the others succeed."""
    server = start(vsqs.QueueRoot(disk))
    url = client(server.url).create_queue(QueueName="orders")["QueueUrl"]
    clients = [client(server.url) for _ in range(4)]
    for sqs in clients:
        sqs.get_queue_url(QueueName="orders")
    events = Events()
    failing = frozenset({1} if failure == "syncfs EIO" else ())  # the shared syncfs
    syncfs = Syncfs(monkeypatch, events, hold=True, failing=failing)
    if failure == "create ENOSPC":
        creates = iter(range(1_000_000))
        real_create = _fs.create_exclusive

        def create(path: str, mode: int) -> int:
            if next(creates) == 10:  # the first after the held send's ten
                raise OSError(errno.ENOSPC, "No space left on device", path)
            return real_create(path, mode)

        patch_fs(monkeypatch, "create_exclusive", create)

    def send(sqs: Any, tag: int) -> Any:
        return sqs.send_message_batch(QueueUrl=url, Entries=_entries(tag))

    calls = [functools.partial(send, sqs, tag) for tag, sqs in enumerate(clients)]
    if failure == "syncfs EIO":
        answers = held_then_joined(syncfs, calls[0], calls[1:])
    else:  # the one that fails never reaches the shared syncfs
        answers = held_then_joined(syncfs, calls[0], calls[1:], waiting=2)
    assert all(isinstance(answer, dict) for answer in answers), answers
    failed = [a for a in answers if isinstance(a, dict) and a.get("Failed")]
    assert len(failed) == (3 if failure == "syncfs EIO" else 1), answers
    for answer in failed:
        assert not answer.get("Successful"), answer
        assert sorted(f["Id"] for f in answer["Failed"]) == [f"m{n}" for n in range(10)]
        for entry in answer["Failed"]:
            assert entry["SenderFault"] is False and entry["Code"] == "InternalError", entry
            assert "It was not sent" in entry["Message"], entry
    for other in answers:
        if other not in failed:
            assert isinstance(other, dict) and len(other["Successful"]) == 10, other
    assert len(_stored(server, "orders")) == 10 * (len(answers) - len(failed))


def test_a_batch_visible_but_unflushed_is_never_answered_as_sent(
    start: Start, disk: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The directory flush after a batch's messages became visible fails (EIO): the
    messages are there (they may be delivered) but not durable, so no entry is answered
    ``Successful``; each is ``Failed``, the server's fault, saying it may be delivered and
    that sending it again may deliver it twice."""
    server = start(vsqs.QueueRoot(disk))
    sqs = client(server.url)
    url = sqs.create_queue(QueueName="orders")["QueueUrl"]
    failures: list[str] = []

    def fsync_dir(path: str) -> None:
        failures.append(path)
        raise OSError(errno.EIO, "Input/output error", path)

    patch_fs(monkeypatch, "fsync_dir", fsync_dir)
    answer = sqs.send_message_batch(QueueUrl=url, Entries=_entries(7))
    assert failures, "the batch never flushed its directory: the test is moot"
    assert not answer.get("Successful"), answer
    assert sorted(f["Id"] for f in answer["Failed"]) == sorted(f"m{n}" for n in range(10))
    for entry in answer["Failed"]:
        assert entry["SenderFault"] is False and entry["Code"] == "InternalError", entry
        assert "may be delivered" in entry["Message"], entry
        assert "twice" in entry["Message"], entry
    assert sorted(_stored(server, "orders").values()) == sorted(
        f"7-{n}".encode() for n in range(10)
    )


def test_shutdown_with_sends_in_flight(
    start: Start, disk: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Clients keep sending batches while the server shuts down, and the sends in flight
    then wait on a held flush (longer than uvicorn's tenth of a second before it drains):
    each is answered once the flush ends; every message stored was answered as sent, and
    every one answered is stored; the server's pool threads all end."""
    server = start(vsqs.QueueRoot(disk))
    url = client(server.url).create_queue(QueueName="orders")["QueueUrl"]
    answered: list[str] = []
    errors: list[BaseException] = []
    lock = threading.Lock()
    started = threading.Barrier(CLIENTS + 1)

    def sender(number: int) -> None:
        sqs = client(server.url)
        sqs.get_queue_url(QueueName="orders")
        started.wait(CHILD_TIMEOUT)
        for batch in range(10_000):
            entries = [{"Id": f"m{n}", "MessageBody": f"{number}-{batch}-{n}"} for n in range(10)]
            try:
                answer = sqs.send_message_batch(QueueUrl=url, Entries=entries)
            except Exception as exc:  # noqa: BLE001 - refused or cut off by the shutdown
                with lock:
                    errors.append(exc)
                return
            assert not answer.get("Failed"), answer
            with lock:
                answered.extend(e["MessageBody"] for e in entries)

    threads = [threading.Thread(target=sender, args=(n,)) for n in range(CLIENTS)]
    for thread in threads:
        thread.start()
    started.wait(CHILD_TIMEOUT)
    wait_until(lambda: len(answered) >= 200, "the clients to send")
    syncfs = Syncfs(monkeypatch, Events(), hold=True)
    assert syncfs.held.wait(CHILD_TIMEOUT), "no send reached its flush"
    stopper = threading.Thread(target=server.shutdown)
    stopper.start()
    wait_until(server.service.stopping.is_set, "the shutdown to begin")
    time.sleep(0.5)  # past uvicorn's grace of 0.1 s: a shutdown that does not drain is done
    syncfs.release()
    stopper.join(CHILD_TIMEOUT)
    assert not stopper.is_alive()
    for thread in threads:
        thread.join(CHILD_TIMEOUT)
        assert not thread.is_alive(), "a send was never answered"
    assert len(errors) == CLIENTS  # each client stopped on a refused or closed connection
    wait_until(  # the last publishes done, if any outlived their answers
        lambda: not [t for t in threading.enumerate() if t.name.startswith("vsqs-serve")],
        "the server's pool threads to end",
    )
    stored = sorted(body.decode() for body in _stored(server, "orders").values())
    assert stored == sorted(answered)
