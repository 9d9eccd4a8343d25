"""Real SQS clients against real ``vsqs serve`` processes (issue 28).

Each test starts ``vsqs serve`` processes (:mod:`tests.serve.clients`) and points a
client nobody wrote for vsqs at them: boto3 on the query protocol (1.28.0 with botocore 1.31.0, in
``.venv-query``), the aws cli (``.venv-awscli``), the JavaScript SDK v3 under node, and
boto3 on the JSON protocol (``.venv``). What the clients did is then read back through
the library itself, or through another server on the same root: the servers hold no
state, so any of them (on any host sharing the root) serves every queue.
"""

from __future__ import annotations

import collections
import json
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import BotoCoreError, ClientError

import vsqs
from tests.multihost._rig import CACHE_NO, rig, why_not

from .clients import (
    AWS_CLI,
    HERE,
    JS_DIR,
    QUERY_PYTHON,
    Served,
    boto3_client,
    client_env,
    need,
    node,
    served,
)

ACCOUNT = "000000000000"


def _run(args: list[str], home: Path, *, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        args, env=client_env(home), capture_output=True, text=True, timeout=120, check=False
    )
    if check and done.returncode != 0:
        pytest.fail(f"{args[0]} exited {done.returncode}:\n{done.stdout}\n{done.stderr}")
    return done


def _library_bodies(path: Path) -> list[str]:
    """Receive and delete everything in the queue at *path* through the library."""
    queue = vsqs.Queue(path)
    bodies = []
    while (message := queue.receive(timeout=0)) is not None:
        bodies.append(message.body.decode())
        assert queue.delete(message)
    return bodies


