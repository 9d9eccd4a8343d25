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

With ``--roll-back-directories`` it goes beyond LazyFS: a crash also undoes, newest
first, every directory operation (create, mkdir, link, unlink, rmdir, and a rename as a
unit) that is not committed: one is committed once each directory it changed has been
fsynced after it (POSIX's rule; a journaling filesystem often commits more). An
unlinked or replaced file is kept (hard-linked) in ``<backing>.stash`` to be restored.

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

Run ``python -m tests.powerloss.lazyfs [--roll-back-directories] BACKING MOUNTPOINT``;
it serves in the foreground,
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
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
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


@dataclass
class _DirectoryOp:
    """A directory operation made at *seq*, committed once every one of *dirs* (backing
    paths) was fsynced after it; *undo* reverts it."""

    seq: int
    dirs: tuple[str, ...]
    undo: Callable[[], None]


class LazyFS(mfusepy.Operations):  # type: ignore[misc]
    """The operations; see the module docstring."""

    use_ns = True

    def __init__(self, backing: str, *, roll_back_directories: bool = False) -> None:
        self.root = os.path.realpath(backing)
        self.roll_back = roll_back_directories
        self.ops: list[_DirectoryOp] = []
        self.seq = 0
        self.synced: dict[str, int] = {}  # directory -> seq of its last fsync
        self.stash = self.root + ".stash"
        if roll_back_directories:
            os.makedirs(self.stash, exist_ok=True)
        # Whole content of every file with unsynced writes, by backing (device, inode):
        # follows the file through renames and links, as a page cache does.
        self.dirty: dict[tuple[int, int], bytearray] = {}
        self.fail = 0  # errno of every flush, or 0
        self.fail_dirs = 0  # errno of every directory flush, or 0
        self.dead = False

    def _path(self, path: str) -> str:
        return self.root + path

    # -- directory operations, undone by a crash unless committed ----------------------

    def _journal(self, undo: Callable[[], None], *paths: str) -> None:
        """Record a directory operation on the entries *paths* (backing paths)."""
        if self.roll_back:
            self.seq += 1
            dirs = tuple(dict.fromkeys(os.path.dirname(path) for path in paths))
            self.ops.append(_DirectoryOp(self.seq, dirs, undo))

    def _committed(self, op: _DirectoryOp) -> bool:
        return all(self.synced.get(directory, 0) > op.seq for directory in op.dirs)

    def _keep(self, full: str) -> str | None:
        """Hard-link the file at *full* into the stash (to restore it); ``None`` if
        there is nothing there, or a directory."""
        if not self.roll_back:
            return None
        try:
            if os.path.isdir(full) and not os.path.islink(full):
                return None
            kept = f"{self.stash}/{self.seq}-{os.urandom(4).hex()}"
            os.link(full, kept, follow_symlinks=False)
        except FileNotFoundError:
            return None
        return kept

    def _roll_back(self) -> None:
        for op in reversed(self.ops):
            if not self._committed(op):
                try:
                    op.undo()
                except OSError as exc:  # the undo of a later op made it moot
                    print(f"lazyfs: undo failed: {exc}", file=sys.stderr)
        self.ops.clear()

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
            self._roll_back()
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
        full = self._path(path).rstrip("/") or "/"
        fd = os.open(full, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        self.seq += 1
        self.synced[full] = self.seq
        if len(self.ops) > 4096:  # forget what can no longer be undone
            self.ops = [op for op in self.ops if not self._committed(op)]
        return 0

    @_alive
    def mkdir(self, path: str, mode: int) -> int:
        full = self._path(path)
        os.mkdir(full, mode)
        self._journal(lambda: shutil.rmtree(full), full)
        return 0

    @_alive
    def rmdir(self, path: str) -> int:
        full = self._path(path)
        mode = os.lstat(full).st_mode & 0o7777
        os.rmdir(full)
        self._journal(lambda: os.mkdir(full, mode), full)
        return 0

    @_alive
    def unlink(self, path: str) -> int:
        full = self._path(path)
        kept = self._keep(full)
        os.unlink(full)
        if kept is not None:
            self._journal(lambda: os.rename(kept, full), full)
        return 0

    @_alive
    def rename(self, old: str, new: str, flags: int = 0) -> int:
        if flags & ~_RENAME_FLAGS:
            raise mfusepy.FuseOSError(errno.EINVAL)
        src, dst = self._path(old), self._path(new)
        replaced = None if flags else self._keep(dst)
        if _libc.renameat2(_AT_FDCWD, os.fsencode(src), _AT_FDCWD, os.fsencode(dst), flags):
            code = ctypes.get_errno()
            if replaced is not None:
                os.unlink(replaced)
            raise mfusepy.FuseOSError(code)

        def undo() -> None:
            if flags & 2:  # RENAME_EXCHANGE: exchange them back
                _libc.renameat2(_AT_FDCWD, os.fsencode(dst), _AT_FDCWD, os.fsencode(src), 2)
                return
            os.rename(dst, src)
            if replaced is not None:
                os.rename(replaced, dst)

        self._journal(undo, src, dst)
        return 0

    @_alive
    def link(self, target: str, source: str) -> int:
        full = self._path(target)
        os.link(self._path(source), full, follow_symlinks=False)
        self._journal(lambda: os.unlink(full), full)
        return 0

    @_alive
    def symlink(self, target: str, source: str) -> int:
        full = self._path(target)
        os.symlink(source, full)
        self._journal(lambda: os.unlink(full), full)
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
        full = self._path(path)
        existed = os.path.lexists(full)
        fd = os.open(full, os.O_RDWR | os.O_CREAT | (flags & os.O_EXCL), mode)
        if not existed:
            # A new inode may reuse the number of a removed file whose unsynced data is
            # still cached here: that is not this file's.
            self.dirty.pop(self._key(os.fstat(fd)), None)
            self._journal(lambda: os.unlink(full), full)
        return fd

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
    """Serve *argv* ``[--roll-back-directories] BACKING MOUNTPOINT`` until unmounted."""
    roll_back = "--roll-back-directories" in argv
    backing, mountpoint = [arg for arg in argv if not arg.startswith("--")]
    _FUSE(
        LazyFS(backing, roll_back_directories=roll_back),
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
