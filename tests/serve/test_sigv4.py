"""``--credentials``: every request signed (SigV4, checked against botocore's own
signer), and each key limited to its queues."""

from __future__ import annotations

import datetime
import http.client
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import boto3
import pytest
from botocore.auth import SigV4Auth, SigV4QueryAuth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials as BotoCredentials
from botocore.exceptions import ClientError

import vsqs
from vsqs.serve import Credential, Credentials, Server, UnsafeAddress, make_server

from .conftest import Start, client

KEYS = Credentials([
    Credential("AKIAORDERS", "orders-secret", ("orders-*",)),
    Credential("AKIABILLING", "billing-secret", ("billing", "shared")),
    Credential("AKIAADMIN", "admin-secret", ("*",), admin=True),
])  # fmt: skip


def _code(error: pytest.ExceptionInfo[ClientError]) -> str:
    return str(error.value.response["Error"]["Code"])


@pytest.fixture
def secured(start: Start) -> Server:
    return start(credentials=KEYS)


def _send(server: Server, request: AWSRequest) -> tuple[int, dict[str, str], bytes]:
    parts = urlsplit(request.url)
    connection = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=10)
    try:
        target = parts.path + (f"?{parts.query}" if parts.query else "")
        connection.request(request.method, target, body=request.body, headers=dict(request.headers))
        response = connection.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        connection.close()


def _signed(
    server: Server,
    action: str,
    params: dict[str, Any],
    *,
    key: str = "AKIAADMIN",
    secret: str = "admin-secret",  # noqa: S107 - a test key
) -> AWSRequest:
    request = AWSRequest(
        method="POST",
        url=server.url + "/",
        data=json.dumps(params).encode(),
        headers={
            "Content-Type": "application/x-amz-json-1.0",
            "X-Amz-Target": f"AmazonSQS.{action}",
        },
    )
    SigV4Auth(BotoCredentials(key, secret), "sqs", "us-east-1").add_auth(request)
    return request


def test_signed_requests_pass_and_keys_keep_to_their_queues(secured: Server) -> None:
    orders = client(secured.url, "AKIAORDERS", "orders-secret")
    billing = client(secured.url, "AKIABILLING", "billing-secret")
    admin = client(secured.url, "AKIAADMIN", "admin-secret")
    url = orders.create_queue(QueueName="orders-eu")["QueueUrl"]
    billing.create_queue(QueueName="billing")
    orders.send_message(QueueUrl=url, MessageBody="m")
    assert orders.receive_message(QueueUrl=url)["Messages"][0]["Body"] == "m"
    policy = json.dumps(
        {"deadLetterTargetArn": "arn:aws:sqs:us-east-1:0:billing", "maxReceiveCount": 1}
    )
    calls: list[Callable[[], object]] = [
        # A dead-letter queue of another key's: its messages would land there.
        lambda: orders.set_queue_attributes(QueueUrl=url, Attributes={"RedrivePolicy": policy}),
        lambda: orders.create_queue(QueueName="orders-x", Attributes={"RedrivePolicy": policy}),
        lambda: billing.send_message(QueueUrl=url, MessageBody="x"),
        lambda: billing.receive_message(QueueUrl=url),
        lambda: billing.purge_queue(QueueUrl=url),
        lambda: billing.delete_queue(QueueUrl=url),
        lambda: billing.get_queue_url(QueueName="orders-eu"),
        lambda: billing.create_queue(QueueName="orders-us"),
        lambda: orders.create_queue(QueueName="billing-2"),
    ]
    for call in calls:
        with pytest.raises(ClientError) as caught:
            call()
        assert _code(caught) == "AccessDenied"
        assert caught.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403

    def names(sqs: Any) -> list[str]:
        return [u.rsplit("/", 1)[1] for u in sqs.list_queues().get("QueueUrls", [])]

    assert names(orders) == ["orders-eu"]
    assert names(billing) == ["billing"]
    assert names(admin) == ["billing", "orders-eu"]
    # The region a request was signed for is the one in the ARNs it is shown.
    west = boto3.client(
        "sqs",
        endpoint_url=secured.url,
        region_name="eu-west-1",
        aws_access_key_id="AKIAADMIN",
        aws_secret_access_key="admin-secret",  # noqa: S106 - a test key
    )
    arn = west.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]
    assert arn["QueueArn"] == "arn:aws:sqs:eu-west-1:000000000000:orders-eu"


