"""PySpark helpers and the ``vsqs`` Spark data source (the ``spark`` extra).

``import vsqs`` never imports pyspark; this module does, at import. The executors need
vsqs installed, like any library their tasks use.

Design
======

Publishing from executors
-------------------------
:func:`publish_partition` runs inside a task (``df.foreachPartition``). It publishes in
batches of ``batch_size`` with :meth:`Queue.publish_batch`: one filesystem sync and one
directory fsync per batch. Every message is covered by a deduplication id, so that a
task that Spark runs twice (a retry after a failure, a speculative copy, a stage
resubmitted after a lost executor) publishes each row once:

* with ``key_column``, each message's id is ``"key:" + str(row[key_column])``: the
  row's identity, the same in any job that publishes that row;
* otherwise each *batch* has one id, ``"t:<run_id>:<stageId>:<partitionId>:<first
  index>+<count>"``, from the ``TaskContext`` (``publish_batch(batch_dedup_id=...)``:
  one marker per batch, the batch's commit point, so a task killed mid-batch leaves a
  batch that its retry completes, never a half one; see the guide).
  ``attemptNumber`` is deliberately left out: every attempt of a task maps to the same
  ids. ``run_id`` tells two jobs (or applications, whose stage ids both start at 0)
  apart; :func:`publish_dataframe` and :func:`partition_publisher` draw a fresh one on
  the driver.

Guaranteed: within the queue's ``dedup_window`` (default 300 s), a row is published at
most once however many attempts run, provided each attempt sees the same rows in the
same order (a deterministic partition) or rows carry a key. Not guaranteed: a retry that
starts after the window, a non-deterministic partition (e.g. after an unordered
shuffle) without a key, and a task is not atomic: a failed task leaves its first
batches published, which its retry then completes.

The data source
---------------
:func:`register` makes the format ``vsqs`` available to a session.

* ``spark.read.format("vsqs").load(path)`` browses: a snapshot of the ready messages,
  nothing claimed. The schema is :data:`SCHEMA`. ``mode=consume`` is refused (see below).
* :func:`consume` is the batch consume, two-phase: the driver claims, the DataFrame reads
  the claimed messages on the executors (the same ones on every action and attempt),
  and they are deleted only when the ``with`` block succeeds.
* ``df.write.format("vsqs").mode("append").save(path)``: the body from ``value``,
  ``body`` or the only column; ``key`` gives the deduplication id; ``attributes`` (or
  Kafka's ``headers``) the attributes; all chosen and checked on the driver. The writer
  is built once on the driver with a fresh run id, so task retries deduplicate as above.
* ``spark.readStream.format("vsqs").load(path)``: replayable micro-batches bound to the
  query's checkpoint (:mod:`vsqs.spark._stream`): claimed on the driver, recorded
  before Spark sees the offset, read on the executors, deleted once Spark commits, and
  served again with the same messages when Spark re-runs a logged batch.
* ``df.writeStream.format("vsqs")``: each micro-batch is published by its tasks, with ids
  (query id, batch id, partition, index), so a replayed batch publishes nothing new.

Partitioned queues
------------------
Reads plan one input partition per queue partition (``queue.partition_queues``); each
planned message carries the name of its partition's directory
(:data:`~vsqs.spark._options.Planned`), so a task reads one directory and a restarted
stream takes its recorded leases over where they are. Writes take a group column
(``group_column``, the format's ``groupColumn``): each row's ``publish(group=...)``.
"""

from __future__ import annotations

import functools
import itertools
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Final

from .._extras import missing_extra

try:  # the modules below import pyarrow too
    from pyspark import TaskContext
    from pyspark.errors import AnalysisException
    from pyspark.sql.readwriter import DataFrameWriter

    from .. import Queue
    from ._consume import consume
    from ._options import SCHEMA, ReadMode
    from ._publish import (
        DEFAULT_BATCH_SIZE,
        RowFormat,
        publish_rows,
        resolve_format,
        row_names,
    )
    from ._source import VsqsDataSource
