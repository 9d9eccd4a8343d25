"""Every action of the SQS API through boto3 (the JSON protocol), on a standard queue,
checked against what the vsqs library sees in the root."""

from __future__ import annotations

import base64
import errno
import hashlib
import json
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

import vsqs
from vsqs import _fs
from vsqs._ids import parse_name
from vsqs.serve import Server

from .conftest import client


def vsqs_id_of(message_id: str) -> str:
    """The vsqs id a MessageId holds: its hex digits but the version and variant ones."""
    digits = message_id.replace("-", "")
    assert len(digits) == 32 and digits[12] == "4" and digits[16] == "8", message_id
    return (digits[:12] + digits[13:16] + digits[17:]).lstrip("0")


ARN = "arn:aws:sqs:us-east-1:000000000000:"


def _code(error: pytest.ExceptionInfo[ClientError]) -> str:
    return str(error.value.response["Error"]["Code"])


def test_create_get_list_delete(sqs: Any, server: Server, root: vsqs.QueueRoot) -> None:
    """CreateQueue makes a directory; GetQueueUrl, ListQueues (prefix, pages) find it;
    DeleteQueue removes it and then it does not exist."""
    url = sqs.create_queue(QueueName="orders")["QueueUrl"]
    host = server.url.removeprefix("http://")
    assert url == f"http://{host}/000000000000/orders"
    assert "orders" in root
    for name in ("orders-eu", "billing", "orders_us"):
        sqs.create_queue(QueueName=name)
    assert sqs.get_queue_url(QueueName="billing")["QueueUrl"].endswith("/000000000000/billing")
    assert sqs.list_queues()["QueueUrls"] == [
        f"http://{host}/000000000000/{n}" for n in ("billing", "orders", "orders-eu", "orders_us")
    ]
    listed = sqs.list_queues(QueueNamePrefix="orders")["QueueUrls"]
    assert [u.rsplit("/", 1)[1] for u in listed] == ["orders", "orders-eu", "orders_us"]
    first = sqs.list_queues(MaxResults=3)
    assert len(first["QueueUrls"]) == 3 and first["NextToken"]
    second = sqs.list_queues(MaxResults=3, NextToken=first["NextToken"])
    assert [u.rsplit("/", 1)[1] for u in second["QueueUrls"]] == ["orders_us"]
    assert "NextToken" not in second
    assert "QueueUrls" not in sqs.list_queues(QueueNamePrefix="nothing")
    sqs.delete_queue(QueueUrl=url)
    assert "orders" not in root
    with pytest.raises(ClientError) as caught:
        sqs.get_queue_url(QueueName="orders")
    assert _code(caught) == "AWS.SimpleQueueService.NonExistentQueue"
    assert isinstance(caught.value, sqs.exceptions.QueueDoesNotExist)
    with pytest.raises(sqs.exceptions.QueueDoesNotExist):
        sqs.send_message(QueueUrl=url, MessageBody="x")
    # Any account id and host in a URL is accepted: the path names the queue.
    other = "https://sqs.eu-west-1.amazonaws.com/123456789012/billing"
    assert sqs.get_queue_attributes(QueueUrl=other, AttributeNames=["QueueArn"])


def test_create_queue_stores_attributes_as_vsqs_settings(sqs: Any, root: vsqs.QueueRoot) -> None:
    sqs.create_queue(QueueName="dlq")
    url = sqs.create_queue(
        QueueName="work",
        Attributes={
            "VisibilityTimeout": "45",
            "DelaySeconds": "2",
            "MessageRetentionPeriod": "600",
            "MaximumMessageSize": "2048",
            "ReceiveMessageWaitTimeSeconds": "3",
            "RedrivePolicy": json.dumps({"deadLetterTargetArn": ARN + "dlq", "maxReceiveCount": 4}),
        },
        tags={"team": "a"},
    )["QueueUrl"]
    settings = root.get("work").settings()
    assert settings == {
        "visibility_timeout": 45.0,
        "delay": 2.0,
        "retention": 600.0,
        "dead_letter": "dlq",
        "max_receives": 4,
    }
    assert root.get("work").visibility_timeout == 45.0
    attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert attributes["VisibilityTimeout"] == "45"
    assert attributes["MaximumMessageSize"] == "2048"
    assert attributes["ReceiveMessageWaitTimeSeconds"] == "3"
    assert json.loads(attributes["RedrivePolicy"]) == {
        "deadLetterTargetArn": ARN + "dlq",
        "maxReceiveCount": 4,
    }
    assert attributes["QueueArn"] == ARN + "work"
    assert "FifoQueue" not in attributes
    # The same attributes again: the same URL; different ones: QueueNameExists.
    assert (
        sqs.create_queue(QueueName="work", Attributes={"VisibilityTimeout": "45"})["QueueUrl"]
        == url
    )
    with pytest.raises(ClientError) as caught:
        sqs.create_queue(QueueName="work", Attributes={"VisibilityTimeout": "46"})
    assert _code(caught) == "QueueAlreadyExists"
    assert isinstance(caught.value, sqs.exceptions.QueueNameExists)
    # A queue made through the API gets SQS's default retention (4 days).
    sqs.create_queue(QueueName="plain")
    assert root.get("plain").settings() == {"retention": 345600.0}


