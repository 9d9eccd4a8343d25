"""The HTTP/1.1 layer of ``vsqs serve`` (uvicorn with httptools): malformed heads refused,
keep-alive, ``Expect: 100-continue``, ``HEAD``; and the per-queue memory of the SQS
record (``_sidecar.read_cached``), which must never serve a stale one."""

from __future__ import annotations

import json
import os
import socket
import time
import uuid
from pathlib import Path
from urllib.parse import urlsplit

import pytest

import vsqs
from vsqs import _storage
from vsqs.serve import Server, _sidecar
from vsqs.serve._context import Caller
from vsqs.serve._dispatch import request_id
from vsqs.serve._server import MAX_HEAD
from vsqs.serve._service import Service

from .conftest import Start
from .http import json_call, raw

_LIST = (
    b"POST / HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/x-amz-json-1.0\r\n"
    b"X-Amz-Target: AmazonSQS.ListQueues\r\nContent-Length: 2\r\n"
)


def _status(answer: bytes) -> int:
    return int(answer.split(b" ", 2)[1])


def _address(server: Server) -> tuple[str, int]:
    parts = urlsplit(server.url)
    return parts.hostname or "", parts.port or 80


def _alive(server: Server) -> None:
    status, _, answer = json_call(server.url, "ListQueues", {})
    assert status == 200, answer


@pytest.mark.parametrize(
    "field",
    [
        b"X-Spaced : a\r\n",  # whitespace between the name and the colon
        b"no colon here\r\n",
        b"X-Bad\x00Name: a\r\n",
        b"X-Bad-Value: a\x00b\r\n",
        b"X-Stray-CR: a\rb\r\n",
        b": no name\r\n",
        # What llhttp refuses unless a leniency is on (none is).
        b"X-Bare-LF: a\n",
        b"X-Fold: a\r\n b\r\n",  # obs-fold
        b"X-Del: a\x7fb\r\n",
    ],
)
def test_a_malformed_header_field_is_a_400_and_the_connection_closes(
    server: Server, field: bytes
) -> None:
    answer = raw(server.url, _LIST + field + b"\r\n{}")
    assert _status(answer) == 400, answer
    assert b"connection: close" in answer.lower()
    _alive(server)


@pytest.mark.parametrize(
    "line",
    [
        b"POST / HTTP/1.2\r\n",
        b"POST / HTTP/9.9\r\n",
        b"post / HTTP/1.1\r\n",
        b"POST /a\tb HTTP/1.1\r\n",
        b"POST /\xff HTTP/1.1\r\n",
        b" POST / HTTP/1.1\r\n",
    ],
)
def test_a_malformed_request_line_is_a_400(server: Server, line: bytes) -> None:
    answer = raw(server.url, line + _LIST.split(b"\r\n", 1)[1] + b"\r\n{}")
    assert _status(answer) == 400, answer
    assert b"connection: close" in answer.lower()
    _alive(server)


def test_values_are_compared_without_the_whitespace_that_ends_them(server: Server) -> None:
    """llhttp keeps the spaces and tabs that end a field's value: the application
    trims every value it reads, so a padded ``Host`` is still loopback and a padded
    ``Origin`` or ``Sec-Fetch-Site`` still foreign."""
    root = server.service.root
    root.create("orders").publish(b"kept")
    purge = b"Action=PurgeQueue&QueueUrl=/000000000000/orders"
    form = (
        b"POST / HTTP/1.1\r\nContent-Type: application/x-www-form-urlencoded \t\r\n"
        b"Content-Length: %d \r\n" % len(purge)
    )
    for fields in [
        b"Host: localhost \t\r\nOrigin: http://evil.example \t\r\n",
        b"Host: localhost\r\nSec-Fetch-Site: cross-site\t\r\n",
        b"Host: localhost\r\nOrigin: http://localhost:1 \r\n",
    ]:
        answer = raw(server.url, form + fields + b"\r\n" + purge)
        assert _status(answer) == 403, answer
        assert b"another origin" in answer
        assert root.get("orders").counts().ready == 1
    listed = raw(server.url, _LIST.replace(b"Host: localhost", b"Host: localhost:1 \t") + b"\r\n{}")
    assert _status(listed) == 200, listed
    answer = raw(server.url, form + b"Host: localhost \t\r\n\r\n" + purge)
    assert _status(answer) == 200, answer
    assert root.get("orders").counts().ready == 0


