"""pytest fixtures for code that uses vsqs, available wherever vsqs is installed.

Registered through the ``pytest11`` entry point, so a test needs no import::

    def test_worker(vsqs_queue):
        vsqs_queue.publish(b"job")
        assert run_worker_once(vsqs_queue.path) == "done"

Fixtures:

``vsqs_clock``
    A :class:`vsqs.testing.ManualClock`; queues made by the fixtures below use it, so
    ``vsqs_clock.advance(31)`` expires a 30 s visibility timeout without sleeping.
``vsqs_queue``
    A fresh :class:`vsqs.Queue` in ``tmp_path`` (not durable: tests need no fsync).
``vsqs_queue_factory``
    ``vsqs_queue_factory(name="q", **options)`` makes more queues in ``tmp_path``.
``vsqs_root``
    A :class:`vsqs.QueueRoot` of named queues in ``tmp_path``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ._queue import Queue
from ._root import QueueRoot
from .testing import ManualClock

QueueFactory = Callable[..., Queue]


@pytest.fixture
def vsqs_clock() -> ManualClock:
    """A manual clock shared by the queues of one test."""
    return ManualClock()


@pytest.fixture
def vsqs_queue_factory(tmp_path: Path, vsqs_clock: ManualClock) -> Iterator[QueueFactory]:
    """Make queues under ``tmp_path``: ``vsqs_queue_factory("name", capacity=10)``."""
    made: list[Queue] = []

    def factory(name: str = "queue", **options: Any) -> Queue:
        options.setdefault("clock", vsqs_clock)
        options.setdefault("durable", False)
        queue = Queue(tmp_path / "vsqs" / name, **options)
        made.append(queue)
        return queue

    yield factory
    for queue in made:
        queue.detach()


@pytest.fixture
def vsqs_queue(vsqs_queue_factory: QueueFactory) -> Queue:
    """A fresh, empty queue on the manual clock."""
    return vsqs_queue_factory()


@pytest.fixture
def vsqs_root(tmp_path: Path, vsqs_clock: ManualClock) -> QueueRoot:
    """A root directory of named queues, on the manual clock."""
    return QueueRoot(tmp_path / "vsqs-root", clock=vsqs_clock, durable=False)
