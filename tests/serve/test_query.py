"""The query protocol (form-encoded ``Action=``, XML answers), as boto3 before 1.34.90
and the Java SDK v1 speak it."""

from __future__ import annotations

import hashlib

import vsqs
from vsqs.serve import Server

from .http import NS, query_call, request


def _text(element: object, path: str) -> str:
    found = element.find(path, NS)  # type: ignore[attr-defined]
    assert found is not None, path
    return str(found.text or "")


def test_a_conversation_in_the_query_protocol(server: Server, root: vsqs.QueueRoot) -> None:
    status, _, xml = query_call(
        server.url,
        {
            "Action": "CreateQueue",
            "QueueName": "q",
            "Attribute.1.Name": "VisibilityTimeout",
            "Attribute.1.Value": "40",
            "Tag.1.Key": "team",
            "Tag.1.Value": "a",
            "Version": "2012-11-05",
        },
    )
    assert status == 200
    assert xml.tag == f"{{{NS['sqs']}}}CreateQueueResponse"
    url = _text(xml, "sqs:CreateQueueResult/sqs:QueueUrl")
    assert url.endswith("/000000000000/q")
    assert _text(xml, "sqs:ResponseMetadata/sqs:RequestId")
    assert root.get("q").settings()["visibility_timeout"] == 40.0
    body = "line one\r\nline two & <three>"
    status, _, xml = query_call(
        server.url,
        {
            "Action": "SendMessage",
            "QueueUrl": url,
            "MessageBody": body,
            "MessageAttribute.1.Name": "color",
            "MessageAttribute.1.Value.DataType": "String",
            "MessageAttribute.1.Value.StringValue": "red",
            "MessageAttribute.2.Name": "raw",
            "MessageAttribute.2.Value.DataType": "Binary",
            "MessageAttribute.2.Value.BinaryValue": "AAEC",
        },
    )
    assert status == 200
    sent = xml.find("sqs:SendMessageResult", NS)
    assert (
        _text(sent, "sqs:MD5OfMessageBody")
        == hashlib.md5(body.encode(), usedforsecurity=False).hexdigest()
    )
    assert _text(sent, "sqs:MD5OfMessageAttributes")
    assert _text(sent, "sqs:MessageId")
    status, _, xml = query_call(
        server.url,
        {
            "Action": "ReceiveMessage",
            "QueueUrl": url,
            "AttributeName.1": "All",
            "MessageAttributeName.1": "All",
            "MaxNumberOfMessages": "10",
        },
    )
    assert status == 200
    (message,) = xml.findall("sqs:ReceiveMessageResult/sqs:Message", NS)
    assert _text(message, "sqs:Body") == body  # \r survives the XML
    assert _text(message, "sqs:MD5OfMessageAttributes") == _text(sent, "sqs:MD5OfMessageAttributes")
    attributes = {
        _text(a, "sqs:Name"): _text(a, "sqs:Value") for a in message.findall("sqs:Attribute", NS)
    }
    assert attributes["ApproximateReceiveCount"] == "1"
    values = {
        _text(a, "sqs:Name"): (_text(a, "sqs:Value/sqs:DataType"), a.find("sqs:Value", NS))
        for a in message.findall("sqs:MessageAttribute", NS)
    }
    assert _text(values["color"][1], "sqs:StringValue") == "red"
    assert _text(values["raw"][1], "sqs:BinaryValue") == "AAEC"
    handle = _text(message, "sqs:ReceiptHandle")
    status, _, xml = query_call(
        server.url,
        {
            "Action": "DeleteMessageBatch",
            "QueueUrl": url,
            "DeleteMessageBatchRequestEntry.1.Id": "a",
            "DeleteMessageBatchRequestEntry.1.ReceiptHandle": handle,
            "DeleteMessageBatchRequestEntry.2.Id": "b",
            "DeleteMessageBatchRequestEntry.2.ReceiptHandle": "junk",
        },
    )
    assert status == 200
    result = xml.find("sqs:DeleteMessageBatchResult", NS)
    assert _text(result, "sqs:DeleteMessageBatchResultEntry/sqs:Id") == "a"
    assert _text(result, "sqs:BatchResultErrorEntry/sqs:Id") == "b"
    assert _text(result, "sqs:BatchResultErrorEntry/sqs:Code") == "ReceiptHandleIsInvalid"
    assert _text(result, "sqs:BatchResultErrorEntry/sqs:SenderFault") == "true"
    assert root.get("q").counts().total == 0
    status, _, xml = query_call(
        server.url,
        {"Action": "GetQueueAttributes", "QueueUrl": url, "AttributeName.1": "VisibilityTimeout"},
    )
    (attribute,) = xml.findall("sqs:GetQueueAttributesResult/sqs:Attribute", NS)
    assert (_text(attribute, "sqs:Name"), _text(attribute, "sqs:Value")) == (
        "VisibilityTimeout",
        "40",
    )
    status, _, xml = query_call(server.url, {"Action": "ListQueueTags", "QueueUrl": url})
    (tag,) = xml.findall("sqs:ListQueueTagsResult/sqs:Tag", NS)
    assert (_text(tag, "sqs:Key"), _text(tag, "sqs:Value")) == ("team", "a")
    status, _, xml = query_call(
        server.url, {"Action": "DeleteMessage", "QueueUrl": url, "ReceiptHandle": handle}
    )
    assert status == 200 and xml.find("sqs:DeleteMessageResult", NS) is None


