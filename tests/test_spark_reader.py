"""The streaming reader's planning calls, made as Spark's driver makes them, on a real
queue (no JVM needed: these run in the driver's Python process): the default limit,
Trigger.AvailableNow's budget, byte limits and the progress report."""

from __future__ import annotations

import errno
import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pyspark.sql.streaming.datasource import ReadMaxBytes, ReadMaxRows

import vsqs
from vsqs import Storage, UnsafeEntry, _fs
from vsqs._ids import State, parse_name
from vsqs._scan import current_names
from vsqs.spark._options import STATE, Planned, SourceOptions
from vsqs.spark._read import MessageGone, read_planned
from vsqs.spark._state import StateDir
from vsqs.spark._stream import StreamReader

from .fixtures_core import patch_fs

pytestmark = pytest.mark.spark


@pytest.fixture
def read_queue(tmp_path: Path) -> vsqs.PlainQueue:
    return vsqs.PlainQueue(tmp_path / "q", durable=False)


@pytest.fixture
def reader(read_queue: vsqs.PlainQueue) -> Iterator[StreamReader]:
    options = SourceOptions.parse(
        {"path": read_queue.path, "maxMessagesPerBatch": "7", "heartbeatInterval": "3600"}
    )
    reader = StreamReader(options)
    yield reader
    reader.stop()


def test_the_default_limit_is_max_messages_per_batch(reader: StreamReader) -> None:
    limit = reader.getDefaultReadLimit()
    assert isinstance(limit, ReadMaxRows) and limit.max_rows == 7


def test_available_now_reads_what_was_ready_when_it_began(
    read_queue: vsqs.PlainQueue, reader: StreamReader
) -> None:
    read_queue.publish_batch([b"before"] * 5)
    reader.prepareForTriggerAvailableNow()
    read_queue.publish_batch([b"after"] * 3)  # published after the trigger began: not this run
    start = reader.initialOffset()
    end = reader.latestOffset(start, ReadMaxRows(100))
    assert end["seq"] == 1
    reader.commit(end)
    assert reader.latestOffset(end, ReadMaxRows(100)) == end  # the run's input has ended
    assert [m.body for m in read_queue.browse()] == [b"after"] * 3


def test_a_byte_limit_ends_a_batch_and_releases_the_rest(
    read_queue: vsqs.PlainQueue, reader: StreamReader
) -> None:
    read_queue.publish_batch([b"x" * 1000] * 6)
    start = reader.initialOffset()
    first = reader.latestOffset(start, ReadMaxBytes(3500))
    assert len(reader._plans[1]) == 3  # a fourth 1000-byte body would pass 3500 bytes
    assert read_queue.counts().ready == 3 and read_queue.counts().held == 3  # the rest released
    reader.commit(first)
    second = reader.latestOffset(first, ReadMaxBytes(3500))
    assert second["seq"] == 2 and len(reader._plans[2]) == 3
    reader.commit(second)
    reader.flush()
    assert read_queue.counts().total == 0


def test_progress_reports_the_backlog(read_queue: vsqs.PlainQueue, reader: StreamReader) -> None:
    read_queue.publish_batch([b"a", b"b", b"c"])
    start = reader.initialOffset()
    end = reader.latestOffset(start, ReadMaxRows(2))
    report = reader.reportLatestOffset()
    assert report is not None
    assert report["seq"] == end["seq"] == 1
    assert (report["ready"], report["held"]) == (1, 2)
    assert report["oldestReadyAgeMs"] >= 0 and report["shutdown"] is False
    reader.commit(end)
    reader.flush()
    read_queue.shutdown()
    drained = reader.latestOffset(end, ReadMaxRows(2))
    reader.commit(drained)
    reader.flush()
    final = reader.reportLatestOffset()
    assert final is not None
    assert (final["ready"], final["held"], final["oldestReadyAgeMs"], final["shutdown"]) == (
        0, 0, -1, True,
    )  # fmt: skip