except ModuleNotFoundError as error:
    raise missing_extra(error, "spark", "vsqs.spark") from None

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = [
    "SCHEMA",
    "ReadMode",
    "VsqsDataSource",
    "consume",
    "partition_publisher",
    "publish_dataframe",
    "publish_partition",
    "register",
]


def register(spark: SparkSession) -> None:
    """Make the ``vsqs`` format available in *spark* (idempotent).

    >>> vsqs.spark.register(spark)  # doctest: +SKIP
    >>> spark.read.format("vsqs").load("/data/q").show()  # doctest: +SKIP
    """
    spark.dataSource.register(VsqsDataSource)
    _explain_save_modes()


_SAVE_MODE_ERROR: Final = "UNSUPPORTED_DATA_SOURCE_SAVE_MODE"
_HINTED: Final[list[Callable[..., None]]] = []


def _explain_save_modes() -> None:
    """Make ``df.write.format("vsqs").save()`` without a mode say to use ``append``.

    Spark's default save mode is ``ErrorIfExists``, which Spark itself refuses for a
    Python data source before any vsqs code runs, advising "Append" or "Overwrite"
    (and vsqs refuses ``overwrite``). No data source hook sees the mode, so this wraps
    ``DataFrameWriter.save`` once, in this process: that one error, for the ``vsqs``
    format only, becomes a :class:`ValueError` naming the fix; everything else passes
    through untouched.
    """
    save = DataFrameWriter.save
    if save in _HINTED:
        return

    @functools.wraps(save)
    def save_with_hint(self: DataFrameWriter, *args: Any, **kwargs: Any) -> None:
        try:
            save(self, *args, **kwargs)
        except AnalysisException as exc:
            source = (exc.getMessageParameters() or {}).get("source", "")
            if exc.getCondition() != _SAVE_MODE_ERROR or source.strip('"`') != "vsqs":
                raise
            mode = (exc.getMessageParameters() or {}).get("createMode", "?").strip('"')
            raise ValueError(
                "the vsqs format only appends: write with"
                f" df.write.format('vsqs').mode('append').save(path) (Spark refuses {mode},"
                " its default when no mode is given)"
            ) from exc

    _HINTED.append(save_with_hint)
    DataFrameWriter.save = save_with_hint  # type: ignore[method-assign]


def publish_partition(
    rows: Iterable[Any],
    queue_path: str,
    *,
    column: str | None = None,
    key_column: str | None = None,
    json_rows: bool = False,
    attributes: Mapping[str, str] | None = None,
    attributes_column: str | None = None,
    group_column: str | None = None,
    batch_size: int = DEFAULT_BATCH_SIZE,
    run_id: str | None = None,
    queue_options: Mapping[str, Any] | None = None,
) -> int:
    """Publish the rows of one Spark partition; return how many rows were handed over.

    Exactly once per row under task retries and speculation, within the queue's
    ``dedup_window`` (see the module docstring for the id scheme and its limits).
    Not atomic as a whole: a failing task leaves a prefix, which its retry completes.
    Columns not named are chosen by Spark's Kafka conventions from the first row's
    names (``value``, ``body`` or the only column; ``key``; ``attributes``/``headers``).

    :param rows: the partition (``Row`` objects, or mappings).
    :param queue_path: the queue directory, as seen from the executors.
    :param column: the body column, binary or string.
    :param key_column: a column identifying the row: its value is the deduplication id.
    :param json_rows: publish each whole row as a JSON object instead of *column*.
    :param attributes: attributes for every message.
    :param attributes_column: a ``map<string,string>`` column merged over *attributes*.
    :param group_column: a column whose value is each message's group (as Kafka's
        ``key`` picks a partition): a group's rows, in the order this task publishes
        them, keep that order in the queue (one partition of a partitioned queue). A
        null cell publishes its row without a group. Consecutive rows of one group share
        a ``publish_batch``: rows clustered by group publish in fewer, larger batches.
    :param batch_size: messages per ``publish_batch`` (one directory fsync each).
    :param run_id: tells this job's ids from another job's; without a key column and
        without it, ids are only unique within one Spark application.
    :param queue_options: keyword arguments for :class:`vsqs.Queue`.
    :raises ValueError: a column is missing or cannot be chosen; a body or key is null.
    :raises TypeError: the body column is neither binary nor string.

    >>> df.foreachPartition(vsqs.spark.partition_publisher("/data/q"))  # doctest: +SKIP
    """
    iterator = iter(rows)
    first = next(iterator, None)
    if first is None:
        return 0
    fmt = resolve_format(
        row_names(first),
        column=column,
        json_rows=json_rows,
        key_column=key_column,
        attributes_column=attributes_column,
        attributes=attributes,
        group_column=group_column,
    )
    return _publish(
        itertools.chain([first], iterator),
        queue_path,
        fmt,
        batch_size=batch_size,
        run_id=run_id,
        queue_options=queue_options,
    )


