"""publish_file (move without copying) and publish_stream (bounded memory)."""

from __future__ import annotations

import errno
import io
import os
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

import vsqs
from vsqs.testing import ManualClock, assert_consistent

from ._lifecycle_workers import CHUNK, forkserver, stream_publisher
from .conftest import names

pytestmark = pytest.mark.usefixtures("fresh_ids")


def test_publish_file_moves_without_copying(q: vsqs.PlainQueue, qdir: Path, tmp_path: Path) -> None:
    """Same filesystem: the message is the very inode of the source, which is gone."""
    source = tmp_path / "payload.bin"
    source.write_bytes(b"x" * 100_000)
    inode = source.stat().st_ino
    message_id = q.publish_file(source, attributes={"name": "payload.bin"})
    assert not source.exists()
    assert names(qdir) == [message_id]
    assert (qdir / message_id).stat().st_ino == inode
    assert (qdir / message_id).stat().st_nlink == 1
    message = q.receive(timeout=0)
    assert message is not None
    assert (message.body, dict(message.attributes)) == (b"x" * 100_000, {"name": "payload.bin"})
    assert_consistent(q)


def test_publish_file_failure_leaves_the_source(
    q: vsqs.PlainQueue, qdir: Path, tmp_path: Path
) -> None:
    """A closed queue, bad attributes, a directory, a missing file: nothing changes."""
    source = tmp_path / "payload"
    source.write_bytes(b"data")
    with pytest.raises(vsqs.InvalidAttributes):
        q.publish_file(source, attributes={"k": 1})  # type: ignore[dict-item]
    with pytest.raises(ValueError, match="not a regular file"):
        q.publish_file(tmp_path)
    with pytest.raises(FileNotFoundError):
        q.publish_file(tmp_path / "missing")
    q.shutdown()
    with pytest.raises(vsqs.QueueClosed):
        q.publish_file(source)
    assert source.read_bytes() == b"data"
    assert names(qdir) == []


def test_publish_file_with_a_dedup_id(q: vsqs.PlainQueue, tmp_path: Path) -> None:
    """A duplicate file is consumed (removed) and the first id returned."""
    first, second = tmp_path / "a", tmp_path / "b"
    first.write_bytes(b"1")
    second.write_bytes(b"1")
    message_id = q.publish_file(first, dedup_id="file-1")
    assert q.publish_file(second, dedup_id="file-1") == message_id
    assert not second.exists()
    assert q.size() == 1


@pytest.fixture
def other_fs(tmp_path: Path) -> Iterator[Path]:
    """A directory on another filesystem than tmp_path: /dev/shm, or a tmpfs we mount."""
    shm = Path("/dev/shm")
    if shm.is_dir() and shm.stat().st_dev != tmp_path.stat().st_dev:
        path = Path(tempfile.mkdtemp(dir=shm))
        try:
            yield path
        finally:
            subprocess.run(["rm", "-rf", str(path)], check=True)
        return
    mount = tmp_path / "tmpfs"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(mount)],
        check=False,
        capture_output=True,
    )
    if done.returncode != 0:
        pytest.fail(
            "/dev/shm is on the same filesystem as the tests and a tmpfs could not be "
            f"mounted (needs root): {done.stderr.decode().strip()}"
        )
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=True)


def test_publish_file_across_filesystems_fails_clearly(
    q: vsqs.PlainQueue, qdir: Path, other_fs: Path
) -> None:
    """Another filesystem: an OSError with errno EXDEV that says so; no copy, source kept."""
    assert other_fs.stat().st_dev != qdir.stat().st_dev
    source = other_fs / "payload"
    source.write_bytes(b"far away")
    with pytest.raises(OSError, match=r"EXDEV.*publish_stream") as info:
        q.publish_file(source)
    assert info.value.errno == errno.EXDEV
    assert info.value.filename == str(source)
    assert source.read_bytes() == b"far away"
    assert names(qdir) == []
    with source.open("rb") as stream:  # the suggested way out works
        message_id = q.publish_stream(stream)
    assert (qdir / message_id).read_bytes() == b"far away"


def test_publish_stream_round_trip(qdir: Path, clock: ManualClock) -> None:
    """Chunked copy; attributes, delay and dedup as publish; text streams refused."""
    q = vsqs.PlainQueue(qdir, clock=clock)
    body = os.urandom(3 * CHUNK + 17)
    message_id = q.publish_stream(io.BytesIO(body), attributes={"a": "b"}, chunk_size=CHUNK)
    assert q.publish_stream(io.BytesIO(b"dup"), dedup_id="d") == q.publish_stream(
        io.BytesIO(b"dup2"), dedup_id="d"
    )
    q.publish_stream(io.BytesIO(b"later"), delay=10)

    class ReadOnly:  # no readinto: read(n) is used
        def __init__(self) -> None:
            self.parts = [b"ab", b"cd", b""]

        def read(self, size: int) -> bytes:
            return self.parts.pop(0)

    q.publish_stream(ReadOnly())
    got = [q.receive(timeout=0) for _ in range(3)]
    assert [m.body for m in got if m is not None] == [body, b"dup", b"abcd"]
    assert got[0] is not None and got[0].id == message_id and got[0].attributes == {"a": "b"}
    with pytest.raises(vsqs.InvalidPayload):
        q.publish_stream(io.StringIO("text"))
    with pytest.raises(ValueError, match="chunk_size"):
        q.publish_stream(io.BytesIO(b""), chunk_size=0)
    clock.advance(10)
    last = q.receive(timeout=0)
    assert last is not None and last.body == b"later"
    assert [n for n in names(qdir) if n.endswith(".new")] == []


def test_publish_stream_memory_is_bounded(tmp_path: Path) -> None:
    """300 MB through publish_stream in a child process: its peak RSS grows by far less
    than the payload (one 1 MiB chunk plus noise)."""
    qdir, out = tmp_path / "q", tmp_path / "out"
    size = 300 * 1024 * 1024
    proc = forkserver().Process(target=stream_publisher, args=(str(qdir), size, str(out)))
    proc.start()
    proc.join(240)
    assert proc.exitcode == 0
    message_id, growth_kib = out.read_text().split()
    assert int(growth_kib) < 32 * 1024, f"peak RSS grew by {growth_kib} KiB"
    path = qdir / message_id
    assert path.stat().st_size == size
    with path.open("rb") as handle:
        assert handle.read(CHUNK) == bytes(range(256)) * (CHUNK // 256)
    path.unlink()
