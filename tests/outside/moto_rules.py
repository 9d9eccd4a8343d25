"""Which of moto's SQS tests say something about SQS, and where vsqs answers otherwise.

A pytest plugin for moto's own suite (``tests/test_sqs`` of its source distribution,
laid out by ``tests/outside/setup-moto.sh``) run in server mode against ``vsqs serve``
by ``tests/outside/test_moto.py``. It runs in ``.venv-moto``'s pytest, not in ours.

* **Not portable** (:data:`NOT_PORTABLE_FILES`, :data:`NOT_PORTABLE`): tests that need
  other AWS services, moto's internals (its backend objects, its process's clock or
  environment) or moto's own endpoint. They are deselected, each by a rule with its
  reason.
* **Known differences** (:data:`KNOWN_DIFFERENCES`): portable tests where vsqs answers
  as AWS documents and moto answers otherwise, or where vsqs differs on purpose. Each is
  an ``xfail(strict=True)`` with the reason, so a test that starts passing is noticed;
  docs/sqs-api.rst lists them.
* **The account**: moto's tests expect moto's default account (123456789012) in URLs and
  ARNs, or ask STS for it (the ``account_id`` fixture). Against any endpoint the
  portable meaning is "the account of the endpoint": both are the account of the server
  under test (:envvar:`VSQS_MOTO_ACCOUNT`).
* **Not yet** (:data:`NOT_YET`): tests vsqs passes in some runs only, an ``xfail`` that
  is not strict, with the reason.
* **A clean endpoint**: every queue of the endpoint is deleted before each test (moto's
  own server is reset through its ``/moto-api/reset``, which vsqs has not:
  ``MOTO_CALL_RESET_API=false``).

The outcome of every test goes to the JSON file named by :envvar:`VSQS_MOTO_SUMMARY`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Final

import pytest

NOT_PORTABLE_FILES: Final = {
    "test_server.py": "moto's own server, started in the test's process",
    "test_sqs_authentication.py": "IAM users and policies (moto's IAM)",
    "test_sqs_cloudformation.py": "CloudFormation stacks",
    "test_sqs_integration.py": "Lambda functions run in docker",
    "test_sqs_multiaccount.py": "STS AssumeRole into a second account",
}
"""Files of tests/test_sqs that test other services or moto itself."""

_BACKEND: Final = "reads moto's backend objects (moto skips it in server mode)"
_CLOCK: Final = "moves the clock of moto's process with freezegun (moto skips it in server mode)"
_ENDPOINT: Final = "expects queue URLs on moto's default endpoint, http://localhost:5000"

NOT_PORTABLE: Final = {
    "test_set_attributes_integer_fields_conversion": _BACKEND,
    "test_change_message_visibility_than_permitted": _CLOCK,
    "test_batch_change_message_visibility": _CLOCK,
    "test_queue_with_dlq": _CLOCK,
    "test_receive_messages_with_message_group_id_on_visibility_timeout": _CLOCK,
    "test_list_queues_limits_to_1000_queues": "moto skips it in server mode",
    "test_fifo_queue_send_duplicate_messages_after_deduplication_time_limit": (
        "sets the deduplication interval in moto's environment (moto skips it in server mode)"
    ),
    "test_create_queues_in_multiple_region": _ENDPOINT,
    "test_get_queue_with_prefix": _ENDPOINT,
    "test_permissions": "expects moto's default account, 123456789012, written out in ARNs",
}
"""Test functions (all their parameters) that need moto's internals or endpoint."""

_STALE: Final = (
    "uses the receipt handle of an earlier receive after the message was received again; "
    "SQS lets it act on the new delivery, vsqs refuses on purpose: a stale handle never "
    "deletes or extends a later delivery (docs/sqs-api.rst)"
)
_UNKNOWN_NAME: Final = (
    "creates a queue with the attribute 'VisibilityTimeout ' (a trailing space), which "
    "moto reads as VisibilityTimeout; SQS knows no such attribute, and CreateQueue's "
    "documented answer to one is InvalidAttributeName, as vsqs's"
)

