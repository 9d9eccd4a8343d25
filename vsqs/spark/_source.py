"""The ``vsqs`` Spark data source: batch read and write, streaming write.

The streaming read is in :mod:`vsqs.spark._stream`. Every class here is pickled by
reference and rebuilt on the executors, which therefore need vsqs installed.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark import TaskContext
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamArrowWriter,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from .. import PartitionedQueue, PlainQueue, Queue, partitions_of
from ._options import SCHEMA, MessageRow, SourceOptions, existing_queue, message_row
from ._publish import RowFormat, is_plain, publish_arrow, publish_rows, resolve_format
from ._stream import StreamReader


@dataclass
class Published(WriterCommitMessage):
    """What one write task reports to the driver."""

    partition: int
    rows: int


class BatchReader(DataSourceReader):
    """``spark.read.format("vsqs")``: a snapshot of the ready messages, nothing claimed.

    One input partition per queue partition, each read on an executor from its own
    directory (one for an unpartitioned queue); messages a vsqs 0.3 producer left in the
    directory of a partitioned queue itself are read with partition 0. Each partition's
    rows are in its FIFO order. Consuming is :func:`vsqs.spark.consume`, which can wait
    for the action to succeed before it deletes.
    """

    def __init__(self, options: SourceOptions) -> None:
        self.options = options

    def partitions(self) -> Sequence[InputPartition]:
        with Queue(self.options.path, durable=self.options.durable) as queue:
            count = len(partitions_of(queue))
        return [InputPartition(index) for index in range(count)]

    def read(self, partition: InputPartition) -> Iterator[MessageRow]:
        path = existing_queue(self.options.path)  # on this executor's filesystem too
        index: int = partition.value
        with Queue(path, durable=self.options.durable) as queue:
            if not isinstance(queue, PartitionedQueue):
                messages = queue.browse()
            else:
                # Only this partition's directory; partition 0 also the queue's own.
                own = PlainQueue(path, durable=self.options.durable) if index == 0 else None
                messages = itertools.chain(
                    () if own is None else own.browse(), queue.partition_queues[index].browse()
                )
            for message in messages:
                yield message_row(message)


def _task() -> TaskContext:
    context = TaskContext.get()
    if context is None:
        raise RuntimeError("this runs only inside a Spark task")
    return context


def _row_format(options: SourceOptions, schema: StructType) -> RowFormat:
    """The columns to publish, chosen and type-checked on the driver before any task."""
    types = {f.name: f.dataType.simpleString() for f in schema.fields}
    return resolve_format(
        list(types), types, key_column=options.key_column, group_column=options.group_column
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
            publish = publish_arrow if isinstance(self, DataSourceArrowWriter) else publish_rows
            count = publish(
                queue, iterator, self.format, prefix, batch_size=self.options.batch_size
            )
        return Published(partition, count)


class ArrowBatchWriter(BatchWriter, DataSourceArrowWriter):
    """:class:`BatchWriter` fed Arrow record batches, for one plain body column."""


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
            arrow = isinstance(self, DataSourceStreamArrowWriter)
            publish = publish_arrow if arrow else publish_rows
            count = publish(
                queue, iterator, self.format, prefix, batch_size=self.options.batch_size
            )
        return Published(partition, count)


class ArrowStreamWriter(StreamWriter, DataSourceStreamArrowWriter):
    """:class:`StreamWriter` fed Arrow record batches, for one plain body column."""


class VsqsDataSource(DataSource):
    """The ``vsqs`` format: a queue directory as a Spark source and sink."""

    @classmethod
    def name(cls) -> str:
        return "vsqs"

    def schema(self) -> str:
        return SCHEMA

    def reader(self, schema: StructType) -> BatchReader:
        options = SourceOptions.parse(self.options)
        existing_queue(options.path)  # on the driver: before any task runs
        return BatchReader(options)

    def writer(self, schema: StructType, overwrite: bool) -> BatchWriter:
        if overwrite:
            raise ValueError("vsqs only appends: use .mode('append') (purge a queue explicitly)")
        options = SourceOptions.parse(self.options)
        if is_plain(_row_format(options, schema)):
            return ArrowBatchWriter(options, schema)
        return BatchWriter(options, schema)

    def streamReader(self, schema: StructType) -> StreamReader:
        options = SourceOptions.parse(self.options)
        existing_queue(options.path)
        return StreamReader(options)

    def streamWriter(self, schema: StructType, overwrite: bool) -> StreamWriter:
        options = SourceOptions.parse(self.options)
        if is_plain(_row_format(options, schema)):
            return ArrowStreamWriter(options, schema)
        return StreamWriter(options, schema)