def test_set_queue_attributes(sqs: Any, root: vsqs.QueueRoot) -> None:
    url = sqs.create_queue(QueueName="q")["QueueUrl"]
    sqs.create_queue(QueueName="q-dlq")
    sqs.set_queue_attributes(
        QueueUrl=url,
        Attributes={
            "VisibilityTimeout": "5",
            "RedrivePolicy": json.dumps(
                {"deadLetterTargetArn": ARN + "q-dlq", "maxReceiveCount": "2"}
            ),
            "Policy": json.dumps({"Version": "2012-10-17"}),
        },
    )
    assert root.get("q").settings()["visibility_timeout"] == 5.0
    assert root.get("q").settings()["max_receives"] == 2
    got = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["VisibilityTimeout", "Policy"])
    assert got["Attributes"] == {"VisibilityTimeout": "5", "Policy": '{"Version": "2012-10-17"}'}
    # The server's cached handle sees the change: a receive holds for 5 s, not 30.
    sqs.send_message(QueueUrl=url, MessageBody="m")
    before = time.time()
    handle = sqs.receive_message(QueueUrl=url)["Messages"][0]["ReceiptHandle"]
    receipt = handle.split("~")[0]  # the vsqs receipt: id.expiry (µs), then ~count
    assert int(receipt.rsplit(".", 1)[1]) / 1e6 - before < 10
    sqs.set_queue_attributes(QueueUrl=url, Attributes={"RedrivePolicy": ""})
    assert "dead_letter" not in root.get("q").settings()
    for bad, code in [
        ({"VisibilityTimeout": "43201"}, "InvalidAttributeValue"),
        ({"DelaySeconds": "x"}, "InvalidAttributeValue"),
        ({"Nope": "1"}, "InvalidAttributeName"),
        ({"QueueArn": "x"}, "InvalidAttributeName"),
        ({"FifoQueue": "true"}, "InvalidAttributeName"),
        ({"RedrivePolicy": "{"}, "InvalidAttributeValue"),
        (
            {
                "RedrivePolicy": json.dumps(
                    {"deadLetterTargetArn": ARN + "none", "maxReceiveCount": 1}
                )
            },
            "InvalidAttributeValue",
        ),
        ({"ContentBasedDeduplication": "true"}, "InvalidAttributeName"),
    ]:
        with pytest.raises(ClientError) as caught:
            sqs.set_queue_attributes(QueueUrl=url, Attributes=bad)
        assert _code(caught) == code, bad
    with pytest.raises(ClientError) as caught:
        sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["Nope"])
    assert _code(caught) == "InvalidAttributeName"


def test_send_receive_delete_with_every_attribute_type(sqs: Any, root: vsqs.QueueRoot) -> None:
    url = sqs.create_queue(QueueName="q")["QueueUrl"]
    attributes = {
        "s": {"DataType": "String", "StringValue": "hello wörld"},
        "n": {"DataType": "Number", "StringValue": "-12.5e3"},
        "b": {"DataType": "Binary", "BinaryValue": b"\x00\x01\xff"},
        "c": {"DataType": "String.custom", "StringValue": "x"},
        "d": {"DataType": "Binary.png", "BinaryValue": b"PNG"},
    }
    body = "héllo \t\n\r <&>"
    sent = sqs.send_message(QueueUrl=url, MessageBody=body, MessageAttributes=attributes)
    assert sent["MD5OfMessageBody"] == hashlib.md5(body.encode(), usedforsecurity=False).hexdigest()
    # As moto computes it, independently of this code (and as the SDKs check it).
    assert sent["MD5OfMessageAttributes"] == "4516699dc4f3c792d5a9f3c832e847d3"
    # The library sees the message, its attributes in the documented encoding.
    (stored,) = list(root.get("q").browse())
    assert stored.body == body.encode()
    assert stored.id == vsqs_id_of(sent["MessageId"])
    assert dict(stored.attributes) == {
        "s": "String:hello wörld",
        "n": "Number:-12.5e3",
        "b": "Binary:AAH/",
        "c": "String.custom:x",
        "d": "Binary.png:UE5H",
    }
    got = sqs.receive_message(
        QueueUrl=url, MessageAttributeNames=["All"], AttributeNames=["All"], VisibilityTimeout=60
    )
    (message,) = got["Messages"]
    assert message["Body"] == body
    assert message["MD5OfBody"] == sent["MD5OfMessageBody"]
    assert message["MD5OfMessageAttributes"] == sent["MD5OfMessageAttributes"]
    assert message["MessageAttributes"]["b"] == {
        "DataType": "Binary",
        "BinaryValue": b"\x00\x01\xff",
    }
    assert message["MessageAttributes"]["n"] == {"DataType": "Number", "StringValue": "-12.5e3"}
    system = message["Attributes"]
    assert system["ApproximateReceiveCount"] == "1"
    assert abs(int(system["SentTimestamp"]) / 1000 - time.time()) < 60
    assert "ApproximateFirstReceiveTimestamp" in system and "SenderId" in system
    # Only the attributes asked for, by name or prefix; their digest is of those.
    sqs.change_message_visibility(
        QueueUrl=url, ReceiptHandle=message["ReceiptHandle"], VisibilityTimeout=0
    )
    again = sqs.receive_message(QueueUrl=url, MessageAttributeNames=["s", "x.*"])["Messages"][0]
    assert set(again["MessageAttributes"]) == {"s"}
    assert (
        again["MD5OfMessageAttributes"]
        == hashlib.md5(
            b"\x00\x00\x00\x01s\x00\x00\x00\x06String\x01\x00\x00\x00\x0chello w\xc3\xb6rld",
            usedforsecurity=False,
        ).hexdigest()
    )
    assert "Attributes" not in again
    sqs.delete_message(QueueUrl=url, ReceiptHandle=again["ReceiptHandle"])
    assert root.get("q").counts().total == 0
    # Deleting again (a stale receipt) is not an error, as in SQS.
    sqs.delete_message(QueueUrl=url, ReceiptHandle=again["ReceiptHandle"])
    with pytest.raises(ClientError) as caught:
        sqs.delete_message(QueueUrl=url, ReceiptHandle="not-a-receipt")
    assert _code(caught) == "ReceiptHandleIsInvalid"