def test_the_end_of_the_stream_among_the_fields_runs_nothing(server: Server) -> None:
    body = json.dumps({"QueueName": "never"}).encode()
    head = (
        b"POST / HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/x-amz-json-1.0\r\n"
        b"X-Amz-Target: AmazonSQS.CreateQueue\r\nContent-Length: %d\r\n" % len(body)
    )
    assert raw(server.url, head) == b""  # closed unanswered: there was no request
    assert "never" not in server.service.root
    _alive(server)


def _head_of(size: int, shape: str) -> bytes:
    """A ListQueues head of *size* bytes (its blank line included), made long by one
    header field, the target or many fields."""
    blank = b"\r\n"
    if shape == "url":
        rest = _LIST.split(b"\r\n", 1)[1] + blank
        pad = size - len(b"POST /? HTTP/1.1\r\n" + rest)
        return b"POST /?" + b"x" * pad + b" HTTP/1.1\r\n" + rest
    count = 0 if shape == "field" else (size - len(_LIST) - 22) // 14
    fields = b"".join(b"X-F%06d: v\r\n" % n for n in range(count))  # 14 bytes each
    pad = size - len(_LIST) - len(fields) - len(b"X-Last: \r\n") - len(blank)
    return _LIST + fields + b"X-Last: " + b"v" * pad + b"\r\n" + blank


@pytest.mark.parametrize("shape", ["field", "url", "fields"])
def test_a_head_of_max_head_bytes_is_read_and_one_byte_more_is_a_431(
    server: Server, shape: str
) -> None:
    """The head (request line, fields, blank line) may take MAX_HEAD bytes; a head
    still incomplete past them is answered 431 and the connection closed, whether one
    field, the target or many fields make it long (uvicorn's httptools protocol would
    keep it all: the connection counts it)."""
    head = _head_of(MAX_HEAD, shape)
    assert len(head) == MAX_HEAD, len(head)
    assert _status(raw(server.url, head + b"{}")) == 200
    # MAX_HEAD + 1 bytes and no end of the head: read whole before the refusal, so
    # the connection closes cleanly and the answer is read.
    longer = _head_of(MAX_HEAD + 64, shape)[: MAX_HEAD + 1]
    assert b"\r\n\r\n" not in longer
    with socket.create_connection(_address(server), timeout=10) as sock:
        sock.sendall(longer)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    assert _status(answer) == 431, answer[:200]
    assert b"Connection: close" in answer
    _alive(server)


def test_field_names_are_case_blind_and_values_trimmed(start: Start) -> None:
    server = start(allow_hosts=["example.test"])
    body = json.dumps({"QueueName": "q"}).encode()
    answer = raw(
        server.url,
        b"POST / HTTP/1.1\r\nhOST: \t example.test:1 \t\r\n"
        b"content-type: application/x-amz-json-1.0\r\n"
        b"x-AMZ-target:AmazonSQS.CreateQueue\r\nCONTENT-LENGTH: %d\r\n"
        b"Connection: close\r\n\r\n%s" % (len(body), body),
    )
    assert _status(answer) == 200, answer
    assert b'"http://example.test:1/000000000000/q"' in answer


def _exchange(sock: socket.socket, data: bytes) -> bytes:
    """Send *data*; read one answer (its head and its Content-Length of body)."""
    sock.sendall(data)
    received = b""
    while b"\r\n\r\n" not in received:
        chunk = sock.recv(65536)
        assert chunk, received
        received += chunk
    head, _, rest = received.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    while len(rest) < length:
        chunk = sock.recv(65536)
        assert chunk
        rest += chunk
    return head + b"\r\n\r\n" + rest


