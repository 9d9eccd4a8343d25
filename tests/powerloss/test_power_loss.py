"""Durable means durable: the power fails while a process writes, on a filesystem that
drops every unsynced byte (issue 31).

Each test runs one writing path (:mod:`tests.powerloss._producers`) on the power-loss
filesystem, fails the power at a random point of its work (the producer dies with it)
and reads what survived: every acknowledged message present and intact, nothing empty
or torn visible, nothing duplicated, settings and attributes intact, and the queue
usable by the next process without a repair. The seed of each run is in its failure
message; ``--stress-long`` runs ten seeds per path.

The flush failures of a dying disk are tested here too, on the real mount: a publish
whose body flush fails leaves nothing visible; one whose directory flush fails after
the commit raises :class:`vsqs.DurabilityError` naming exactly what is visible.
"""

from __future__ import annotations

import asyncio
import errno
import io
import os
import random
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Final

import pytest

import vsqs
from vsqs.aio import AsyncQueue
from vsqs.testing import ManualClock, drain

from ._mount import LazyMount, lazy_mount
from ._power import cut_power
from .conftest import require_lazyfs

KINDS = ["publish", "batch", "batch_keys", "batch_dedup", "file", "stream", "aio", "cli",
         "attributes", "consume", "kombu", "configure", "dead_letter", "redrive",
         pytest.param("spark", marks=pytest.mark.spark)]  # fmt: skip

pytestmark = pytest.mark.root  # mounts a FUSE filesystem


@pytest.mark.parametrize("strict", [False, True], ids=["data", "data+directories"])
@pytest.mark.parametrize("kind", KINDS)
def test_the_power_fails_while_a_producer_runs(
    kind: str, strict: bool, tmp_path: Path, stress_long: bool
) -> None:
    """publish, publish_batch (plain, dedup_ids, batch_dedup_id), publish_file,
    publish_stream, AsyncQueue.publish, ``vsqs publish - --batch 10``, attributes, a
    consumer beside the producer, the kombu transport, configure, dead-letter moves,
    redrive and Spark's publish_dataframe: nothing acknowledged is lost or emptied.
    *strict*: the power failure also undoes every directory operation whose directory
    was not flushed after it (the queue directory itself, made by the first producer,
    included)."""
    require_lazyfs()
    for run in range(10 if stress_long else 1):
        seed = random.randrange(1 << 32)
        where = tmp_path / str(run)
        where.mkdir()
        outcome = cut_power(kind, where, seed=seed, roll_back_directories=strict)
        assert outcome.ok, f"{kind}, seed {seed}: {outcome}"
        assert outcome.acknowledged > 0


def test_a_batch_acknowledged_before_a_power_loss_adds_nothing_when_retried(
    tmp_path: Path,
) -> None:
    """``publish_batch(..., batch_dedup_id=)`` returned, then the power failed on the
    filesystem that also undoes unflushed directory operations: the batch's record
    survived with it (its directory entry was flushed), so the retry of the
    acknowledged batch returns its ids and adds nothing (the mutant that did not flush
    the record published the batch a second time)."""
    require_lazyfs()
    with lazy_mount(tmp_path, roll_back_directories=True) as mount:
        with vsqs.Queue(mount.mountpoint / "data" / "q") as queue:
            ids = queue.publish_batch([b"a", b"b"], batch_dedup_id="job-7")
        mount.crash()
        backing = mount.backing
    with vsqs.Queue(backing / "data" / "q") as after:
        assert after.publish_batch([b"a", b"b"], batch_dedup_id="job-7") == ids
        assert [m.body for m in drain(after)] == [b"a", b"b"]


@pytest.fixture
def lazy_queue(lazy: LazyMount) -> Iterator[vsqs.PlainQueue]:
    """A durable queue on the power-loss filesystem (closed before it is unmounted)."""
    with vsqs.PlainQueue(lazy.mountpoint / "q") as opened:
        yield opened


def _names(path: str) -> list[str]:
    return sorted(n for n in os.listdir(path) if not n.startswith("."))


def _publishes(queue: vsqs.PlainQueue, source: Path) -> dict[str, Callable[[], object]]:
    def publish_file() -> object:
        source.write_bytes(b"from a file")
        return queue.publish_file(source)

    async def publish_async() -> object:
        async with AsyncQueue(queue.path) as aq:
            return await aq.publish(b"async")

    return {
        "publish": lambda: queue.publish(b"one"),
        "publish_keyed": lambda: queue.publish(b"one", dedup_id="k1"),
        "publish_batch": lambda: queue.publish_batch([b"a", b"b", b"c"]),
        "publish_batch_keys": lambda: queue.publish_batch([b"a", b"b"], dedup_ids=["x", "y"]),
        "publish_batch_dedup": lambda: queue.publish_batch([b"a", b"b"], batch_dedup_id="j"),
        "publish_stream": lambda: queue.publish_stream(io.BytesIO(b"streamed")),
        "publish_file": publish_file,
        "aio": lambda: asyncio.run(publish_async()),
    }