def test_library_messages_are_served_and_served_messages_reach_the_library(
    sqs: Any, root: vsqs.QueueRoot
) -> None:
    url = sqs.create_queue(QueueName="q")["QueueUrl"]
    queue = root.get("q")
    queue.publish(b"from the library", attributes={"plain": "text: with a colon"})
    (message,) = sqs.receive_message(QueueUrl=url, MessageAttributeNames=["All"])["Messages"]
    assert message["Body"] == "from the library"
    assert message["MessageAttributes"] == {
        "plain": {"DataType": "String", "StringValue": "text: with a colon"}
    }
    sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
    sqs.send_message(QueueUrl=url, MessageBody="to the library")
    got = queue.receive(timeout=5)
    assert got is not None and got.body == b"to the library"
    assert queue.delete(got)


def test_library_bodies_sqs_could_not_hold_are_served_replaced_with_their_digest(
    sqs: Any, root: vsqs.QueueRoot
) -> None:
    """Bytes that are not UTF-8, or characters outside XML 1.0's, come out as U+FFFD, and
    MD5OfBody is of what is sent (botocore checks it, and raises if it differs)."""
    url = sqs.create_queue(QueueName="q")["QueueUrl"]
    bodies = {
        b"\xff\xfe not utf-8": "\ufffd\ufffd not utf-8",
        b"nul \x00 and escape \x1b": "nul \ufffd and escape \ufffd",
        "h\u00e9llo \u2713 \U0001f600".encode(): "h\u00e9llo \u2713 \U0001f600",
        b"plain ascii ~": "plain ascii ~",
        b"tab\tand\nnewline\r": "tab\tand\nnewline\r",
    }
    root.get("q").publish_batch(list(bodies))
    got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
    assert [m["Body"] for m in got] == list(bodies.values())
    for message in got:
        digest = hashlib.md5(message["Body"].encode(), usedforsecurity=False).hexdigest()
        assert message["MD5OfBody"] == digest


