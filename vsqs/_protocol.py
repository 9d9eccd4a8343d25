"""What queue-like objects offer, as protocols that mypy checks against each of them.

:class:`Receiver` is what a consumer needs: :class:`~vsqs.PlainQueue`,
:class:`~vsqs.PartitionedQueue`, :class:`~vsqs.QueueSet` and :class:`~vsqs.NullQueue`
all offer it. :class:`QueueLike` is everything a queue offers, producer side and
housekeeping included: a plain queue, a partitioned one and a null queue offer it, so
each can stand in for the others. Code typed against these protocols accepts any of
them; the test suite assigns each class to its protocols (so a signature that drifts
fails ``mypy --strict``) and calls every method of :class:`QueueLike` on each.
``isinstance(obj, QueueLike)`` checks that the methods are there.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from ._message import Counts, Message
from ._renewal import Lease
from ._stored import Settings

if TYPE_CHECKING:
    from ._reports import History, Stats


class Receiver(Protocol):
    """Receive, delete and extend messages (a queue, a set of queues, a null queue)."""

    def receive(
        self, *, visibility_timeout: float | None = None, timeout: float | None = None
    ) -> Message | None: ...

    def receive_batch(
        self,
        max_messages: int,
        *,
        visibility_timeout: float | None = None,
        timeout: float | None = 0,
    ) -> list[Message]: ...

    def consume(
        self, *, visibility_timeout: float | None = None, timeout: float | None = None
    ) -> Iterator[Message]: ...

    def delete(self, message: Message) -> bool: ...

    def delete_batch(self, messages: Iterable[Message]) -> int: ...

    def change_visibility(self, message: Message, seconds: float) -> Message: ...

    def size(self) -> int: ...

    def __len__(self) -> int: ...


@runtime_checkable
class QueueLike(Receiver, Protocol):
    """Everything a queue offers: publishing, receiving, looking, housekeeping."""

    @property
    def path(self) -> str: ...

    def publish(
        self,
        data: bytes | bytearray | memoryview,
        *,
        delay: float = 0.0,
        attributes: Mapping[str, str] | None = None,
        dedup_id: str | None = None,
        timeout: float | None = None,
        group: str | None = None,
    ) -> str: ...

    def publish_batch(
        self,
        bodies: Iterable[bytes | bytearray | memoryview],
        *,
        delay: float = 0.0,
        attributes: Mapping[str, str] | None = None,
        dedup_ids: Iterable[str | None] | None = None,
        batch_dedup_id: str | None = None,
        timeout: float | None = None,
        group: str | None = None,
    ) -> list[str]: ...

    def publish_file(
        self,
        path: str | os.PathLike[str],
        *,
        attributes: Mapping[str, str] | None = None,
        delay: float = 0.0,
        dedup_id: str | None = None,
        group: str | None = None,
    ) -> str: ...

    def publish_stream(
        self,
        readable: object,
        *,
        attributes: Mapping[str, str] | None = None,
        delay: float = 0.0,
        dedup_id: str | None = None,
        group: str | None = None,
        chunk_size: int = ...,
    ) -> str: ...

    def try_receive(
        self, max_messages: int = 1, *, visibility_timeout: float | None = None
    ) -> list[Message]: ...

    def lease(
        self,
        message: Message,
        *,
        max_duration: float = 3600.0,
        visibility_timeout: float | None = None,
    ) -> Lease: ...

    def consume_leases(
        self,
        *,
        visibility_timeout: float | None = None,
        timeout: float | None = None,
        max_duration: float = 3600.0,
    ) -> Iterator[Lease]: ...

    def next_look(self, deadline: float | None = None) -> float: ...

    def counts(self) -> Counts: ...

    def browse(self) -> Iterator[Message]: ...

    def peek(self) -> Message | None: ...

    def peek_oldest_key(self, *, known: bool = False) -> int | None: ...

    def stats(self) -> Stats: ...

    @property
    def is_shutdown(self) -> bool: ...

    def shutdown(self) -> None: ...

    def close(self) -> None: ...

    def requeue_expired(self) -> int: ...

    def purge(self) -> int: ...

    def clean(self, older_than: float = 3600.0) -> int: ...

    def history(self, message: Message | str) -> History: ...

    # *to*: a queue object or a path; each class says which queues it can move into.
    def redrive(self, to: Any = None, limit: int | None = None) -> int: ...

    def settings(self) -> Settings: ...

    def __enter__(self) -> Any: ...

    def __exit__(self, *exc_info: object) -> None: ...