def test_a_failed_delete_is_raised_by_the_commit_and_the_deleter_goes_on(
    read_queue: vsqs.PlainQueue, reader: StreamReader, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fault while deleting a completed batch reaches Spark's commit (it used to kill
    the delete thread, and the commit then waited forever); the batch keeps its record
    and its messages; the next batch is deleted as usual."""
    read_queue.publish_batch([b"a", b"b"])
    first = reader.latestOffset(reader.initialOffset(), ReadMaxRows(2))
    real = _fs.unlink

    def failing(path: str) -> bool:
        raise OSError(errno.EIO, os.strerror(errno.EIO), path)

    patch_fs(monkeypatch, "unlink", failing)
    with pytest.raises(OSError) as raised:
        reader.commit(first)
    assert raised.value.errno == errno.EIO
    assert read_queue.counts().held == 2  # nothing deleted: held until the lease ends
    patch_fs(monkeypatch, "unlink", real)
    read_queue.publish(b"c")
    second = reader.latestOffset(first, ReadMaxRows(2))
    reader.commit(second)  # the thread is alive: this batch is deleted
    assert read_queue.counts().held == 2 and read_queue.counts().ready == 0


# -- options and rows: every error names what is wrong, and nothing is published -------


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({}, "needs a queue path"),
        ({"mode": "tail"}, "option 'mode' must be browse"),
        ({"visibilityTimeout": "0.5"}, "option 'visibilityTimeout' must be >= 1.0"),
        ({"visibilityTimeout": "nan"}, "option 'visibilityTimeout' must be >= 1.0"),
        ({"numPartitions": "0"}, "option 'numPartitions' must be >= 1"),
        ({"durable": "yes"}, "option 'durable' must be true or false"),
    ],
)
def test_bad_options_are_named(tmp_path: Path, options: dict[str, str], named: str) -> None:
    given = {"path": str(tmp_path / "q"), **options} if options else {}
    with pytest.raises(ValueError, match=named):
        SourceOptions.parse(given)


def test_rows_with_bad_cells_publish_nothing_and_say_which(read_queue: vsqs.PlainQueue) -> None:
    from pyspark.sql import Row

    from vsqs.spark._publish import publish_rows, resolve_format

    fmt = resolve_format(["value", "key"], key_column="key")
    with pytest.raises(ValueError, match="row 1 has a null key column 'key'"):
        publish_rows(read_queue, [Row(value=b"a", key="1"), Row(value=b"b", key=None)], fmt, "t:")
    with pytest.raises(ValueError, match="row 0 has a null 'value' column"):
        publish_rows(read_queue, [Row(value=None, key="2")], fmt, "t:")
    with pytest.raises(TypeError, match="column 'value' must be binary or string, not int"):
        publish_rows(read_queue, [Row(value=7, key="3")], fmt, "t:")
    with pytest.raises(KeyError, match="the row has no column 'key'"):
        publish_rows(read_queue, [Row(value=b"c")], fmt, "t:")
    with pytest.raises(ValueError, match="batch_size must be a positive int"):
        publish_rows(read_queue, [], fmt, "t:", batch_size=0)
    assert read_queue.counts().total == 0
    body_fmt = resolve_format(["value"])
    cells = [Row(value=bytearray(b"x")), Row(value=memoryview(b"y"))]
    assert publish_rows(read_queue, cells, body_fmt, "u:") == 2
    assert [m.body for m in read_queue.browse()] == [b"x", b"y"]


# -- the data source's planning side, as Spark's planner process calls it ----------------


def test_the_data_source_plans_readers_and_writers(read_queue: vsqs.PlainQueue) -> None:
    from pyspark.sql.types import BinaryType, StringType, StructField, StructType

    from vsqs.spark._source import (
        ArrowBatchWriter,
        ArrowStreamWriter,
        BatchReader,
        BatchWriter,
        StreamWriter,
        VsqsDataSource,
    )

    source = VsqsDataSource({"path": read_queue.path})
    assert source.name() == "vsqs" and "body binary" in source.schema()
    reader = source.reader(StructType())
    assert isinstance(reader, BatchReader) and len(reader.partitions()) == 1
    read_queue.publish(b"seen")
    assert [row[1] for row in reader.read(reader.partitions()[0])] == [b"seen"]
    assert read_queue.counts().ready == 1  # a batch read claims nothing
    plain = StructType([StructField("value", BinaryType())])
    keyed = StructType([StructField("value", BinaryType()), StructField("key", StringType())])
    assert type(source.writer(plain, False)) is ArrowBatchWriter
    assert type(source.streamWriter(plain, False)) is ArrowStreamWriter
    with_key = VsqsDataSource({"path": read_queue.path, "keyColumn": "key"})
    assert type(with_key.writer(keyed, False)) is BatchWriter
    assert type(with_key.streamWriter(keyed, False)) is StreamWriter
    with pytest.raises(ValueError, match=r"vsqs only appends: use .mode\('append'\)"):
        source.writer(plain, True)
    stream = source.streamReader(StructType())
    try:
        assert isinstance(stream, StreamReader)
    finally:
        stream.stop()
    with pytest.raises(RuntimeError, match="only inside a Spark task"):
        source.writer(plain, False).write(iter([]))
    assert read_queue.counts().total == 1


# -- offsets that do not belong to the reader are refused, naming what to do -------------


def test_offsets_of_another_run_are_refused(read_queue: vsqs.PlainQueue, tmp_path: Path) -> None:
    from vsqs.spark._state import StateMismatch

    read_queue.publish_batch([b"a", b"b"])
    options = SourceOptions.parse(
        {"path": read_queue.path, "heartbeatInterval": "3600", "lockTimeout": "0.2"}
    )
    first = StreamReader(options)
    try:
        start = first.initialOffset()
        end = first.latestOffset(start, ReadMaxRows(1))
        assert first.latestOffset(start, ReadMaxRows(1)) == end  # asked again: same batch
        with pytest.raises(StateMismatch, match="without an epoch past batch 0"):
            first.latestOffset({"epoch": "", "seq": 3}, ReadMaxRows(1))
        with pytest.raises(StateMismatch, match="one reader serves one checkpoint"):
            first.latestOffset({"epoch": "another", "seq": 1}, ReadMaxRows(1))
        with pytest.raises(StateMismatch, match="no record of it"):
            first.partitions(start, {"epoch": end["epoch"], "seq": 5})
        second = StreamReader(options)
        try:
            with pytest.raises(RuntimeError, match="still holds"):
                second.latestOffset(end, ReadMaxRows(1))  # the first run holds the state
        finally:
            second.stop()
    finally:
        first.stop()
    moved = SourceOptions.parse(
        {
            "path": read_queue.path,
            "stateDir": str(tmp_path / "elsewhere"),
            "heartbeatInterval": "3600",
        }
    )
    third = StreamReader(moved)
    try:
        with pytest.raises(StateMismatch, match="holds no state for it"):
            third.latestOffset(end, ReadMaxRows(1))
    finally:
        third.stop()
    assert read_queue.counts().total == 2  # nothing lost by any refusal


# -- executors find a renamed message by the grammar alone ------------------------------


def test_an_executor_reads_only_names_of_the_grammar(read_queue: vsqs.PlainQueue) -> None:
    """A planned message deleted meanwhile is gone, even when a foreign file that starts
    with its id (a user's ``<id>.orig`` copy, ``0<id>``) sits in the queue directory."""
    read_queue.publish(b"the message")
    (held,) = read_queue.receive_batch(1, timeout=0)
    read_queue.delete(held)
    for foreign in (f"{held.id}.orig", f"0{held.id}", f"0{held.id}.1"):
        Path(read_queue.path, foreign).write_bytes(b"not the message")
    plan: list[Planned] = [(held.id, held.receipt, {}, 1, held.sent_at, "")]
    with pytest.raises(MessageGone):
        list(read_planned(read_queue.path, plan))


def test_an_executor_reads_the_renewed_name_whatever_the_listing_order() -> None:
    names = ["17.200", "17.bak", "17", "0017", "0017.300", "17.100", "18.new", "18.5.0"]
    assert current_names(names) == {"17": "17.200", "18": "18.5.0"}
    assert current_names(reversed(names)) == {"17": "17.200", "18": "18.5.0"}


@given(st.lists(st.sampled_from(["17", "17.100", "17.200", "17.200.0", "017", "17.new", "x"])))
def test_which_name_an_executor_reads_never_depends_on_the_listing(names: list[str]) -> None:
    """Whatever the order, the same name; and a name parse_name rejects is never one."""
    found = current_names(names)
    assert found == current_names(sorted(names)) == current_names(sorted(names, reverse=True))
    for message_id, name in found.items():
        entry = parse_name(name)
        assert entry is not None and entry.id == message_id and entry.state is not State.NEW


# -- the state never follows a planted symlink ------------------------------------------


def _snapshot(top: Path) -> dict[str, bytes | None]:
    """Every entry under *top*, with the content of each file (to see it untouched)."""
    return {
        str(p.relative_to(top)): None if p.is_dir() else p.read_bytes()
        for p in sorted(top.rglob("*"))
    }


@pytest.mark.parametrize(
    "planted", [".vsqs/spark", ".vsqs/spark/streams", "{epoch}", "{epoch}/epoch.json",
                "{epoch}/1.json", "{epoch}/lock"],
)  # fmt: skip
def test_a_symlink_planted_in_the_spark_state_is_refused(
    read_queue: vsqs.PlainQueue, tmp_path: Path, planted: str
) -> None:
    """A later run of the query refuses a symlink planted at .vsqs/spark or anywhere in
    its state with an error naming it, and never touches what the link points to (the
    state it would find there is a real copy: following it would work)."""
    read_queue.publish_batch([b"a", b"b"])
    options = SourceOptions.parse({"path": read_queue.path, "heartbeatInterval": "3600"})
    first = StreamReader(options)
    end = first.latestOffset(first.initialOffset(), ReadMaxRows(1))
    first.stop()
    epoch_dir = f".vsqs/spark/streams/{end['epoch']}"
    target = Path(read_queue.path, planted.format(epoch=epoch_dir))
    assert target.exists()
    outside = tmp_path / "outside"
    outside.mkdir()
    moved = outside / target.name
    target.rename(moved)
    target.symlink_to(moved)
    before = _snapshot(outside)
    second = StreamReader(options)
    try:
        with pytest.raises(UnsafeEntry, match=re.escape(target.name)):
            second.latestOffset(end, ReadMaxRows(1))
    finally:
        second.stop()
    assert _snapshot(outside) == before
    assert target.is_symlink()  # not removed either: the user decides


@pytest.mark.parametrize("planted", ["", "epoch.json", "1.json", "lock"])
def test_a_symlink_planted_in_a_named_state_dir_is_refused(
    read_queue: vsqs.PlainQueue, tmp_path: Path, planted: str
) -> None:
    """The same below a stateDir the user named outside the queue (the stateDir itself is
    opened as named: it may be a link the user chose)."""
    read_queue.publish_batch([b"a", b"b"])
    (tmp_path / "real-state").mkdir()
    (tmp_path / "state").symlink_to(tmp_path / "real-state")  # the user's own choice
    options = SourceOptions.parse(
        {"path": read_queue.path, "stateDir": str(tmp_path / "state"), "heartbeatInterval": "3600"}
    )
    first = StreamReader(options)
    end = first.latestOffset(first.initialOffset(), ReadMaxRows(1))
    first.stop()
    target = tmp_path / "real-state" / end["epoch"] / planted
    outside = tmp_path / "outside"
    outside.mkdir()
    moved = outside / target.name
    target.rename(moved)
    target.symlink_to(moved)
    before = _snapshot(outside)
    second = StreamReader(options)
    try:
        with pytest.raises(UnsafeEntry, match=re.escape(target.name)):
            second.latestOffset(end, ReadMaxRows(1))
    finally:
        second.stop()
    assert _snapshot(outside) == before


def test_a_storage_is_named_only_by_directories_inside_vsqs() -> None:
    assert Storage.name_of("/q", Storage("/q", "spark/streams").path) == "spark/streams"
    assert Storage.name_of("/q", "/q/.vsqs/spark/") == "spark"
    for elsewhere in (
        "/q/.vsqs",
        "/q/.vsqs/../x",
        "/q/.vsqs/spark/../../x",
        "/q/.vsqsx",
        "/q",
        "/x",
    ):
        assert Storage.name_of("/q", elsewhere) is None, elsewhere


def test_state_records_round_trip_and_leave_no_temporary_file(read_queue: vsqs.PlainQueue) -> None:
    """What one run records, the next loads; a record that fails to write leaves nothing,
    and what a crashed writer left is removed by the next run's load."""
    state = StateDir(read_queue.path, Storage(read_queue.path, STATE).path, "e1")
    try:
        assert not state.exists()
        with pytest.raises(FileNotFoundError, match="no epoch record"):
            state.info()
        state.create("e1", read_queue.path)
        assert state.info() == {"epoch": "e1", "queue": read_queue.path, "high": 0}
        state.save(3, [("17", "17.100", {"k": "v"}, 2, 1.5, "partition-1")])
        with pytest.raises(TypeError):
            state.save(4, [("18", "18.100", {}, 1, object())])  # type: ignore[list-item]
        epoch_dir = Path(state.path)
        (epoch_dir / ".tmp-5.json-1-dead").write_bytes(b"a crashed writer's")
        (epoch_dir / "notes.json").write_bytes(b"not a batch")
        assert state.load() == {3: [("17", "17.100", {"k": "v"}, 2, 1.5, "partition-1")]}
        assert sorted(p.name for p in epoch_dir.iterdir()) == ["3.json", "epoch.json", "notes.json"]
        state.remove(3)
        state.remove(3)  # twice is fine
        assert state.load() == {}
        # A record of a vsqs before partitions names no directory: the queue's own.
        state.save(4, [("18", "18.100", {}, 1, 2.5)])  # type: ignore[list-item]
        assert state.load() == {4: [("18", "18.100", {}, 1, 2.5, "")]}
    finally:
        state.close()


def test_stream_state_is_read_with_a_bound_like_every_file_under_vsqs(
    read_queue: vsqs.PlainQueue,
) -> None:
    """A sparse 256 MiB ``epoch.json`` (or a batch record past its bound) is refused
    after one ``fstat``, naming it, never read into memory (before issue 37 it was read
    whole: a 320 MiB peak); a record too large to be read back is never written."""
    state = StateDir(read_queue.path, Storage(read_queue.path, STATE).path, "e1")
    try:
        state.create("e1", read_queue.path)
        epoch = Path(state.path) / "epoch.json"
        with epoch.open("r+b") as handle:
            handle.truncate(256 << 20)  # sparse: costs no disk
        with pytest.raises(OSError, match=r"epoch\.json") as refused:
            state.info()
        assert refused.value.errno == errno.EFBIG
        state.create("e1", read_queue.path)
        batch = Path(state.path) / "7.json"
        with batch.open("wb") as handle:
            handle.truncate((64 << 20) + 1)
        with pytest.raises(OSError, match=r"7\.json") as refused:
            state.load()
        assert refused.value.errno == errno.EFBIG
        batch.unlink()
        huge = [("17", "17.100", {"k": "v" * (8 << 10)}, 2, 1.5, "")] * 8200
        with pytest.raises(ValueError, match="maxMessagesPerBatch"):
            state.save(8, huge)
        assert state.load() == {}
    finally:
        state.close()


def test_readers_never_create_a_queue(tmp_path: Path) -> None:
    """``spark.read.format("vsqs").load("/mistyped")`` once read 0 rows and left an empty
    queue at the typo. Every reader (batch, stream, consume) refuses it on the driver,
    naming the path, and the batch reader's task refuses it on the executor too."""
    from typing import Any, cast

    from pyspark.sql.types import StructType

    from vsqs.spark import consume
    from vsqs.spark._source import BatchReader, VsqsDataSource

    missing = tmp_path / "mistyped"
    source = VsqsDataSource({"path": str(missing)})
    attempts: list[Callable[[], object]] = [
        lambda: source.reader(StructType()),
        lambda: source.streamReader(StructType()),
        lambda: list(BatchReader(SourceOptions.parse({"path": str(missing)})).read(cast(Any, 0))),
        lambda: consume(cast(Any, None), str(missing)).__enter__(),
    ]
    for attempt in attempts:
        with pytest.raises(FileNotFoundError, match=f"no queue at {missing} "):
            attempt()
    assert not missing.exists()
