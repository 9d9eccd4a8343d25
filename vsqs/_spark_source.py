"""The ``vsqs`` Spark data source: batch read and write, streaming write.

The streaming read is in :mod:`vsqs._spark_stream`. Every class here is pickled by
reference and rebuilt on the executors, which therefore need vsqs installed.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark import TaskContext
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from ._message import Message
from ._queue import Queue
from ._spark_options import SCHEMA, MessageRow, ReadMode, SourceOptions, message_row
from ._spark_publish import RowFormat, publish_rows
from ._spark_stream import StreamReader


@dataclass
class Published(WriterCommitMessage):
    """What one write task reports to the driver."""

    partition: int
    rows: int


class BatchReader(DataSourceReader):
    """``spark.read.format("vsqs")``: browse (one partition) or consume (claiming tasks)."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options

    def partitions(self) -> Sequence[InputPartition]:
        if self.options.mode is ReadMode.BROWSE:
            return [InputPartition(0)]
        return [InputPartition(i) for i in range(self.options.num_partitions)]

    def read(self, partition: InputPartition) -> Iterator[MessageRow]:
        opts = self.options
        with Queue(opts.path, durable=opts.durable) as queue:
            if opts.mode is ReadMode.BROWSE:
                for message in queue.browse():
                    yield message_row(message)
                return
            yield from _consume(queue, opts, int(partition.value))


def _consume(queue: Queue, opts: SourceOptions, partition: int) -> Iterator[MessageRow]:
    """Claim until the queue is empty (or this partition's share of maxMessages), yield,
    then delete: a task that fails before its end leaves the leases to expire."""
    quota: int | None = None
    if opts.max_messages is not None:
        share, extra = divmod(opts.max_messages, opts.num_partitions)
        quota = share + (partition < extra)
    held: list[Message] = []
    while quota is None or len(held) < quota:
        want = 500 if quota is None else min(500, quota - len(held))
        got = queue.receive_batch(want, visibility_timeout=opts.visibility_timeout, timeout=0)
        if not got:
            break
        for message in got:
            yield message_row(message)
        # Keep only the receipt: the bodies may be large and are already in Spark's hands.
        held.extend(
            Message(id=m.id, body=b"", receipt=m.receipt, expires_at=m.expires_at) for m in got
        )
    queue.delete_batch(held)


def _task() -> TaskContext:
    context = TaskContext.get()
    if context is None:
        raise RuntimeError("this runs only inside a Spark task")
    return context


def _row_format(options: SourceOptions, schema: StructType) -> RowFormat:
    names = set(schema.fieldNames())
    if "body" not in names:
        raise ValueError("writing to vsqs needs a 'body' column (binary or string)")
    if options.key_column is not None and options.key_column not in names:
        raise ValueError(f"option keyColumn names a missing column {options.key_column!r}")
    return RowFormat(
        column="body",
        key_column=options.key_column,
        attributes_column="attributes" if "attributes" in names else None,
    )


class BatchWriter(DataSourceWriter):
    """``df.write.format("vsqs").mode("append")``: each task publishes its partition.

    Built once on the driver, so every attempt of a task sees the same ``run_id`` and
    publishes under the same deduplication ids: a retried or speculative task adds nothing.
    """

    def __init__(self, options: SourceOptions, schema: StructType) -> None:
        self.options = options
        self.format = _row_format(options, schema)
        self.run_id = uuid.uuid4().hex

    def write(self, iterator: Iterator[Any]) -> Published:
        partition = _task().partitionId()
        prefix = "key:" if self.format.key_column is not None else f"w:{self.run_id}:{partition}:"
        with Queue(self.options.path, durable=self.options.durable) as queue:
            count = publish_rows(
                queue, iterator, self.format, prefix, batch_size=self.options.batch_size
            )
        return Published(partition, count)


class StreamWriter(DataSourceStreamWriter):
    """``writeStream.format("vsqs")``: publishes each micro-batch as its tasks run.

    The deduplication id is (query id, batch id, partition, index): a micro-batch that
    Spark replays after a failure, within the queue's dedup window, publishes nothing new.
    """

    def __init__(self, options: SourceOptions, schema: StructType) -> None:
        self.options = options
        self.format = _row_format(options, schema)

    def write(self, iterator: Iterator[Any]) -> Published:
        context = _task()
        query = context.getLocalProperty("sql.streaming.queryId")
        batch = context.getLocalProperty("streaming.sql.batchId")
        partition = context.partitionId()
        prefix = "key:" if self.format.key_column is not None else f"s:{query}:{batch}:{partition}:"
        with Queue(self.options.path, durable=self.options.durable) as queue:
            count = publish_rows(
                queue, iterator, self.format, prefix, batch_size=self.options.batch_size
            )
        return Published(partition, count)


class VsqsDataSource(DataSource):
    """The ``vsqs`` format: a queue directory as a Spark source and sink."""

    @classmethod
    def name(cls) -> str:
        return "vsqs"

    def schema(self) -> str:
        return SCHEMA

    def reader(self, schema: StructType) -> BatchReader:
        return BatchReader(SourceOptions.parse(self.options))

    def writer(self, schema: StructType, overwrite: bool) -> BatchWriter:
        if overwrite:
            raise ValueError("vsqs only appends: use .mode('append') (purge a queue explicitly)")
        return BatchWriter(SourceOptions.parse(self.options), schema)

    def streamReader(self, schema: StructType) -> StreamReader:
        return StreamReader(SourceOptions.parse(self.options))

    def streamWriter(self, schema: StructType, overwrite: bool) -> StreamWriter:
        return StreamWriter(SourceOptions.parse(self.options), schema)
