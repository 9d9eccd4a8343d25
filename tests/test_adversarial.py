"""What a hostile or careless hand does to a queue directory (issue 26, items 2-7): user
files beside the pokes, planted non-files under message names, huge files under
``.vsqs/``, durations past what a name holds, a dead-letter queue swapped for a link.
"""

from __future__ import annotations

import math
import os
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

import vsqs
from vsqs.cli import cli
from vsqs.testing import ManualClock

MAX = 10**12  # vsqs._ids.MAX_DURATION, what a name holds


# -- item 6: every duration fits the name grammar -----------------------------------------


@pytest.mark.parametrize(
    "call",
    [
        lambda q: q.receive(visibility_timeout=1e13),
        lambda q: q.publish(b"x", delay=2e13),
        lambda q: q.change_visibility(q.receive() or "1", 1e13),
        lambda q: vsqs.PlainQueue(q.path, visibility_timeout=1e13),
        lambda q: vsqs.PlainQueue(q.path, delay=1e13),
        lambda q: vsqs.PlainQueue(q.path, retention=1e13),
        lambda q: q.configure(visibility_timeout=1e13),
        lambda q: q.lease(q.receive(), visibility_timeout=1e13),
        lambda q: q.lease(q.receive(), max_duration=1e13),
    ],
    ids=[
        "receive",
        "publish",
        "change_visibility",
        "vt",
        "delay",
        "retention",
        "configure",
        "lease",
        "max_duration",
    ],
)
def test_a_duration_past_the_grammar_is_refused_naming_the_maximum(
    q: vsqs.PlainQueue, call: object
) -> None:
    q.publish(b"m")
    with pytest.raises(ValueError, match=r"at most 1e\+12 seconds"):
        call(q)  # type: ignore[operator]
    assert q.counts().ready + q.counts().held == 1
    assert all(len(name.rpartition(".")[2]) <= 19 for name in _names(q))


def test_the_longest_duration_still_makes_a_name_the_queue_reads(q: vsqs.PlainQueue) -> None:
    q.publish(b"late", delay=MAX)
    q.publish(b"m")
    message = q.receive(visibility_timeout=MAX)
    assert message is not None
    counts = q.counts()
    assert (counts.held, counts.delayed) == (1, 1)  # both still in the accounting
    assert q.change_visibility(message, 0).id == message.id
    assert q.purge() == 2


def test_the_cli_refuses_a_duration_past_the_grammar(qdir: Path) -> None:
    vsqs.PlainQueue(qdir).close()
    runner = CliRunner()
    for args in (
        ["config", str(qdir), "--visibility-timeout", "1e13"],
        ["publish", str(qdir), "x", "--delay", "2e13"],
        ["receive", str(qdir), "--visibility-timeout", "1e13"],
    ):
        result = runner.invoke(cli, args)
        assert result.exit_code == 2, (args, result.output)
        assert "1000000000000" in result.output
    assert vsqs.PlainQueue(qdir).settings().get("visibility_timeout") is None


def test_a_stored_duration_past_the_grammar_is_refused(qdir: Path) -> None:
    vsqs.PlainQueue(qdir).close()
    (qdir / ".vsqs").mkdir(exist_ok=True)
    (qdir / ".vsqs" / "settings.json").write_text('{"visibility_timeout": 1e13}')
    with pytest.raises(vsqs.InvalidSettings, match=r"at most 1e\+12"):
        vsqs.PlainQueue(qdir)


def test_spark_and_kombu_options_are_bounded_too(qdir: Path, tmp_path: Path) -> None:
    from vsqs.spark._options import SourceOptions

    with pytest.raises(ValueError, match=r"at most 1e\+12"):
        SourceOptions.parse({"path": str(qdir), "visibilityTimeout": "1e13"})
    kombu = pytest.importorskip("kombu")
    import vsqs.kombu  # noqa: F401  # registers the transport

    with (
        kombu.Connection(
            f"vsqs://{tmp_path / 'root'}", transport_options={"visibility_timeout": 1e13}
        ) as conn,
        pytest.raises(ValueError, match=r"at most 1e\+12"),
    ):
        conn.channel()
    assert math.isfinite(MAX)


def _names(q: vsqs.PlainQueue) -> list[str]:
    return [p.name for p in Path(q.path).iterdir() if p.name != ".vsqs"]


# -- item 2: clean() removes only vsqs's own pokes ----------------------------------------