PATHS = ["publish", "publish_keyed", "publish_batch", "publish_batch_keys",
         "publish_batch_dedup", "publish_stream", "publish_file", "aio"]  # fmt: skip


@pytest.mark.parametrize("code", ["EIO", "ENOSPC"])
@pytest.mark.parametrize("path", PATHS)
def test_a_failed_body_flush_leaves_nothing_visible(
    lazy: LazyMount, lazy_queue: vsqs.PlainQueue, path: str, code: str
) -> None:
    lazy.command(f"fail-fsync {code}")
    with pytest.raises(OSError, match=os.strerror(getattr(errno, code))) as info:
        _publishes(lazy_queue, lazy.mountpoint / "source")[path]()
    assert not isinstance(info.value, vsqs.DurabilityError)
    lazy.command("fail-fsync off")
    lazy_queue.clean()  # nothing a crash-repair could roll forward either
    assert _names(lazy_queue.path) == []


@pytest.mark.parametrize("path", PATHS)
def test_a_failed_directory_flush_names_what_is_visible(
    lazy: LazyMount, lazy_queue: vsqs.PlainQueue, path: str
) -> None:
    """The directory flush after the commit fails. (A batch with a ``batch_dedup_id``
    flushes its record's directory before any message is visible: nothing is.)"""
    lazy_queue.publish(b"warm-up", dedup_id="warm-up")  # .vsqs/dedup is made (and flushed)
    before = _names(lazy_queue.path)
    lazy.command("fail-fsyncdir EIO")
    with pytest.raises(OSError, match="Input/output error") as info:
        _publishes(lazy_queue, lazy.mountpoint / "source")[path]()
    lazy.command("fail-fsync off")
    if path == "publish_batch_dedup":
        assert not isinstance(info.value, vsqs.DurabilityError)
        lazy_queue.clean()
        assert _names(lazy_queue.path) == before
        return
    assert isinstance(info.value, vsqs.DurabilityError)
    assert sorted(set(_names(lazy_queue.path)) - set(before)) == sorted(info.value.ids)
    assert info.value.ids


def _settings_change(queue: vsqs.PlainQueue) -> object:
    return queue.configure(visibility_timeout=45)


def _shutdown(queue: vsqs.PlainQueue) -> object:
    queue.shutdown()
    return None


def _dead_letter(queue: vsqs.PlainQueue) -> object:
    """A message that used up its one receive is moved when its lease ends."""
    clock = ManualClock(start=time.time())
    dlq = vsqs.PlainQueue(Path(queue.path).parent / "dlq", clock=clock)
    bounced = vsqs.PlainQueue(queue.path, dead_letter=dlq, max_receives=1, clock=clock)
    bounced.publish(b"bounced")
    clock.advance(1)
    assert bounced.receive(timeout=0, visibility_timeout=1) is not None
    clock.advance(2)
    return bounced.requeue_expired()


def _redrive(queue: vsqs.PlainQueue) -> object:
    dlq = vsqs.PlainQueue(Path(queue.path).parent / "dlq2", durable=False)
    dlq.publish(b"to move")
    dlq.close()
    return vsqs.PlainQueue(dlq.path).redrive(to=queue)


ELSEWHERE: Final = {
    "configure": _settings_change,
    "shutdown": _shutdown,
    "dead-letter": _dead_letter,
    "redrive": _redrive,
}


@pytest.mark.parametrize("code", ["EIO", "ENOSPC"])
@pytest.mark.parametrize("kind", ["fail-fsync", "fail-fsyncdir"])
@pytest.mark.parametrize("what", list(ELSEWHERE))
def test_a_failed_flush_outside_publishing_is_raised_never_hidden(
    lazy: LazyMount, lazy_queue: vsqs.PlainQueue, what: str, kind: str, code: str
) -> None:
    """Settings, the shutdown marker, a dead-letter move and a redrive: each flushes what
    it wrote; when that flush fails (EIO, ENOSPC, on a file or on a directory), the call
    raises the error (a move that had happened: :class:`vsqs.DurabilityError`) instead of
    returning as if it were durable."""
    lazy_queue.publish(b"warm-up")  # .vsqs and the queue's own directories exist
    lazy.command(f"{kind} {code}")
    try:
        with pytest.raises(OSError, match=os.strerror(getattr(errno, code))):
            ELSEWHERE[what](lazy_queue)
    finally:
        lazy.command("fail-fsync off")
