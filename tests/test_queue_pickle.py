"""A Queue crosses process boundaries (multiprocessing, Spark closures) by path and options."""

from __future__ import annotations

import multiprocessing as mp
import pickle
from pathlib import Path

import vsqs


def _publish_from_child(queue: vsqs.Queue) -> None:
    queue.publish(b"from the child")


def test_pickle_round_trip_keeps_path_and_options(tmp_path: Path) -> None:
    dlq = vsqs.Queue(tmp_path / "dlq")
    q = vsqs.Queue(
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
    q = vsqs.Queue(tmp_path / "q")
    child = mp.get_context("spawn").Process(target=_publish_from_child, args=(q,))
    child.start()
    child.join(60)
    assert child.exitcode == 0
    message = q.receive(timeout=0)
    assert message is not None and message.body == b"from the child"
