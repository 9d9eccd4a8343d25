"""The streaming read of the ``vsqs`` data source: claim, record, serve, delete on commit.

Spark drives one :class:`StreamReader` per query run in a long-lived Python process on
the driver; ``read()`` runs elsewhere, on a copy, and only yields rows that
:meth:`StreamReader.partitions` put into the partitions. The offset is ``{"seq": n}``,
the number of the last micro-batch this consumer claimed.

The state of a consumer is one small JSON file per claimed, not yet deleted micro-batch,
``<state_dir>/<seq>.json`` listing the receipts, written durably *before* its offset is
handed to Spark. Whenever Spark hands in a start offset ``n`` (``latestOffset``,
``partitions``) or commits ``n``, every batch up to ``n`` has completed, so its messages
are deleted. Batches after ``n`` that an earlier process claimed cannot be served again
(their bodies were in that process), so their messages are released to the queue and
come back in a later batch: at least once, never lost.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from filelock import FileLock, Timeout
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow

from . import _fs
from ._errors import LeaseLost
from ._message import Message
from ._queue import Queue
from ._spark_options import MessageRow, SourceOptions, message_row

log = logging.getLogger("vsqs.spark")

_CLAIM_CHUNK = 1000


@dataclass
class _Batch:
    """A micro-batch this process claimed: the current leases and the rows served."""

    messages: list[Message]
    rows: list[MessageRow] = field(default_factory=list)


class _StateDir:
    """``<seq>.json`` files of the receipts of claimed, not yet deleted batches."""

    def __init__(self, path: str) -> None:
        self.path = path
        _fs.make_dirs(path)

    def _file(self, seq: int) -> str:
        return os.path.join(self.path, f"{seq}.json")

    def save(self, seq: int, receipts: list[str]) -> None:
        """Record *receipts* durably, replacing the previous record of *seq* atomically."""
        tmp = self._file(seq) + f".{os.getpid()}.tmp"
        _fs.unlink(tmp)  # a leftover of a crashed process with our pid
        fd = _fs.create_exclusive(tmp)
        try:
            _fs.write_all(fd, memoryview(json.dumps({"receipts": receipts}).encode()))
            _fs.fsync(fd)
        finally:
            _fs.close(fd)
        _fs.replace(tmp, self._file(seq))
        _fs.fsync_dir(self.path)

    def load(self) -> dict[int, list[str]]:
        """Every recorded batch (left by an earlier process of this consumer)."""
        found: dict[int, list[str]] = {}
        for name in os.listdir(self.path):
            stem, _, ext = name.partition(".")
            if ext == "json" and stem.isdigit():
                with open(os.path.join(self.path, name), "rb") as fh:
                    found[int(stem)] = list(json.load(fh)["receipts"])
        return found

    def remove(self, seq: int) -> None:
        _fs.unlink(self._file(seq))  # RACE: none, one process per consumer holds the lock


class StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """At-least-once micro-batches from a queue (see the module docstring)."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        # Created on first use in the driver's reader process; never pickled.
        self._queue: Queue | None = None
        self._state: _StateDir | None = None
        self._filelock: FileLock | None = None
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._pending: dict[int, _Batch] = {}
        self._orphans: dict[int, list[str]] = {}
        self._budget: int | None = None

    def __getstate__(self) -> dict[str, Any]:
        # read() runs on a copy that only needs the options; locks and files stay here.
        return {"options": self.options}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["options"])  # type: ignore[misc]

    # -- lifecycle -------------------------------------------------------------------

    def _start(self) -> Queue:
        if self._queue is not None:
            return self._queue
        opts = self.options
        state = _StateDir(opts.state_dir)
        lock = FileLock(os.path.join(opts.state_dir, "lock"))
        try:
            lock.acquire(timeout=opts.lock_timeout)
        except Timeout:
            raise RuntimeError(
                f"another streaming query is reading with the state in {opts.state_dir!r};"
                " give each query its own 'consumer' option"
            ) from None
        self._filelock, self._state = lock, state
        self._orphans = state.load()
        self._queue = Queue(
            opts.path, durable=opts.durable, visibility_timeout=opts.visibility_timeout
        )
        threading.Thread(target=self._heartbeat, name="vsqs-spark-heartbeat", daemon=True).start()
        return self._queue

    def stop(self) -> None:
        """Stop extending leases; claimed batches stay recorded for the next run."""
        self._stopping.set()
        with self._lock:
            if self._queue is not None:
                self._queue.detach()
            if self._filelock is not None:
                self._filelock.release()

    # -- offsets ---------------------------------------------------------------------

    def initialOffset(self) -> dict[str, int]:
        return {"seq": 0}

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.options.max_messages_per_batch)

    def prepareForTriggerAvailableNow(self) -> None:
        queue = self._start()
        # Batches an earlier run claimed and did not complete come back to the queue
        # during this run, so they count as already there.
        with self._lock:
            self._budget = queue.counts().ready + sum(map(len, self._orphans.values()))

    def latestOffset(self, start: dict[str, int], limit: ReadLimit) -> dict[str, int]:
        queue = self._start()
        done = int(start["seq"])
        with self._lock:
            self._settle(queue, done)
            ahead = [seq for seq in self._pending if seq > done]
            if ahead:  # Spark asks again before running what we offered: same answer
                return {"seq": max(ahead)}
            want = self.options.max_messages_per_batch
            if isinstance(limit, ReadMaxRows):
                want = min(want, limit.max_rows)
            if self._budget is not None:
                want = min(want, self._budget)
            messages: list[Message] = []
            while len(messages) < want:
                got = queue.receive_batch(
                    min(_CLAIM_CHUNK, want - len(messages)),
                    visibility_timeout=self.options.visibility_timeout,
                    timeout=0,
                )
                if not got:
                    break
                messages.extend(got)
            if not messages:
                return start
            if self._budget is not None:
                self._budget -= len(messages)
            seq = done + 1
            # A crash before this record lets the leases expire: redelivered, not lost.
            assert self._state is not None
            self._state.save(seq, [m.receipt for m in messages])
            self._pending[seq] = _Batch(messages, [message_row(m) for m in messages])
        return {"seq": seq}

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> Sequence[InputPartition]:
        queue = self._start()
        first, last = int(start["seq"]), int(end["seq"])
        with self._lock:
            self._settle(queue, first)
            rows = [
                row
                for seq in range(first + 1, last + 1)
                if seq in self._pending
                for row in self._pending[seq].rows
            ]
        if not rows:
            return []
        parts = min(self.options.num_partitions, len(rows))
        size = -(-len(rows) // parts)
        return [InputPartition(rows[i : i + size]) for i in range(0, len(rows), size)]

    def read(self, partition: InputPartition) -> Iterator[MessageRow]:
        rows: list[MessageRow] = partition.value
        return iter(rows)

    def commit(self, end: dict[str, int]) -> None:
        queue = self._start()
        with self._lock:
            self._settle(queue, int(end["seq"]))

    # -- state -----------------------------------------------------------------------

    def _settle(self, queue: Queue, done: int) -> None:
        """Delete every batch up to *done*; release what earlier processes claimed after it."""
        assert self._state is not None
        for seq in sorted(s for s in self._pending if s <= done):
            batch = self._pending.pop(seq)
            deleted = queue.delete_batch(batch.messages)
            if deleted != len(batch.messages):
                log.warning(
                    "batch %d: %d of %d leases had ended before the commit; those"
                    " messages may be delivered again",
                    seq,
                    len(batch.messages) - deleted,
                    len(batch.messages),
                )
            self._state.remove(seq)
        for seq in sorted(self._orphans):
            receipts = self._orphans.pop(seq)
            if seq <= done:
                queue.delete_batch(receipts)  # a lease that ended: the message comes again
            else:
                for receipt in receipts:
                    try:
                        queue.change_visibility(receipt, 0)
                    except LeaseLost:
                        pass  # the lease ended already: the message is back in the queue
            if seq not in self._pending:
                self._state.remove(seq)

    def _heartbeat(self) -> None:
        """Extend the leases of claimed batches until they are deleted or the reader stops."""
        interval = self.options.heartbeat_interval
        while not self._stopping.wait(interval):
            with self._lock:
                if self._stopping.is_set() or self._queue is None or self._state is None:
                    return
                for seq, batch in self._pending.items():
                    self._extend(self._queue, seq, batch)
                    self._state.save(seq, [m.receipt for m in batch.messages])

    def _extend(self, queue: Queue, seq: int, batch: _Batch) -> None:
        kept: list[Message] = []
        for message in batch.messages:
            try:
                kept.append(queue.change_visibility(message, self.options.visibility_timeout))
            except LeaseLost:
                log.warning(
                    "batch %d: the lease of %s ended before its heartbeat (a process pause"
                    " longer than visibilityTimeout?); it may be delivered again",
                    seq,
                    message.id,
                )
        batch.messages = kept
