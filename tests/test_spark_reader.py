"""The streaming reader's planning calls, made as Spark's driver makes them, on a real
queue (no JVM needed: these run in the driver's Python process): the default limit,
Trigger.AvailableNow's budget, byte limits and the progress report."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql.streaming.datasource import ReadMaxBytes, ReadMaxRows

import vsqs
from vsqs._spark_options import SourceOptions
from vsqs._spark_stream import StreamReader

pytestmark = pytest.mark.spark


@pytest.fixture
def queue(tmp_path: Path) -> vsqs.Queue:
    return vsqs.Queue(tmp_path / "q", durable=False)


@pytest.fixture
def reader(queue: vsqs.Queue) -> Iterator[StreamReader]:
    options = SourceOptions.parse(
        {"path": queue.path, "maxMessagesPerBatch": "7", "heartbeatInterval": "3600"}
    )
    reader = StreamReader(options)
    yield reader
    reader.stop()


def test_the_default_limit_is_max_messages_per_batch(reader: StreamReader) -> None:
    limit = reader.getDefaultReadLimit()
    assert isinstance(limit, ReadMaxRows) and limit.max_rows == 7


def test_available_now_reads_what_was_ready_when_it_began(
    queue: vsqs.Queue, reader: StreamReader
) -> None:
    queue.publish_batch([b"before"] * 5)
    reader.prepareForTriggerAvailableNow()
    queue.publish_batch([b"after"] * 3)  # published after the trigger began: not this run
    start = reader.initialOffset()
    end = reader.latestOffset(start, ReadMaxRows(100))
    assert end["seq"] == 1
    reader.commit(end)
    assert reader.latestOffset(end, ReadMaxRows(100)) == end  # the run's input has ended
    assert [m.body for m in queue.browse()] == [b"after"] * 3


def test_a_byte_limit_ends_a_batch_and_releases_the_rest(
    queue: vsqs.Queue, reader: StreamReader
) -> None:
    queue.publish_batch([b"x" * 1000] * 6)
    start = reader.initialOffset()
    first = reader.latestOffset(start, ReadMaxBytes(3500))
    assert len(reader._plans[1]) == 3  # a fourth 1000-byte body would pass 3500 bytes
    assert queue.counts().ready == 3 and queue.counts().held == 3  # the rest released
    reader.commit(first)
    second = reader.latestOffset(first, ReadMaxBytes(3500))
    assert second["seq"] == 2 and len(reader._plans[2]) == 3
    reader.commit(second)
    reader.flush()
    assert queue.counts().total == 0


def test_progress_reports_the_backlog(queue: vsqs.Queue, reader: StreamReader) -> None:
    queue.publish_batch([b"a", b"b", b"c"])
    start = reader.initialOffset()
    end = reader.latestOffset(start, ReadMaxRows(2))
    report = reader.reportLatestOffset()
    assert report is not None
    assert report["seq"] == end["seq"] == 1
    assert (report["ready"], report["held"]) == (1, 2)
    assert report["oldestReadyAgeMs"] >= 0 and report["shutdown"] is False
    reader.commit(end)
    reader.flush()
    queue.shutdown()
    drained = reader.latestOffset(end, ReadMaxRows(2))
    reader.commit(drained)
    reader.flush()
    final = reader.reportLatestOffset()
    assert final is not None
    assert (final["ready"], final["held"], final["oldestReadyAgeMs"], final["shutdown"]) == (
        0, 0, -1, True,
    )  # fmt: skip