def test_clean_keeps_user_files_and_directories_named_like_pokes(qdir: Path) -> None:
    """Only empty regular files of the exact poke/announcement grammar go; a user's
    `.wake-up-notes.txt` stays, a `.wake-dir` directory neither crashes clean() nor stops
    its later work (orphaned metadata here)."""
    q = vsqs.PlainQueue(qdir, durable=False)
    q.publish(b"kept")
    (qdir / ".wake-up-notes.txt").write_bytes(b"twenty bytes of note")
    (qdir / ".wake-dir").mkdir()
    (qdir / ".wake-41-0a1b2c3d-dir").mkdir()  # the grammar, but a directory
    (qdir / ".wake-41-0a1b2c3e").write_bytes(b"x")  # the grammar, but not empty
    os.mkfifo(qdir / ".wake-41-0a1b2c3f")  # the grammar, but a FIFO
    (qdir / ".wake-41-0a1b2c40").touch()  # a poke a dead process left: removed
    (qdir / ".vsqs" / "meta").mkdir(parents=True, exist_ok=True)
    (qdir / ".vsqs" / "meta" / "1000000000000009").write_text("{}")  # orphaned metadata
    old = time.time() - 7200
    for path in qdir.iterdir():
        os.utime(path, (old, old), follow_symlinks=False)
    os.utime(qdir / ".vsqs" / "meta" / "1000000000000009", (old, old))
    assert q.clean(older_than=3600) == 2  # the poke and the orphaned record
    left = sorted(p.name for p in qdir.iterdir() if p.name.startswith(".wake"))
    assert left == [".wake-41-0a1b2c3d-dir", ".wake-41-0a1b2c3e", ".wake-41-0a1b2c3f",
                    ".wake-dir", ".wake-up-notes.txt"]  # fmt: skip
    assert (qdir / ".wake-up-notes.txt").read_bytes() == b"twenty bytes of note"
    assert not (qdir / ".vsqs" / "meta" / "1000000000000009").exists()
    result = CliRunner().invoke(cli, ["clean", str(qdir), "--older-than", "0"])
    assert result.exit_code == 0, result.output
    assert (qdir / ".wake-dir").is_dir()


# -- item 3: a planted non-file under a message name is not a message ---------------------


PLANTED = "1000000000000001"


def _plant(qdir: Path, kind: str, name: str = PLANTED) -> None:
    if kind == "directory":
        (qdir / name).mkdir()
    elif kind == "fifo":
        os.mkfifo(qdir / name)
    else:
        (qdir / name).symlink_to("/etc/hostname")


