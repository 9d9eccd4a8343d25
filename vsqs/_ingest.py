"""Publishing bodies that are not in memory: an existing file, or a stream.

Both end like every publish: a complete ``<id>.new`` becomes ready in one no-replace
rename (see ``_queue``). They differ only in how that ``.new`` comes to exist:

* :func:`publish_file` gives the caller's file a second name, ``<id>.new``, with a hard
  link (no byte is copied), then removes the original name once the message is
  published. Across filesystems a link is impossible (``EXDEV``) and vsqs refuses
  rather than copy behind the caller's back. The source is never touched on failure.
* :func:`publish_stream` copies a file object in fixed-size chunks into ``<id>.new``,
  so a payload of any size costs one chunk of memory.
"""

from __future__ import annotations

import errno
import os
import stat
from typing import IO, TYPE_CHECKING, Any, Final

from . import _fs
from ._errors import InvalidPayload

if TYPE_CHECKING:
    from ._queue import Queue

DEFAULT_CHUNK: Final = 1 << 20


def publish_file(
    queue: Queue, source: str, *, attrs: dict[str, str], delay_us: int, dedup_id: str | None
) -> str:
    """Move the regular file *source* into *queue* as a message; return its id."""
    info = os.lstat(source)  # FileNotFoundError passes through, naming the file
    if not stat.S_ISREG(info.st_mode):
        raise ValueError(f"{source!r} is not a regular file (symlinks are not followed)")
    queue._check_open()  # fail before touching anything
    while True:
        new = queue._new_id() + ".new"
        try:
            _fs.link_noreplace(source, queue._file(new))
        except FileExistsError:
            continue  # RACE: another process drew the same id in the same tick
        except OSError as exc:
            if exc.errno == errno.EXDEV:
                raise OSError(
                    errno.EXDEV,
                    f"cannot move {source!r} into queue {queue.path!r}: they are on different "
                    "filesystems (EXDEV), and publish_file never copies; copy it with "
                    "publish_stream() instead",
                    source,
                    None,
                    queue.path,
                ) from exc
            raise
        break
    path = queue._file(new)
    try:
        if queue._file_mode is not None:
            _fs.chmod(path, queue._file_mode)
        if queue.durable:
            fd = _fs.open_regular(path)
            try:
                _fs.fsync(fd)
            finally:
                _fs.close(fd)
    except BaseException:
        _fs.unlink(path)  # only our second name: the source keeps the file
        raise
    # On failure the commit removes `<id>.new`, our link, and nothing else.
    message_id = _commit(queue, new, info.st_size, attrs=attrs, delay_us=delay_us, key=dedup_id)
    # Published: now drop the original name. A crash before this leaves the file in both
    # places, one inode (at least once, never lost).
    _fs.unlink(source)
    if queue.durable:
        _fs.fsync_dir(os.path.dirname(os.path.abspath(source)))
    return message_id


def publish_stream(
    queue: Queue,
    readable: IO[bytes] | Any,
    *,
    attrs: dict[str, str],
    delay_us: int,
    dedup_id: str | None,
    chunk_size: int,
) -> str:
    """Copy *readable* into *queue* as one message, chunk by chunk; return its id."""
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
        raise ValueError(f"chunk_size must be a positive int, not {chunk_size!r}")
    queue._check_open()
    new, size = _stage_stream(queue, readable, chunk_size)
    return _commit(queue, new, size, attrs=attrs, delay_us=delay_us, key=dedup_id)


def _stage_stream(queue: Queue, readable: Any, chunk_size: int) -> tuple[str, int]:
    buffer = memoryview(bytearray(chunk_size))  # the only copy of the data we hold
    readinto = getattr(readable, "readinto", None)

    def copy(fd: int) -> int:
        size = 0
        while chunk := _next_chunk(readable, readinto, buffer):
            _fs.write_all(fd, chunk)
            size += len(chunk)
        return size

    return queue._stage(copy, sync=queue.durable)


def _next_chunk(readable: Any, readinto: Any, buffer: memoryview) -> memoryview:
    """The next chunk of *readable* (empty at the end), in *buffer* when it can."""
    if readinto is not None:
        count = readinto(buffer)
        if count is None:
            raise ValueError("the stream is non-blocking and has no data now")
        return buffer[:count]
    data = readable.read(len(buffer))
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise InvalidPayload(type(data).__name__)
    return memoryview(data)


def _commit(
    queue: Queue, new: str, size: int, *, attrs: dict[str, str], delay_us: int, key: str | None
) -> str:
    if key is None:
        message_id = queue._commit(new, size, attrs, delay_us)
    else:
        message_id = queue._dedup.commit_staged(new, size, attrs, delay_us, key)
    if queue.durable:
        _fs.fsync_dir(queue.path)
    return message_id