KNOWN_DIFFERENCES: Final = {
    "test_message_becomes_inflight_when_received": _UNKNOWN_NAME,
    "test_receive_message_with_explicit_visibility_timeout": _UNKNOWN_NAME,
    "test_change_message_visibility": _UNKNOWN_NAME,
    "test_queue_length": _UNKNOWN_NAME,
    "test_delete_batch_operation": _UNKNOWN_NAME,
    "test_delete_message_after_visibility_timeout": _UNKNOWN_NAME,
    "test_message_retention_period": (
        "creates a queue with MessageRetentionPeriod=1; SQS documents 60 to 1,209,600 "
        "seconds and refuses 1 with InvalidAttributeValue, as vsqs"
    ),
    "test_change_message_visibility_on_old_message": _STALE,
    "test_delete_message_using_old_receipt_handle": _STALE,
    "test_batch_change_message_visibility_on_old_message": _STALE,
    "test_create_queue_with_different_attributes_fail": (
        "creates a queue named as a standard one with FifoQueue=tru, which moto reads as "
        "false; SQS takes only true or false, and refuses FifoQueue on a standard queue "
        "even as false (recorded from SQS), so it refuses this, as vsqs"
    ),
    "test_create_fifo_queue_with_dlq": (
        "creates a standard queue with FifoQueue=false; SQS answers InvalidAttributeName "
        "'Unknown Attribute FifoQueue.' (recorded from SQS), as vsqs"
    ),
    "test_remove_permission_errors": (
        "expects 'can't find label on existing policy.' for a queue without a policy; "
        "SQS says 'Value <label> for parameter Label is invalid. Reason: can't find "
        "label.' (recorded from SQS, on a queue whose permissions were all removed), as "
        "vsqs"
    ),
    "test_send_messages_to_fifo_without_message_group_id": (
        "expects MissingParameter for a FIFO batch entry without MessageGroupId; SQS "
        "refuses the batch with InvalidParameterValue 'The request must contain the "
        "parameter MessageGroupId.' (recorded from SQS), as vsqs"
    ),
    "test_message_delay_is_more_than_15_minutes": (
        "sends MessageDeduplicationId to a standard queue, which moto ignores; SQS "
        "documents it for FIFO queues only and refuses it elsewhere ('... Reason: The "
        "request include parameter that is not valid for this queue type.', seen from "
        "SQS), as vsqs"
    ),
    "test_get_queue_attributes": (
        "expects RedrivePolicy back with the spacing it was sent with; SQS gives it back "
        "re-serialized, compact JSON with maxReceiveCount a number (AWS CLI reference, "
        "get-queue-attributes), as vsqs"
    ),
}
"""Test functions where vsqs answers as SQS documents and moto otherwise."""

NOT_YET: Final[dict[str, str]] = {}
"""Tests vsqs does not pass yet, nor always fail: ``xfail`` not strict, with the reason."""


def pytest_configure(config: pytest.Config) -> None:
    """Make moto's default account the endpoint's, before the test modules import it."""
    del config
    import moto.core

    moto.core.DEFAULT_ACCOUNT_ID = os.environ["VSQS_MOTO_ACCOUNT"]  # type: ignore[attr-defined,unused-ignore]


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    del config
    return True if collection_path.name in NOT_PORTABLE_FILES else None


def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    del session
    kept: list[pytest.Item] = []
    dropped: list[pytest.Item] = []
    for item in items:
        name = getattr(item, "originalname", item.name)
        if name in NOT_PORTABLE:
            _EXCLUDED[item.nodeid] = NOT_PORTABLE[name]
            dropped.append(item)
            continue
        if name in KNOWN_DIFFERENCES:
            _KNOWN[item.nodeid] = KNOWN_DIFFERENCES[name]
            item.add_marker(pytest.mark.xfail(reason=KNOWN_DIFFERENCES[name], strict=True))
        elif name in NOT_YET:
            _KNOWN[item.nodeid] = NOT_YET[name]
            item.add_marker(pytest.mark.xfail(reason=NOT_YET[name], strict=False))
        kept.append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
    items[:] = kept


_EXCLUDED: dict[str, str] = {}
_KNOWN: dict[str, str] = {}
_OUTCOMES: dict[str, str] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == "call" or report.outcome != "passed":
        outcome = "xfailed" if hasattr(report, "wasxfail") else report.outcome
        if report.nodeid not in _OUTCOMES or outcome != "passed":
            _OUTCOMES[report.nodeid] = outcome


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    del session
    summary = {
        "exitstatus": int(exitstatus),
        "excluded": _EXCLUDED,
        "known": _KNOWN,
        "outcomes": _OUTCOMES,
    }
    Path(os.environ["VSQS_MOTO_SUMMARY"]).write_text(json.dumps(summary, indent=1))


@pytest.fixture
def account_id() -> str:
    """The endpoint's account (moto's own fixture asks STS, which vsqs is not)."""
    return os.environ["VSQS_MOTO_ACCOUNT"]


@pytest.fixture(autouse=True)
def _empty_endpoint() -> None:
    """Delete every queue of the endpoint before the test (moto resets its own server)."""
    import boto3

    sqs: Any = boto3.client(
        "sqs", endpoint_url=os.environ["TEST_SERVER_MODE_ENDPOINT"], region_name="us-east-1"
    )
    for page in sqs.get_paginator("list_queues").paginate(MaxResults=1000):
        for url in page.get("QueueUrls", []):
            sqs.delete_queue(QueueUrl=url)
