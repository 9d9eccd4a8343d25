"""No request ever prints a traceback (issue 36): a real ``vsqs serve --admin`` process,
its access log on, is given every action of both protocols, the fuzzers of
:mod:`tests.serve.test_errors`, the dashboard's pages and actions, on healthy queues
and on odd ones (a file, a symlink, settings that are a directory, unreadable
messages...); no answer is a 500 and its output never holds a traceback."""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlencode

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import vsqs
from vsqs.serve._wire import ACTIONS

from .clients import Served
from .http import json_call, request
from .test_errors import FUZZ_BODIES, FUZZ_PARAMS, FUZZ_TARGETS, FUZZ_VALUES

ARN: Final = "arn:aws:sqs:us-east-1:000000000000:"
HEALTHY: Final = ("q", "q.fifo", "dlq", "src")
ODD: Final = (
    "a-file",  # a regular file where a queue directory would be
    "a-link",  # a symlink to a healthy queue
    "a-dangling-link",  # a symlink to nothing
    "settings-dir",  # .vsqs/settings.json is a directory
    "settings-bad",  # .vsqs/settings.json is not JSON
    "vsqs-file",  # .vsqs is a regular file
    "sqs-json-dir",  # .vsqs/sqs/record.json (the SQS API's own state) is a directory
    "sqs-json-bad",  # .vsqs/sqs/record.json is not JSON
    "unreadable",  # messages that cannot be read: directories, dangling links, bad metadata
    "to-nowhere",  # its dead-letter queue is a file
)
NAMES: Final = HEALTHY + ODD


def _make(root: Path) -> None:
    """(Re)make every queue of :data:`NAMES` as it is meant to be: the requests may
    delete, purge or reconfigure any of them."""
    queues = vsqs.QueueRoot(root)
    for name in ("q", "dlq"):
        if name not in queues:
            queues.create(name).publish_batch([b"one", b"two"])
    if "q.fifo" not in queues:
        queues.create("q.fifo", partitions=2, fifo=True).publish(b"f", group="g")
    if "src" not in queues:
        queues.create("src", dead_letter="dlq", max_receives=1).publish(b"s")
    _entry(root / "a-file", lambda path: path.write_text("not a queue"))
    _entry(root / "a-link", lambda path: path.symlink_to(root / "q"))
    _entry(root / "a-dangling-link", lambda path: path.symlink_to(root / "nowhere"))
    for name, kind, what in [
        ("settings-dir", "settings.json", None),
        ("settings-bad", "settings.json", b"{broken"),
        ("sqs-json-dir", "sqs/record.json", None),
        ("sqs-json-bad", "sqs/record.json", b"[1, 2"),
    ]:
        if name not in queues:
            queues.create(name).publish(b"m")
            stored = root / name / ".vsqs" / kind
            stored.parent.mkdir(exist_ok=True)
            if stored.exists():
                stored.unlink()
            if what is None:
                stored.mkdir()
            else:
                stored.write_bytes(what)
    if not (root / "vsqs-file").exists():
        (root / "vsqs-file").mkdir()
        (root / "vsqs-file" / "1700000000000000").write_bytes(b"m")
        (root / "vsqs-file" / ".vsqs").write_text("not a directory")
    if "unreadable" not in queues:
        queue = queues.create("unreadable")
        good = queue.publish(b"good", attributes={"a": "b"})
        bad_meta = queue.publish(b"bad metadata", attributes={"a": "b"})
        queue.close()
        here = root / "unreadable"
        (here / ".vsqs" / "meta" / bad_meta).write_bytes(b"\xff{not json")
        (here / ".vsqs" / "meta" / good).unlink()
        (here / ".vsqs" / "meta" / good).mkdir()
        (here / "1600000000000000").mkdir()  # a message name held by a directory
        (here / "1600000000000001").symlink_to(here / "gone")  # and by a dangling link
        (here / "1600000000000002.1600000000000003").mkdir()  # a held one, expired
        (here / ".vsqs" / "stats" / "x-1-2").parent.mkdir(exist_ok=True)
        (here / ".vsqs" / "stats" / "x-1-2").write_bytes(b"\x00garbage")
    if "to-nowhere" not in queues:
        queues.create("to-nowhere", dead_letter="to-nowhere-dlq", max_receives=1).publish(b"m")
    _entry(root / "to-nowhere-dlq", lambda path: path.write_text("a file"))