def test_batches_lists_and_the_queue_url_as_the_path(server: Server, root: vsqs.QueueRoot) -> None:
    root.create("q")
    status, _, xml = query_call(
        server.url,
        {
            "Action": "SendMessageBatch",
            "SendMessageBatchRequestEntry.1.Id": "one",
            "SendMessageBatchRequestEntry.1.MessageBody": "1",
            "SendMessageBatchRequestEntry.2.Id": "two",
            "SendMessageBatchRequestEntry.2.MessageBody": "2",
            "SendMessageBatchRequestEntry.2.DelaySeconds": "5",
            "SendMessageBatchRequestEntry.2.MessageAttribute.1.Name": "k",
            "SendMessageBatchRequestEntry.2.MessageAttribute.1.Value.DataType": "Number",
            "SendMessageBatchRequestEntry.2.MessageAttribute.1.Value.StringValue": "7",
        },
        path="/000000000000/q",  # older SDKs post to the queue's URL
    )
    assert status == 200
    entries = xml.findall("sqs:SendMessageBatchResult/sqs:SendMessageBatchResultEntry", NS)
    assert [_text(e, "sqs:Id") for e in entries] == ["one", "two"]
    assert _text(entries[1], "sqs:MD5OfMessageAttributes")
    assert root.get("q").counts().ready == 1 and root.get("q").counts().delayed == 1
    status, _, body = request(server.url, "GET", "/?Action=ListQueues&QueueNamePrefix=q")
    assert status == 200
    assert b"<QueueUrl>http://" in body and b"/000000000000/q</QueueUrl>" in body


def test_errors_are_error_responses(server: Server) -> None:
    status, headers, xml = query_call(server.url, {"Action": "GetQueueUrl", "QueueName": "missing"})
    assert status == 400
    assert headers["x-amzn-query-error"] == "AWS.SimpleQueueService.NonExistentQueue;Sender"
    assert xml.tag == f"{{{NS['sqs']}}}ErrorResponse"
    assert _text(xml, "sqs:Error/sqs:Code") == "AWS.SimpleQueueService.NonExistentQueue"
    assert _text(xml, "sqs:Error/sqs:Type") == "Sender"
    message = "The specified queue does not exist for this wsdl version."
    assert _text(xml, "sqs:Error/sqs:Message") == message
    assert _text(xml, "sqs:RequestId")
    for params, code in [
        ({"Action": "Fly"}, "InvalidAction"),
        ({"QueueName": "x"}, "MissingAction"),
        ({"Action": "CreateQueue"}, "MissingParameter"),
        ({"Action": "ReceiveMessage", "QueueUrl": "/0/q", "MaxNumberOfMessages": "ten"},
         "InvalidParameterValue"),
        ({"Action": "GetQueueAttributes", "QueueUrl": "/0/q", "AttributeName.x": "All"},
         "MalformedQueryString"),
        ({"Action": "CreateQueue", "QueueName": "q", "Attribute.1.Name": "DelaySeconds"},
         "MalformedQueryString"),
    ]:  # fmt: skip
        status, _, xml = query_call(server.url, params)
        assert status == 400, params
        assert _text(xml, "sqs:Error/sqs:Code") == code, params