def _publish(
    rows: Iterable[Any],
    queue_path: str,
    fmt: RowFormat,
    *,
    batch_size: int,
    run_id: str | None,
    queue_options: Mapping[str, Any] | None,
) -> int:
    if fmt.key_column is not None:
        prefix = "key:"
    else:
        context = TaskContext.get()
        if context is None:
            raise RuntimeError("publish_partition outside a Spark task needs a key_column")
        prefix = f"t:{run_id or '-'}:{context.stageId()}:{context.partitionId()}:"
    with Queue(queue_path, **dict(queue_options or {})) as queue:
        return publish_rows(queue, rows, fmt, prefix, batch_size=batch_size)


def partition_publisher(queue_path: str, **options: Any) -> Callable[[Iterable[Any]], None]:
    """:func:`publish_partition` bound to *queue_path*, *options* and a fresh ``run_id``.

    Call it on the driver, once per job, and pass the result to ``foreachPartition``.
    """
    options.setdefault("run_id", uuid.uuid4().hex)
    return functools.partial(_publish_quietly, queue_path=queue_path, **options)


def _publish_quietly(rows: Iterable[Any], **options: Any) -> None:
    publish_partition(rows, **options)


def publish_dataframe(
    df: DataFrame,
    queue_path: str,
    *,
    column: str | None = None,
    key_column: str | None = None,
    json_rows: bool = False,
    attributes: Mapping[str, str] | None = None,
    attributes_column: str | None = None,
    group_column: str | None = None,
    batch_size: int = DEFAULT_BATCH_SIZE,
    run_id: str | None = None,
    queue_options: Mapping[str, Any] | None = None,
) -> int:
    """Publish every row of *df*; return the number of rows (retried tasks counted once).

    Takes the keyword options of :func:`publish_partition`. The columns are chosen and
    their types checked against ``df.schema`` here, on the driver, before any task runs.

    :raises ValueError: a column is missing, cannot be chosen, or has the wrong type.

    >>> vsqs.spark.publish_dataframe(df, "/data/q", column="payload")  # doctest: +SKIP
    1000
    """
    types = {f.name: f.dataType.simpleString() for f in df.schema.fields}
    fmt = resolve_format(
        list(types),
        types,
        column=column,
        json_rows=json_rows,
        key_column=key_column,
        attributes_column=attributes_column,
        attributes=attributes,
        group_column=group_column,
    )
    # Rows, not Arrow: pyspark's mapInArrow needs pandas, which the extra does not pull in.
    publish = functools.partial(
        _publish_counted,
        queue_path=queue_path,
        fmt=fmt,
        batch_size=batch_size,
        run_id=run_id or uuid.uuid4().hex,
        queue_options=queue_options,
    )
    counts = df.rdd.mapPartitions(publish).collect()
    return int(sum(counts))


def _publish_counted(rows: Iterable[Any], **options: Any) -> list[int]:
    return [_publish(rows, **options)]
