"""FIFO queues (``NAME.fifo``) on vsqs's partitioned queues with ``fifo=True``."""

from __future__ import annotations

import hashlib
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

import vsqs
from vsqs.serve import Server

from .. import _fifo_workers as workers
from ..fixtures_core import children, wait_until
from ..procs import load
from .conftest import client
from .test_actions import vsqs_id_of


def _code(error: pytest.ExceptionInfo[ClientError]) -> str:
    return str(error.value.response["Error"]["Code"])


def _fifo(sqs: Any, name: str = "jobs.fifo", **attributes: str) -> str:
    url: str = sqs.create_queue(QueueName=name, Attributes={"FifoQueue": "true", **attributes})[
        "QueueUrl"
    ]
    return url


def test_a_fifo_queue_is_a_partitioned_vsqs_queue(sqs: Any, root: vsqs.QueueRoot) -> None:
    url = _fifo(sqs)
    queue = root.get("jobs.fifo")
    assert queue.fifo and isinstance(queue, vsqs.PartitionedQueue)
    attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert attributes["FifoQueue"] == "true"
    assert attributes["ContentBasedDeduplication"] == "false"
    assert attributes["DeduplicationScope"] == "queue"  # SQS's default
    assert attributes["FifoThroughputLimit"] == "perQueue"
    for name, attrs in [
        ("jobs", {"FifoQueue": "true"}),  # a FIFO queue's name ends with .fifo
        ("other.fifo", {}),  # and a .fifo name is a FIFO queue
        ("bad.name.fifo", {"FifoQueue": "true"}),
    ]:
        with pytest.raises(ClientError) as caught:
            sqs.create_queue(QueueName=name, Attributes=attrs)
        assert _code(caught) == "InvalidParameterValue"
    # A standard dead-letter queue for a FIFO queue is refused.
    sqs.create_queue(QueueName="standard")
    with pytest.raises(ClientError) as caught:
        sqs.set_queue_attributes(
            QueueUrl=url,
            Attributes={
                "RedrivePolicy": '{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:0:standard",'
                '"maxReceiveCount":3}'
            },
        )
    assert _code(caught) == "InvalidAttributeValue"


def test_order_per_group_and_one_in_flight_per_group(sqs: Any) -> None:
    url = _fifo(sqs, ContentBasedDeduplication="true")
    for group in ("a", "b"):
        sqs.send_message_batch(
            QueueUrl=url,
            Entries=[
                {"Id": f"{group}{i}", "MessageBody": f"{group}{i}", "MessageGroupId": group}
                for i in range(3)
            ],
        )
    seen: dict[str, list[str]] = {"a": [], "b": []}
    for _ in range(10):
        got = sqs.receive_message(
            QueueUrl=url, MaxNumberOfMessages=10, AttributeNames=["MessageGroupId"]
        ).get("Messages", [])
        if not got:
            break
        # While a group's messages are held, no later message of that group comes (as
        # in SQS, one receive may return several of one group, in order).
        held = {m["Attributes"]["MessageGroupId"] for m in got}
        more = sqs.receive_message(
            QueueUrl=url, MaxNumberOfMessages=10, AttributeNames=["MessageGroupId"]
        ).get("Messages", [])
        assert held.isdisjoint(m["Attributes"]["MessageGroupId"] for m in more)
        for message in got + more:
            seen[message["Attributes"]["MessageGroupId"]].append(message["Body"])
            sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
    assert seen == {"a": ["a0", "a1", "a2"], "b": ["b0", "b1", "b2"]}


def test_held_group_blocks_until_released(sqs: Any) -> None:
    url = _fifo(sqs, ContentBasedDeduplication="true")
    sqs.send_message(QueueUrl=url, MessageBody="one", MessageGroupId="g")
    sqs.send_message(QueueUrl=url, MessageBody="two", MessageGroupId="g")
    first = sqs.receive_message(QueueUrl=url)["Messages"][0]
    assert first["Body"] == "one"
    assert "Messages" not in sqs.receive_message(QueueUrl=url)
    sqs.change_message_visibility(
        QueueUrl=url, ReceiptHandle=first["ReceiptHandle"], VisibilityTimeout=0
    )
    again = sqs.receive_message(QueueUrl=url, AttributeNames=["ApproximateReceiveCount"])
    assert again["Messages"][0]["Body"] == "one"  # the order holds across a release
    assert again["Messages"][0]["Attributes"]["ApproximateReceiveCount"] == "2"
    sqs.delete_message(QueueUrl=url, ReceiptHandle=again["Messages"][0]["ReceiptHandle"])
    assert sqs.receive_message(QueueUrl=url)["Messages"][0]["Body"] == "two"


