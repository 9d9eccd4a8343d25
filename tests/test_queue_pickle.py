"""A Queue crosses process boundaries (multiprocessing, Spark closures) by path and options."""

from __future__ import annotations

import multiprocessing as mp
import pickle
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest

import vsqs


def _publish_from_child(queue: vsqs.PlainQueue) -> None:
    queue.publish(b"from the child")


def test_pickle_round_trip_keeps_path_and_options(tmp_path: Path) -> None:
    dlq = vsqs.PlainQueue(tmp_path / "dlq")
    q = vsqs.PlainQueue(
        tmp_path / "q", capacity=5, dead_letter=dlq, max_receives=2, precision="ms", durable=False
    )
    copy = pickle.loads(pickle.dumps(q))  # noqa: S301 (our own bytes, this very process)
    assert copy.path == q.path
    assert copy.precision is vsqs.Precision.MS
    assert copy.durable is False
    assert copy.max_receives == 2
    assert copy.dead_letter is not None and copy.dead_letter.path == dlq.path
    assert copy._capacity is not None and copy._capacity.capacity == 5


def test_a_queue_passed_to_a_spawned_process_works(tmp_path: Path) -> None:
    q = vsqs.PlainQueue(tmp_path / "q")
    child = mp.get_context("spawn").Process(target=_publish_from_child, args=(q,))
    child.start()
    child.join(60)
    assert child.exitcode == 0
    message = q.receive(timeout=0)
    assert message is not None and message.body == b"from the child"


def _delete_in_worker(path: str, message: vsqs.Message) -> tuple[bool, dict[str, str]]:
    return vsqs.PlainQueue(path).delete(message), dict(message.attributes)


@pytest.mark.parametrize("attributes", [None, {"tenant": "a"}])
def test_a_received_message_pickles_and_deletes_after_unpickling(
    tmp_path: Path, attributes: dict[str, str] | None
) -> None:
    """Issue 32.4: a received message, with or without attributes, pickles; the copy
    equals it and deletes the message through its receipt."""
    q = vsqs.PlainQueue(tmp_path / "q")
    q.publish(b"job", attributes=attributes)
    message = q.receive(timeout=0)
    assert message is not None
    copy = pickle.loads(pickle.dumps(message))  # noqa: S301 (our own bytes, this very process)
    assert copy == message
    assert (copy.receipt, copy.queue, copy.body) == (message.receipt, message.queue, b"job")
    assert dict(copy.attributes) == (attributes or {})
    assert q.delete(copy) is True
    assert q.counts().total == 0


@pytest.mark.parametrize("attributes", [None, {"tenant": "a"}])
def test_a_received_message_is_deleted_by_a_process_pool_worker(
    tmp_path: Path, attributes: dict[str, str] | None
) -> None:
    """Issue 32.4: handing a received message to a ``ProcessPoolExecutor`` worker (a
    ``multiprocessing`` pickle round trip) works, and the worker's delete takes it."""
    q = vsqs.PlainQueue(tmp_path / "q")
    q.publish(b"job", attributes=attributes)
    message = q.receive(timeout=0)
    assert message is not None
    with ProcessPoolExecutor(1, mp_context=mp.get_context("forkserver")) as pool:
        deleted, seen = pool.submit(_delete_in_worker, q.path, message).result(timeout=120)
    assert deleted is True
    assert seen == (attributes or {})
    assert q.counts().total == 0