def test_batches(sqs: Any, root: vsqs.QueueRoot) -> None:
    url = sqs.create_queue(QueueName="q")["QueueUrl"]
    entries: list[dict[str, Any]] = [{"Id": f"m{i}", "MessageBody": f"body {i}"} for i in range(9)]
    entries.append({"Id": "bad", "MessageBody": "x", "DelaySeconds": 901})
    entries[3]["MessageAttributes"] = {"k": {"DataType": "String", "StringValue": "v"}}
    result = sqs.send_message_batch(QueueUrl=url, Entries=entries)
    assert [e["Id"] for e in result["Successful"]] == [f"m{i}" for i in range(9)]
    assert result["Successful"][3]["MD5OfMessageAttributes"]
    (failed,) = result["Failed"]
    assert failed["Id"] == "bad" and failed["Code"] == "InvalidParameterValue"
    assert failed["SenderFault"] is True
    bodies = [m.body for m in root.get("q").browse()]
    assert bodies == [f"body {i}".encode() for i in range(9)]  # in order
    received: list[dict[str, Any]] = []
    while len(received) < 9:
        received += sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
    assert [m["Body"] for m in received] == [f"body {i}" for i in range(9)]
    handles = [{"Id": f"d{i}", "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(received)]
    changed = sqs.change_message_visibility_batch(
        QueueUrl=url,
        Entries=[{**h, "VisibilityTimeout": 120} for h in handles[:2]]
        + [{"Id": "x", "ReceiptHandle": "junk", "VisibilityTimeout": 1}],
    )
    assert [e["Id"] for e in changed["Successful"]] == ["d0", "d1"]
    assert changed["Failed"][0]["Code"] == "ReceiptHandleIsInvalid"
    deleted = sqs.delete_message_batch(
        QueueUrl=url, Entries=[*handles, {"Id": "y", "ReceiptHandle": "junk"}]
    )
    assert len(deleted["Successful"]) == 9
    assert deleted["Failed"][0]["Id"] == "y"
    assert root.get("q").counts().total == 0
    for bad_entries, code in [
        ([], "AWS.SimpleQueueService.EmptyBatchRequest"),
        ([{"Id": f"e{i}", "MessageBody": "x"} for i in range(11)],
         "AWS.SimpleQueueService.TooManyEntriesInBatchRequest"),
        ([{"Id": "a", "MessageBody": "x"}, {"Id": "a", "MessageBody": "y"}],
         "AWS.SimpleQueueService.BatchEntryIdsNotDistinct"),
        ([{"Id": "no spaces", "MessageBody": "x"}], "AWS.SimpleQueueService.InvalidBatchEntryId"),
        ([{"Id": f"e{i}", "MessageBody": "x" * 400_000} for i in range(3)],
         "AWS.SimpleQueueService.BatchRequestTooLong"),
    ]:  # fmt: skip
        with pytest.raises(ClientError) as caught:
            sqs.send_message_batch(QueueUrl=url, Entries=bad_entries)
        assert _code(caught) == code


def test_change_visibility_releases_and_extends(sqs: Any, root: vsqs.QueueRoot) -> None:
    url = sqs.create_queue(QueueName="q")["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="m")
    first = sqs.receive_message(QueueUrl=url, VisibilityTimeout=30)["Messages"][0]
    assert "Messages" not in sqs.receive_message(QueueUrl=url)
    sqs.change_message_visibility(
        QueueUrl=url, ReceiptHandle=first["ReceiptHandle"], VisibilityTimeout=300
    )
    assert root.get("q").counts().held == 1
    # The extended message is still deleted by the handle its receive gave.
    sqs.change_message_visibility(
        QueueUrl=url, ReceiptHandle=first["ReceiptHandle"], VisibilityTimeout=0
    )
    second = sqs.receive_message(QueueUrl=url, AttributeNames=["ApproximateReceiveCount"])[
        "Messages"
    ][0]
    assert second["Attributes"]["ApproximateReceiveCount"] == "2"
    with pytest.raises(ClientError) as caught:
        sqs.change_message_visibility(
            QueueUrl=url, ReceiptHandle=first["ReceiptHandle"], VisibilityTimeout=5
        )
    assert _code(caught) == "InvalidParameterValue"
    with pytest.raises(ClientError) as caught:
        sqs.change_message_visibility(
            QueueUrl=url, ReceiptHandle=second["ReceiptHandle"], VisibilityTimeout=43201
        )
    assert _code(caught) == "InvalidParameterValue"
    sqs.delete_message(QueueUrl=url, ReceiptHandle=second["ReceiptHandle"])
    assert root.get("q").counts().total == 0


def test_long_poll_returns_when_a_message_comes(sqs: Any, root: vsqs.QueueRoot) -> None:
    url = sqs.create_queue(QueueName="q")["QueueUrl"]
    began = time.monotonic()
    assert "Messages" not in sqs.receive_message(QueueUrl=url, WaitTimeSeconds=1)
    assert 0.9 < time.monotonic() - began < 5
    publisher = threading.Timer(0.5, lambda: root.get("q").publish(b"late"))
    publisher.start()
    began = time.monotonic()
    got = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=20)
    took = time.monotonic() - began
    publisher.join()
    assert got["Messages"][0]["Body"] == "late"
    assert took < 3  # as soon as it came, not at the end of the 20 s
    # The queue's ReceiveMessageWaitTimeSeconds is the default wait.
    sqs.set_queue_attributes(QueueUrl=url, Attributes={"ReceiveMessageWaitTimeSeconds": "1"})
    sqs.delete_message(QueueUrl=url, ReceiptHandle=got["Messages"][0]["ReceiptHandle"])
    began = time.monotonic()
    sqs.receive_message(QueueUrl=url)
    assert time.monotonic() - began > 0.9
    with pytest.raises(ClientError) as caught:
        sqs.receive_message(QueueUrl=url, WaitTimeSeconds=21)
    assert _code(caught) == "InvalidParameterValue"


def test_purge_and_counts(sqs: Any, root: vsqs.QueueRoot) -> None:
    url = sqs.create_queue(QueueName="q")["QueueUrl"]
    queue = root.get("q")
    queue.publish_batch([b"a", b"b", b"c"])
    queue.publish(b"later", delay=600)
    sqs.receive_message(QueueUrl=url)
    names = [
        "ApproximateNumberOfMessages",
        "ApproximateNumberOfMessagesNotVisible",
        "ApproximateNumberOfMessagesDelayed",
    ]
    got = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=names)["Attributes"]
    assert got == dict(zip(names, ["2", "1", "1"], strict=True))
    sqs.purge_queue(QueueUrl=url)
    assert queue.counts().total == 0


def test_dead_letter_sources_and_move_tasks(sqs: Any, root: vsqs.QueueRoot) -> None:
    dlq = sqs.create_queue(QueueName="dlq")["QueueUrl"]
    policy = json.dumps({"deadLetterTargetArn": ARN + "dlq", "maxReceiveCount": 1})
    sources = [
        sqs.create_queue(QueueName=name, Attributes={"RedrivePolicy": policy})["QueueUrl"]
        for name in ("a", "b")
    ]
    sqs.create_queue(QueueName="c")
    assert sorted(sqs.list_dead_letter_source_queues(QueueUrl=dlq)["queueUrls"]) == sorted(sources)
    # Two messages die in "a" (one receive allowed, then released).
    sqs.send_message_batch(
        QueueUrl=sources[0],
        Entries=[{"Id": "1", "MessageBody": "x"}, {"Id": "2", "MessageBody": "y"}],
    )
    for message in sqs.receive_message(QueueUrl=sources[0], MaxNumberOfMessages=10)["Messages"]:
        sqs.change_message_visibility(
            QueueUrl=sources[0], ReceiptHandle=message["ReceiptHandle"], VisibilityTimeout=0
        )
    assert root.get("dlq").counts().ready == 2
    dead = sqs.receive_message(QueueUrl=dlq, AttributeNames=["DeadLetterQueueSourceArn"])[
        "Messages"
    ][0]
    assert dead["Attributes"]["DeadLetterQueueSourceArn"] == ARN + "a"
    sqs.change_message_visibility(
        QueueUrl=dlq, ReceiptHandle=dead["ReceiptHandle"], VisibilityTimeout=0
    )
    with pytest.raises(ClientError) as caught:
        sqs.start_message_move_task(SourceArn=ARN + "c")
    assert _code(caught) == "InvalidParameterValue"
    handle = sqs.start_message_move_task(SourceArn=ARN + "dlq")["TaskHandle"]
    deadline = time.monotonic() + 10
    while True:
        (task,) = sqs.list_message_move_tasks(SourceArn=ARN + "dlq")["Results"]
        if task["Status"] != "RUNNING" or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert task["Status"] == "COMPLETED"
    assert task["ApproximateNumberOfMessagesMoved"] == 2
    assert task["SourceArn"] == ARN + "dlq"
    assert root.get("a").counts().ready == 2 and root.get("dlq").counts().total == 0
    with pytest.raises(ClientError) as caught:
        sqs.cancel_message_move_task(TaskHandle=handle)  # it is over
    assert _code(caught) == "ResourceNotFoundException"
    # A slow task (1 message a second) is cancelled between two seconds.
    root.get("dlq").publish_batch([b"m"] * 5)
    handle = sqs.start_message_move_task(
        SourceArn=ARN + "dlq", DestinationArn=ARN + "c", MaxNumberOfMessagesPerSecond=1
    )["TaskHandle"]
    with pytest.raises(ClientError) as caught:
        sqs.start_message_move_task(SourceArn=ARN + "dlq")
    assert _code(caught) == "InvalidParameterValue"  # one task at a time
    sqs.cancel_message_move_task(TaskHandle=handle)
    deadline = time.monotonic() + 10
    while sqs.list_message_move_tasks(SourceArn=ARN + "dlq")["Results"][0]["Status"] != "CANCELLED":
        assert time.monotonic() < deadline
        time.sleep(0.05)
    tasks = sqs.list_message_move_tasks(SourceArn=ARN + "dlq", MaxResults=10)["Results"]
    assert [t["Status"] for t in tasks] == ["CANCELLED", "COMPLETED"]
    assert tasks[0]["DestinationArn"] == ARN + "c"
    assert root.get("c").counts().ready < 5


def test_tags(sqs: Any) -> None:
    url = sqs.create_queue(QueueName="q", tags={"team": "orders"})["QueueUrl"]
    assert sqs.list_queue_tags(QueueUrl=url)["Tags"] == {"team": "orders"}
    sqs.tag_queue(QueueUrl=url, Tags={"env": "prod", "team": "billing"})
    assert sqs.list_queue_tags(QueueUrl=url)["Tags"] == {"team": "billing", "env": "prod"}
    sqs.untag_queue(QueueUrl=url, TagKeys=["team", "absent"])
    assert sqs.list_queue_tags(QueueUrl=url)["Tags"] == {"env": "prod"}
    with pytest.raises(ClientError) as caught:
        sqs.tag_queue(QueueUrl=url, Tags={f"k{i}": "v" for i in range(50)})
    assert _code(caught) == "InvalidParameterValue"  # 51 tags in all
    sqs.untag_queue(QueueUrl=url, TagKeys=["env"])
    assert "Tags" not in sqs.list_queue_tags(QueueUrl=url)


def test_permissions_are_recorded(sqs: Any, root: vsqs.QueueRoot) -> None:
    url = sqs.create_queue(QueueName="q")["QueueUrl"]
    sqs.add_permission(
        QueueUrl=url, Label="l1", AWSAccountIds=["111122223333"], Actions=["SendMessage"]
    )
    with pytest.raises(ClientError) as caught:
        sqs.add_permission(QueueUrl=url, Label="l1", AWSAccountIds=["1"], Actions=["*"])
    assert _code(caught) == "InvalidParameterValue"
    with pytest.raises(ClientError) as caught:
        sqs.add_permission(QueueUrl=url, Label="l2", AWSAccountIds=["1"], Actions=["Fly"])
    assert _code(caught) == "InvalidParameterValue"
    from vsqs.serve import _sidecar

    assert _sidecar.read(root.get("q").path)["permissions"] == {
        "l1": {"accounts": ["111122223333"], "actions": ["SendMessage"]}
    }
    sqs.remove_permission(QueueUrl=url, Label="l1")
    assert _sidecar.read(root.get("q").path)["permissions"] == {}
    with pytest.raises(ClientError) as caught:
        sqs.remove_permission(QueueUrl=url, Label="l1")
    assert _code(caught) == "InvalidParameterValue"


def test_message_validation(sqs: Any) -> None:
    url = sqs.create_queue(QueueName="q", Attributes={"MaximumMessageSize": "1024"})["QueueUrl"]
    cases: list[tuple[dict[str, Any], str]] = [
        ({"MessageBody": ""}, "MissingParameter"),
        ({"MessageBody": "x" * 1025}, "InvalidParameterValue"),
        ({"MessageBody": "\x00"}, "InvalidMessageContents"),
        ({"MessageBody": "x", "DelaySeconds": 901}, "InvalidParameterValue"),
        ({"MessageBody": "x", "MessageDeduplicationId": "d"}, "InvalidParameterValue"),
        (
            {
                "MessageBody": "x",
                "MessageAttributes": {
                    f"a{i}": {"DataType": "String", "StringValue": "v"} for i in range(11)
                },
            },
            "InvalidParameterValue",
        ),
        (
            {
                "MessageBody": "x",
                "MessageAttributes": {"AWS.x": {"DataType": "String", "StringValue": "v"}},
            },
            "InvalidParameterValue",
        ),
        (
            {
                "MessageBody": "x",
                "MessageAttributes": {"a": {"DataType": "Number", "StringValue": "ten"}},
            },
            "InvalidParameterValue",
        ),
        (
            {
                "MessageBody": "x",
                "MessageAttributes": {"a": {"DataType": "Float", "StringValue": "1"}},
            },
            "InvalidParameterValue",
        ),
        (
            {
                "MessageBody": "x",
                "MessageAttributes": {"a": {"DataType": "String", "StringValue": ""}},
            },
            "InvalidParameterValue",
        ),
    ]
    for params, code in cases:
        with pytest.raises(ClientError) as caught:
            sqs.send_message(QueueUrl=url, **params)
        assert _code(caught) == code, params
    # A delay is honoured: the message is not received before it.
    sqs.send_message(QueueUrl=url, MessageBody="later", DelaySeconds=60)
    assert "Messages" not in sqs.receive_message(QueueUrl=url)


def test_binary_attributes_round_trip_base64_in_the_json(sqs: Any) -> None:
    url = sqs.create_queue(QueueName="q")["QueueUrl"]
    raw = bytes(range(256))
    sqs.send_message(
        QueueUrl=url,
        MessageBody="b",
        MessageAttributes={"r": {"DataType": "Binary", "BinaryValue": raw}},
    )
    got = sqs.receive_message(QueueUrl=url, MessageAttributeNames=["r"])["Messages"][0]
    assert got["MessageAttributes"]["r"]["BinaryValue"] == raw
    assert base64.b64encode(raw)


def test_trace_header_and_library_queue_names(sqs: Any, root: vsqs.QueueRoot) -> None:
    """The one system attribute a sender sets comes back with its digest; a queue the
    library named with a dot (``orders.dlq``, not an SQS name) is served too."""
    root.create("orders.dlq")
    url = sqs.get_queue_url(QueueName="orders.dlq")["QueueUrl"]
    trace = {"AWSTraceHeader": {"DataType": "String", "StringValue": "Root=1-5759e988-bd862e3fe"}}
    sent = sqs.send_message(QueueUrl=url, MessageBody="t", MessageSystemAttributes=trace)
    assert (
        sent["MD5OfMessageSystemAttributes"]
        == hashlib.md5(
            b"\x00\x00\x00\x0eAWSTraceHeader\x00\x00\x00\x06String\x01"
            b"\x00\x00\x00\x19Root=1-5759e988-bd862e3fe",
            usedforsecurity=False,
        ).hexdigest()
    )
    got = sqs.receive_message(QueueUrl=url, MessageSystemAttributeNames=["AWSTraceHeader"])
    assert got["Messages"][0]["Attributes"] == {"AWSTraceHeader": "Root=1-5759e988-bd862e3fe"}
    assert "MessageAttributes" not in got["Messages"][0]  # the trace is not a user attribute
    with pytest.raises(ClientError) as caught:
        sqs.create_queue(QueueName="orders.dlq2")  # SQS names have no dots
    assert _code(caught) == "InvalidParameterValue"


def test_create_queue_again_with_the_same_redrive_policy(sqs: Any) -> None:
    sqs.create_queue(QueueName="dlq")
    policy = {"deadLetterTargetArn": "arn:aws:sqs:eu-west-1:123456789012:dlq", "maxReceiveCount": 3}
    attributes = {"RedrivePolicy": json.dumps(policy)}
    url = sqs.create_queue(QueueName="q", Attributes=attributes)["QueueUrl"]
    # Any ARN naming the same queue, the count as a number or a string: the same policy.
    again = {**policy, "deadLetterTargetArn": ARN + "dlq", "maxReceiveCount": "3"}
    assert (
        sqs.create_queue(QueueName="q", Attributes={"RedrivePolicy": json.dumps(again)})["QueueUrl"]
        == url
    )
    with pytest.raises(ClientError) as caught:
        sqs.create_queue(
            QueueName="q",
            Attributes={"RedrivePolicy": json.dumps({**policy, "maxReceiveCount": 4})},
        )
    assert _code(caught) == "QueueAlreadyExists"


def test_settings_changed_by_another_process_are_used_by_the_next_request(
    sqs: Any, root: vsqs.QueueRoot
) -> None:
    """The server's cached handle is replaced once vsqs.settings_stamp says the stored
    settings changed: a receive without VisibilityTimeout takes the new default."""
    root.create("q")
    url = sqs.get_queue_url(QueueName="q")["QueueUrl"]
    assert sqs.receive_message(QueueUrl=url).get("Messages", []) == []  # a handle cached
    root.get("q").configure(visibility_timeout=2)  # as `vsqs config` would, elsewhere
    sqs.send_message(QueueUrl=url, MessageBody="m")
    assert len(sqs.receive_message(QueueUrl=url)["Messages"]) == 1
    (held,) = [n for n in os.listdir(Path(root.path, "q")) if not n.startswith(".")]
    expiry = parse_name(held)
    assert expiry is not None and expiry.expires is not None
    assert expiry.expires / 1e6 - time.time() < 10  # 2 s, not the cached handle's 30


def test_a_queue_made_again_by_the_library_is_served_fresh(sqs: Any, root: vsqs.QueueRoot) -> None:
    """The server's cached handle of a queue deleted and made again elsewhere is not
    used: messages go to the new directory."""
    root.create("q")  # no stored settings: nothing changes in .vsqs/settings.json
    url = sqs.get_queue_url(QueueName="q")["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="old", MessageAttributes={
        "k": {"DataType": "String", "StringValue": "v"}
    })  # fmt: skip
    root.delete("q")
    vsqs.Queue(root.path + "/q").close()  # made again, without settings
    sqs.send_message(QueueUrl=url, MessageBody="new", MessageAttributes={
        "k": {"DataType": "String", "StringValue": "v"}
    })  # fmt: skip
    got = root.get("q").receive(timeout=0)
    assert got is not None and got.body == b"new" and got.attributes["k"] == "String:v"


