"""The HTTP server and ``vsqs serve``: keep-alive, the dashboard's pages hook, the
access log, graceful shutdown (in a thread and on SIGTERM), the command line."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.config import Config

import vsqs
from vsqs.serve import Deadlines, Server, make_server

from .conftest import Start, client
from .http import raw, request

REPO = Path(__file__).resolve().parents[2]


def test_keep_alive_and_no_nagle_stall(server: Server) -> None:
    """Many requests on one connection, each answered at once: with Nagle's algorithm
    on, each would wait for the client's delayed ACK (about 40 ms)."""
    host, port = server.server_address[:2]
    connection = http.client.HTTPConnection(str(host), port, timeout=10)
    headers = {"Content-Type": "application/x-amz-json-1.0", "X-Amz-Target": "AmazonSQS.ListQueues"}
    began = time.monotonic()
    for _ in range(100):
        connection.request("POST", "/", body=b"{}", headers=headers)
        response = connection.getresponse()
        assert response.status == 200
        response.read()
    took = time.monotonic() - began
    connection.close()
    assert took < 2.0, f"{took:.2f}s for 100 requests on one connection"


def test_pages_hook(start: Start) -> None:
    calls: list[tuple[str, str, bytes]] = []

    def pages(
        method: str, target: str, headers: Mapping[str, str], body: bytes
    ) -> tuple[int, list[tuple[str, str]], bytes] | None:
        calls.append((method, target, body))
        if target.startswith("/ui/missing"):
            return None
        return 200, [("Content-Type", "text/html")], b"<h1>dashboard</h1>"

    server = start(pages=pages)
    assert request(server.url, "GET", "/")[2] == b"<h1>dashboard</h1>"
    status, headers, body = request(server.url, "HEAD", "/ui/queue/x?y=1")
    assert (status, body, headers["content-length"]) == (200, b"", "18")
    assert request(server.url, "POST", "/ui/act", b"csrf=1")[0] == 200
    status, _, body = request(server.url, "GET", "/ui/missing")
    assert status == 404 and b"Not found" in body
    assert calls == [
        ("GET", "/", b""),
        ("HEAD", "/ui/queue/x?y=1", b""),
        ("POST", "/ui/act", b"csrf=1"),
        ("GET", "/ui/missing", b""),
    ]
    # The SQS API is not a page: a GET with Action, and every POST outside /ui.
    assert b"<ListQueuesResponse" in request(server.url, "GET", "/?Action=ListQueues")[2]
    assert request(server.url, "POST", "/", b"Action=ListQueues")[0] == 200
    assert len(calls) == 4
    # Without a hook, / is a plain 404.
    bare = start()
    status, headers, body = request(bare.url, "GET", "/")
    assert status == 404 and headers["content-type"].startswith("text/plain")


def test_a_failing_page_is_a_500_and_the_server_goes_on(start: Start) -> None:
    def pages(*args: Any) -> None:
        raise RuntimeError("dashboard bug")

    server = start(pages=pages)
    status, _, body = request(server.url, "GET", "/ui/")
    assert status == 500 and b"dashboard bug" not in body
    assert request(server.url, "GET", "/?Action=ListQueues")[0] == 200


def test_shutdown_waits_for_requests_in_flight_and_ends_long_polls(start: Start) -> None:
    entered, release = threading.Event(), threading.Event()

    def pages(*args: Any) -> tuple[int, list[tuple[str, str]], bytes]:
        entered.set()
        assert release.wait(10)
        return 200, [], b"finished"

    server = start(pages=pages)
    sqs = client(server.url)
    url = sqs.create_queue(QueueName="q")["QueueUrl"]
    answers: dict[str, Any] = {}
    slow = threading.Thread(target=lambda: answers.update(page=request(server.url, "GET", "/")))
    poll = threading.Thread(
        target=lambda: answers.update(poll=sqs.receive_message(QueueUrl=url, WaitTimeSeconds=20))
    )
    slow.start()
    poll.start()
    assert entered.wait(10)
    time.sleep(0.2)  # the long poll is waiting (nothing to wait on but time here)
    began = time.monotonic()
    stopper = threading.Thread(target=server.shutdown)
    stopper.start()
    poll.join(5)
    assert not poll.is_alive() and "Messages" not in answers["poll"]
    assert time.monotonic() - began < 3  # the long poll ended at once, not after 20 s
    assert stopper.is_alive()  # still waiting for the page in flight
    release.set()
    stopper.join(10)
    slow.join(10)
    assert answers["page"][0] == 200 and answers["page"][2] == b"finished"


