"""The errors a user hits (issue 36): each names the problem and the fix, and no
request prints a traceback."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

import vsqs

from .clients import SERVE
from .conftest import Start
from .http import json_call


def test_a_corrupt_settings_file_names_the_queue_and_the_fix(
    start: Start, capsys: pytest.CaptureFixture[str]
) -> None:
    server = start(quiet=False)
    root = server.service.root
    root.create("orders", visibility_timeout=5).publish(b"x")
    (Path(root.path) / "orders" / ".vsqs" / "settings.json").write_text("{broken")
    status, headers, answer = json_call(
        server.url, "ReceiveMessage", {"QueueUrl": "/000000000000/orders"}
    )
    assert 400 <= status < 500, answer  # an SDK does not retry it
    assert "orders" in answer["message"] and "--reset" in answer["message"]
    assert root.path not in answer["message"]  # no server path sent to a client
    assert headers["x-amzn-query-error"].startswith("InvalidSettings;")
    assert "Traceback" not in capsys.readouterr().err


def test_serve_refuses_a_root_that_does_not_exist(tmp_path: Path) -> None:
    typo = tmp_path / "typo"
    refused = subprocess.run(
        [*SERVE, str(typo), "--port", "0"], capture_output=True, text=True, timeout=60, check=False
    )
    assert refused.returncode != 0
    assert "no directory" in refused.stderr and "--create" in refused.stderr
    assert "Traceback" not in refused.stderr
    assert not typo.exists()


def test_a_move_task_whose_queue_is_deleted_fails_quietly(
    start: Start, capsys: pytest.CaptureFixture[str]
) -> None:
    server = start(quiet=False)
    root = server.service.root
    dlq = root.create("dlq")
    root.create("source", dead_letter="dlq", max_receives=1)
    root.create("target")
    dlq.publish_batch([b"m%d" % i for i in range(50)])
    arn = "arn:aws:sqs:us-east-1:000000000000:"
    for deleted in ("target", "dlq"):
        status, _, answer = json_call(
            server.url,
            "StartMessageMoveTask",
            {
                "SourceArn": arn + "dlq",
                "DestinationArn": arn + "target",
                "MaxNumberOfMessagesPerSecond": 1,
            },
        )
        assert status == 200, answer
        root.delete(deleted)
        time.sleep(1.5)  # the task's thread notices
        if deleted == "target":
            status, _, answer = json_call(
                server.url, "ListMessageMoveTasks", {"SourceArn": arn + "dlq"}
            )
            assert answer["Results"][0]["Status"] == "FAILED", answer
            root.create("target")
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    assert vsqs.QueueRoot(root.path).list() == ["source", "target"]


def _error(call: Callable[..., object], **params: Any) -> dict[str, str]:
    with pytest.raises(ClientError) as caught:
        call(**params)
    return dict(caught.value.response["Error"])


@pytest.mark.parametrize("fifo", [False, True])
def test_a_receipt_handle_of_another_queue_is_invalid(sqs: Any, fifo: bool) -> None:
    """A handle names its queue: on another queue's URL (same message file names there
    or not), DeleteMessage, its batch and ChangeMessageVisibility answer
    ReceiptHandleIsInvalid and change nothing; so does an altered handle."""
    suffix, attributes = (".fifo", {"FifoQueue": "true"}) if fifo else ("", {})
    extra = {"MessageGroupId": "g", "MessageDeduplicationId": "d"} if fifo else {}
    urls = [
        sqs.create_queue(QueueName=name + suffix, Attributes=attributes)["QueueUrl"]
        for name in ("a", "b")
    ]
    for url in urls:
        sqs.send_message(QueueUrl=url, MessageBody="m", **extra)
    handles = [
        sqs.receive_message(QueueUrl=url, VisibilityTimeout=60)["Messages"][0]["ReceiptHandle"]
        for url in urls
    ]
    a, b = urls
    receipt, count, tag = handles[0].split("~")
    altered = f"{receipt}~{count}~{'0' * 16 if tag != '0' * 16 else '1' * 16}"
    for url, handle in ((b, handles[0]), (a, altered), (a, f"{receipt}~{count}")):
        error = _error(sqs.delete_message, QueueUrl=url, ReceiptHandle=handle)
        assert error["Code"] == "ReceiptHandleIsInvalid", error
        error = _error(
            sqs.change_message_visibility, QueueUrl=url, ReceiptHandle=handle, VisibilityTimeout=0
        )
        assert error["Code"] == "ReceiptHandleIsInvalid", error
    batch = sqs.delete_message_batch(QueueUrl=b, Entries=[{"Id": "x", "ReceiptHandle": handles[0]}])
    assert [f["Code"] for f in batch["Failed"]] == ["ReceiptHandleIsInvalid"]
    assert not batch["Successful"]
    # Nothing changed: both messages are still held, and their own handles work.
    for url, handle in zip(urls, handles, strict=True):
        assert "Messages" not in sqs.receive_message(QueueUrl=url)
        sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=handle, VisibilityTimeout=0)
        again = sqs.receive_message(QueueUrl=url)["Messages"][0]["ReceiptHandle"]
        sqs.delete_message(QueueUrl=url, ReceiptHandle=again)
        assert "Messages" not in sqs.receive_message(QueueUrl=url)


def test_a_damaged_queue_is_a_409_naming_the_entry(
    start: Start, capsys: pytest.CaptureFixture[str]
) -> None:
    """A file where a queue would be, a directory where the SQS state file would be:
    409 QueueUnusable naming the entry inside the root (never the server's path), one
    line in the server's log, no traceback."""
    server = start(quiet=False)
    root = Path(server.service.root.path)
    (root / "planted").write_text("not a queue")
    server.service.root.create("tagged")
    (root / "tagged" / ".vsqs" / "sqs" / "record.json").mkdir(parents=True)
    for action, params, entry in [
        ("CreateQueue", {"QueueName": "planted"}, "planted"),
        ("TagQueue", {"QueueUrl": "/0/tagged", "Tags": {"k": "v"}}, "record.json"),
    ]:
        status, headers, answer = json_call(server.url, action, params)
        assert status == 409, answer
        assert headers["x-amzn-query-error"].startswith("QueueUnusable;")
        assert entry in answer["message"] and str(root) not in answer["message"]
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    assert "CreateQueue: queue path" in err  # the operator reads what to repair
