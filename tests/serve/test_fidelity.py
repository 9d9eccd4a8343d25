"""``vsqs serve`` answers as SQS does: limits, codes, checks, ids and error texts.

Each expectation is SQS's, from its documentation or from answers recorded from SQS
itself (quoted texts); the outside suite of tests/outside checks moto's view of the same.
"""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

import vsqs
from vsqs.serve import Server

from ..reliability._mounts import mounted, why_not_mountable
from .conftest import Start, client
from .http import json_call
from .test_actions import vsqs_id_of

MIB = 1048576


def _error(caught: pytest.ExceptionInfo[ClientError]) -> tuple[str, str, int]:
    response: Any = caught.value.response
    return (
        response["Error"]["Code"],
        response["Error"]["Message"],
        response["ResponseMetadata"]["HTTPStatusCode"],
    )


def _fifo(sqs: Any, name: str = "f.fifo", **attributes: str) -> str:
    url: str = sqs.create_queue(QueueName=name, Attributes={"FifoQueue": "true", **attributes})[
        "QueueUrl"
    ]
    return url


def test_maximum_message_size_is_one_mebibyte(sqs: Any) -> None:
    url = sqs.create_queue(QueueName="q")["QueueUrl"]
    got = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["MaximumMessageSize"])
    assert got["Attributes"]["MaximumMessageSize"] == str(MIB)
    sqs.send_message(QueueUrl=url, MessageBody="a" * MIB)
    assert len(sqs.receive_message(QueueUrl=url)["Messages"][0]["Body"]) == MIB
    with pytest.raises(ClientError) as caught:
        sqs.send_message(QueueUrl=url, MessageBody="a" * (MIB + 1))
    assert _error(caught) == (
        "InvalidParameterValue",
        "One or more parameters are invalid. Reason: Message must be shorter than 1048576 bytes.",
        400,
    )


def test_a_missing_queue_is_400_whatever_names_it(sqs: Any) -> None:
    with pytest.raises(ClientError) as caught:
        sqs.get_queue_url(QueueName="nowhere")
    assert _error(caught) == (
        "AWS.SimpleQueueService.NonExistentQueue",
        "The specified queue does not exist.",
        400,
    )
    with pytest.raises(ClientError) as caught:
        sqs.get_queue_attributes(QueueUrl="http://whatever-incorrect-queue-address")
    assert _error(caught)[0::2] == ("AWS.SimpleQueueService.NonExistentQueue", 400)


def test_a_queue_name_is_taken_as_its_url(sqs: Any) -> None:
    sqs.create_queue(QueueName="named")
    sqs.send_message(QueueUrl="named", MessageBody="by name")
    assert sqs.receive_message(QueueUrl="named")["Messages"][0]["Body"] == "by name"


def test_fifo_sends_need_a_group_and_a_dedup_id(sqs: Any) -> None:
    url = _fifo(sqs)
    with pytest.raises(ClientError) as caught:
        sqs.send_message(QueueUrl=url, MessageBody="x", MessageDeduplicationId="d")
    assert _error(caught) == (
        "MissingParameter",
        "The request must contain the parameter MessageGroupId.",
        400,
    )
    no_dedup = (
        "InvalidParameterValue",
        "The queue should either have ContentBasedDeduplication enabled or "
        "MessageDeduplicationId provided explicitly",
        400,
    )
    with pytest.raises(ClientError) as caught:
        sqs.send_message(QueueUrl=url, MessageBody="x", MessageGroupId="g")
    assert _error(caught) == no_dedup
    # A batch with one such entry is refused whole, nothing sent (as SQS answers).
    good = {"Id": "a", "MessageBody": "a", "MessageGroupId": "g", "MessageDeduplicationId": "a"}
    with pytest.raises(ClientError) as caught:
        sqs.send_message_batch(
            QueueUrl=url, Entries=[good, {"Id": "b", "MessageBody": "b", "MessageGroupId": "g"}]
        )
    assert _error(caught) == no_dedup
    with pytest.raises(ClientError) as caught:
        sqs.send_message_batch(
            QueueUrl=url,
            Entries=[good, {"Id": "b", "MessageBody": "b", "MessageDeduplicationId": "b"}],
        )
    assert _error(caught) == (
        "InvalidParameterValue",
        "The request must contain the parameter MessageGroupId.",
        400,
    )
    assert "Messages" not in sqs.receive_message(QueueUrl=url)