def test_a_handle_stays_valid_through_any_server_after_an_extension(
    start: Any, tmp_path: Path
) -> None:
    """As in SQS, ChangeMessageVisibility leaves the receipt handle valid: here through
    another server (or this one after a restart), which extended the lease."""
    first, second = start(tmp_path / "shared"), start(tmp_path / "shared")
    a, b = client(first.url), client(second.url)
    url = a.create_queue(QueueName="q")["QueueUrl"]
    queue = vsqs.QueueRoot(tmp_path / "shared").get("q")
    for body in ("delete me", "extend me twice"):
        a.send_message(QueueUrl=url, MessageBody=body)
        handle = a.receive_message(QueueUrl=url)["Messages"][0]["ReceiptHandle"]
        b.change_message_visibility(QueueUrl=url, ReceiptHandle=handle, VisibilityTimeout=300)
        b.change_message_visibility(QueueUrl=url, ReceiptHandle=handle, VisibilityTimeout=400)
        a.change_message_visibility(QueueUrl=url, ReceiptHandle=handle, VisibilityTimeout=500)
        assert queue.counts().held == 1
        a.delete_message(QueueUrl=url, ReceiptHandle=handle)
        assert queue.counts().total == 0
    # A lease that ended (extended far, then released) is not followed: its old handle
    # deletes nothing and changes nothing of the next delivery.
    a.send_message(QueueUrl=url, MessageBody="released")
    handle = a.receive_message(QueueUrl=url)["Messages"][0]["ReceiptHandle"]
    b.change_message_visibility(QueueUrl=url, ReceiptHandle=handle, VisibilityTimeout=900)
    b.change_message_visibility(QueueUrl=url, ReceiptHandle=handle, VisibilityTimeout=0)
    again = b.receive_message(QueueUrl=url)["Messages"][0]
    a.delete_message(QueueUrl=url, ReceiptHandle=handle)
    assert queue.counts().held == 1  # the second receive's lease is untouched
    with pytest.raises(ClientError) as caught:
        a.change_message_visibility(QueueUrl=url, ReceiptHandle=handle, VisibilityTimeout=5)
    assert _code(caught) == "InvalidParameterValue"
    b.delete_message(QueueUrl=url, ReceiptHandle=again["ReceiptHandle"])
    assert queue.counts().total == 0


