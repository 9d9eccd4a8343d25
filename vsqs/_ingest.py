"""Publishing bodies that are not in memory: an existing file, or a stream.

Both end like every publish: a complete ``<id>.new`` becomes ready in one no-replace
rename (``Queue._commit``). They differ only in how that ``.new`` comes to exist
(``Queue._stage``, the *create* arrow), which this module describes:

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
from collections.abc import Callable
from typing import IO, Any, Final

from . import _fs, _host
from ._errors import InvalidPayload

DEFAULT_CHUNK: Final = 1 << 20


def check_source(source: str) -> int:
    """The size of the regular file *source*; an error naming it if it is anything else."""
    info = _host.lstatus(source)  # FileNotFoundError passes through, naming the file
    if not stat.S_ISREG(info.st_mode):
        raise ValueError(f"{source!r} is not a regular file (symlinks are not followed)")
    return info.st_size


class Linked:
    """An existing regular file to publish under a second name: no byte is copied
    (immutable; a plain class, as a dataclass would compile its methods at every
    ``import vsqs``)."""

    __slots__ = ("path", "size")

    def __init__(self, path: str, size: int) -> None:
        self.path: Final = path
        self.size: Final = size

    @classmethod
    def of(cls, source: str) -> Linked:
        """*source*, checked: a regular file (never through a symlink), with its size."""
        return cls(source, check_source(source))


def cross_device(source: str, queue_path: str) -> OSError:
    """The error for a file that cannot be linked into the queue: another filesystem."""
    return OSError(
        errno.EXDEV,
        f"cannot move {source!r} into queue {queue_path!r}: they are on different "
        "filesystems (EXDEV), and publish_file never copies; copy it with "
        "publish_stream() instead",
        source,
        None,
        queue_path,
    )


def unlink_source(source: Linked, *, durable: bool) -> None:
    """Remove the original name of a file published by a link (the message keeps it)."""
    _fs.unlink(source.path)
    if durable:
        _fs.fsync_dir(os.path.dirname(os.path.abspath(source.path)))


def stream_writer(readable: IO[bytes] | Any, chunk_size: int) -> Callable[[int], int]:
    """A function that copies *readable* to a descriptor, chunk by chunk; returns the size.

    Memory use is one *chunk_size* buffer, whatever the payload size.
    """
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
        raise ValueError(f"chunk_size must be a positive int, not {chunk_size!r}")
    buffer = memoryview(bytearray(chunk_size))  # the only copy of the data we hold
    readinto = getattr(readable, "readinto", None)

    def copy(fd: int) -> int:
        size = 0
        while chunk := _next_chunk(readable, readinto, buffer):
            _fs.write_all(fd, chunk)
            size += len(chunk)
        return size

    return copy


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
