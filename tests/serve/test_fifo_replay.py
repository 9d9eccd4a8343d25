"""FIFO order and visibility through ``vsqs serve``, replayed.

One sequence of requests (several groups; sends; receives of one and of ten messages,
with and without ``VisibilityTimeout``; deletes; ``ChangeMessageVisibility`` to 0 and to
longer) is run many times, each time on a fresh FIFO queue and through a fresh client
(a new connection: another thread of the server). Every run must get the same answers,
the ones written out in :data:`EXPECTED`, and they must keep SQS's rules for message
groups, checked by :func:`check_rules` against a model of them.
"""

from __future__ import annotations

from typing import Any, Final

import pytest

import vsqs
from vsqs.serve import Server

from .conftest import client

RUNS: Final = 12
LONG: Final = 600

# The sequence: each message's body is its group's role (X, Y, Z) and its rank in it.
Step = tuple[Any, ...]
SEQUENCE: Final[list[Step]] = [
    ("send", "X1"), ("send", "Y1"), ("send", "Z1"), ("send", "X2"), ("send", "Y2"),
    ("send_batch", "Z2", "X3"),
    ("receive", 1, None),
    ("receive", 1, None),
    ("receive", 10, LONG),
    ("receive", 10, None),
    ("change", "X1", 0),
    ("receive", 1, None),
    ("delete", "Y1"),
    ("receive", 10, None),
    ("change", "X1", 900),
    ("delete", "Z1"),
    ("receive", 10, None),
    ("delete", "X1"),
    ("change", "Z2", 0),
    ("receive", 10, 0),
    ("receive", 1, None),
    ("change", "Y2", 0),
    ("receive", 10, None),
    ("delete", "X2"),
    ("delete", "Y2"),
    ("receive", 10, None),
    ("delete", "X3"),
    ("delete", "Z2"),
    ("receive", 10, None),
]  # fmt: skip
"""``("receive", MaxNumberOfMessages, VisibilityTimeout or None)``; ``("change", body,
seconds)`` uses the handle of the body's latest receive, as does ``("delete", body)``."""

Answer = list[tuple[str, int]]  # (body, ApproximateReceiveCount) of each message
EXPECTED: Final[list[Answer]] = [
    [("X1", 1)],  # the oldest
    [("Y1", 1)],  # X is in flight: the next oldest of another group
    [("Z1", 1), ("Z2", 1)],  # several of one group, in order
    [],  # every group has a message in flight
    [("X1", 2)],  # made visible again: before X's later ones
    [("Y2", 1)],
    [],  # X1 extended, Z2 still held
    [("X2", 1), ("Z2", 2), ("X3", 1)],  # VisibilityTimeout=0: visible again at once
    [("X2", 2)],  # the oldest, though Z's partition comes first
    [("Y2", 2), ("Z2", 3)],  # X is held by X2
    [("X3", 2)],
    [],
]


def check_rules(answers: list[Answer]) -> None:
    """SQS's rules for message groups, checked on one run's *answers* with a model.

    A receive returns of each group the earliest messages not deleted, in order, and
    nothing of a group that has a message in flight (received with a visibility timeout
    that has not ended, nor been changed to 0); a receive count counts the receives.
    """
    groups: dict[str, list[str]] = {}
    held: set[str] = set()
    counts: dict[str, int] = {}
    received = iter(answers)
    for step in SEQUENCE:
        kind, *args = step
        if kind in ("send", "send_batch"):
            for body in args:
                groups.setdefault(body[0], []).append(body)
        elif kind == "receive":
            answer = next(received)
            assert len(answer) <= args[0]
            for group in {body[0] for body, _ in answer}:
                mine = [body for body, _ in answer if body[0] == group]
                assert not held & set(groups[group]), f"{mine}: {group} has one in flight"
                assert mine == groups[group][: len(mine)], f"{mine}: not {group}'s next"
            for body, count in answer:
                counts[body] = counts.get(body, 0) + 1
                assert count == counts[body], (body, count)
                if args[1] != 0:
                    held.add(body)
        elif kind == "change":
            (held.discard if args[1] == 0 else held.add)(args[0])
        else:
            held.discard(args[0])
            groups[args[0][0]].remove(args[0])
    assert not any(groups.values())


def replay(sqs: Any, url: str, names: dict[str, str]) -> list[Answer]:
    """Run :data:`SEQUENCE` on the queue *url* (*names*: each role's group); the answers."""
    handles: dict[str, str] = {}
    answers: list[Answer] = []

    def entry(body: str) -> dict[str, str]:
        return {"MessageBody": body, "MessageGroupId": names[body[0]],
                "MessageDeduplicationId": body}  # fmt: skip

    for step in SEQUENCE:
        kind, *args = step
        if kind == "send":
            sqs.send_message(QueueUrl=url, **entry(args[0]))
        elif kind == "send_batch":
            entries = [{"Id": body, **entry(body)} for body in args]
            assert not sqs.send_message_batch(QueueUrl=url, Entries=entries).get("Failed")
        elif kind == "receive":
            extra = {} if args[1] is None else {"VisibilityTimeout": args[1]}
            got = sqs.receive_message(
                QueueUrl=url, MaxNumberOfMessages=args[0], WaitTimeSeconds=0,
                MessageSystemAttributeNames=["ApproximateReceiveCount", "MessageGroupId"],
                **extra,
            ).get("Messages", [])  # fmt: skip
            for message in got:
                assert message["Attributes"]["MessageGroupId"] == names[message["Body"][0]]
                handles[message["Body"]] = message["ReceiptHandle"]
            answers.append(
                [(m["Body"], int(m["Attributes"]["ApproximateReceiveCount"])) for m in got]
            )
        elif kind == "change":
            sqs.change_message_visibility(
                QueueUrl=url, ReceiptHandle=handles[args[0]], VisibilityTimeout=args[1]
            )
        else:
            sqs.delete_message(QueueUrl=url, ReceiptHandle=handles[args[0]])
    return answers


def _roles(queue: vsqs.AnyQueue) -> dict[str, str]:
    """Groups for X, Y and Z: X and Y in one partition of *queue*, Z in one before it."""
    if not isinstance(queue, vsqs.PartitionedQueue):  # one directory holds every group
        return {"X": "group-0", "Y": "group-1", "Z": "group-2"}
    where: dict[int, list[str]] = {}
    paths = [part.path for part in vsqs.partitions_of(queue)]
    for n in range(100):
        where.setdefault(paths.index(queue.partition_for(f"group-{n}").path), []).append(
            f"group-{n}"
        )
    x, y, *_ = where[max(where)]
    return {"X": x, "Y": y, "Z": where[min(where)][0]}


@pytest.mark.parametrize("partitions", ["serve's default", 1])
def test_the_same_requests_get_the_same_answers_in_sqs_order(
    server: Server, partitions: str | int
) -> None:
    root = server.service.root
    for run in range(RUNS):
        sqs = client(server.url)  # a new connection each run: another thread of the server
        name = f"replay-{run}.fifo"
        if partitions == 1:
            root.create(name, fifo=True, partitions=1)
            url = sqs.get_queue_url(QueueName=name)["QueueUrl"]
        else:
            url = sqs.create_queue(QueueName=name, Attributes={"FifoQueue": "true"})["QueueUrl"]
        queue = root.get(name)
        assert queue.fifo
        assert len(vsqs.partitions_of(queue)) == (1 if partitions == 1 else 8)
        answers = replay(sqs, url, _roles(queue))
        check_rules(answers)
        assert answers == EXPECTED, f"run {run}"
        sqs.close()