def test_deduplication(sqs: Any, root: vsqs.QueueRoot) -> None:
    url = _fifo(sqs)
    with pytest.raises(ClientError) as caught:
        sqs.send_message(QueueUrl=url, MessageBody="x", MessageGroupId="g")
    assert _code(caught) == "InvalidParameterValue"  # no id and no content-based dedup
    with pytest.raises(ClientError) as caught:
        sqs.send_message(QueueUrl=url, MessageBody="x", MessageDeduplicationId="d")
    assert _code(caught) == "MissingParameter"  # no group
    with pytest.raises(ClientError) as caught:
        sqs.send_message(
            QueueUrl=url, MessageBody="x", MessageGroupId="g", MessageDeduplicationId="d",
            DelaySeconds=5,
        )  # fmt: skip
    assert _code(caught) == "InvalidParameterValue"  # no per-message delay on FIFO
    first = sqs.send_message(
        QueueUrl=url, MessageBody="x", MessageGroupId="g", MessageDeduplicationId="d1"
    )
    again = sqs.send_message(
        QueueUrl=url, MessageBody="other", MessageGroupId="g", MessageDeduplicationId="d1"
    )
    assert again["MessageId"] == first["MessageId"]
    assert again["SequenceNumber"] == first["SequenceNumber"]
    assert root.get("jobs.fifo").counts().ready == 1
    # By default a deduplication id is the whole queue's, whatever the group...
    other_group = sqs.send_message(
        QueueUrl=url, MessageBody="x", MessageGroupId="h", MessageDeduplicationId="d1"
    )
    assert other_group["MessageId"] == first["MessageId"]
    assert root.get("jobs.fifo").counts().ready == 1
    # ...and with DeduplicationScope=messageGroup, each group's.
    sqs.set_queue_attributes(QueueUrl=url, Attributes={"DeduplicationScope": "messageGroup"})
    other = sqs.send_message(
        QueueUrl=url, MessageBody="x", MessageGroupId="h", MessageDeduplicationId="d1"
    )
    assert other["MessageId"] != first["MessageId"]
    assert root.get("jobs.fifo").counts().ready == 2
    sqs.set_queue_attributes(QueueUrl=url, Attributes={"ContentBasedDeduplication": "true"})
    body = "same body"
    ids = [
        sqs.send_message(QueueUrl=url, MessageBody=body, MessageGroupId="g")["MessageId"]
        for _ in range(3)
    ]
    assert len(set(ids)) == 1
    assert root.get("jobs.fifo").counts().ready == 3
    got = sqs.receive_message(
        QueueUrl=url,
        MaxNumberOfMessages=10,
        MessageSystemAttributeNames=["MessageDeduplicationId", "SequenceNumber", "MessageGroupId"],
    )["Messages"]
    by_body = {m["Body"]: m["Attributes"] for m in got}
    assert by_body["x"]["MessageDeduplicationId"] == "d1"
    assert by_body[body]["MessageDeduplicationId"] == hashlib.sha256(body.encode()).hexdigest()
    assert len(by_body["x"]["SequenceNumber"]) == 20


def test_batch_deduplication_and_order(sqs: Any) -> None:
    url = _fifo(sqs)
    result = sqs.send_message_batch(
        QueueUrl=url,
        Entries=[
            {"Id": "a", "MessageBody": "1", "MessageGroupId": "g", "MessageDeduplicationId": "x"},
            {"Id": "b", "MessageBody": "2", "MessageGroupId": "g", "MessageDeduplicationId": "y"},
            {"Id": "c", "MessageBody": "3", "MessageGroupId": "g", "MessageDeduplicationId": "x"},
        ],
    )
    ids = {e["Id"]: e["MessageId"] for e in result["Successful"]}
    assert ids["a"] == ids["c"] != ids["b"]
    assert result["Failed"] == []
    bodies = []
    while True:
        got = sqs.receive_message(QueueUrl=url).get("Messages", [])
        if not got:
            break
        bodies.append(got[0]["Body"])
        sqs.delete_message(QueueUrl=url, ReceiptHandle=got[0]["ReceiptHandle"])
    assert bodies == ["1", "2"]


def test_receive_request_attempt_id_repeats_the_answer(sqs: Any) -> None:
    url = _fifo(sqs, ContentBasedDeduplication="true")
    for i in range(3):
        sqs.send_message(QueueUrl=url, MessageBody=str(i), MessageGroupId=f"g{i}")
    first = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=2, ReceiveRequestAttemptId="r1")
    retry = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=2, ReceiveRequestAttemptId="r1")
    assert first["Messages"] == retry["Messages"]
    other = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=2, ReceiveRequestAttemptId="r2")
    assert {m["Body"] for m in other["Messages"]}.isdisjoint(m["Body"] for m in first["Messages"])
    for message in first["Messages"]:
        sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])


