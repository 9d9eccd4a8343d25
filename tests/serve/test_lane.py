"""Durable sends through a queue's send lane (:mod:`vsqs.serve._lane`), on a disk.

A real server in this process, its root on a disk filesystem (the lane serves durable
queues from the pool; on tmpfs the server sends from its event loop instead), real
boto3 clients in threads. What each test guards:

* concurrent clients' sends are all answered, each message is stored exactly once,
  under the ``MessageId`` its answer gave, and each client's messages keep its order
  (one lane per queue and options: a FIFO group's sends share one);
* a round's failure is answered per entry for every send it covered (a failed flush
  before or after the messages became visible, a full disk), never as a success;
* a shutdown with sends in flight answers each of them, and every message stored was
  answered as sent; no thread is left.
"""

from __future__ import annotations

import errno
import functools
import threading
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
    client's in its order (FIFO: two clients share each group, so they share a lane)."""
    server = start(vsqs.QueueRoot(disk))
    name = "orders.fifo" if fifo else "orders"
    attributes = {"FifoQueue": "true"} if fifo else {}
    url = client(server.url).create_queue(QueueName=name, Attributes=attributes)["QueueUrl"]
    sent: dict[str, str] = {}  # MessageId -> body
    order: list[list[str]] = [[] for _ in range(CLIENTS)]  # each client's bodies, in order
    lock = threading.Lock()
    gate = threading.Barrier(CLIENTS)

    def options(tag: str, number: int) -> dict[str, str]:
        if not fifo:
            return {}
        return {"MessageGroupId": f"g{number % 2}", "MessageDeduplicationId": tag}

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


def _fail_second(real: Any, code: int) -> Any:
    """*real*, failing (``OSError`` *code*) at its second call and only then."""
    calls = iter(range(1_000_000))

    def failing(*args: Any) -> Any:
        if next(calls) == 1:
            raise OSError(code, "injected by the test", str(args[0]))
        return real(*args)

    return failing


@pytest.mark.parametrize(
    "failure",
    ["syncfs EIO", "create ENOSPC", "directory fsync EIO"],
)
def test_a_rounds_failure_answered_per_entry(
    start: Start, disk: Path, monkeypatch: pytest.MonkeyPatch, failure: str
) -> None:
    """The first send's flush is held while three others wait in the lane; their round
    then fails: before its messages became visible (the bodies' ``syncfs`` fails, or
    the disk is full at a create: nothing of the round is stored) or after (the
    directory's ``fsync`` fails: stored, not flushed). Every entry of the round is
    answered ``Failed`` (InternalError, the server's fault) saying which, none as sent;
    the first send, flushed before, succeeded."""
    server = start(vsqs.QueueRoot(disk))
    url = client(server.url).create_queue(QueueName="orders")["QueueUrl"]
    clients = [client(server.url) for _ in range(4)]
    for sqs in clients:
        sqs.get_queue_url(QueueName="orders")
    events = Events()
    failing = frozenset({1} if failure == "syncfs EIO" else ())  # the round's syncfs
    syncfs = Syncfs(monkeypatch, events, hold=True, failing=failing)
    if failure == "create ENOSPC":  # the 11th create: the round's first (the held send's 10)
        creates = iter(range(1_000_000))
        real_create = _fs.create_exclusive

        def create(path: str, mode: int) -> int:
            if next(creates) == 10:
                raise OSError(errno.ENOSPC, "No space left on device", path)
            return real_create(path, mode)

        patch_fs(monkeypatch, "create_exclusive", create)
    if failure == "directory fsync EIO":
        patch_fs(monkeypatch, "fsync_dir", _fail_second(_fs.fsync_dir, errno.EIO))

    def send(sqs: Any, tag: int) -> Any:
        return sqs.send_message_batch(QueueUrl=url, Entries=_entries(tag))

    calls = [functools.partial(send, sqs, tag) for tag, sqs in enumerate(clients)]
    answers = held_then_joined(syncfs, calls[0], calls[1:], server.service.lanes.waiting)
    first, *round_ = answers
    assert isinstance(first, dict) and len(first["Successful"]) == 10, first
    assert not first.get("Failed"), first
    visible = failure == "directory fsync EIO"
    for answer in round_:
        assert isinstance(answer, dict), answers
        assert not answer.get("Successful"), answer
        assert sorted(f["Id"] for f in answer["Failed"]) == [f"m{n}" for n in range(10)]
        for entry in answer["Failed"]:
            assert entry["SenderFault"] is False and entry["Code"] == "InternalError", entry
            said = "stored but could not be flushed" if visible else "It was not sent"
            assert said in entry["Message"], entry
    assert len(events.syncfs) == (2 if failure != "create ENOSPC" else 1)
    stored = _stored(server, "orders")
    assert len(stored) == (40 if visible else 10)  # a visible message may be delivered


def test_shutdown_with_sends_in_flight(start: Start, disk: Path) -> None:
    """Clients keep sending batches while the server shuts down: each send in flight is
    answered; every message stored was answered as sent, and every one answered is
    stored; the server's pool threads all end."""
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
    wait_until(lambda: len(server.service.lanes) > 0, "sends in the lane")
    server.shutdown()
    for thread in threads:
        thread.join(CHILD_TIMEOUT)
        assert not thread.is_alive(), "a send was never answered"
    assert len(errors) == CLIENTS  # each client stopped on a refused or closed connection
    stored = sorted(body.decode() for body in _stored(server, "orders").values())
    assert stored == sorted(answered)
    wait_until(
        lambda: not [t for t in threading.enumerate() if t.name.startswith("vsqs-serve")],
        "the server's pool threads to end",
    )
    assert len(server.service.lanes) == 0
