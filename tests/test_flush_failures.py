"""Failed flushes are never hidden (issue 31, item 4).

A flush that fails before a message is visible leaves nothing behind and raises the
``OSError``; one that fails after messages became visible raises
:class:`vsqs.DurabilityError` naming exactly those, so a retry with the same dedup ids
adds nothing. The failures are forced by wrapping the ``_fs`` flush functions (the disk
that fails is simulated at the syscall boundary; the files are real). The power-loss
filesystem of ``tests/reliability/test_power_loss.py`` checks the same on a real mount.
"""

from __future__ import annotations

import errno
import io
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import vsqs
from vsqs import _fs

from .fixtures_core import patch_fs


def _failing(
    monkeypatch: pytest.MonkeyPatch, name: str, *, code: int = errno.EIO, after: int = 0
) -> list[int]:
    """Make ``_fs.<name>`` fail with *code* from its call number *after* (0: the first)."""
    real: Callable[..., Any] = getattr(_fs, name)
    calls = [0]

    def fail(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        if calls[0] > after:
            raise OSError(code, os.strerror(code))
        return real(*args, **kwargs)

    patch_fs(monkeypatch, name, fail)
    return calls


def _names(queue: vsqs.PlainQueue) -> list[str]:
    return sorted(n for n in os.listdir(queue.path) if not n.startswith("."))


@pytest.mark.parametrize("code", [errno.EIO, errno.ENOSPC])
def test_a_failed_body_flush_leaves_nothing_visible(
    q: vsqs.PlainQueue, monkeypatch: pytest.MonkeyPatch, code: int
) -> None:
    """publish, publish_stream: the body's fsync fails before the commit rename."""
    _failing(monkeypatch, "fsync", code=code)
    with pytest.raises(OSError, match=os.strerror(code)) as info:
        q.publish(b"body")
    assert not isinstance(info.value, vsqs.DurabilityError)
    with pytest.raises(OSError, match=os.strerror(code)):
        q.publish_stream(io.BytesIO(b"body"))
    assert _names(q) == []


@pytest.mark.parametrize("batch_key", [None, "job-1"])
def test_a_failed_batch_flush_leaves_nothing_visible(
    q: vsqs.PlainQueue, monkeypatch: pytest.MonkeyPatch, batch_key: str | None
) -> None:
    """publish_batch (with and without batch_dedup_id): the bodies' flush fails."""
    _failing(monkeypatch, "sync_files")
    with pytest.raises(OSError, match="Input/output error") as info:
        q.publish_batch([b"a", b"b", b"c"], batch_dedup_id=batch_key)
    assert not isinstance(info.value, vsqs.DurabilityError)
    assert _names(q) == []
    monkeypatch.undo()
    assert len(q.publish_batch([b"a", b"b", b"c"], batch_dedup_id=batch_key)) == 3


def test_a_failed_directory_flush_after_publish_names_the_message(
    q: vsqs.PlainQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    """publish: the directory fsync after the commit rename fails."""
    _failing(monkeypatch, "fsync_dir")
    with pytest.raises(vsqs.DurabilityError) as info:
        q.publish(b"plain")
    assert info.value.errno == errno.EIO
    assert _names(q) == info.value.ids
    with pytest.raises(vsqs.DurabilityError) as keyed:
        q.publish(b"keyed", dedup_id="k")
    monkeypatch.undo()
    assert q.publish(b"keyed", dedup_id="k") == keyed.value.ids[0]  # the retry adds nothing
    assert _names(q) == sorted(info.value.ids + keyed.value.ids)


@pytest.mark.parametrize("barrier", [True, False], ids=["syncfs", "fsync-each"])
def test_a_failed_flush_after_a_batch_names_every_visible_message(
    q: vsqs.PlainQueue, monkeypatch: pytest.MonkeyPatch, barrier: bool
) -> None:
    """publish_batch with dedup ids: the final flush (one syncfs where it is a barrier,
    else the directory fsync) fails; a retry with the same ids adds nothing."""
    if barrier and not _fs.syncfs_is_barrier(q.path):
        pytest.skip(f"syncfs is no barrier on {q.path}")
    patch_fs(monkeypatch, "syncfs_is_barrier", lambda _path: barrier)
    if barrier:
        _failing(monkeypatch, "sync_filesystem", after=1)  # the bodies' flush passes
    else:
        _failing(monkeypatch, "fsync_dir")
    bodies, keys = [b"a", b"b", b"c"], ["ka", "kb", "kc"]
    with pytest.raises(vsqs.DurabilityError) as info:
        q.publish_batch(bodies, dedup_ids=keys)
    assert _names(q) == sorted(info.value.ids)
    assert len(info.value.ids) == 3
    monkeypatch.undo()
    assert q.publish_batch(bodies, dedup_ids=keys) == info.value.ids
    assert _names(q) == sorted(info.value.ids)


def test_a_failed_flush_after_a_recorded_batch_names_it(
    q: vsqs.PlainQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    """publish_batch with batch_dedup_id: the directory fsync after the renames fails."""
    _failing(monkeypatch, "fsync_dir")
    with pytest.raises(vsqs.DurabilityError) as info:
        q.publish_batch([b"a", b"b"], batch_dedup_id="job")
    assert _names(q) == sorted(info.value.ids)
    monkeypatch.undo()
    assert q.publish_batch([b"a", b"b"], batch_dedup_id="job") == info.value.ids
    assert _names(q) == sorted(info.value.ids)


def test_a_failed_record_flush_leaves_nothing_visible_nor_recorded(
    q: vsqs.PlainQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    """publish_batch with batch_dedup_id: the record's directory flush fails before any
    message is visible: nothing is left that `clean` or a retry would publish."""
    real = _fs.fsync

    def fail_on_directories(fd: int, directory: str) -> None:
        if os.path.isdir(f"/proc/self/fd/{fd}"):
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        real(fd, directory)

    patch_fs(monkeypatch, "fsync", fail_on_directories)
    with pytest.raises(OSError, match="Input/output error") as info:
        q.publish_batch([b"a", b"b"], batch_dedup_id="job")
    assert not isinstance(info.value, vsqs.DurabilityError)
    monkeypatch.undo()
    q.clean()
    assert _names(q) == []
    assert len(q.publish_batch([b"a", b"b"], batch_dedup_id="job")) == 2
    assert len(_names(q)) == 2


def test_a_batch_that_fails_midway_names_the_messages_already_visible(
    q: vsqs.PlainQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    """publish_batch: the second commit rename fails; the first message is visible and
    not flushed, the rest is gone."""
    _failing(monkeypatch, "rename_noreplace", after=1)
    with pytest.raises(vsqs.DurabilityError) as info:
        q.publish_batch([b"a", b"b", b"c"])
    assert len(info.value.ids) == 1
    assert _names(q) == info.value.ids
    assert isinstance(info.value.__cause__, OSError)


def test_publish_file_names_the_message_when_a_flush_after_it_fails(
    q: vsqs.PlainQueue, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """publish_file: the directory fsync after the commit fails."""
    source = tmp_path / "in.bin"
    source.write_bytes(b"file body")
    _failing(monkeypatch, "fsync_dir")
    with pytest.raises(vsqs.DurabilityError) as info:
        q.publish_file(source)
    assert _names(q) == info.value.ids
    assert q.receive(timeout=0) is not None


def test_a_failed_fsync_is_never_retried(
    q: vsqs.PlainQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each flush is tried once: after a failure nothing flushes the same file again
    and reports success (fsyncgate)."""
    calls = _failing(monkeypatch, "fsync")
    with pytest.raises(OSError, match="Input/output error"):
        q.publish(b"x")
    assert calls == [1]


def test_a_process_that_flushed_on_the_fsync_threads_exits_quietly(tmp_path: Path) -> None:
    """A queue still alive at interpreter exit, after a batch flushed on the fsync
    threads (no syncfs barrier): no "Exception ignored" noise from its descriptors."""
    script = (
        "import sys, vsqs\n"
        "vsqs._fs.syncfs_is_barrier = lambda directory: False\n"
        "q = vsqs.PlainQueue(sys.argv[1])\n"
        "q.publish_batch([b'a', b'b', b'c'], attributes={'k': 'v'})\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "q")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (done.returncode, done.stderr) == (0, "")