def _entry(path: Path, make: Callable[[Path], object]) -> None:
    if not os.path.lexists(path):
        make(path)


def _params(action: str, name: str, handle: str) -> dict[str, Any]:
    """Plausible parameters of *action* on the queue *name*."""
    url = f"/000000000000/{name}"
    group = {"MessageGroupId": "g", "MessageDeduplicationId": "d"} if "fifo" in name else {}
    every: dict[str, dict[str, Any]] = {
        "SendMessage": {"QueueUrl": url, "MessageBody": "x", **group},
        "SendMessageBatch": {
            "QueueUrl": url,
            "Entries": [{"Id": "a", "MessageBody": "x", **group}],
        },
        "ReceiveMessage": {
            "QueueUrl": url,
            "MaxNumberOfMessages": 10,
            "VisibilityTimeout": 0,
            "AttributeNames": ["All"],
            "MessageAttributeNames": ["All"],
        },
        "DeleteMessage": {"QueueUrl": url, "ReceiptHandle": handle},
        "DeleteMessageBatch": {"QueueUrl": url, "Entries": [{"Id": "a", "ReceiptHandle": handle}]},
        "ChangeMessageVisibility": {
            "QueueUrl": url,
            "ReceiptHandle": handle,
            "VisibilityTimeout": 0,
        },
        "ChangeMessageVisibilityBatch": {
            "QueueUrl": url,
            "Entries": [{"Id": "a", "ReceiptHandle": handle, "VisibilityTimeout": 0}],
        },
        "GetQueueAttributes": {"QueueUrl": url, "AttributeNames": ["All"]},
        "SetQueueAttributes": {"QueueUrl": url, "Attributes": {"VisibilityTimeout": "7"}},
        "GetQueueUrl": {"QueueName": name},
        "CreateQueue": {"QueueName": name},
        "DeleteQueue": {"QueueUrl": url},
        "PurgeQueue": {"QueueUrl": url},
        "ListQueues": {"QueueNamePrefix": name[:2]},
        "ListDeadLetterSourceQueues": {"QueueUrl": url},
        "TagQueue": {"QueueUrl": url, "Tags": {"k": "v"}},
        "UntagQueue": {"QueueUrl": url, "TagKeys": ["k"]},
        "ListQueueTags": {"QueueUrl": url},
        "AddPermission": {
            "QueueUrl": url,
            "Label": "l",
            "AWSAccountIds": ["000000000000"],
            "Actions": ["SendMessage"],
        },
        "RemovePermission": {"QueueUrl": url, "Label": "l"},
        "StartMessageMoveTask": {"SourceArn": ARN + name, "DestinationArn": ARN + "q"},
        "ListMessageMoveTasks": {"SourceArn": ARN + name},
        "CancelMessageMoveTask": {"TaskHandle": "eyJ0YXNrIjogIngifQ=="},
    }
    return every[action]


class _Watch:
    """The server under test, and every answer of 500 or more it gave."""

    def __init__(self, served: Served) -> None:
        self.served = served
        self.failures: list[str] = []

    def json(self, action: str, params: Any) -> tuple[int, Any]:
        status, _, answer = json_call(self.served.url, action, params)
        if status >= 500:
            self.failures.append(f"{action} {json.dumps(params)[:300]} -> {status} {answer}")
        return status, answer

    def http(
        self, method: str, target: str, body: bytes = b"", headers: dict[str, str] | None = None
    ) -> tuple[int, bytes]:
        status, _, answer = request(self.served.url, method, target, body, headers)
        if status >= 500:
            self.failures.append(f"{method} {target} {body[:200]!r} -> {status} {answer[:300]!r}")
        return status, answer


