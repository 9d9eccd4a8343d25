"""Bad input of every kind gets a 4xx with an SQS error, never a traceback or a 5xx,
and the server keeps serving."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import vsqs
from vsqs.serve import Server
from vsqs.serve._server import MAX_BODY
from vsqs.serve._wire import ACTIONS

from .http import json_call, raw, request


def _alive(server: Server) -> None:
    status, _, answer = json_call(server.url, "ListQueues", {})
    assert status == 200, answer


@pytest.mark.parametrize(
    ("action", "params", "code"),
    [
        ("SendMessage", {"QueueUrl": "/0/q", "MessageBody": 5}, "InvalidParameterValue"),
        ("SendMessage", {"QueueUrl": "/0/q"}, "MissingParameter"),
        ("SendMessage", {"MessageBody": "x"}, "MissingParameter"),
        (
            "ReceiveMessage",
            {"QueueUrl": "/0/q", "MaxNumberOfMessages": "ten"},
            "InvalidParameterValue",
        ),
        (
            "ReceiveMessage",
            {"QueueUrl": "/0/q", "MaxNumberOfMessages": 11},
            "InvalidParameterValue",
        ),
        ("ReceiveMessage", {"QueueUrl": "/0/q", "AttributeNames": "All"}, "InvalidParameterValue"),
        (
            "ReceiveMessage",
            {"QueueUrl": "/0/q", "AttributeNames": ["Nope"]},
            "InvalidAttributeName",
        ),
        ("SendMessageBatch", {"QueueUrl": "/0/q", "Entries": {}}, "InvalidParameterValue"),
        ("SendMessageBatch", {"QueueUrl": "/0/q", "Entries": [1]}, "InvalidParameterValue"),
        ("DeleteMessage", {"QueueUrl": "/0/q", "ReceiptHandle": 7}, "ReceiptHandleIsInvalid"),
        ("DeleteMessage", {"QueueUrl": "/0/q", "ReceiptHandle": "1.2.3"}, "ReceiptHandleIsInvalid"),
        (
            "ChangeMessageVisibility",
            {"QueueUrl": "/0/q", "ReceiptHandle": "1.2"},
            "MissingParameter",
        ),
        ("CreateQueue", {"QueueName": ["q"]}, "InvalidParameterValue"),
        ("CreateQueue", {"QueueName": "a" * 81}, "InvalidParameterValue"),
        ("CreateQueue", {"QueueName": "x", "Attributes": []}, "InvalidParameterValue"),
        (
            "CreateQueue",
            {"QueueName": "x", "Attributes": {"VisibilityTimeout": 5}},
            "InvalidAttributeValue",
        ),
        ("TagQueue", {"QueueUrl": "/0/q", "Tags": {"aws:x": "y"}}, "InvalidParameterValue"),
        ("ListQueues", {"MaxResults": 0}, "InvalidParameterValue"),
        ("ListQueues", {"NextToken": "%%%"}, "InvalidParameterValue"),
        ("StartMessageMoveTask", {"SourceArn": "not an arn"}, "InvalidParameterValue"),
        ("CancelMessageMoveTask", {"TaskHandle": "junk"}, "ResourceNotFoundException"),
        (
            "ListMessageMoveTasks",
            {"SourceArn": "arn:aws:sqs:r:0:q", "MaxResults": 11},
            "InvalidParameterValue",
        ),
    ],
)
def test_bad_parameters_get_sqs_errors(
    server: Server, root: vsqs.QueueRoot, action: str, params: dict[str, Any], code: str
) -> None:
    root.create("q")
    status, headers, answer = json_call(server.url, action, params)
    assert 400 <= status < 500, answer
    # As SQS: the JSON protocol's type for the two generic errors is not the query code.
    json_type = {
        "InvalidParameterValue": "InvalidParameterValueException",
        "MissingParameter": "MissingRequiredParameterException",
    }.get(code, code)
    assert answer["__type"] == f"com.amazonaws.sqs#{json_type}"
    assert headers["x-amzn-query-error"] == f"{code};Sender"
    assert answer["message"]
    _alive(server)


@pytest.mark.parametrize(
    "url",
    [
        "/0/..",
        "/0/.vsqs",
        "/0/q/../../etc",
        "/0/%2e%2e",
        "../q",
        "/0/a%2Fb",
        "/0/" + "a" * 300,
        "http://h/0/q?x=1#y",
        "",
        42,
    ],
)
def test_path_tricks_in_queue_urls_reach_no_directory(
    server: Server, root: vsqs.QueueRoot, tmp_path: Path, url: object
) -> None:
    (tmp_path / "outside").mkdir()
    status, _, answer = json_call(server.url, "SendMessage", {"QueueUrl": url, "MessageBody": "x"})
    assert 400 <= status < 500
    assert answer["__type"] in (
        "com.amazonaws.sqs#InvalidAddress",
        "com.amazonaws.sqs#QueueDoesNotExist",
    )
    for name in ("..", ".vsqs", "a/b"):
        status, _, answer = json_call(server.url, "GetQueueUrl", {"QueueName": name})
        assert status == 400 and answer["__type"].endswith("#QueueDoesNotExist")
        status, _, answer = json_call(server.url, "CreateQueue", {"QueueName": name})
        assert status == 400 and answer["__type"].endswith("#InvalidParameterValueException")
    assert list((tmp_path / "outside").iterdir()) == []
    assert root.list() == []


def test_malformed_bodies_and_requests(server: Server) -> None:
    json_headers = {
        "Content-Type": "application/x-amz-json-1.0",
        "X-Amz-Target": "AmazonSQS.ListQueues",
    }
    form = {"Content-Type": "application/x-www-form-urlencoded"}
    for body, headers, code in [
        (b"{not json", json_headers, "SerializationException"),
        (b"[1, 2]", json_headers, "SerializationException"),
        (b"\xff\xfe", json_headers, "SerializationException"),
        (b"{}", {**json_headers, "X-Amz-Target": "AmazonSQS.Fly"}, "InvalidAction"),
        (b"{}", {**json_headers, "X-Amz-Target": "Other.ListQueues"}, "InvalidAction"),
        (b"Action=ListQueues&%zz", form, "MalformedQueryString"),
        (b"\xff=\xfe", form, "MalformedQueryString"),
        (b"a=1&a.1=2&Action=ListQueues", {}, "MalformedQueryString"),
        (b"", {}, "MissingAction"),
    ]:  # fmt: skip
        status, answer_headers, answer = request(server.url, "POST", "/", body, headers)
        assert status == 400, (body, answer)
        assert answer_headers["x-amzn-query-error"].startswith(code), (body, answer)
    for method in ("PUT", "DELETE", "PATCH", "BREW"):
        status, _, answer = request(server.url, method, "/?Action=ListQueues")
        assert 400 <= status < 500 or status == 200, (method, answer)
    status, headers, _ = request(
        server.url, "POST", "/", b"", {**json_headers, "Content-Length": str(MAX_BODY + 1)}
    )
    assert status == 413
    assert headers.get("connection") == "close"
    # Not HTTP at all, or a broken request line: an answer, then the connection closes.
    assert raw(server.url, b"\x00\x01\x02garbage\r\n\r\n").startswith(b"HTTP/1.")
    assert b" 400 " in raw(server.url, b"GET / HTTP/1.1 extra words\r\n\r\n")[:20]
    assert b" 400 " in raw(server.url, b"POST / HTTP/1.1\r\nContent-Length: x\r\n\r\n")[:20]
    assert raw(server.url, b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n")[
        :12
    ].endswith(b"400")
    _alive(server)


def test_a_chunked_body_is_read(server: Server) -> None:
    body = json.dumps({"QueueName": "chunky"}).encode()
    chunked = b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
    answer = raw(
        server.url,
        b"POST / HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/x-amz-json-1.0\r\n"
        b"X-Amz-Target: AmazonSQS.CreateQueue\r\nTransfer-Encoding: chunked\r\n"
        b"Connection: close\r\n\r\n" + chunked,
    )
    assert answer.startswith(b"HTTP/1.1 200"), answer
    assert b"/000000000000/chunky" in answer


FUZZ_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=10), inner, max_size=3)
    ),
    max_leaves=8,
)
FUZZ_PARAMS = st.sampled_from([
    "QueueUrl", "QueueName", "MessageBody", "ReceiptHandle", "Entries", "Attributes",
    "AttributeNames", "MessageAttributes", "MaxNumberOfMessages", "WaitTimeSeconds", "Tags",
    "TagKeys", "VisibilityTimeout", "DelaySeconds", "MessageGroupId", "Label", "SourceArn",
    "TaskHandle", "NextToken", "MaxResults", "MessageAttributeNames", "Actions",
])  # fmt: skip


FUZZ_BODIES = st.binary(max_size=200) | st.text(max_size=200).map(str.encode)
FUZZ_TARGETS = st.sampled_from(
    ["/", "/0/q", "/?Action=ListQueues", "/%", "//x/..", "/?Action=SendMessage&QueueUrl=/0/q"]
)


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    action=st.sampled_from(sorted(ACTIONS)),
    params=st.dictionaries(FUZZ_PARAMS, FUZZ_VALUES, max_size=4),
    queue=st.sampled_from(["/0/q", "/0/q.fifo", "/0/none", "/0/../q"]),
)
def test_fuzzed_json_requests_never_fail_the_server(
    server: Server, root: vsqs.QueueRoot, action: str, params: dict[str, Any], queue: str
) -> None:
    if "q" not in root:
        root.create("q")
    if "WaitTimeSeconds" in params:
        params["WaitTimeSeconds"] = 0  # no long polls in a fuzz loop
    params.setdefault("QueueUrl", queue)
    status, _, answer = json_call(server.url, action, params)
    assert status < 500, answer


@settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(body=FUZZ_BODIES, target=FUZZ_TARGETS, json_protocol=st.booleans())
def test_fuzzed_bytes_never_fail_the_server(
    server: Server, body: bytes, target: str, json_protocol: bool
) -> None:
    headers = (
        {"Content-Type": "application/x-amz-json-1.0", "X-Amz-Target": "AmazonSQS.SendMessage"}
        if json_protocol
        else {"Content-Type": "application/x-www-form-urlencoded"}
    )
    status, _, answer = request(server.url, "POST", target, body, headers)
    assert status < 500, answer
    assert b"Traceback" not in answer


def test_a_queue_deleted_elsewhere_does_not_exist(
    server: Server, root: vsqs.QueueRoot, monkeypatch: pytest.MonkeyPatch
) -> None:
    root.create("q")
    assert json_call(server.url, "SendMessage", {"QueueUrl": "/0/q", "MessageBody": "x"})[0] == 200
    root.delete("q")  # by the library (or another server): this server's handle is stale
    status, headers, _ = json_call(
        server.url, "SendMessage", {"QueueUrl": "/0/q", "MessageBody": "x"}
    )
    assert status == 400
    assert headers["x-amzn-query-error"] == "AWS.SimpleQueueService.NonExistentQueue;Sender"
    # Deleted between the server's look and its publish: the same answer, not a 500.
    root.create("q")
    from vsqs.serve._service import Service

    opened = Service.open

    def open_then_lose(self: Service, name: str) -> vsqs.AnyQueue:
        queue = opened(self, name)
        root.delete(name)
        return queue

    monkeypatch.setattr(Service, "open", open_then_lose)
    calls: list[tuple[str, dict[str, Any]]] = [
        ("SendMessage", {"MessageBody": "x"}),
        ("ReceiveMessage", {}),
        ("GetQueueAttributes", {"AttributeNames": ["All"]}),
    ]
    for action, params in calls:
        root.create("q")
        status, headers, answer = json_call(server.url, action, {"QueueUrl": "/0/q", **params})
        assert status == 400, (action, answer)
        assert headers["x-amzn-query-error"].startswith("AWS.SimpleQueueService.NonExistentQueue")


def test_the_host_header_is_reflected_only_when_it_is_a_host(start: Any) -> None:
    server = start(allow_hosts=["sqs.example"])
    for host, shown in [
        ("sqs.example:9324", "http://sqs.example:9324/000000000000/q"),
        ("[::1]:80", "http://[::1]:80/000000000000/q"),
        ("evil/path?x=<script>", ""),  # not a host name: refused, never reflected
    ]:
        status, _, body = request(
            server.url,
            "POST",
            "/",
            json.dumps({"QueueName": "q"}).encode(),
            {
                "Host": host,
                "Content-Type": "application/x-amz-json-1.0",
                "X-Amz-Target": "AmazonSQS.CreateQueue",
            },
        )
        if shown:
            assert status == 200 and json.loads(body)["QueueUrl"] == shown
        else:
            assert status == 403 and b"<script>" not in body


def test_a_failure_of_the_server_is_a_500_without_a_traceback(
    start: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from vsqs.serve._service import Service

    server = start(quiet=False)

    def broken(self: Service, caller: object, request: object) -> dict[str, Any]:
        raise RuntimeError("a bug in the server")

    monkeypatch.setattr(Service, "handle", broken)
    status, headers, answer = json_call(server.url, "ListQueues", {})
    assert status == 500
    assert headers["x-amzn-query-error"] == "InternalFailure;Receiver"
    assert "bug" not in json.dumps(answer)
    assert "RuntimeError: a bug in the server" in capsys.readouterr().err  # logged, not sent
    monkeypatch.undo()
    _alive(server)


def test_full_and_shut_down_queues(server: Server, root: vsqs.QueueRoot) -> None:
    root.create("small", capacity=1)
    status, _, _ = json_call(
        server.url, "SendMessage", {"QueueUrl": "/0/small", "MessageBody": "a"}
    )
    assert status == 200
    status, headers, _ = json_call(
        server.url, "SendMessage", {"QueueUrl": "/0/small", "MessageBody": "b"}
    )
    assert status == 403 and headers["x-amzn-query-error"] == "OverLimit;Sender"
    status, _, answer = json_call(
        server.url,
        "SendMessageBatch",
        {"QueueUrl": "/0/small", "Entries": [{"Id": "x", "MessageBody": "c"}]},
    )
    assert status == 200 and answer["Failed"][0]["Code"] == "OverLimit"
    received = json_call(server.url, "ReceiveMessage", {"QueueUrl": "/0/small"})[2]["Messages"]
    json_call(
        server.url,
        "DeleteMessage",
        {"QueueUrl": "/0/small", "ReceiptHandle": received[0]["ReceiptHandle"]},
    )
    root.get("small").shutdown()
    status, headers, _ = json_call(
        server.url, "SendMessage", {"QueueUrl": "/0/small", "MessageBody": "d"}
    )
    assert headers["x-amzn-query-error"] == "AWS.SimpleQueueService.UnsupportedOperation;Sender"
    # Shut down and drained: a receive (even a long poll) answers empty at once.
    began = time.monotonic()
    status, _, answer = json_call(
        server.url, "ReceiveMessage", {"QueueUrl": "/0/small", "WaitTimeSeconds": 20}
    )
    assert status == 200 and "Messages" not in answer
    assert time.monotonic() - began < 5


def test_deep_or_huge_input_is_refused_cheaply(server: Server) -> None:
    json_headers = {
        "Content-Type": "application/x-amz-json-1.0",
        "X-Amz-Target": "AmazonSQS.ListQueues",
    }
    form = {"Content-Type": "application/x-www-form-urlencoded"}
    for body, headers, code in [
        (b"[" * 100_000, json_headers, "SerializationException"),
        (b"Action=ListQueues&" + b"a." * 50_000 + b"b=1", form, "MalformedQueryString"),
        (b"Action=ListQueues" + b"&a=1" * 20_000, form, "MalformedQueryString"),
    ]:
        status, answer_headers, answer = request(server.url, "POST", "/", body, headers)
        assert status == 400, answer[:200]
        assert answer_headers["x-amzn-query-error"].startswith(code)
    _alive(server)