def test_receipt_handles_name_their_partition(sqs: Any) -> None:
    url = _fifo(sqs, ContentBasedDeduplication="true")
    sqs.send_message(QueueUrl=url, MessageBody="m", MessageGroupId="g")
    handle = sqs.receive_message(QueueUrl=url)["Messages"][0]["ReceiptHandle"]
    assert handle.startswith("p")
    for bad in ("p99-1.2", handle.split("-", 1)[1], "p0-x"):
        with pytest.raises(ClientError) as caught:
            sqs.delete_message(QueueUrl=url, ReceiptHandle=bad)
        assert _code(caught) == "ReceiptHandleIsInvalid"
    sqs.delete_message(QueueUrl=url, ReceiptHandle=handle)
    assert "Messages" not in sqs.receive_message(QueueUrl=url)


def test_a_long_poll_on_a_fifo_queue_returns_when_a_message_comes(
    sqs: Any, root: vsqs.QueueRoot
) -> None:
    url = _fifo(sqs, ContentBasedDeduplication="true")
    queue = root.get("jobs.fifo")
    publisher = threading.Timer(0.3, lambda: queue.publish(b"late", group="g", dedup_id="d"))
    publisher.start()
    began = time.monotonic()
    got = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=10, AttributeNames=["All"])
    publisher.join()
    assert time.monotonic() - began < 3
    (message,) = got["Messages"]
    assert message["Body"] == "late"
    assert message["Attributes"]["MessageGroupId"] == "g"


def test_a_stopped_consumer_never_keeps_a_long_poll_from_answering(
    server: Server, root: vsqs.QueueRoot, tmp_path: Path
) -> None:
    """A consumer stopped (SIGSTOP) while it holds group A's message, then one stopped
    while it holds the claim lock of that partition: ``ReceiveMessage`` gets group B's
    message (same partition) at once, and ``WaitTimeSeconds=1`` is answered in time."""
    sqs = client(server.url)
    sqs.meta.config.read_timeout = 10  # a server waiting for a stopped holder fails fast
    url = _fifo(sqs, ContentBasedDeduplication="true")
    queue = root.get("jobs.fifo")
    assert isinstance(queue, vsqs.PartitionedQueue)
    a, b = workers.same_partition(queue, 2)
    for body, group in [("a:0", a), ("a:1", a), ("b:0", b)]:
        sqs.send_message(QueueUrl=url, MessageBody=body, MessageGroupId=group)

    def receive(wait: int) -> tuple[list[str], float]:
        began = time.monotonic()
        got = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=wait, MaxNumberOfMessages=10)
        return [m["Body"] for m in got.get("Messages", [])], time.monotonic() - began

    with children() as kids:
        holder = kids.start(workers.hold_and_stop, queue.path, str(tmp_path / "held"), 60.0)
        wait_until(lambda: holder.pid is not None and workers.stopped(holder.pid), "the stop")
        assert load(str(tmp_path / "held")) == ["a:0", a]
        assert receive(0)[0] == ["b:0"]
        bodies, took = receive(1)
        assert bodies == [] and took < 2.5, took
        part = queue.partition_for(a).path
        locker = kids.start(workers.lock_and_stop, part, str(tmp_path / "locked"))
        wait_until(lambda: locker.pid is not None and workers.stopped(locker.pid), "the stop")
        bodies, took = receive(1)
        assert bodies == [] and took < 2.5, took


def test_attribute_limits_with_a_deduplication_id(sqs: Any) -> None:
    url = _fifo(sqs)
    ten = {f"a{i}": {"DataType": "String", "StringValue": "v"} for i in range(10)}
    nine = dict(list(ten.items())[:9])
    sent = sqs.send_message(
        QueueUrl=url, MessageBody="m", MessageGroupId="g", MessageDeduplicationId="d",
        MessageAttributes=nine,
    )  # fmt: skip
    assert sent["MD5OfMessageAttributes"]
    with pytest.raises(ClientError) as caught:  # vsqs keeps at most 10 (documented)
        sqs.send_message(
            QueueUrl=url, MessageBody="m", MessageGroupId="g", MessageDeduplicationId="e",
            MessageAttributes=ten,
        )  # fmt: skip
    assert _code(caught) == "InvalidParameterValue"


def test_the_library_deduplicates_against_the_api_with_the_documented_id(
    sqs: Any, root: vsqs.QueueRoot
) -> None:
    url = _fifo(sqs)
    first = root.get("jobs.fifo").publish(b"from the library", group="g", dedup_id="d1")
    sent = sqs.send_message(
        QueueUrl=url, MessageBody="from the API", MessageGroupId="g", MessageDeduplicationId="d1"
    )
    assert vsqs_id_of(sent["MessageId"]) == first
    # Per message group: the group, a newline and the id.
    sqs.set_queue_attributes(QueueUrl=url, Attributes={"DeduplicationScope": "messageGroup"})
    second = root.get("jobs.fifo").publish(b"library", group="h", dedup_id="h\nd2")
    sent = sqs.send_message(
        QueueUrl=url, MessageBody="API", MessageGroupId="h", MessageDeduplicationId="d2"
    )
    assert vsqs_id_of(sent["MessageId"]) == second
    assert root.get("jobs.fifo").counts().ready == 2