def test_tag_errors(sqs: Any) -> None:
    url = sqs.create_queue(QueueName="tagged", tags={"k": "v"})["QueueUrl"]
    with pytest.raises(ClientError) as caught:
        sqs.tag_queue(QueueUrl=url, Tags={})
    assert _error(caught) == (
        "MissingParameter",
        "The request must contain the parameter Tags.",
        400,
    )
    with pytest.raises(ClientError) as caught:
        sqs.tag_queue(QueueUrl=url, Tags={f"k{i}": "v" for i in range(50)})
    assert _error(caught) == ("InvalidParameterValue", "Too many tags added for queue tagged.", 400)
    with pytest.raises(ClientError) as caught:
        sqs.untag_queue(QueueUrl=url, TagKeys=[])
    assert _error(caught)[1] == "Tag keys must be between 1 and 128 characters in length."
    assert sqs.list_queue_tags(QueueUrl=url)["Tags"] == {"k": "v"}


def test_permission_errors_and_the_policy_they_make(sqs: Any) -> None:
    url = sqs.create_queue(QueueName="shared")["QueueUrl"]
    assert "Attributes" not in sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["Policy"])
    sqs.add_permission(
        QueueUrl=url, Label="one", AWSAccountIds=["111111111111"], Actions=["SendMessage"]
    )
    policy = json.loads(
        sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["Policy"])["Attributes"]["Policy"]
    )
    arn = "arn:aws:sqs:us-east-1:000000000000:shared"
    assert policy == {
        "Version": "2012-10-17",
        "Id": f"{arn}/SQSDefaultPolicy",
        "Statement": [{
            "Sid": "one",
            "Effect": "Allow",
            "Principal": {"AWS": "arn:aws:iam::111111111111:root"},
            "Action": "SQS:SendMessage",
            "Resource": arn,
        }],
    }  # fmt: skip
    cases: list[tuple[dict[str, Any], tuple[str, str, int]]] = [
        (
            {"Label": "one", "AWSAccountIds": ["1"], "Actions": ["SendMessage"]},
            ("InvalidParameterValue", "Value one for parameter Label is invalid. Reason: Already "
             "exists.", 400),
        ),
        (
            {"Label": "two", "AWSAccountIds": ["1"], "Actions": ["RemovePermission"]},
            ("InvalidParameterValue", "Value SQS:RemovePermission for parameter ActionName is "
             "invalid. Reason: Only the queue owner is allowed to invoke this action.", 400),
        ),
        (
            {"Label": "two", "AWSAccountIds": ["1"], "Actions": []},
            ("MissingParameter", "The request must contain the parameter Actions.", 400),
        ),
        (
            {"Label": "two", "AWSAccountIds": [], "Actions": ["SendMessage"]},
            ("InvalidParameterValue", "Value [] for parameter PrincipalId is invalid. Reason: "
             "Unable to verify.", 400),
        ),
        (
            {"Label": "two", "AWSAccountIds": ["1"], "Actions": ["SendMessage"] * 8},
            ("OverLimit", "8 Actions were found, maximum allowed is 7.", 403),
        ),
    ]  # fmt: skip
    for params, expected in cases:
        with pytest.raises(ClientError) as caught:
            sqs.add_permission(QueueUrl=url, **params)
        assert _error(caught) == expected
    with pytest.raises(ClientError) as caught:
        sqs.remove_permission(QueueUrl=url, Label="two")
    assert (
        _error(caught)[1] == "Value two for parameter Label is invalid. Reason: can't find label."
    )
    sqs.remove_permission(QueueUrl=url, Label="one")
    assert "Attributes" not in sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["Policy"])


def test_an_empty_policy_removes_it(sqs: Any) -> None:
    policy = json.dumps({"Version": "2012-10-17", "Statement": []})
    url = sqs.create_queue(QueueName="p", Attributes={"Policy": policy})["QueueUrl"]
    got = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["Policy"])
    assert json.loads(got["Attributes"]["Policy"]) == json.loads(policy)
    sqs.set_queue_attributes(QueueUrl=url, Attributes={"Policy": ""})
    assert "Attributes" not in sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["Policy"])