def test_keep_alive_versions_and_expect_continue(server: Server) -> None:
    parts = urlsplit(server.url)
    with socket.create_connection((parts.hostname or "", parts.port or 80), timeout=10) as sock:
        # HTTP/1.1: the connection stays open for the next request.
        for _ in range(3):
            answer = _exchange(sock, _LIST + b"\r\n{}")
            assert answer.startswith(b"HTTP/1.1 200 OK\r\n"), answer
            assert b"server: vsqs" in answer.lower()
            assert b"connection: close" not in answer.lower()
            assert b"x-amzn-requestid: " in answer.lower()
        # Expect: 100-continue gets its interim answer before the body is sent.
        sock.sendall(_LIST + b"Expect: 100-continue\r\n\r\n")
        assert sock.recv(65536).startswith(b"HTTP/1.1 100 Continue\r\n")
        assert _exchange(sock, b"{}").startswith(b"HTTP/1.1 200")
    # HTTP/1.0 closes after the answer.
    answer = raw(server.url, _LIST.replace(b"HTTP/1.1", b"HTTP/1.0") + b"\r\n{}")
    assert _status(answer) == 200 and b"connection: close" in answer.lower()
    for version in (b"HTTP/1.x", b"HTTP/1", b"HTTP/1.1.1", b"HTTP/01.01", b"FTP/1.1"):
        answer = raw(server.url, _LIST.replace(b"HTTP/1.1", version) + b"\r\n{}")
        assert _status(answer) == 400, (version, answer)


def test_a_head_request_gets_the_length_without_the_body(start: Start) -> None:
    server = start(pages=lambda *_: None)
    answer = raw(server.url, b"HEAD /ui HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
    head, _, body = answer.partition(b"\r\n\r\n")
    assert _status(answer) == 404 and body == b""
    assert b"content-length: " in head.lower()


# -- the memory of the SQS record -------------------------------------------------------


def _age(path: Path, seconds: float = 60.0) -> None:
    then = time.time() - seconds
    os.utime(path, (then, then))


def test_the_record_is_read_again_whenever_it_changed(tmp_path: Path) -> None:
    root = vsqs.QueueRoot(tmp_path / "root")
    mine, theirs = Service(root), Service(root)  # two servers on one root
    caller = Caller(None, "us-east-1", "h")
    mine.create_queue(caller, {"QueueName": "q", "Attributes": {"MaximumMessageSize": "2048"}})
    queue = mine.open("q")
    record = Path(queue.path) / ".vsqs" / "sqs" / "record.json"
    _age(record)
    assert _sidecar.read_cached(queue.path)["attributes"]["MaximumMessageSize"] == "2048"
    assert _sidecar.read_cached(queue.path) is _sidecar.read_cached(queue.path)  # remembered
    # Another server changes it (a new file, renamed over): read again at once.
    theirs.set_queue_attributes(
        caller, {"QueueUrl": "/0/q", "Attributes": {"MaximumMessageSize": "4096"}}
    )
    assert _sidecar.read_cached(queue.path)["attributes"]["MaximumMessageSize"] == "4096"
    # Changed in place to the same size, its modification time set back: the change
    # time tells.
    _age(record)
    before = _sidecar.read_cached(queue.path)
    text = record.read_text().replace("4096", "8192")
    record.write_text(text)
    _age(record)
    after = _sidecar.read_cached(queue.path)
    assert before["attributes"]["MaximumMessageSize"] == "4096"
    assert after["attributes"]["MaximumMessageSize"] == "8192"
    # Gone (the queue deleted): an empty record, never the remembered one.
    record.unlink()
    assert _sidecar.read_cached(queue.path) == {}


def test_on_a_filesystem_other_hosts_write_the_record_is_always_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """NFS or FUSE: a stat may answer from the attribute cache; opening revalidates."""
    queue = vsqs.QueueRoot(tmp_path / "root").create("q")
    record = Path(queue.path) / ".vsqs" / "sqs" / "record.json"
    record.parent.mkdir(parents=True, exist_ok=True)
    record.write_text('{"attributes": {"DelaySeconds": "1"}}')
    _age(record)
    assert _sidecar.read_cached(queue.path) is _sidecar.read_cached(queue.path)
    monkeypatch.setitem(_storage._shared, record.stat().st_dev, True)  # as if NFS
    assert _sidecar.read_cached(queue.path) is not _sidecar.read_cached(queue.path)
    assert _sidecar.read_cached(queue.path) == {"attributes": {"DelaySeconds": "1"}}


def test_request_ids_are_distinct_version_4_uuids() -> None:
    ids = [request_id() for _ in range(2000)]
    assert len(set(ids)) == len(ids)
    for text in ids:
        parsed = uuid.UUID(text)
        assert (parsed.version, parsed.variant, str(parsed)) == (4, uuid.RFC_4122, text)