def _drain(client: Any, url: str, *, until: int, seconds: float = 60) -> list[str]:
    """ReceiveMessage(10) + DeleteMessageBatch through *client* until *until* bodies came
    (or an empty long poll after *seconds*)."""
    bodies: list[str] = []
    deadline = time.monotonic() + seconds
    while len(bodies) < until and time.monotonic() < deadline:
        got = client.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1)
        messages = got.get("Messages", [])
        if not messages:
            continue
        bodies += [m["Body"] for m in messages]
        entries = [
            {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(messages)
        ]
        deleted = client.delete_message_batch(QueueUrl=url, Entries=entries)
        assert not deleted.get("Failed"), deleted
    return bodies


def test_boto3_on_the_query_protocol(tmp_path: Path) -> None:
    """boto3 1.28.0 (botocore 1.31.0) speaks the query protocol (form-encoded ``Action=``,
    XML answers): queues, attributes of every type (botocore checks their MD5), batches, visibility,
    deletes, SQS's error code for a missing queue, and a FIFO queue in order."""
    python = need(QUERY_PYTHON, "the query-protocol boto3 (.venv-query)")
    root = tmp_path / "root"
    root.mkdir()
    with served(root) as server:
        # -I: not this directory on sys.path (its http.py would shadow the standard one)
        done = _run([python, "-I", str(HERE / "query_client.py"), server.url, "p"], tmp_path)
    out = json.loads(done.stdout)
    assert (out["protocol"], out["botocore"]) == ("query", "1.31.0")
    url = f"{server.url}/{ACCOUNT}/p-query"
    assert out["url"] == out["looked_up"] == url
    assert out["listed"] == [url]
    assert out["first"] == {
        "body": "héllo <query> & more",
        "text": "ünïcode",
        "count": "42",
        "blob": [0, 1, 255],
        "receive_count": "1",
    }
    assert out["rest"] == sorted(f"batch {i}" for i in range(10))
    assert out["attributes"]["VisibilityTimeout"] == "60"
    assert out["attributes"]["QueueArn"].endswith(f":{ACCOUNT}:p-query")
    assert out["missing"] == "AWS.SimpleQueueService.NonExistentQueue"
    assert out["fifo"] == ["in order 0", "in order 1", "in order 2"]
    # The same queue through the library, with the server gone.
    assert _library_bodies(root / "p-query") == ["left for python"]


def test_the_aws_cli(tmp_path: Path) -> None:
    """``aws sqs`` create-queue, send-message, receive-message, delete-message against
    ``--endpoint-url``, dummy credentials from the environment."""
    aws = need(AWS_CLI, "the aws cli (.venv-awscli)")
    root = tmp_path / "root"
    root.mkdir()
    with served(root) as server:

        def sqs(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
            common = ["--endpoint-url", server.url, "--output", "json"]
            return _run([aws, "sqs", *args, *common], tmp_path, check=check)

        url = json.loads(sqs("create-queue", "--queue-name", "from-cli").stdout)["QueueUrl"]
        assert url == f"{server.url}/{ACCOUNT}/from-cli"
        sent = json.loads(
            sqs("send-message", "--queue-url", url, "--message-body", "hello from the cli",
                "--message-attributes", '{"k": {"DataType": "String", "StringValue": "v"}}').stdout
        )  # fmt: skip
        assert set(sent) >= {"MessageId", "MD5OfMessageBody", "MD5OfMessageAttributes"}
        sqs("send-message", "--queue-url", url, "--message-body", "second")
        got = json.loads(
            sqs("receive-message", "--queue-url", url, "--message-attribute-names", "All",
                "--attribute-names", "All", "--wait-time-seconds", "1").stdout
        )["Messages"]  # fmt: skip
        assert len(got) == 1
        assert got[0]["Body"] == "hello from the cli"
        assert got[0]["MessageId"] == sent["MessageId"]
        assert got[0]["MessageAttributes"]["k"]["StringValue"] == "v"
        assert got[0]["Attributes"]["ApproximateReceiveCount"] == "1"
        sqs("delete-message", "--queue-url", url, "--receipt-handle", got[0]["ReceiptHandle"])
        missing = sqs("get-queue-url", "--queue-name", "no-such-queue", check=False)
        assert missing.returncode != 0
        assert "NonExistentQueue" in missing.stderr
    assert _library_bodies(root / "from-cli") == ["second"]


def test_the_javascript_sdk_v3(tmp_path: Path) -> None:
    """``@aws-sdk/client-sqs`` under node (the JSON protocol; it checks the MD5s too):
    create, send, send a batch, receive, delete; a FIFO queue keeps each group's order,
    gives the group back and deduplicates by content."""
    runner = node()
    root = tmp_path / "root"
    root.mkdir()
    with served(root) as server:
        done = _run([runner, str(JS_DIR / "client.mjs"), server.url, "js"], tmp_path)
    out = json.loads(done.stdout)
    assert out["url"] == out["lookedUp"] == f"{server.url}/{ACCOUNT}/js-std"
    assert (out["batchSent"], out["batchFailed"]) == (3, 0)
    assert out["first"] == {"body": "one from node", "lang": "javascript"}
    assert sorted(out["rest"]) == ["batch 0", "batch 1", "batch 2"]
    assert out["visible"] == "1"
    assert out["fifoUrl"] == f"{server.url}/{ACCOUNT}/js-groups.fifo"
    assert out["fifoBatchSent"] == 2
    by_group: dict[str, list[str]] = collections.defaultdict(list)
    for message in out["fifo"]:
        by_group[message["group"]].append(message["body"])
    assert by_group == {
        "red": ["red 0", "red 1", "red 2"],  # "red 0" sent twice: deduplicated
        "blue": [f"blue {i}" for i in range(5)],
    }
    assert _library_bodies(root / "js-std") == ["left for python"]


def _threads(*targets: Callable[[], None]) -> Iterator[threading.Thread]:
    for target in targets:
        thread = threading.Thread(target=target)
        thread.start()
        yield thread


def test_two_servers_on_one_root_deliver_exactly_once(fast_tmp_path: Path) -> None:
    """Two ``vsqs serve`` processes on one root and the library are one queue: messages
    sent through one server and published by the library are received through both
    servers and the library together, each exactly once."""
    root = fast_tmp_path / "root"
    root.mkdir()
    with served(root) as a, served(root) as b:
        client_a, client_b = boto3_client(a.url), boto3_client(b.url)
        url_a = client_a.create_queue(QueueName="shared")["QueueUrl"]
        url_b = client_b.get_queue_url(QueueName="shared")["QueueUrl"]
        assert url_b == f"{b.url}/{ACCOUNT}/shared"
        # One message across: attributes and ids survive the trip between servers.
        sent = client_a.send_message(
            QueueUrl=url_a,
            MessageBody="across",
            MessageAttributes={"n": {"DataType": "Number", "StringValue": "7"}},
        )
        got = client_b.receive_message(
            QueueUrl=url_b, MessageAttributeNames=["All"], WaitTimeSeconds=5
        )["Messages"]
        assert [(m["MessageId"], m["Body"]) for m in got] == [(sent["MessageId"], "across")]
        assert got[0]["MessageAttributes"]["n"]["StringValue"] == "7"
        client_b.delete_message(QueueUrl=url_b, ReceiptHandle=got[0]["ReceiptHandle"])

        expected = {f"a{i}" for i in range(200)} | {f"lib{i}" for i in range(100)}
        received: list[tuple[str, str]] = []
        lock = threading.Lock()
        done = threading.Event()
        errors: list[BaseException] = []

        def send_through_a() -> None:
            for start in range(0, 200, 10):
                entries = [{"Id": str(i), "MessageBody": f"a{start + i}"} for i in range(10)]
                answer = client_a.send_message_batch(QueueUrl=url_a, Entries=entries)
                assert len(answer["Successful"]) == 10, answer

        def publish_through_library() -> None:
            queue = vsqs.Queue(root / "shared")
            for n in range(100):
                queue.publish(f"lib{n}".encode())

        def consume_through(name: str, client: Any, url: str) -> Callable[[], None]:
            def consume() -> None:
                while not done.is_set():
                    got = client.receive_message(
                        QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1
                    ).get("Messages", [])
                    with lock:
                        received.extend((name, m["Body"]) for m in got)
                    if got:
                        entries = [
                            {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]}
                            for i, m in enumerate(got)
                        ]
                        answer = client.delete_message_batch(QueueUrl=url, Entries=entries)
                        assert not answer.get("Failed"), answer

            return consume

        def consume_through_library() -> None:
            queue = vsqs.Queue(root / "shared")
            while not done.is_set():
                for message in queue.receive_batch(10, timeout=0.2):
                    with lock:
                        received.append(("library", message.body.decode()))
                    assert queue.delete(message)

        def guarded(target: Callable[[], None]) -> Callable[[], None]:
            def run() -> None:
                try:
                    target()
                except BaseException as exc:  # noqa: BLE001 (reported below, in the test's thread)
                    errors.append(exc)
                    done.set()

            return run

        consumers = list(
            _threads(
                guarded(consume_through("a", boto3_client(a.url), url_a)),
                guarded(consume_through("b", boto3_client(b.url), url_b)),
                guarded(consume_through_library),
            )
        )
        producers = list(_threads(guarded(send_through_a), guarded(publish_through_library)))
        for thread in producers:
            thread.join(timeout=120)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not done.is_set():
            with lock:
                if len(received) >= len(expected):
                    break
            time.sleep(0.05)
        done.set()
        for thread in consumers:
            thread.join(timeout=30)
    assert not errors, errors
    counts = collections.Counter(body for _, body in received)
    assert {body for body, n in counts.items() if n > 1} == set()
    assert set(counts) == expected
    assert {name for name, _ in received} <= {"a", "b", "library"}
    assert _library_bodies(root / "shared") == []


@pytest.fixture
def sshfs_hosts() -> Iterator[tuple[Path, Path, Path]]:
    """One root seen from three "hosts": the owner's directory and two sshfs mounts of it
    (tests/multihost's rig: no inotify across them, no RENAME_NOREPLACE on the mounts)."""
    reason = why_not()
    if reason is not None:
        pytest.skip(f"cannot test across hosts: {reason}")
    with rig() as made:
        yield made.owner, made.mount("b", CACHE_NO), made.mount("c", CACHE_NO)


def test_one_server_per_host_over_sshfs(sshfs_hosts: tuple[Path, Path, Path]) -> None:
    """A server on each of three hosts sharing a root over sshfs: sent through one,
    received through the two others together, each message exactly once; and back."""
    owner, b, c = sshfs_hosts
    with served(owner) as on_a, served(b) as on_b, served(c) as on_c:
        client_a, client_b, client_c = (boto3_client(s.url) for s in (on_a, on_b, on_c))
        url_a = client_a.create_queue(QueueName="hosts")["QueueUrl"]
        url_b = client_b.get_queue_url(QueueName="hosts")["QueueUrl"]
        url_c = client_c.get_queue_url(QueueName="hosts")["QueueUrl"]
        sent = {f"m{i}" for i in range(60)}
        for start in range(0, 60, 10):
            entries = [{"Id": str(i), "MessageBody": f"m{start + i}"} for i in range(10)]
            assert (
                len(client_a.send_message_batch(QueueUrl=url_a, Entries=entries)["Successful"])
                == 10
            )
        got: list[str] = []
        lock = threading.Lock()

        def drain(client: Any, url: str) -> Callable[[], None]:
            def run() -> None:
                deadline = time.monotonic() + 30
                while time.monotonic() < deadline:
                    with lock:
                        if len(got) >= len(sent):
                            return
                    bodies = _drain(client, url, until=1, seconds=1)
                    with lock:
                        got.extend(bodies)

            return run

        for thread in list(_threads(drain(client_b, url_b), drain(client_c, url_c))):
            thread.join(timeout=60)
        assert sorted(got) == sorted(sent)
        # And back: sent through host C, received through host A.
        client_c.send_message(QueueUrl=url_c, MessageBody="from c")
        assert _drain(client_a, url_a, until=1, seconds=20) == ["from c"]
    assert _library_bodies(owner / "hosts") == []


def test_kill_9_of_a_server_loses_no_acknowledged_send(fast_tmp_path: Path) -> None:
    """Clients send (single and batched) while the server is killed with SIGKILL: every
    message whose send the client saw succeed is in the queue, exactly once, and a new
    server on the same root delivers it (no retries: a send either answered or not)."""
    root = fast_tmp_path / "root"
    root.mkdir()
    server = Served(root)
    try:
        url = boto3_client(server.url).create_queue(QueueName="durable")["QueueUrl"]
        acked: list[str] = []
        lock = threading.Lock()
        unexpected: list[BaseException] = []

        def send(worker: int) -> Callable[[], None]:
            client = boto3_client(server.url, timeout=10)

            def run() -> None:
                for n in range(100_000):
                    try:
                        if n % 2:
                            body = f"w{worker}-{n}"
                            client.send_message(QueueUrl=url, MessageBody=body)
                            ok = [body]
                        else:
                            entries = [
                                {"Id": str(i), "MessageBody": f"w{worker}-{n}-{i}"}
                                for i in range(10)
                            ]
                            answer = client.send_message_batch(QueueUrl=url, Entries=entries)
                            ok = [f"w{worker}-{n}-{e['Id']}" for e in answer["Successful"]]
                    except ClientError as exc:  # an SQS error is never right here
                        unexpected.append(exc)
                        return
                    except (BotoCoreError, OSError):  # the server is gone
                        return
                    with lock:
                        acked.extend(ok)

            return run

        senders = list(_threads(*(send(w) for w in range(4))))
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with lock:
                if len(acked) >= 300:
                    break
            time.sleep(0.01)
        server.kill()  # mid-request: four clients are sending
        for thread in senders:
            thread.join(timeout=60)
    finally:
        server.kill()
    assert not unexpected, unexpected
    assert len(acked) >= 300
    with served(root) as again:
        client = boto3_client(again.url)
        url = client.get_queue_url(QueueName="durable")["QueueUrl"]
        bodies = _drain(client, url, until=len(acked), seconds=60)
        bodies += _drain(client, url, until=1_000_000, seconds=2)  # sent but never answered
    counts = collections.Counter(bodies)
    assert [body for body in acked if counts[body] != 1] == []


def test_celerys_sqs_transport(tmp_path: Path) -> None:
    """kombu's ``sqs://`` transport (what Celery's SQS broker is) through a server: the
    broker URL's host and port are the endpoint, ``is_secure: False`` makes it http."""
    from kombu.connection import Connection

    root = tmp_path / "root"
    root.mkdir()
    options = {"region": "us-east-1", "is_secure": False, "wait_time_seconds": 1}
    with (
        served(root) as server,
        Connection(f"sqs://any:any@127.0.0.1:{server.port}", transport_options=options) as conn,
    ):
        jobs = conn.SimpleQueue("celery-jobs")
        jobs.put({"task": "add", "args": [1, 2]})
        jobs.put({"task": "add", "args": [3, 4]})
        message = jobs.get(timeout=10)
        assert message.payload == {"task": "add", "args": [1, 2]}
        message.ack()
        jobs.close()
    # The second one is a vsqs message in the root (held: kombu prefetched it, and it
    # comes back when its visibility timeout ends), for the library or any server.
    assert vsqs.Queue(root / "celery-jobs").counts().total == 1