def test_a_wrong_secret_an_unknown_key_and_no_signature_are_refused(secured: Server) -> None:
    for access, secret, code in [
        ("AKIAORDERS", "wrong", "SignatureDoesNotMatch"),
        ("AKIAORDERS", "billing-secret", "SignatureDoesNotMatch"),
        ("AKIANOBODY", "orders-secret", "InvalidClientTokenId"),
    ]:
        with pytest.raises(ClientError) as caught:
            client(secured.url, access, secret).list_queues()
        assert _code(caught) == code
        assert caught.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
    request = AWSRequest(
        method="POST",
        url=secured.url + "/",
        data=b"{}",
        headers={
            "Content-Type": "application/x-amz-json-1.0",
            "X-Amz-Target": "AmazonSQS.ListQueues",
        },
    )
    status, headers, body = _send(secured, request)
    assert status == 403
    assert headers["x-amzn-query-error"] == "MissingAuthenticationToken;Sender"
    assert json.loads(body)["__type"].endswith("#MissingAuthenticationToken")


def test_a_changed_body_is_refused(secured: Server, tmp_path: Path) -> None:
    vsqs.QueueRoot(secured.service.root.path).create("orders-eu")
    url = f"{secured.url}/000000000000/orders-eu"
    request = _signed(secured, "SendMessage", {"QueueUrl": url, "MessageBody": "paid 10"})
    assert _send(secured, request)[0] == 200
    request = _signed(secured, "SendMessage", {"QueueUrl": url, "MessageBody": "paid 10"})
    request.data = json.dumps({"QueueUrl": url, "MessageBody": "paid 99"}).encode()
    status, headers, _ = _send(secured, request)
    assert status == 403
    assert headers["x-amzn-query-error"] == "SignatureDoesNotMatch;Sender"
    # A changed signed header too.
    request = _signed(secured, "ListQueues", {})
    request.headers.replace_header("X-Amz-Target", "AmazonSQS.PurgeQueue")
    assert _send(secured, request)[0] in (400, 403)
    assert vsqs.QueueRoot(secured.service.root.path).get("orders-eu").counts().ready == 1


def test_an_old_or_future_signature_is_refused(
    secured: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    for minutes in (-16, 16):
        then = datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None) + (
            datetime.timedelta(minutes=minutes)
        )
        monkeypatch.setattr("botocore.auth.get_current_datetime", lambda then=then: then)
        status, headers, body = _send(secured, _signed(secured, "ListQueues", {}))
        assert status == 400
        assert headers["x-amzn-query-error"] == "RequestExpired;Sender"
        assert "Signature expired" in json.loads(body)["message"]
    monkeypatch.undo()
    then = datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None) - datetime.timedelta(
        minutes=14
    )
    monkeypatch.setattr("botocore.auth.get_current_datetime", lambda: then)
    assert _send(secured, _signed(secured, "ListQueues", {}))[0] == 200


def test_a_presigned_query_request_is_accepted(secured: Server) -> None:
    request = AWSRequest(method="GET", url=f"{secured.url}/?Action=ListQueues&Version=2012-11-05")
    SigV4QueryAuth(BotoCredentials("AKIAADMIN", "admin-secret"), "sqs", "us-east-1").add_auth(
        request
    )
    status, _, body = _send(secured, request)
    assert status == 200, body
    assert b"<ListQueuesResponse" in body
    request = AWSRequest(method="GET", url=f"{secured.url}/?Action=ListQueues&Version=2012-11-05")
    SigV4QueryAuth(BotoCredentials("AKIAADMIN", "wrong"), "sqs", "us-east-1").add_auth(request)
    status, _, body = _send(secured, request)
    assert status == 403 and b"<Code>SignatureDoesNotMatch</Code>" in body


def _presigned(server: Server, expires: int, minutes_ago: float) -> AWSRequest:
    request = AWSRequest(method="GET", url=f"{server.url}/?Action=ListQueues&Version=2012-11-05")
    then = datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None)
    then -= datetime.timedelta(minutes=minutes_ago)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("botocore.auth.get_current_datetime", lambda: then)
        SigV4QueryAuth(
            BotoCredentials("AKIAADMIN", "admin-secret"), "sqs", "us-east-1", expires=expires
        ).add_auth(request)
    return request