def test_a_batch_entry_delayed_over_900_seconds_fails_alone(sqs: Any) -> None:
    url = sqs.create_queue(QueueName="q")["QueueUrl"]
    result = sqs.send_message_batch(
        QueueUrl=url,
        Entries=[
            {"Id": "ok", "MessageBody": "sent"},
            {"Id": "late", "MessageBody": "refused", "DelaySeconds": 1800},
        ],
    )
    assert [e["Id"] for e in result["Successful"]] == ["ok"]
    (failed,) = result["Failed"]
    assert (failed["Id"], failed["Code"], failed["SenderFault"]) == (
        "late",
        "InvalidParameterValue",
        True,
    )
    assert [m["Body"] for m in sqs.receive_message(QueueUrl=url)["Messages"]] == ["sent"]


def test_delay_seconds_0_overrides_the_queues_delay(sqs: Any) -> None:
    url = sqs.create_queue(QueueName="slow", Attributes={"DelaySeconds": "600"})["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="delayed")
    sqs.send_message(QueueUrl=url, MessageBody="now", DelaySeconds=0)
    sqs.send_message_batch(
        QueueUrl=url, Entries=[{"Id": "b", "MessageBody": "batch now", "DelaySeconds": 0}]
    )
    got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
    assert sorted(m["Body"] for m in got) == ["batch now", "now"]


def test_message_attribute_names_take_prefix_wildcards(sqs: Any) -> None:
    url = sqs.create_queue(QueueName="q")["QueueUrl"]
    attributes = {
        name: {"DataType": "String", "StringValue": name}
        for name in ("Custom1", "Custom.b", "Other")
    }
    sqs.send_message(QueueUrl=url, MessageBody="x", MessageAttributes=attributes)
    got = sqs.receive_message(QueueUrl=url, MessageAttributeNames=["Custom.*"])["Messages"][0]
    assert set(got["MessageAttributes"]) == {"Custom1", "Custom.b"}


def test_fifo_messages_come_in_send_order_across_groups(sqs: Any) -> None:
    url = _fifo(sqs, ContentBasedDeduplication="true")
    groups = [f"group-{i}" for i in range(8)]
    for group in groups:
        sqs.send_message(QueueUrl=url, MessageBody=group, MessageGroupId=group)
    got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
    assert [m["Body"] for m in got] == groups[: len(got)]
    assert len(got) == len(groups)


def test_batch_error_texts_name_the_entry(sqs: Any) -> None:
    url = sqs.create_queue(QueueName="q")["QueueUrl"]
    for call, kind in (
        (sqs.send_message_batch, "SendMessageBatchRequestEntry"),
        (sqs.delete_message_batch, "DeleteMessageBatchRequestEntry"),
        (sqs.change_message_visibility_batch, "ChangeMessageVisibilityBatchRequestEntry"),
    ):
        with pytest.raises(ClientError) as caught:
            call(QueueUrl=url, Entries=[])
        assert _error(caught) == (
            "AWS.SimpleQueueService.EmptyBatchRequest",
            f"There should be at least one {kind} in the request.",
            400,
        )
    with pytest.raises(ClientError) as caught:
        sqs.delete_message(QueueUrl=url, ReceiptHandle="junk")
    assert _error(caught)[:2] == ("ReceiptHandleIsInvalid", "The input receipt handle is invalid.")
    result = sqs.delete_message_batch(QueueUrl=url, Entries=[{"Id": "a", "ReceiptHandle": "junk"}])
    assert result["Failed"][0]["Message"] == (
        'The input receipt handle "junk" is not a valid receipt handle.'
    )


def test_message_ids_are_uuids_that_hold_the_vsqs_id(sqs: Any, root: vsqs.QueueRoot) -> None:
    url = sqs.create_queue(QueueName="q")["QueueUrl"]
    sent = sqs.send_message(QueueUrl=url, MessageBody="x")["MessageId"]
    assert str(uuid.UUID(sent)) == sent and uuid.UUID(sent).version == 4
    (stored,) = root.get("q").browse()
    assert vsqs_id_of(sent) == stored.id
    batch = sqs.send_message_batch(QueueUrl=url, Entries=[{"Id": "b", "MessageBody": "y"}])
    received = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
    assert {m["MessageId"] for m in received} == {sent, batch["Successful"][0]["MessageId"]}


def test_fifo_queue_attribute_in_any_case_and_only_for_fifo_queues(sqs: Any) -> None:
    url = sqs.create_queue(QueueName="a.fifo", Attributes={"FifoQueue": "True"})["QueueUrl"]
    got = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["FifoQueue"])
    assert got["Attributes"]["FifoQueue"] == "true"
    for attribute, value, message in (
        ("FifoQueue", "false", "Unknown Attribute FifoQueue."),
        ("ContentBasedDeduplication", "false", "Unknown Attribute ContentBasedDeduplication."),
        ("DeduplicationScope", "queue",
         "You can specify the DeduplicationScope only when FifoQueue is set to true."),
    ):  # fmt: skip
        with pytest.raises(ClientError) as caught:
            sqs.create_queue(QueueName="standard", Attributes={attribute: value})
        assert _error(caught) == ("InvalidAttributeName", message, 400)
    assert "QueueUrls" not in sqs.list_queues(QueueNamePrefix="standard")