@pytest.mark.parametrize("requeue", ["by a vsqs 0.3 peer", "on a full disk"])
def test_a_stale_handle_never_acts_on_a_later_delivery(
    start: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, requeue: str
) -> None:
    """A requeue that records no receive count (a vsqs 0.3 peer renames the expired
    lease straight back; vsqs on a full disk delivers without the count) leaves no
    record to tell a later delivery from an extension: the lease's name does. The
    first delivery's handle deletes and changes nothing of the second (before issue 37
    it deleted B's copy, and B's delete found nothing)."""
    first, second = start(tmp_path / "shared"), start(tmp_path / "shared")
    a, b = client(first.url), client(second.url)
    url = a.create_queue(QueueName="q")["QueueUrl"]
    queue_dir = tmp_path / "shared" / "q"
    a.send_message(QueueUrl=url, MessageBody="job")
    stale = a.receive_message(QueueUrl=url, VisibilityTimeout=0)["Messages"][0]
    (held,) = [p for p in queue_dir.iterdir() if "." in p.name and p.name[0] != "."]
    if requeue == "by a vsqs 0.3 peer":
        held.rename(queue_dir / held.name.split(".")[0])
    else:
        real = _fs.create_at

        def full(name: str, mode: int = 0o666, dir_fd: int | None = None) -> int:
            if name.startswith(".tmp-"):  # the receive count's record: no room for it
                raise OSError(errno.ENOSPC, "No space left on device", name)
            return real(name, mode, dir_fd)

        monkeypatch.setattr(_fs, "create_at", full)
    again = b.receive_message(QueueUrl=url, VisibilityTimeout=300)["Messages"][0]
    monkeypatch.undo()
    assert again["Body"] == "job"
    queue = vsqs.QueueRoot(tmp_path / "shared").get("q")
    for client_ in (a, b):  # through either server
        client_.delete_message(QueueUrl=url, ReceiptHandle=stale["ReceiptHandle"])
        assert queue.counts().held == 1  # the second delivery's lease is untouched
        with pytest.raises(ClientError) as caught:
            client_.change_message_visibility(
                QueueUrl=url, ReceiptHandle=stale["ReceiptHandle"], VisibilityTimeout=5
            )
        assert _code(caught) == "InvalidParameterValue"  # as SQS: not in flight
    b.delete_message(QueueUrl=url, ReceiptHandle=again["ReceiptHandle"])
    assert queue.counts().total == 0


