"""The streaming read of the ``vsqs`` data source: claim, record, serve, replay, delete.

Spark drives one :class:`StreamReader` per query run in a long-lived Python process on
the driver; ``read()`` runs on the executors, on a copy, and reads the bodies of the
messages :meth:`StreamReader.partitions` planned (see :mod:`vsqs.spark._read`).

Offsets are ``{"epoch": E, "seq": n}``. The epoch is drawn when a query starts from an
empty checkpoint (``initialOffset``) and then travels in every offset Spark logs, so the
checkpoint names it. The reader's state lives in ``<stateDir>/<epoch>/``: ``epoch.json``
(the queue and the highest batch claimed) and one ``<seq>.json`` per claimed, not yet
deleted micro-batch, listing its messages (id, receipt, attributes...), written durably
*before* the offset is handed to Spark. State therefore belongs to one checkpoint: no
other query can settle or release its batches, and a checkpoint whose epoch has no state
(another queue or ``stateDir``, removed state) fails loudly.

* Whenever Spark hands in a start offset ``n`` or commits ``n``, the batches up to ``n``
  have completed: their messages are deleted.
* A batch after ``n`` that an earlier run of this query claimed and Spark logged is run
  again by Spark (``partitions`` with its offsets): its leases are renewed and the same
  messages are served in the same partitions, so an idempotent sink sees the same batch.
* A batch that an earlier run claimed but Spark never logged (the driver died between
  recording it and Spark's offset log) can only be met by ``latestOffset`` starting
  before it: it is released to the queue.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import Any, Final

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadLimit,
    ReadMaxBytes,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from .. import AnyQueue, LeaseLost, Message, Queue, QueueDrained
from ._deleter import Deleter
from ._options import Planned, SourceOptions, directory, existing_queue, planned
from ._read import Slice, arrow_batches, partition_names, plan_slices, read_planned
from ._state import StateDir, StateMismatch, take_over

log = logging.getLogger("vsqs.spark")

_CLAIM_CHUNK: Final = 1000
Offset = dict[str, Any]


class StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Replayable micro-batches from a queue, bound to the query (see the module docstring)."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        # Created on first use in the driver's reader process; never pickled.
        self._queue: AnyQueue | None = None
        self._state: StateDir | None = None
        self._epoch: str | None = None
        self._new_epoch = uuid.uuid4().hex
        self._high = 0
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._heartbeat_thread: threading.Thread | None = None
        self._deleter: Deleter | None = None
        self._pending: dict[int, list[Message]] = {}
        self._plans: dict[int, list[Planned]] = {}
        self._recorded: dict[int, list[Planned]] = {}
        self._budget: int | None = None

    def __getstate__(self) -> dict[str, Any]:
        # read() runs on a copy that only needs the options; locks and files stay here.
        return {"options": self.options}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["options"])  # type: ignore[misc]

    # -- lifecycle -------------------------------------------------------------------

    def _open(self) -> AnyQueue:
        if self._queue is None:
            opts = self.options
            self._queue = Queue(
                existing_queue(opts.path),
                durable=opts.durable,
                visibility_timeout=opts.visibility_timeout,
            )
        return self._queue

    def _bind(self, offset: Offset) -> AnyQueue:
        """Tie this reader to the epoch of *offset*: its state, its lock, its heartbeat.

        The initial offset has no epoch yet (``""``): Spark asks for it again on a restart
        before the first batch it logged, so it must not stand for one run.
        """
        queue = self._open()
        epoch, seq = offset.get("epoch"), int(offset.get("seq", 0))
        if not isinstance(epoch, str):
            raise StateMismatch(
                f"the checkpoint's vsqs offset {offset!r} has no epoch: it was written by an"
                " older vsqs. Start the query with a new checkpointLocation (messages the old"
                " run leased return to the queue after visibilityTimeout)"
            )
        if not epoch:
            if seq:
                raise StateMismatch(f"a vsqs offset without an epoch past batch 0: {offset!r}")
            return queue
        if self._epoch is not None:
            if epoch != self._epoch:
                raise StateMismatch(
                    f"offset of vsqs stream epoch {epoch} given to the reader of epoch"
                    f" {self._epoch}: one reader serves one checkpoint"
                )
            return queue
        opts = self.options
        state = StateDir(opts.path, opts.state_dir, epoch)
        try:
            info = self._take_state(state, epoch, seq)
            recorded = state.load()
        except BaseException:
            state.close()  # the lock and the descriptors: another run may take them
            raise
        self._epoch, self._state = epoch, state
        self._high = int(info.get("high", 0))
        self._recorded = recorded
        self._heartbeat_thread = threading.Thread(
            target=self._heartbeat, name="vsqs-spark-heartbeat", daemon=True
        )
        self._heartbeat_thread.start()
        self._deleter = Deleter(self.options, state)
        return queue

    def _take_state(self, state: StateDir, epoch: str, seq: int) -> dict[str, Any]:
        """Lock the state of *epoch* (made if new) and check it against the checkpoint's
        batch *seq*; its ``epoch.json`` record."""
        opts = self.options
        if not state.exists():
            if seq > 0:
                raise StateMismatch(
                    f"the checkpoint continues vsqs stream epoch {epoch} at batch {seq}, but"
                    f" {state.path} holds no state for it: the query now reads another queue"
                    " or stateDir than when the checkpoint was written, or the state was"
                    " removed. Restart with the original path and stateDir, or start a new"
                    " checkpointLocation (the old run's leases then expire and its messages"
                    " come back)"
                )
            state.create(epoch, opts.path)
        if not state.lock(opts.lock_timeout):
            raise RuntimeError(
                f"another run of this query still holds {state.path!r}; stop it first"
            )
        info = state.info()
        if info.get("queue") != opts.path or int(info.get("high", 0)) < seq:
            raise StateMismatch(
                f"the state in {state.path} (queue {info.get('queue')!r}, batches up to"
                f" {info.get('high')}) does not match the checkpoint (queue {opts.path!r},"
                f" batch {seq}): it was restored from an older copy or belongs to another"
                " queue. Restore the matching state, or start a new checkpointLocation"
            )
        return info

    def stop(self) -> None:
        """Finish the deletes under way; stop renewing leases; claimed batches stay
        recorded for the next run."""
        self._stopping.set()
        if self._deleter is not None:
            self._deleter.stop()
        with self._lock:
            if self._queue is not None:
                self._queue.close()
            if self._state is not None:
                self._state.close()

    # -- offsets ---------------------------------------------------------------------

    def initialOffset(self) -> Offset:
        return {"epoch": "", "seq": 0}

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.options.max_messages_per_batch)

    def prepareForTriggerAvailableNow(self) -> None:
        queue = self._open()
        with self._lock:
            self._budget = queue.counts().ready

    def reportLatestOffset(self) -> Offset | None:
        """The last batch claimed, and the queue's backlog, for the query's progress."""
        stats = self._open().stats()
        age = stats.oldest_ready_age
        return {
            "epoch": self._epoch or self._new_epoch,
            "seq": self._high,
            "ready": stats.ready,
            "held": stats.held,
            "oldestReadyAgeMs": -1 if age is None else round(age * 1000),
            "shutdown": stats.is_shutdown,
        }

    def latestOffset(self, start: Offset, limit: ReadLimit) -> Offset:
        try:
            return self._latest(start, limit)
        finally:
            # The deletes of completed batches overlapped the claim; they must be done
            # before returning: after the last call of a query Spark ends this process
            # without waiting for stop().
            self.flush()

    def _latest(self, start: Offset, limit: ReadLimit) -> Offset:
        queue = self._bind(start)
        done = int(start["seq"])
        with self._lock:
            self._settle(queue, done)
            self._release_unlogged(queue, done)
            ahead = [seq for seq in self._pending if seq > done]
            if ahead:  # Spark asks again before running what we offered: same answer
                return {"epoch": self._epoch, "seq": max(ahead)}
            messages = self._claim(queue, limit)
            if not messages:
                return start
            if self._epoch is None:  # the first claim of a new checkpoint draws its epoch
                self._bind({"epoch": self._new_epoch, "seq": 0})
            seq = done + 1  # every batch after done was released above, or is pending
            plan = [planned(m, queue.path) for m in messages]
            # A crash before this record lets the leases expire: redelivered, not lost.
            assert self._state is not None
            assert self._epoch is not None
            self._state.save(seq, plan)
            if seq > self._high:
                self._high = seq
                self._state.set_high(self._epoch, self.options.path, seq)
            self._pending[seq] = messages
            self._plans[seq] = plan
        return {"epoch": self._epoch, "seq": seq}

    def _claim(self, queue: AnyQueue, limit: ReadLimit) -> list[Message]:
        """Claim up to the row and byte limits (the bodies are dropped at once)."""
        want = self.options.max_messages_per_batch
        max_bytes = self.options.max_bytes_per_batch
        if isinstance(limit, ReadMaxRows):
            want = min(want, limit.max_rows)
        elif isinstance(limit, ReadMaxBytes):
            max_bytes = min(max_bytes, limit.max_bytes)
        if self._budget is not None:
            want = min(want, self._budget)
        messages: list[Message] = []
        size = 0
        while len(messages) < want and size < max_bytes:
            try:
                got = queue.receive_batch(
                    min(_CLAIM_CHUNK, want - len(messages)),
                    visibility_timeout=self.options.visibility_timeout,
                    timeout=0,
                )
            except QueueDrained:
                break  # shut down and empty: no new data, and the end of AvailableNow
            if not got:
                break
            for index, message in enumerate(got):
                if messages and size + len(message.body) > max_bytes:
                    self._release(queue, got[index:])  # over the byte limit: next batch
                    size = max_bytes
                    break
                size += len(message.body)
                messages.append(replace(message, body=b""))
        if self._budget is not None:
            self._budget -= len(messages)
        return messages

    def partitions(self, start: Offset, end: Offset) -> Sequence[InputPartition]:
        # Bound by the end: the start of a checkpoint's first batch is the initial offset.
        self._bind(start)
        queue = self._bind(end)
        first, last = int(start["seq"]), int(end["seq"])
        plan: list[Planned] = []
        with self._lock:
            self._settle(queue, first)
            for seq in range(first + 1, last + 1):
                if seq not in self._plans and seq in self._recorded:
                    self._replay(queue, seq)
                if seq not in self._plans:
                    raise StateMismatch(
                        f"Spark runs batch {seq} of vsqs stream epoch {self._epoch}, but no"
                        f" record of it is in {self.options.state_dir}: the state was"
                        " removed or restored from an older copy. Restore it, or start a"
                        " new checkpointLocation"
                    )
                plan.extend(self._plans[seq])
        self.flush()
        slices = plan_slices(plan, self.options.num_partitions, partition_names(queue))
        return [InputPartition(part) for part in slices]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        part: Slice = partition.value
        name, messages = part
        rows = read_planned(
            directory(self.options.path, name),
            messages,
            fail_on_data_loss=self.options.fail_on_data_loss,
        )
        return arrow_batches(rows)

    def commit(self, end: Offset) -> None:
        queue = self._bind(end)
        with self._lock:
            self._settle(queue, int(end["seq"]))
        self.flush()

    # -- state -----------------------------------------------------------------------

    def _replay(self, queue: AnyQueue, seq: int) -> None:
        """Serve batch *seq*, claimed by an earlier run and logged by Spark, again."""
        assert self._state is not None
        plan = self._recorded.pop(seq)
        held: list[Message] = []
        renewed: list[Planned] = []
        for entry in plan:
            try:
                message = take_over(queue, entry[1], self.options.visibility_timeout, entry[5])
            except LeaseLost as exc:
                # Served anyway (the batch must stay the same for the sink), but the
                # message is no longer ours: it may also come in a later batch.
                log.warning(
                    "batch %d: the lease of %s ended before the restart (%s); it is served"
                    " again in this batch and may be delivered once more",
                    seq,
                    entry[0],
                    exc.reason,
                )
                renewed.append(entry)
                continue
            held.append(message)
            renewed.append((*entry[:1], message.receipt, *entry[2:]))
        self._state.save(seq, renewed)
        self._pending[seq] = held
        self._plans[seq] = renewed

    def _settle(self, queue: AnyQueue, done: int) -> None:
        """Hand every batch up to *done* (Spark has completed them) to the deleter."""
        deleter = self._deleter
        if deleter is None:
            return  # no batch claimed yet under this checkpoint
        for seq in sorted(s for s in self._pending if s <= done):
            self._plans.pop(seq, None)
            deleter.put(seq, list(self._pending.pop(seq)))
        for seq in sorted(s for s in self._recorded if s <= done):
            # Completed by an earlier run that died before deleting.
            deleter.put(seq, [(entry[1], entry[5]) for entry in self._recorded.pop(seq)])

    def flush(self) -> None:
        """Wait until the batches completed so far are deleted.

        :raises OSError: (or whatever the deletes raised) a completed batch could not be
            deleted; its record is kept, so a restart deletes it again.
        """
        if self._deleter is not None:
            self._deleter.flush()

    def _release_unlogged(self, queue: AnyQueue, done: int) -> None:
        """Release batches an earlier run claimed after *done*: Spark never logged them."""
        if self._state is None:
            return
        for seq in sorted(s for s in self._recorded if s > done):
            plan = self._recorded.pop(seq)
            released = self._release(queue, [entry[1] for entry in plan])
            if self._budget is not None:
                self._budget += released
            self._state.remove(seq)

    @staticmethod
    def _release(queue: AnyQueue, receipts: Sequence[Message | str]) -> int:
        count = 0
        for receipt in receipts:
            try:
                queue.change_visibility(receipt, 0)
                count += 1
            except LeaseLost:
                pass  # the lease ended already: the message is back in the queue
        return count

    def _heartbeat(self) -> None:
        """Renew the leases of claimed batches until they are deleted or the reader stops."""
        interval = self.options.heartbeat_interval
        while not self._stopping.wait(interval):
            with self._lock:
                if self._stopping.is_set() or self._queue is None or self._state is None:
                    return
                for seq, messages in self._pending.items():
                    self._extend(self._queue, seq, messages)

    def _extend(self, queue: AnyQueue, seq: int, messages: list[Message]) -> None:
        assert self._state is not None
        kept: list[Message] = []
        current = {m.id: m.receipt for m in messages}
        for message in messages:
            try:
                renewed = queue.change_visibility(message, self.options.visibility_timeout)
            except LeaseLost as exc:
                log.warning(
                    "batch %d: the lease of %s ended before its heartbeat (%s: a pause"
                    " longer than visibilityTimeout?); it may be delivered again",
                    seq,
                    message.id,
                    exc.reason,
                )
                continue
            kept.append(renewed)
            current[renewed.id] = renewed.receipt
        messages[:] = kept
        plan = [(p[0], current.get(p[0], p[1]), *p[2:]) for p in self._plans[seq]]
        self._plans[seq] = plan
        self._state.save(seq, plan)