def test_set_queue_attributes_refuses_to_change_the_queue_type(sqs: Any) -> None:
    """SQS's recorded answers: ``FifoQueue`` is unknown to a standard queue's
    SetQueueAttributes; on a FIFO queue ``true`` is taken, anything else refused."""
    standard = sqs.create_queue(QueueName="standard")["QueueUrl"]
    fifo = _fifo(sqs)
    unknown = ("InvalidAttributeName", "Unknown Attribute FifoQueue.", 400)
    for url, value, answer in [
        (standard, "true", unknown),
        (standard, "false", unknown),
        (fifo, "false", ("InvalidAttributeValue", "Invalid value for the parameter FifoQueue. "
                         "Reason: Modifying queue type is not supported.", 400)),
        (standard, "x", unknown),
    ]:  # fmt: skip
        with pytest.raises(ClientError) as caught:
            sqs.set_queue_attributes(QueueUrl=url, Attributes={"FifoQueue": value})
        assert _error(caught) == answer, (url, value)
    sqs.set_queue_attributes(QueueUrl=fifo, Attributes={"FifoQueue": "true"})
    sqs.set_queue_attributes(QueueUrl=fifo, Attributes={"FifoQueue": "TRUE", "DelaySeconds": "3"})
    got = sqs.get_queue_attributes(QueueUrl=fifo, AttributeNames=["All"])["Attributes"]
    assert (got["FifoQueue"], got["DelaySeconds"]) == ("true", "3")
    everything = sqs.get_queue_attributes(QueueUrl=standard, AttributeNames=["All"])
    assert "FifoQueue" not in everything["Attributes"]
    with pytest.raises(ClientError) as caught:  # a read-only attribute is as unknown
        sqs.set_queue_attributes(QueueUrl=standard, Attributes={"QueueArn": "x"})
    assert _error(caught) == ("InvalidAttributeName", "Unknown Attribute QueueArn.", 400)


def test_a_standard_queue_refuses_a_deduplication_id(sqs: Any) -> None:
    """A deduplication id "applies only to FIFO queues" (SendMessage): SQS refuses it on a
    standard queue, with the text recorded from it. In a batch the entry fails alone,
    as vsqs fails every bad entry of a standard queue's batch."""
    url = sqs.create_queue(QueueName="standard")["QueueUrl"]
    text = (
        "Value d for parameter MessageDeduplicationId is invalid. Reason: The request "
        "include parameter that is not valid for this queue type."
    )
    with pytest.raises(ClientError) as caught:
        sqs.send_message(QueueUrl=url, MessageBody="x", MessageDeduplicationId="d")
    assert _error(caught) == ("InvalidParameterValue", text, 400)
    sent = sqs.send_message_batch(
        QueueUrl=url,
        Entries=[
            {"Id": "a", "MessageBody": "a"},
            {"Id": "b", "MessageBody": "b", "MessageDeduplicationId": "d"},
        ],
    )
    assert [e["Id"] for e in sent["Successful"]] == ["a"]
    assert [(e["Id"], e["Code"], e["Message"]) for e in sent["Failed"]] == [
        ("b", "InvalidParameterValue", text)
    ]