@pytest.mark.parametrize("kind", ["directory", "fifo", "symlink"])
def test_purge_removes_the_messages_and_skips_a_planted_entry(
    qdir: Path, kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    q = vsqs.PlainQueue(qdir, durable=False)
    q.publish_batch([b"m"] * 200)
    _plant(qdir, kind)
    _plant(qdir, kind, PLANTED + ".1000000000000002")  # and under a held name
    assert q.counts().ready == 200
    assert q.counts().held == 0
    assert q.purge() == 200
    assert sorted(_names(q)) == [PLANTED, PLANTED + ".1000000000000002"]
    assert "purge left entries that are not messages" in caplog.text


def test_the_cli_purge_skips_a_planted_directory(qdir: Path) -> None:
    q = vsqs.PlainQueue(qdir, durable=False)
    q.publish_batch([b"m"] * 200)
    _plant(qdir, "directory")
    result = CliRunner().invoke(cli, ["purge", str(qdir), "--yes"])
    assert result.exit_code == 0, result.output
    assert q.counts() == vsqs.Counts(ready=0, held=0, delayed=0, new=0)
    assert (qdir / PLANTED).is_dir()


@pytest.mark.parametrize("kind", ["directory", "fifo"])
def test_a_shut_down_queue_with_a_planted_entry_drains(
    qdir: Path, clock: ManualClock, kind: str
) -> None:
    """consume() ends once the real messages are gone; stats() counts no planted entry."""
    q = vsqs.PlainQueue(qdir, durable=False, clock=clock)
    q.publish(b"real")
    _plant(qdir, kind)
    _plant(qdir, kind, PLANTED[:-1] + "3.new")
    q.shutdown()
    clock.advance(5)  # past the shutdown's grace
    stats = q.stats()
    assert (stats.ready, stats.held, stats.new) == (1, 0, 0)
    assert [q.delete(m) for m in q.consume()] == [True]  # and then it stops
    with pytest.raises(vsqs.QueueDrained):
        q.receive(timeout=0)


# -- item 7: a dead-letter queue swapped for a symlink receives nothing through it ---------


def test_a_dead_letter_queue_swapped_for_a_link_gets_nothing_outside(
    tmp_path: Path, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    dlq_path, outside = tmp_path / "dlq", tmp_path / "outside"
    q = vsqs.PlainQueue(tmp_path / "q", dead_letter=dlq_path, max_receives=1, clock=clock)
    q.publish(b"poison")
    assert q.receive() is not None
    dlq_path.rename(tmp_path / "dlq-real")  # swapped after the handle was made
    outside.mkdir()
    dlq_path.symlink_to(outside)
    clock.advance(31)
    assert q.receive(timeout=0) is None  # the lease ended: dead-lettering is refused, logged
    assert list(outside.iterdir()) == []  # neither the message nor a .vsqs folder
    assert "cannot dead-letter a message" in caplog.text
    assert "never moves a message through it" in caplog.text
    assert q.counts().held == 1  # kept in its hold, never lost
    dlq_path.unlink()
    (tmp_path / "dlq-real").rename(dlq_path)
    clock.advance(31)
    assert q.receive(timeout=0) is None
    assert [m.body for m in vsqs.PlainQueue(dlq_path, clock=clock).receive_batch(10)] == [b"poison"]


def test_retention_into_a_dead_letter_queue_swapped_for_a_link_moves_nothing_outside(
    tmp_path: Path, clock: ManualClock
) -> None:
    dlq_path, outside = tmp_path / "dlq", tmp_path / "outside"
    q = vsqs.PlainQueue(tmp_path / "q", dead_letter=dlq_path, retention=10, clock=clock)
    q.publish(b"old")
    dlq_path.rename(tmp_path / "dlq-real")
    outside.mkdir()
    dlq_path.symlink_to(outside)
    clock.advance(11)
    assert q.receive(timeout=0) is None  # retention claims it; the move is refused
    assert q.clean() >= 0
    assert list(outside.iterdir()) == []
    assert q.counts().held == 1  # kept, never lost


def test_a_redrive_target_swapped_for_a_link_is_refused(tmp_path: Path) -> None:
    dlq = vsqs.PlainQueue(tmp_path / "dlq", durable=False)
    target = vsqs.PlainQueue(tmp_path / "target", durable=False)
    dlq.publish(b"m")
    (tmp_path / "target").rename(tmp_path / "target-real")
    (tmp_path / "outside").mkdir()
    (tmp_path / "target").symlink_to(tmp_path / "outside")
    with pytest.raises(OSError, match="never moves a message through it"):
        dlq.redrive(to=target)
    assert list((tmp_path / "outside").iterdir()) == []


# -- item 4: a huge file under .vsqs costs no memory ---------------------------------------

GIB = 1 << 30


def _sparse(path: Path, size: int = GIB) -> None:
    """A file of *size* bytes that takes no disk (a hole)."""
    with open(path, "ab") as handle:
        handle.truncate(size)


def _peak(call: Callable[[], object]) -> tuple[object, int]:
    """What *call* returns, and the most memory Python allocated meanwhile (bytes)."""
    tracemalloc.start()
    try:
        result = call()
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_huge_settings_file_is_refused_naming_it_without_being_read(qdir: Path) -> None:
    vsqs.PlainQueue(qdir).close()
    (qdir / ".vsqs").mkdir(exist_ok=True)
    _sparse(qdir / ".vsqs" / "settings.json")

    def open_it() -> object:
        with pytest.raises(vsqs.InvalidSettings, match=r"settings\.json.*larger than 65536"):
            vsqs.PlainQueue(qdir)
        return None

    _, peak = _peak(open_it)
    assert peak < 8 << 20


def test_a_huge_counter_file_is_ignored_and_reported_once(
    q: vsqs.PlainQueue, caplog: pytest.LogCaptureFixture
) -> None:
    q.publish(b"m")
    stats_dir = Path(q.path) / ".vsqs" / "stats"
    stats_dir.mkdir(parents=True, exist_ok=True)
    _sparse(stats_dir / "planted-huge", GIB // 2)
    stats, peak = _peak(q.stats)
    assert isinstance(stats, vsqs.Stats)
    assert (stats.produced_messages, stats.ready) == (1, 1)
    assert peak < 8 << 20
    q.stats()
    assert caplog.text.count("too large to be ours") == 1


def test_a_huge_metadata_record_is_ignored_and_the_message_delivered(
    q: vsqs.PlainQueue, caplog: pytest.LogCaptureFixture
) -> None:
    message_id = q.publish(b"m", attributes={"a": "b"})
    _sparse(Path(q.path) / ".vsqs" / "meta" / message_id, GIB // 2)
    message, peak = _peak(lambda: q.receive(timeout=0))
    assert isinstance(message, vsqs.Message)
    assert (message.body, message.attributes) == (b"m", {})
    assert peak < 8 << 20
    assert "unreadable metadata" in caplog.text
    assert "too large" in caplog.text


def test_huge_dedup_capacity_and_closed_files_cost_no_memory(qdir: Path) -> None:
    q = vsqs.PlainQueue(qdir, durable=False, capacity=5)
    q.publish(b"first", dedup_id="key")
    vsqs_dir = qdir / ".vsqs"
    (marker,) = (vsqs_dir / "dedup").iterdir()
    _sparse(marker)
    _sparse(vsqs_dir / "capacity.count")
    ids, peak = _peak(lambda: q.publish(b"again", dedup_id="key"))
    assert isinstance(ids, str)  # the marker is not ours: replaced, the publish goes on
    assert peak < 8 << 20
    q.shutdown()
    _sparse(vsqs_dir / "closed")
    is_shut, peak = _peak(lambda: vsqs.PlainQueue(qdir, durable=False).is_shutdown)
    assert is_shut is True
    assert peak < 8 << 20
    assert q.counts().ready == 2
