"""The streaming reader's deleter: completed micro-batches deleted on a thread of their own.

Spark commits a micro-batch once its sink has written it; the reader then hands the
batch's messages to a :class:`Deleter`, which deletes them while the next batch is
claimed, then removes the batch's record from the stream's state.
"""

from __future__ import annotations

import logging
import threading
from queue import Queue as WorkQueue

from .. import AnyQueue, LeaseLost, Message, Queue
from ._options import SourceOptions
from ._state import StateDir, take_over

log = logging.getLogger("vsqs.spark")

Held = Message | tuple[str, str]
"""A message this run holds, or (receipt, token) recorded by an earlier run."""


class Deleter:
    """Deletes completed batches on one daemon thread, in the order they are handed in.

    Its own queue handle: the messages of a completed batch are no longer renewed, so
    their receipts are current. A crash before a record is removed repeats its deletes
    on the restart, which then find nothing or a lease that ended. A batch whose deletes
    fail (a fault of the filesystem) keeps its record, so the restart repeats them too;
    the failure is raised by the next :meth:`flush` (Spark's commit), and the thread
    goes on with the next batches: it never dies leaving a commit waiting for it.
    """

    def __init__(self, options: SourceOptions, state: StateDir) -> None:
        self.options = options
        self._state = state
        self._work: WorkQueue[tuple[int, list[Held]] | None] = WorkQueue()
        self._failure: Exception | None = None  # the first since the last flush
        self._thread = threading.Thread(target=self._run, name="vsqs-spark-delete", daemon=True)
        self._thread.start()

    def put(self, seq: int, messages: list[Held]) -> None:
        """Delete the messages of the completed batch *seq*, then its record (soon)."""
        self._work.put((seq, messages))

    def flush(self) -> None:
        """Wait until every batch handed in so far is done with.

        :raises OSError: (or whatever the deletes raised) a batch could not be deleted.
        """
        self._work.join()
        failure, self._failure = self._failure, None
        if failure is not None:
            raise failure

    def stop(self) -> None:
        """Finish the batches handed in, then end the thread."""
        self._work.put(None)
        self._thread.join()

    def _run(self) -> None:
        deleter: AnyQueue | None = None
        try:
            deleter = Queue(self.options.path, durable=self.options.durable)
        except Exception as exc:  # noqa: BLE001 - raised by flush(), in the driver
            self._failed(exc, "cannot open the queue to delete completed batches")
        while (item := self._work.get()) is not None:
            try:
                if deleter is not None:
                    self._delete(deleter, *item)
            except Exception as exc:  # noqa: BLE001 - raised by flush(), in the driver
                self._failed(exc, f"batch {item[0]}: deleting its messages failed")
            finally:
                self._work.task_done()
        self._work.task_done()
        if deleter is not None:
            deleter.close()

    def _delete(self, deleter: AnyQueue, seq: int, messages: list[Held]) -> None:
        deleted = 0
        for held in messages:
            try:
                # A receipt recorded by an earlier run is taken over first.
                deleted += deleter.delete(
                    take_over(deleter, held[0], self.options.visibility_timeout, held[1])
                    if isinstance(held, tuple)
                    else held
                )
            except LeaseLost:
                pass  # the lease ended: counted below
        if deleted != len(messages):
            log.warning(
                "batch %d: %d of %d leases had ended before the commit; those"
                " messages may be delivered again",
                seq,
                len(messages) - deleted,
                len(messages),
            )
        self._state.remove(seq)

    def _failed(self, exc: Exception, what: str) -> None:
        """Keep the first failure for the next :meth:`flush` to raise."""
        log.error("%s: %s", what, exc)
        if self._failure is None:
            self._failure = exc
