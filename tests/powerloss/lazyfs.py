"""A FUSE filesystem that loses what was not synced when the power fails (LazyFS's model).

A pass-through over a backing directory, except for file data: what a process writes
stays in this daemon's memory until that file is ``fsync``ed (or ``fdatasync``ed), as
in a page cache that is never written back on its own. Directory operations (create,
rename, link, unlink, mkdir) go through to the backing directory at once, as on a
journaling filesystem that commits them in order (LazyFS does the same). So after a
power failure the backing directory holds every directory entry that was made, and of
each file only the data that was synced: a file written and never synced comes back
empty (or with its last synced content).

``syncfs`` never reaches a FUSE daemon, so only ``fsync``/``fdatasync`` save data here,
as on sshfs, JuiceFS, ceph-fuse and every other FUSE filesystem.

Commands, written to ``<mountpoint>/.lazyfs`` (one write, done when it returns):

* ``crash``: the power fails. Unsynced data is dropped, and every later operation
  fails with ``EIO`` (the machine is off) until the mount is gone.
* ``drop``: drop the unsynced data and go on.
* ``fail-fsync EIO`` / ``fail-fsync ENOSPC``: every later ``fsync``/``fsyncdir`` fails
  with that error, and a failed file flush loses the file's unsynced data (as Linux
  does after a failed writeback: a retried ``fsync`` then succeeds without the data).
* ``fail-fsyncdir EIO`` (or ``ENOSPC``): only directory flushes fail, so a file
  flushed before its rename is saved and the directory flush after it fails.
* ``fail-fsync off``: flushes succeed again.

Run ``python -m tests.powerloss.lazyfs BACKING MOUNTPOINT``; it serves in the foreground,
one request at a time, until unmounted (``fusermount3 -u``). Mounted with ``direct_io``
and no attribute caching, so the kernel keeps no copy of the data that this daemon
could drop behind its back.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import functools
import os
import sys
from collections.abc import Callable
from typing import Any, Final, TypeVar

import mfusepy

CONTROL: Final = "/.lazyfs"
_CONTROL_FH: Final = (1 << 62) + 1  # no backing descriptor is ever that large
_RENAME_FLAGS: Final = 1 | 2  # RENAME_NOREPLACE | RENAME_EXCHANGE, passed on as they are
_AT_FDCWD: Final = -100
_libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
_STAT_FIELDS: Final = ("st_mode", "st_nlink", "st_uid", "st_gid", "st_size", "st_rdev")

F = TypeVar("F", bound=Callable[..., Any])


def _alive(method: F) -> F:
    """After a ``crash`` every operation fails: the machine is off."""

    @functools.wraps(method)
    def checked(self: LazyFS, *args: Any) -> Any:
        if self.dead:
            raise mfusepy.FuseOSError(errno.EIO)
        return method(self, *args)

    return checked  # type: ignore[return-value]


class LazyFS(mfusepy.Operations):  # type: ignore[misc]
    """The operations; see the module docstring."""

    use_ns = True

    def __init__(self, backing: str) -> None:
        self.root = os.path.realpath(backing)
        # Whole content of every file with unsynced writes, by backing (device, inode):
        # follows the file through renames and links, as a page cache does.
        self.dirty: dict[tuple[int, int], bytearray] = {}
        self.fail = 0  # errno of every flush, or 0
        self.fail_dirs = 0  # errno of every directory flush, or 0
        self.dead = False

    def _path(self, path: str) -> str:
        return self.root + path

    @staticmethod
    def _key(info: os.stat_result) -> tuple[int, int]:
        return info.st_dev, info.st_ino

    def _content(self, fd: int) -> bytearray:
        """The file's current content (for a write): cached, or read from the backing."""
        key = self._key(os.fstat(fd))
        found = self.dirty.get(key)
        if found is None:
            found = self.dirty[key] = bytearray(os.pread(fd, os.fstat(fd).st_size, 0))
        return found

    # -- the control file ---------------------------------------------------------------

    def _command(self, text: str) -> None:
        words = text.split()
        if words == ["crash"]:
            self.dirty.clear()
            self.dead = True
        elif words == ["drop"]:
            self.dirty.clear()
        elif len(words) == 2 and words[0] == "fail-fsync":
            self.fail = self.fail_dirs = 0 if words[1] == "off" else getattr(errno, words[1])
        elif len(words) == 2 and words[0] == "fail-fsyncdir":
            self.fail_dirs = getattr(errno, words[1])
        else:
            raise mfusepy.FuseOSError(errno.EINVAL)

    # -- attributes and directories ---------------------------------------------------------

    @_alive
    def getattr(self, path: str, fh: int | None = None) -> dict[str, int]:
        if path == CONTROL:
            return {"st_mode": 0o100666, "st_nlink": 1, "st_size": 0}
        info = os.lstat(self._path(path))
        found: dict[str, int] = {name: getattr(info, name) for name in _STAT_FIELDS}
        found |= {"st_atime": info.st_atime_ns, "st_mtime": info.st_mtime_ns}
        found["st_ctime"] = info.st_ctime_ns
        content = self.dirty.get(self._key(info))
        if content is not None:
            found["st_size"] = len(content)
        return found

    @_alive
    def access(self, path: str, amode: int) -> int:
        if path != CONTROL and not os.access(self._path(path), amode, follow_symlinks=False):
            raise mfusepy.FuseOSError(errno.EACCES)
        return 0

    @_alive
    def readdir(self, path: str, fh: int) -> list[str]:
        return [".", "..", *os.listdir(self._path(path))]

    @_alive
    def fsyncdir(self, path: str, datasync: int, fh: int) -> int:
        if self.fail_dirs:
            raise mfusepy.FuseOSError(self.fail_dirs)
        fd = os.open(self._path(path), os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        return 0

    @_alive
    def mkdir(self, path: str, mode: int) -> int:
        os.mkdir(self._path(path), mode)
        return 0

    @_alive
    def rmdir(self, path: str) -> int:
        os.rmdir(self._path(path))
        return 0

    @_alive
    def unlink(self, path: str) -> int:
        os.unlink(self._path(path))
        return 0

    @_alive
    def rename(self, old: str, new: str, flags: int = 0) -> int:
        if flags & ~_RENAME_FLAGS:
            raise mfusepy.FuseOSError(errno.EINVAL)
        src, dst = os.fsencode(self._path(old)), os.fsencode(self._path(new))
        if _libc.renameat2(_AT_FDCWD, src, _AT_FDCWD, dst, flags) != 0:
            raise mfusepy.FuseOSError(ctypes.get_errno())
        return 0

    @_alive
    def link(self, target: str, source: str) -> int:
        os.link(self._path(source), self._path(target), follow_symlinks=False)
        return 0

    @_alive
    def symlink(self, target: str, source: str) -> int:
        os.symlink(source, self._path(target))
        return 0

    @_alive
    def readlink(self, path: str) -> str:
        return os.readlink(self._path(path))

    @_alive
    def chmod(self, path: str, mode: int) -> int:
        os.chmod(self._path(path), mode, follow_symlinks=False)
        return 0

    @_alive
    def chown(self, path: str, uid: int, gid: int) -> int:
        os.chown(self._path(path), uid, gid, follow_symlinks=False)
        return 0

    @_alive
    def utimens(self, path: str, times: tuple[int, int] | None = None) -> int:
        if times is None:
            os.utime(self._path(path), follow_symlinks=False)
        else:
            os.utime(self._path(path), ns=times, follow_symlinks=False)
        return 0

    @_alive
    def statfs(self, path: str) -> dict[str, int]:
        info = os.statvfs(self._path(path))
        names = ("f_bsize", "f_frsize", "f_blocks", "f_bfree", "f_bavail", "f_files", "f_ffree")
        return {name: getattr(info, name) for name in (*names, "f_favail", "f_namemax")}

    # -- files: data stays here until fsync ---------------------------------------------

    @_alive
    def create(self, path: str, mode: int, flags: int = 0) -> int:
        # The entry is made at once (a directory operation); its data comes by write().
        return os.open(self._path(path), os.O_RDWR | os.O_CREAT | (flags & os.O_EXCL), mode)

    @_alive
    def open(self, path: str, flags: int) -> int:
        if path == CONTROL:
            return _CONTROL_FH
        try:
            return os.open(self._path(path), os.O_RDWR | os.O_NOFOLLOW)
        except IsADirectoryError:
            raise
        except OSError:
            return os.open(self._path(path), os.O_RDONLY | os.O_NOFOLLOW)

    @_alive
    def read(self, path: str, size: int, offset: int, fh: int) -> bytes:
        if fh == _CONTROL_FH:
            return b""
        content = self.dirty.get(self._key(os.fstat(fh)))
        if content is None:
            return os.pread(fh, size, offset)
        return bytes(content[offset : offset + size])

    @_alive
    def write(self, path: str, data: bytes, offset: int, fh: int) -> int:
        if fh == _CONTROL_FH:
            self._command(data.decode("ascii", "replace"))
            return len(data)
        content = self._content(fh)
        if offset > len(content):
            content.extend(bytes(offset - len(content)))
        content[offset : offset + len(data)] = data
        return len(data)

    @_alive
    def truncate(self, path: str, length: int, fh: int | None = None) -> int:
        if path == CONTROL:
            return 0
        fd = os.open(self._path(path), os.O_RDONLY) if fh is None else fh
        try:
            content = self._content(fd)
            del content[length:]
            content.extend(bytes(length - len(content)))
        finally:
            if fh is None:
                os.close(fd)
        return 0

    @_alive
    def fsync(self, path: str, datasync: int, fh: int) -> int:
        if fh == _CONTROL_FH:
            return 0
        key = self._key(os.fstat(fh))
        if self.fail:
            self.dirty.pop(key, None)  # a failed writeback: the pages are gone
            raise mfusepy.FuseOSError(self.fail)
        content = self.dirty.pop(key, None)
        if content is not None:
            os.ftruncate(fh, len(content))
            os.pwrite(fh, bytes(content), 0)
        os.fsync(fh)
        return 0

    def flush(self, path: str, fh: int) -> int:
        return 0  # close() saves nothing: only fsync does

    def release(self, path: str, fh: int) -> int:
        if fh != _CONTROL_FH:
            os.close(fh)
        return 0


class _FUSE(mfusepy.FUSE):  # type: ignore[misc]
    """mfusepy drops rename's flags (RENAME_NOREPLACE would replace): pass them on."""

    def rename_fuse_3(self, old: bytes, new: bytes, flags: int) -> int:
        decode = self.encoding, self.errors
        result: int = self.operations.rename(old.decode(*decode), new.decode(*decode), flags)
        return result


def main(argv: list[str]) -> None:
    """Serve *argv* ``[BACKING, MOUNTPOINT]`` until unmounted."""
    backing, mountpoint = argv
    _FUSE(
        LazyFS(backing),
        mountpoint,
        foreground=True,
        nothreads=True,
        direct_io=True,
        hard_remove=True,
        attr_timeout=0,
        entry_timeout=0,
        negative_timeout=0,
        fsname="lazyfs",
        subtype="lazyfs",
    )


if __name__ == "__main__":
    main(sys.argv[1:])