@pytest.fixture
def watch(tmp_path: Path) -> Iterator[_Watch]:
    root = tmp_path / "root"
    _make(root)
    served = Served(root, "--admin", quiet=False)
    try:
        yield _Watch(served)
    finally:
        served.stop()
    log = served.log.read_text(errors="replace")
    assert "Traceback" not in log, log[-20000:]


def _every_action(watch: _Watch, root: Path) -> None:
    for name in NAMES:
        _make(root)
        _, received = watch.json("ReceiveMessage", _params("ReceiveMessage", name, ""))
        messages = (received or {}).get("Messages") or [{}]
        handle = messages[0].get("ReceiptHandle", "1.2~1~0000000000000000")
        for action in sorted(ACTIONS, key=lambda a: a == "DeleteQueue"):
            watch.json(action, _params(action, name, handle))
        query = urlencode({"Action": "GetQueueAttributes", "AttributeName.1": "All"})
        watch.http(
            "POST",
            f"/000000000000/{name}",
            query.encode(),
            {"Content-Type": "application/x-www-form-urlencoded"},
        )


def _dashboard(watch: _Watch, root: Path) -> None:
    _make(root)
    _, page = watch.http("GET", "/")
    token = re.search(rb'name="csrf" value="([^"]+)"', page)
    for name in (*NAMES, "nope"):
        watch.http("GET", "/ui/api/overview")
        for path in ("/ui/queue/{}", "/ui/api/queue/{}", "/ui/queue/{}/depth.svg"):
            watch.http("GET", path.format(name))
        _, queue_page = watch.http("GET", f"/ui/queue/{name}")
        found = token or re.search(rb'name="csrf" value="([^"]+)"', queue_page)
        if found is None:
            continue
        form_token = found.group(1).decode()
        for form in (
            {"action": "purge", "confirm": "yes"},
            {"action": "redrive", "confirm": "yes"},
            {"action": "redrive", "to": "q", "limit": "5", "confirm": "yes"},
            {"action": "configure", "key": "visibility_timeout", "value": "9"},
            {"action": "configure", "key": "dead_letter", "value": "a-file", "confirm": "yes"},
            {"action": "configure", "key": "retention", "value": "", "confirm": "yes"},
            {"action": "shutdown"},
        ):
            watch.http(
                "POST",
                f"/ui/action/{name}",
                urlencode({**form, "csrf": form_token}).encode(),
                {
                    "Content-Type": "application/x-www-form-urlencoded",
                    "Origin": watch.served.url,
                },
            )


def test_no_request_prints_a_traceback_or_fails(watch: _Watch) -> None:
    root = watch.served.root
    _every_action(watch, root)
    _dashboard(watch, root)

    @settings(
        max_examples=150,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    @given(
        action=st.sampled_from(sorted(ACTIONS)),
        params=st.dictionaries(FUZZ_PARAMS, FUZZ_VALUES, max_size=4),
        name=st.sampled_from(NAMES),
    )
    def fuzz_json(action: str, params: dict[str, Any], name: str) -> None:
        _make(root)
        if "WaitTimeSeconds" in params:
            params["WaitTimeSeconds"] = 0  # no long polls in a fuzz loop
        params.setdefault("QueueUrl", f"/0/{name}")
        watch.json(action, params)

    @settings(max_examples=100, deadline=None)
    @given(body=FUZZ_BODIES, target=FUZZ_TARGETS, json_protocol=st.booleans())
    def fuzz_bytes(body: bytes, target: str, json_protocol: bool) -> None:
        headers = (
            {"Content-Type": "application/x-amz-json-1.0", "X-Amz-Target": "AmazonSQS.SendMessage"}
            if json_protocol
            else {"Content-Type": "application/x-www-form-urlencoded"}
        )
        watch.http("POST", target.replace("/0/q", "/0/unreadable"), body, headers)
        watch.http("POST", target, body, headers)

    fuzz_json()
    fuzz_bytes()
    time.sleep(1.0)  # move tasks and the sampler run on: they may fail after the answers
    assert not watch.failures, "\n".join(watch.failures)