def test_json_error_types_as_sqs_sends_them(server: Server) -> None:
    status, headers, answer = json_call(server.url, "CreateQueue", {"QueueName": "bad name"})
    assert status == 400
    assert answer["__type"] == "com.amazonaws.sqs#InvalidParameterValueException"
    assert headers["x-amzn-query-error"] == "InvalidParameterValue;Sender"
    assert answer["message"] == (
        "Can only include alphanumeric characters, hyphens, or underscores. 1 to 80 in length"
    )
    status, headers, answer = json_call(server.url, "GetQueueUrl", {})
    assert answer["__type"] == "com.amazonaws.sqs#MissingRequiredParameterException"
    assert headers["x-amzn-query-error"] == "MissingParameter;Sender"
    status, headers, answer = json_call(server.url, "GetQueueUrl", {"QueueName": "none"})
    assert (status, answer["__type"]) == (400, "com.amazonaws.sqs#QueueDoesNotExist")


def test_new_queues_report_sse_and_empty_bodies_are_missing(sqs: Any) -> None:
    url = sqs.create_queue(QueueName="q")["QueueUrl"]
    got = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["SqsManagedSseEnabled"])
    assert got["Attributes"]["SqsManagedSseEnabled"] == "true"
    with pytest.raises(ClientError) as caught:
        sqs.send_message(QueueUrl=url, MessageBody="")
    assert _error(caught) == (
        "MissingParameter",
        "The request must contain the parameter MessageBody.",
        400,
    )


def test_changing_the_visibility_of_a_deleted_message_is_invalid(sqs: Any) -> None:
    url = sqs.create_queue(QueueName="q")["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="x")
    handle = sqs.receive_message(QueueUrl=url)["Messages"][0]["ReceiptHandle"]
    sqs.delete_message(QueueUrl=url, ReceiptHandle=handle)
    with pytest.raises(ClientError) as caught:
        sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=handle, VisibilityTimeout=5)
    code, message, status = _error(caught)
    assert (code, status) == ("InvalidParameterValue", 400)
    assert message.endswith(
        "Reason: Message does not exist or is not available for visibility timeout change."
    )


def test_aws_trace_header_is_kept_and_returned(sqs: Any) -> None:
    url = sqs.create_queue(QueueName="q")["QueueUrl"]
    trace = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1"
    sqs.send_message(
        QueueUrl=url,
        MessageBody="traced",
        MessageSystemAttributes={"AWSTraceHeader": {"DataType": "String", "StringValue": trace}},
    )
    got = sqs.receive_message(QueueUrl=url, MessageSystemAttributeNames=["AWSTraceHeader"])
    message = got["Messages"][0]
    assert message["Attributes"] == {"AWSTraceHeader": trace}
    assert "MessageAttributes" not in message


def test_a_full_disk_fails_batch_entries_cleanly(start: Start, tmp_path: Path) -> None:
    """SendMessageBatch on a filling disk: every answer is per entry (never a 500 after
    publishing), a failed entry is not sent, and every entry answered as sent is there."""
    reason = why_not_mountable("tmpfs")
    if reason is not None:
        pytest.skip(f"cannot mount a small tmpfs: {reason}")
    with mounted("tmpfs", tmp_path, size_kb=1024) as mountpoint:
        (mountpoint / "root").mkdir()
        server = start(mountpoint / "root")
        sqs = client(server.url)
        url = sqs.create_queue(QueueName="q")["QueueUrl"]
        sent: set[str] = set()
        failed: list[dict[str, Any]] = []
        for batch in range(40):
            # Two runs a batch (the delay differs), so one may be stored and the next not.
            entries: list[dict[str, Any]] = [
                {"Id": f"e{i}", "MessageBody": f"{batch}-{i}-" + "x" * 12000,
                 **({"DelaySeconds": 0} if i < 5 else {})}
                for i in range(10)
            ]  # fmt: skip
            result = sqs.send_message_batch(QueueUrl=url, Entries=entries)
            assert len(result["Successful"]) + len(result["Failed"]) == 10
            bodies = {e["Id"]: e["MessageBody"] for e in entries}
            sent.update(bodies[e["Id"]] for e in result["Successful"])
            failed.extend(result["Failed"])
        assert failed, "the disk never filled"
        for entry in failed:
            assert entry["SenderFault"] is False and entry["Code"] == "InternalError"
            assert re.search("No space left on device", entry["Message"])
        received: list[str] = []
        while got := sqs.receive_message(
            QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=600
        ).get("Messages"):
            received.extend(m["Body"] for m in got)
        assert sorted(received) == sorted(sent)
