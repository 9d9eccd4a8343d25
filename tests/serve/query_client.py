"""boto3 on SQS's query protocol against ``vsqs serve``, run in ``.venv-query``.

``python query_client.py ENDPOINT_URL PREFIX`` (tests/serve/test_clients.py runs it with
the boto3 1.28.0 and botocore 1.31.0 that tests/setup-sqs-clients.sh installs there): it
checks that this botocore speaks the query protocol (form-encoded ``Action=``, XML
answers), drives the common actions, and prints one JSON object of what it saw. botocore
checks the MD5 digests of bodies and attributes itself; any error exits non-zero.
It imports nothing of vsqs or of the tests: that venv has neither.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import boto3
import botocore.session
from botocore.config import Config
from botocore.exceptions import ClientError


def main(endpoint: str, prefix: str) -> dict[str, Any]:
    protocol = botocore.session.get_session().get_service_model("sqs").protocol
    assert protocol == "query", protocol
    sqs = boto3.client(
        "sqs",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="AKIDEXAMPLE",
        aws_secret_access_key="dummy",  # noqa: S106 (the server checks no signature here)
        config=Config(retries={"total_max_attempts": 1}),
    )
    out: dict[str, Any] = {"protocol": protocol, "botocore": botocore.__version__}
    url = sqs.create_queue(QueueName=f"{prefix}-query", Attributes={"VisibilityTimeout": "60"})[
        "QueueUrl"
    ]
    out["url"] = url
    out["looked_up"] = sqs.get_queue_url(QueueName=f"{prefix}-query")["QueueUrl"]
    out["listed"] = sqs.list_queues(QueueNamePrefix=prefix).get("QueueUrls", [])
    sqs.send_message(
        QueueUrl=url,
        MessageBody="héllo <query> & more",
        MessageAttributes={
            "text": {"DataType": "String", "StringValue": "ünïcode"},
            "count": {"DataType": "Number", "StringValue": "42"},
            "blob": {"DataType": "Binary", "BinaryValue": b"\x00\x01\xff"},
        },
    )
    batch = sqs.send_message_batch(
        QueueUrl=url, Entries=[{"Id": f"e{i}", "MessageBody": f"batch {i}"} for i in range(10)]
    )
    out["batch_sent"] = len(batch.get("Successful", []))
    received = sqs.receive_message(
        QueueUrl=url,
        MaxNumberOfMessages=1,
        MessageAttributeNames=["All"],
        AttributeNames=["All"],
    )["Messages"][0]
    attributes = received["MessageAttributes"]
    out["first"] = {
        "body": received["Body"],
        "text": attributes["text"]["StringValue"],
        "count": attributes["count"]["StringValue"],
        "blob": list(attributes["blob"]["BinaryValue"]),
        "receive_count": received["Attributes"]["ApproximateReceiveCount"],
    }
    sqs.change_message_visibility(
        QueueUrl=url, ReceiptHandle=received["ReceiptHandle"], VisibilityTimeout=120
    )
    sqs.delete_message(QueueUrl=url, ReceiptHandle=received["ReceiptHandle"])
    bodies: list[str] = []
    for _ in range(5):
        messages = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1)
        got = messages.get("Messages", [])
        if not got:
            break
        bodies += [m["Body"] for m in got]
        deleted = sqs.delete_message_batch(
            QueueUrl=url,
            Entries=[
                {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(got)
            ],
        )
        assert not deleted.get("Failed"), deleted
    out["rest"] = sorted(bodies)
    sqs.send_message(QueueUrl=url, MessageBody="left for python")
    attrs = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    out["attributes"] = {k: attrs.get(k) for k in ("VisibilityTimeout", "QueueArn")}
    try:
        sqs.get_queue_url(QueueName=f"{prefix}-no-such-queue")
    except ClientError as exc:
        out["missing"] = exc.response["Error"]["Code"]
    fifo = sqs.create_queue(
        QueueName=f"{prefix}-query.fifo",
        Attributes={"FifoQueue": "true", "ContentBasedDeduplication": "true"},
    )["QueueUrl"]
    for i in range(3):
        sqs.send_message(QueueUrl=fifo, MessageBody=f"in order {i}", MessageGroupId="g")
    order: list[str] = []
    for _ in range(10):
        got = sqs.receive_message(
            QueueUrl=fifo, MaxNumberOfMessages=10, WaitTimeSeconds=1, AttributeNames=["All"]
        ).get("Messages", [])
        for message in got:
            assert message["Attributes"]["MessageGroupId"] == "g", message
            order.append(message["Body"])
            sqs.delete_message(QueueUrl=fifo, ReceiptHandle=message["ReceiptHandle"])
        if len(order) == 3:
            break
    out["fifo"] = order
    return out


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], sys.argv[2])))