def serve_command(root: Path, *args: str) -> tuple[subprocess.Popen[str], str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    child = subprocess.Popen(
        [sys.executable, "-m", "vsqs", "serve", str(root), "--port", "0", "--create", *args],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    assert child.stderr is not None
    line = child.stderr.readline()
    match = re.search(r"at (http://\S+)", line)
    assert match, line
    return child, match.group(1)


def test_the_command_serves_logs_and_stops_gracefully_on_sigterm(tmp_path: Path) -> None:
    child, url = serve_command(tmp_path / "root")
    try:
        sqs = client(url)
        queue_url = sqs.create_queue(QueueName="cli")["QueueUrl"]
        sqs.send_message(QueueUrl=queue_url, MessageBody="through the command")
        assert vsqs.QueueRoot(tmp_path / "root").get("cli").receive(timeout=5) is not None
        answers: dict[str, Any] = {}
        poll = threading.Thread(
            target=lambda: answers.update(
                poll=sqs.receive_message(QueueUrl=queue_url, WaitTimeSeconds=20)
            )
        )
        poll.start()
        time.sleep(0.3)  # the poll is in flight
        began = time.monotonic()
        child.send_signal(signal.SIGTERM)
        poll.join(10)
        assert "Messages" not in answers["poll"]
        assert child.wait(10) == 0
        assert time.monotonic() - began < 5
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
            assert child.stderr is not None
            child.stderr.close()
    assert child.stderr is not None
    log = child.stderr.read()
    child.stderr.close()
    assert re.search(r'"POST / HTTP/1.1" 200 \d+ SendMessage', log), log
    assert "stopped" in log


def test_quiet_and_refusals(tmp_path: Path) -> None:
    child, url = serve_command(tmp_path / "root", "--quiet")
    try:
        client(url).list_queues()
        child.send_signal(signal.SIGINT)
        assert child.wait(10) == 0
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
            assert child.stderr is not None
            child.stderr.close()
    assert child.stderr is not None
    assert "ListQueues" not in child.stderr.read()
    child.stderr.close()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    refused = subprocess.run(
        [sys.executable, "-m", "vsqs", "serve", str(tmp_path), "--host", "0.0.0.0", "--port", "0"],  # noqa: S104
        capture_output=True, text=True, env=env, timeout=60, check=False,
    )  # fmt: skip
    assert refused.returncode != 0
    assert "without --credentials" in refused.stderr
    assert "Traceback" not in refused.stderr
    bad = tmp_path / "keys.json"
    bad.write_text('{"keys": [{"access_key": "A"}]}')
    refused = subprocess.run(
        [sys.executable, "-m", "vsqs", "serve", str(tmp_path), "--credentials", str(bad)],
        capture_output=True, text=True, env=env, timeout=60, check=False,
    )  # fmt: skip
    assert refused.returncode != 0 and "keys[0].secret_key" in refused.stderr


def test_the_access_log(start: Start, capsys: pytest.CaptureFixture[str]) -> None:
    server = start(quiet=False)
    client(server.url).list_queues()
    request(server.url, "POST", "/", b"Action=Fly")
    err = capsys.readouterr().err
    line = r'127\.0\.0\.1 - - \[.*\] "POST / HTTP/1.1" 200 \d+ ListQueues [\d.]+ms'
    assert re.search(line, err), err
    assert '" 400 ' in err


def test_the_access_log_escapes_control_characters(
    start: Start, capsys: pytest.CaptureFixture[str]
) -> None:
    """ESC, BEL and the other control characters of a request never reach the
    operator's terminal raw (an ESC sequence could rewrite what it shows)."""
    server = start(quiet=False)
    answer = raw(
        server.url,
        b"GET /\x1b[2J\x1b]0;owned\x07\x7f\xc2\x9b?Action=ListQueues HTTP/1.1\r\n"
        b"Host: localhost\r\nConnection: close\r\n\r\n",
    )
    assert answer.startswith(b"HTTP/1.1 400"), answer  # llhttp: a target is visible ASCII
    client(server.url).list_queues()
    err = capsys.readouterr().err
    assert "ListQueues" in err  # the log is on
    assert not any((ord(c) < 0x20 and c != "\n") or 0x7F <= ord(c) <= 0x9F for c in err), repr(err)


def test_idle_and_stalled_connections_are_closed(start: Start) -> None:
    """A connection that sends nothing, or stops in its head or its body, is closed
    by the deadline it misses; the defaults outlast any long poll (20 s)."""
    default = Deadlines()
    assert default.request > default.header + default.body + 20 and default.idle > 20
    server = start(deadlines=Deadlines(header=0.3, body=0.3, idle=0.3))
    host, port = server.server_address[:2]
    for opening, status in (
        (b"", b""),  # idle: closed without a word
        (b"POST / HTTP/1.1\r\nHost: localhost\r\nContent-Le", b"HTTP/1.1 408 "),  # head
        (b"POST / HTTP/1.1\r\nHost: localhost\r\nContent-Length: 100\r\n\r\n{", b"HTTP/1.1 408 "),
    ):
        with socket.create_connection((str(host), port), timeout=5) as sock:
            sock.sendall(opening)
            began = time.monotonic()
            said = b""
            while chunk := sock.recv(4096):
                said += chunk
            assert time.monotonic() - began < 3
            assert said.startswith(status), said
    assert request(server.url, "GET", "/?Action=ListQueues")[0] == 200
    with pytest.raises(ValueError, match="header deadline"):
        Deadlines(header=0)


def test_a_deadline_begun_while_the_alarm_sleeps_is_kept_on_time(start: Start) -> None:
    """A connection's deadlines are checked by one alarm that sleeps at most the
    shortest deadline: a head begun after a second of idleness (the idle deadline is
    4 s) still gets its 408 half a second later, not at the idle deadline."""
    server = start(deadlines=Deadlines(header=0.5, body=0.5, request=10.0, idle=4.0))
    host, port = server.server_address[:2]
    with socket.create_connection((str(host), port), timeout=10) as sock:
        time.sleep(1.0)
        sock.sendall(b"POST / HTTP/1.1\r\nHost: localhost\r\nContent-Le")
        began = time.monotonic()
        said = b""
        while chunk := sock.recv(4096):
            said += chunk
        took = time.monotonic() - began
    assert said.startswith(b"HTTP/1.1 408 "), said
    assert 0.4 < took < 2.0, took


def test_a_request_past_its_deadline_is_cut_off_unanswered(start: Start) -> None:
    """The request deadline runs from a request's first byte to its answer: a long
    poll of 5 s under a request deadline of 1 s loses its connection after about 1 s,
    unanswered."""
    server = start(deadlines=Deadlines(header=0.5, body=0.5, request=1.0, idle=5.0))
    url = client(server.url).create_queue(QueueName="late")["QueueUrl"]
    host, port = server.server_address[:2]
    form = f"Action=ReceiveMessage&WaitTimeSeconds=5&QueueUrl={url}".encode()
    head = b"POST / HTTP/1.1\r\nHost: localhost\r\nContent-Length: %d\r\n\r\n" % len(form)
    with socket.create_connection((str(host), port), timeout=10) as sock:
        sock.sendall(head + form)
        began = time.monotonic()
        said = b""
        with contextlib.suppress(ConnectionResetError):  # aborted: a reset
            while chunk := sock.recv(4096):
                said += chunk
        took = time.monotonic() - began
    assert said == b""
    assert 0.8 < took < 3.0, took


def test_connections_beyond_the_cap_get_a_retryable_503(start: Start) -> None:
    """With max_connections served, another connection is answered 503
    ServiceUnavailable (which SDKs retry) and closed; once one closes, clients are served
    again, and a boto3 client retrying through the 503 gets its answer."""
    server = start(max_connections=2)
    host, port = str(server.server_address[0]), server.server_address[1]
    held = [socket.create_connection((host, port), timeout=5) for _ in range(2)]
    try:
        for sock in held:  # each is served: its thread answers
            sock.sendall(b"GET /?Action=ListQueues HTTP/1.1\r\nHost: localhost\r\n\r\n")
            assert sock.recv(4096).startswith(b"HTTP/1.1 200")
        with socket.create_connection((host, port), timeout=5) as extra:
            answer = b""
            while chunk := extra.recv(4096):
                answer += chunk
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 503") and b"Retry-After: 1" in head
        assert b"x-amzn-query-error: ServiceUnavailable;Receiver" in head
        assert json.loads(body)["__type"] == "ServiceUnavailable"
        sqs = boto3.client(
            "sqs",
            endpoint_url=server.url,
            region_name="us-east-1",
            aws_access_key_id="AKIATEST",
            aws_secret_access_key="secret",  # noqa: S106 - a test key
            config=Config(retries={"max_attempts": 8, "mode": "standard"}),
        )
        closer = threading.Timer(0.3, held.pop().close)
        closer.start()  # a slot frees while the client retries
        assert "QueueUrls" not in sqs.list_queues()  # answered (no queues yet)
        closer.join()
    finally:
        for sock in held:
            sock.close()
    with pytest.raises(ValueError, match="max_connections"):
        make_server(server.service.root, port=0, max_connections=0)


def test_shutdown_without_serving_and_twice(tmp_path: Path) -> None:
    server = make_server(tmp_path, port=0, quiet=True)
    stopper = threading.Thread(target=server.shutdown)
    stopper.start()
    stopper.join(5)
    assert not stopper.is_alive()  # it did not wait for a serve_forever that never ran
    server.serve_forever()  # returns at once after a shutdown
    server.shutdown()


def test_concurrent_clients_get_each_message_exactly_once(server: Server) -> None:
    """Senders and receivers in threads, one server (its queue handle shared by every
    request thread): each message is received and deleted exactly once."""
    url = client(server.url).create_queue(QueueName="busy")["QueueUrl"]
    senders, per_sender = 4, 40
    received: list[str] = []
    lock = threading.Lock()
    done = threading.Event()

    def send(who: int) -> None:
        sqs = client(server.url)
        for start_at in range(0, per_sender, 10):
            entries = [{"Id": str(i), "MessageBody": f"{who}-{start_at + i}"} for i in range(10)]
            assert not sqs.send_message_batch(QueueUrl=url, Entries=entries).get("Failed")

    def receive() -> None:
        sqs = client(server.url)
        while not done.is_set():
            got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1)
            messages = got.get("Messages", [])
            if not messages:
                continue
            with lock:
                received.extend(m["Body"] for m in messages)
            entries = [
                {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(messages)
            ]
            assert not sqs.delete_message_batch(QueueUrl=url, Entries=entries).get("Failed")

    threads = [threading.Thread(target=send, args=(i,)) for i in range(senders)]
    threads += [threading.Thread(target=receive) for _ in range(4)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 60
    while len(received) < senders * per_sender and time.monotonic() < deadline:
        time.sleep(0.05)
    done.set()
    for thread in threads:
        thread.join(30)
    assert sorted(received) == sorted(f"{w}-{i}" for w in range(senders) for i in range(per_sender))
