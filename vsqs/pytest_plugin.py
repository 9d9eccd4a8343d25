"""pytest fixtures for code that uses vsqs, available wherever vsqs is installed.

Registered through the ``pytest11`` entry point, so a test needs no import or conftest::

    def test_worker(vsqs_queue):
        vsqs_queue.publish(b"resize cat.jpg")
        assert vsqs_queue.receive(timeout=0).body == b"resize cat.jpg"

Fixtures:

``vsqs_clock``
    A :class:`vsqs.testing.ManualClock`; queues made by the fixtures below use it, so
    ``vsqs_clock.advance(31)`` expires a 30 s visibility timeout without sleeping, and a
    blocking ``receive(timeout=5)`` on an empty queue returns at once.
``vsqs_queue``
    A fresh, empty :class:`vsqs.Queue` in ``tmp_path`` (not durable: tests need no
    fsync). ``@pytest.mark.vsqs(visibility_timeout=5, capacity=10)`` passes options to it.
``vsqs_queue_factory``
    ``vsqs_queue_factory("name", **options)`` makes more queues in ``tmp_path``; the same
    name gives another handle on the same queue, as a second process would have.
``vsqs_root``
    A :class:`vsqs.QueueRoot` of named queues in ``tmp_path``.

Every queue is detached at teardown. The fixtures are function-scoped: each test gets
fresh directories, so tests can run in parallel (pytest-xdist) without sharing a queue.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import pytest

from . import AnyQueue, Queue, QueueOptions, QueueRoot, validate_name
from .testing import ManualClock

if TYPE_CHECKING:
    from typing_extensions import Unpack


class QueueFactory(Protocol):
    """The type of the ``vsqs_queue_factory`` fixture: options are checked by mypy."""

    def __call__(self, name: str = "queue", **options: Unpack[QueueOptions]) -> AnyQueue: ...


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "vsqs(**options): keyword options for the vsqs_queue fixture's Queue"
    )


@pytest.fixture
def vsqs_clock() -> ManualClock:
    """A manual clock shared by the queues of one test; ``advance(seconds)`` moves it."""
    return ManualClock()


@pytest.fixture
def vsqs_queue_factory(tmp_path: Path, vsqs_clock: ManualClock) -> Iterator[QueueFactory]:
    """Make queues under ``tmp_path``: ``vsqs_queue_factory("orders", capacity=10)``.

    Options default to the manual clock and ``durable=False``; any :class:`vsqs.Queue`
    option may be given. Names follow :func:`vsqs.validate_name`.
    """
    made: list[AnyQueue] = []

    def factory(name: str = "queue", **options: Unpack[QueueOptions]) -> AnyQueue:
        options.setdefault("clock", vsqs_clock)
        options.setdefault("durable", False)
        queue = Queue(tmp_path / "vsqs" / validate_name(name), **options)
        made.append(queue)
        return queue

    yield factory
    for queue in made:
        queue.detach()


@pytest.fixture
def vsqs_queue(request: pytest.FixtureRequest, vsqs_queue_factory: QueueFactory) -> AnyQueue:
    """A fresh, empty queue on the manual clock (options from ``@pytest.mark.vsqs``)."""
    options: dict[str, Any] = {}
    for marker in reversed(list(request.node.iter_markers("vsqs"))):
        options.update(marker.kwargs)  # the closest marker (the test's own) wins
    return vsqs_queue_factory(**options)


@pytest.fixture
def vsqs_root(tmp_path: Path, vsqs_clock: ManualClock) -> QueueRoot:
    """A root directory of named queues, on the manual clock, not durable."""
    return QueueRoot(tmp_path / "vsqs-root", clock=vsqs_clock, durable=False)