def test_a_move_task_whose_server_stopped_shows_failed(start: Any, tmp_path: Path) -> None:
    server = start(tmp_path / "r")
    sqs = client(server.url)
    dlq = sqs.create_queue(QueueName="dlq")["QueueUrl"]
    policy = json.dumps({"deadLetterTargetArn": ARN + "dlq", "maxReceiveCount": 1})
    sqs.create_queue(QueueName="src", Attributes={"RedrivePolicy": policy})
    root = vsqs.QueueRoot(tmp_path / "r")
    root.get("dlq").publish_batch([b"m"] * 5)
    sqs.start_message_move_task(
        SourceArn=ARN + "dlq", DestinationArn=ARN + "src", MaxNumberOfMessagesPerSecond=1
    )
    server.shutdown()  # the task's thread stops with its server
    other = client(start(tmp_path / "r").url)
    deadline = time.monotonic() + 10
    while True:
        (task,) = other.list_message_move_tasks(SourceArn=ARN + "dlq")["Results"]
        if task["Status"] != "RUNNING" or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert task["Status"] == "FAILED"
    assert task["FailureReason"] == "the server stopped"
    assert root.get("src").counts().ready < 5 and dlq
    # A task whose server died without a word is shown FAILED after a minute of silence.
    from vsqs.serve import _sidecar

    def stale(record: dict[str, Any]) -> None:
        record["tasks"][-1].update(status="RUNNING", beat=time.time() - 120)
        record["tasks"][-1].pop("reason", None)

    _sidecar.update(root.get("dlq").path, stale)
    (task,) = other.list_message_move_tasks(SourceArn=ARN + "dlq")["Results"]
    assert task["Status"] == "FAILED" and "stopped" in task["FailureReason"]
    with pytest.raises(ClientError):
        other.cancel_message_move_task(TaskHandle="e30=")  # {} : not a task of ours
