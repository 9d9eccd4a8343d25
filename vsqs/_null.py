"""A queue that accepts everything and keeps nothing (dirq's QueueNull)."""

from __future__ import annotations

import errno
import math
import os
from collections.abc import Iterable, Iterator, Mapping
from typing import Final

from . import _fs
from ._clock import SYSTEM_CLOCK, Clock
from ._errors import InvalidId, LeaseLost
from ._ids import Precision, parse_name, source_for
from ._message import Counts, Message
from ._renewal import Lease
from ._reports import History, Stats
from ._stored import Settings


class NullQueue:
    """A queue that accepts everything and keeps nothing (dirq's QueueNull).

    It has :class:`Queue`'s methods, so it can stand in for one to switch a pipeline
    stage off or in tests: publishing returns a fresh id and discards the body, receiving
    finds nothing, counts are zero. :meth:`publish_file` removes the file, as if it was
    published and consumed at once. Nothing is created on disk.
    """

    path: Final = os.devnull

    def __init__(self, *, precision: str | Precision = Precision.US, clock: Clock | None = None):
        self.precision = Precision(precision)
        self.clock: Clock = clock or SYSTEM_CLOCK

    def __repr__(self) -> str:
        return "NullQueue()"

    def __enter__(self) -> NullQueue:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Nothing to release."""

    detach = close

    def __bool__(self) -> bool:
        return True

    partitions: Final = 1
    """A null queue is one (empty) partition."""
    fifo: Final = False

    def _new_id(self) -> str:
        return source_for(self.clock).next(self.clock.time_us(), self.precision)

    def publish(
        self,
        data: bytes | bytearray | memoryview,
        *,
        delay: float = 0.0,
        attributes: Mapping[str, str] | None = None,
        dedup_id: str | None = None,
        timeout: float | None = None,
        group: str | None = None,
    ) -> str:
        """Discard *data*; return a fresh id."""
        return self._new_id()

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
    ) -> list[str]:
        """Discard *bodies*; return one fresh id for each."""
        return [self._new_id() for _ in bodies]

    def publish_file(
        self,
        path: str | os.PathLike[str],
        *,
        attributes: Mapping[str, str] | None = None,
        delay: float = 0.0,
        dedup_id: str | None = None,
        group: str | None = None,
    ) -> str:
        """Remove the file at *path* (it was "moved into" the null queue); return an id."""
        source = os.fspath(path)
        if not _fs.unlink(source):
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), source)
        return self._new_id()

    def publish_stream(
        self,
        readable: object,
        *,
        attributes: Mapping[str, str] | None = None,
        delay: float = 0.0,
        dedup_id: str | None = None,
        group: str | None = None,
        chunk_size: int = 1 << 20,
    ) -> str:
        """Return a fresh id without reading *readable*."""
        return self._new_id()

    def receive(
        self, *, visibility_timeout: float | None = None, timeout: float | None = None
    ) -> Message | None:
        """Always ``None``, at once (nothing will ever arrive, so it never waits)."""
        return None

    def receive_batch(
        self,
        max_messages: int,
        *,
        visibility_timeout: float | None = None,
        timeout: float | None = 0,
    ) -> list[Message]:
        """Always empty, at once."""
        return []

    def consume(
        self, *, visibility_timeout: float | None = None, timeout: float | None = None
    ) -> Iterator[Message]:
        """Yields nothing."""
        return iter(())

    def delete(self, message: Message | str) -> bool:
        """Nothing to delete: ``False``."""
        return False

    def delete_batch(self, messages: Iterable[Message | str]) -> int:
        """Nothing to delete: ``0``."""
        return 0

    def change_visibility(self, message: Message | str, seconds: float) -> Message:
        """No message is ever held here.

        :raises LeaseLost: always.
        """
        receipt = message.receipt if isinstance(message, Message) else str(message)
        raise LeaseLost(receipt, f"the null queue holds no lease {receipt!r}")

    def try_receive(
        self, max_messages: int = 1, *, visibility_timeout: float | None = None
    ) -> list[Message]:
        """Finds nothing."""
        return []

    def lease(
        self,
        message: Message,
        *,
        max_duration: float = 3600.0,
        visibility_timeout: float | None = None,
    ) -> Lease:
        """No message is ever held here.

        :raises LeaseLost: always.
        """
        receipt = message.receipt if isinstance(message, Message) else str(message)
        raise LeaseLost(receipt, f"the null queue holds no lease {receipt!r}")

    def consume_leases(
        self,
        *,
        visibility_timeout: float | None = None,
        timeout: float | None = None,
        max_duration: float = 3600.0,
    ) -> Iterator[Lease]:
        """Yields nothing."""
        return iter(())

    def size(self) -> int:
        return 0

    def __len__(self) -> int:
        return 0

    def counts(self) -> Counts:
        return Counts(ready=0, held=0, delayed=0, new=0)

    def browse(self) -> Iterator[Message]:
        return iter(())

    __iter__ = browse

    def peek(self) -> Message | None:
        return None

    def peek_oldest_key(self, *, known: bool = False) -> int | None:
        return None

    @property
    def is_shutdown(self) -> bool:
        return False

    def shutdown(self) -> None:
        """A null queue never shuts down: it keeps accepting."""

    def stats(self) -> Stats:
        return Stats(
            produced_messages=0,
            produced_bytes=0,
            consumed_messages=0,
            consumed_bytes=0,
            ready=0,
            held=0,
            delayed=0,
            new=0,
            oldest_ready_age=None,
            is_shutdown=False,
        )

    def requeue_expired(self) -> int:
        return 0

    def purge(self) -> int:
        return 0

    def clean(self, older_than: float = 3600.0) -> int:
        return 0

    def redrive(self, to: object = None, limit: int | None = None) -> int:
        return 0

    def next_look(self, deadline: float | None = None) -> float:
        """Nothing will ever change here."""
        return math.inf

    def configure(self, **settings: object) -> Settings:
        """Stores nothing: the null queue has no settings."""
        return Settings()

    def settings(self) -> Settings:
        """None are stored."""
        return Settings()

    def history(self, message: Message | str) -> History:
        """Nothing is known: a message never received, sent now."""
        name = message.id if isinstance(message, Message) else message
        entry = parse_name(name)
        if entry is None:
            raise InvalidId(name)
        return History(receive_count=0, first_sent=entry.key / 1e6, last_received=None)