def test_a_presigned_url_expires(secured: Server) -> None:
    """X-Amz-Expires is kept: a URL signed for 2 s is refused 10 s later; one signed an
    hour ago for two hours is still good (the 15-minute skew is for signed headers)."""
    status, _, body = _send(secured, _presigned(secured, expires=2, minutes_ago=10 / 60))
    assert status == 400 and b"<Code>RequestExpired</Code>" in body and b"expired" in body
    assert _send(secured, _presigned(secured, expires=7200, minutes_ago=60))[0] == 200
    assert _send(secured, _presigned(secured, expires=3600, minutes_ago=61))[0] == 400
    # Without X-Amz-Expires, or beyond SigV4's seven days: refused.
    request = _presigned(secured, expires=60, minutes_ago=0)
    request.url = re.sub(r"&X-Amz-Expires=[0-9]+", "", request.url)
    assert _send(secured, request)[0] == 400
    request = _presigned(secured, expires=60, minutes_ago=0)
    request.url = request.url.replace("X-Amz-Expires=60", "X-Amz-Expires=604801")
    assert _send(secured, request)[0] == 400


def test_no_other_address_than_loopback_without_credentials(tmp_path: Path) -> None:
    for host in ("0.0.0.0", "::", "192.0.2.1"):  # noqa: S104 - refused, the point
        with pytest.raises(UnsafeAddress) as caught:
            make_server(tmp_path, host, 0)
        assert caught.value.host == host
        assert isinstance(caught.value, PermissionError)
    server = make_server(tmp_path, "0.0.0.0", 0, credentials=KEYS, quiet=True)  # noqa: S104
    server.server_close()
    for host in ("127.0.0.1", "::1", "localhost"):
        make_server(tmp_path, host, 0, quiet=True).server_close()


@pytest.mark.parametrize(
    "authorization",
    [
        "AWS4-HMAC-SHA1 Credential=AKIAADMIN/{day}/us-east-1/sqs/aws4_request",
        "AWS4-HMAC-SHA256 Credential=AKIAADMIN/{day}/us-east-1/sqs/aws4_request",
        "AWS4-HMAC-SHA256 Credential=AKIAADMIN, SignedHeaders=host, Signature=00",
        "AWS4-HMAC-SHA256 garbage",
        "AWS4-HMAC-SHA256 Credential=AKIAADMIN/{day}/us-east-1/sqs/aws4_request, "
        "SignedHeaders=x-amz-date, Signature=00",
        "AWS4-HMAC-SHA256 Credential=AKIAADMIN/{day}/us-east-1/sqs/aws4_request, "
        "SignedHeaders=x-amz-date;host, Signature=00",
        "AWS4-HMAC-SHA256 Credential=AKIAADMIN/{day}/us-east-1/sqs/aws4_request, "
        "SignedHeaders=host;x-absent, Signature=00",
    ],
)
def test_an_unreadable_signature_is_incomplete(secured: Server, authorization: str) -> None:
    now = datetime.datetime.now(datetime.timezone.utc)
    authorization = authorization.format(day=now.strftime("%Y%m%d"))
    status, headers, answer = _send(
        secured,
        AWSRequest(
            method="POST",
            url=secured.url + "/",
            data=b"{}",
            headers={
                "Content-Type": "application/x-amz-json-1.0",
                "X-Amz-Target": "AmazonSQS.ListQueues",
                "X-Amz-Date": now.strftime("%Y%m%dT%H%M%SZ"),
                "Authorization": authorization,
            },
        ),
    )
    assert status == 400, answer
    assert headers["x-amzn-query-error"] == "IncompleteSignature;Sender"


def test_a_signature_for_another_date_than_its_credential_is_incomplete(
    secured: Server,
) -> None:
    request = _signed(secured, "ListQueues", {})
    request.headers.replace_header("X-Amz-Date", "20000101T000000Z")
    status, headers, _ = _send(secured, request)
    assert status == 400 and headers["x-amzn-query-error"] == "IncompleteSignature;Sender"
