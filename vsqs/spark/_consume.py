"""Two-phase batch consume: claim on the driver, read on the executors, delete on success.

Spark never tells a batch data source whether the action that read it succeeded, and a
task's Python generator finishes before the JVM has written its rows; a reader that
deletes in its tasks deletes messages that no result holds. So the batch consume is a
context manager on the driver instead of a read mode:

1. entering it claims the messages (one lease each, ``visibility_timeout``) and keeps
   their receipts, not their bodies; a heartbeat thread renews the leases;
2. the DataFrame it yields is built from those receipts: every action on it, every task
   attempt, reads the same messages (the bodies from their files, on the executors);
3. leaving the block normally deletes them; leaving it with an exception releases them
   to the queue at once. A driver that dies leaves the leases to expire: the messages
   come back, nothing is deleted.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import threading
from collections.abc import Iterator, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from .. import AnyQueue, LeaseLost, Message, Queue, QueueDrained
from ._options import SCHEMA, directory, existing_queue, planned
from ._read import Slice, partition_names, plan_slices, read_planned

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger("vsqs.spark")

_CLAIM_CHUNK = 1000


def _read_slice(queue_path: str, fail_on_data_loss: bool, part: Slice) -> Any:
    name, messages = part
    return read_planned(directory(queue_path, name), messages, fail_on_data_loss=fail_on_data_loss)


class _Leases:
    """The messages one consume holds, renewed by a thread until settled."""

    def __init__(
        self, queue: AnyQueue, messages: list[Message], vt: float, interval: float
    ) -> None:
        self.queue = queue
        self.messages = messages
        self.vt = vt
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.thread = threading.Thread(
            target=self._renew, args=(interval,), name="vsqs-spark-consume", daemon=True
        )
        if messages:
            self.thread.start()

    def _renew(self, interval: float) -> None:
        while not self.stopping.wait(interval):
            with self.lock:
                if self.stopping.is_set():
                    return
                kept: list[Message] = []
                for message in self.messages:
                    try:
                        kept.append(self.queue.change_visibility(message, self.vt))
                    except LeaseLost as exc:
                        log.warning(
                            "consume: the lease of %s ended (%s); it may be delivered again",
                            message.id,
                            exc,
                        )
                self.messages = kept

    def settle(self, *, delete: bool) -> int:
        """Stop renewing; delete (or release) the messages; return how many."""
        self.stopping.set()
        with self.lock:
            if delete:
                done = self.queue.delete_batch(self.messages)
            else:
                done = 0
                for message in self.messages:
                    try:
                        self.queue.change_visibility(message, 0)
                        done += 1
                    except LeaseLost:
                        pass  # the lease ended already: the message is back in the queue
            self.messages = []
        if self.thread.is_alive():
            self.thread.join()
        return done


def _claim(queue: AnyQueue, max_messages: int | None, vt: float) -> list[Message]:
    held: list[Message] = []
    while max_messages is None or len(held) < max_messages:
        want = _CLAIM_CHUNK if max_messages is None else min(_CLAIM_CHUNK, max_messages - len(held))
        try:
            got = queue.receive_batch(want, visibility_timeout=vt, timeout=0)
        except QueueDrained:
            break  # shut down and empty: the end of the input
        if not got:
            break
        # Keep everything but the body: the executors read it from the file.
        held.extend(replace(m, body=b"") for m in got)
    return held


@contextlib.contextmanager
def consume(
    spark: SparkSession,
    queue_path: str,
    *,
    max_messages: int | None = None,
    num_partitions: int | None = None,
    visibility_timeout: float = 300.0,
    heartbeat_interval: float | None = None,
    fail_on_data_loss: bool = True,
    queue_options: Mapping[str, Any] | None = None,
) -> Iterator[DataFrame]:
    """Claim the ready messages; yield them as a DataFrame; delete them if the block succeeds.

    Two-phase: the messages are leased while the block runs (renewed every
    *heartbeat_interval*), every action on the DataFrame reads the same messages, and
    they are deleted only when the block ends without an exception. An exception
    releases them to the queue; a crash of the driver lets their leases expire. At least
    once: a block that wrote its result and then failed delivers them again.

    :param max_messages: claim at most this many (default: all that are ready).
    :param num_partitions: partitions of the DataFrame (default: Spark's parallelism).
        On a partitioned queue each Spark partition reads one queue partition's
        directory: one per queue partition, or ``num_partitions // partitions`` each
        when that is more.
    :param visibility_timeout: seconds of each lease (renewed while the block runs).
    :param heartbeat_interval: seconds between renewals (default a fifth of the lease).
    :param fail_on_data_loss: a message deleted by someone else before a task read it
        fails the task (default) rather than being skipped.
    :param queue_options: keyword arguments for :class:`vsqs.Queue`.
    :raises ValueError: a bad argument.

    >>> with vsqs.spark.consume(spark, "/data/q") as df:  # doctest: +SKIP
    ...     df.write.parquet("/data/out")
    """
    if max_messages is not None and max_messages < 1:
        raise ValueError(f"max_messages must be a positive int, not {max_messages!r}")
    if not visibility_timeout >= 1:
        raise ValueError(f"visibility_timeout must be >= 1, not {visibility_timeout!r}")
    interval = visibility_timeout / 5 if heartbeat_interval is None else heartbeat_interval
    if not 0 < interval < visibility_timeout:
        raise ValueError(
            f"heartbeat_interval must be between 0 and visibility_timeout, not {interval!r}"
        )
    queue = Queue(existing_queue(os.path.abspath(queue_path)), **dict(queue_options or {}))
    held = _claim(queue, max_messages, visibility_timeout)
    leases = _Leases(queue, held, visibility_timeout, interval)
    try:
        parts = num_partitions or spark.sparkContext.defaultParallelism
        plan = [planned(m, queue.path) for m in held]
        slices = plan_slices(plan, parts, partition_names(queue))
        read = functools.partial(_read_slice, queue.path, fail_on_data_loss)
        # One slice per Spark partition (parallelize cuts a list of n into n single ones).
        rdd = spark.sparkContext.parallelize(slices, max(1, len(slices))).flatMap(read)
        df = spark.createDataFrame(rdd, SCHEMA)
        yield df
    except BaseException:
        leases.settle(delete=False)
        queue.close()
        raise
    deleted = leases.settle(delete=True)
    queue.close()
    if deleted != len(held):
        log.warning(
            "consume: %d of %d messages could not be deleted (their leases had ended);"
            " they may be delivered again",
            len(held) - deleted,
            len(held),
        )
