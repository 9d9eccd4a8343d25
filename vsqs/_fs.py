"""Every system call vsqs makes on files, and every platform difference.

The state machine in ``_queue`` decides *what* to do; this module only does it: the
crash tests have one place to patch (kill between any two calls), and the policy code
no ``errno`` plumbing. Only :mod:`vsqs._host` (other files) and :mod:`vsqs._inotify`
(waiting) make system calls beside it. Guarantees the rest of vsqs relies on:

* :func:`create_exclusive` never opens an existing file (``O_EXCL``; an existing name is
  :class:`FileExistsError` on every filesystem, sshfs too), never follows a symlink.
* :func:`rename_noreplace` and :func:`link_noreplace` never replace an existing name;
  they raise :class:`FileExistsError` instead.
* :func:`read_regular` reads only regular files, never through a symlink, never
  blocking on a FIFO or device that someone planted in the queue directory.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import math
import os
import stat
import sys
from collections.abc import Callable
from typing import Final

from . import _host, _libc

# The flushes live in _flush; callers (and the kill-point tests) reach them here.
from ._flush import *  # noqa: F403
from ._flush import flush_made, in_memory, missing_dirs

_O_NOFOLLOW: Final = getattr(os, "O_NOFOLLOW", 0)
_O_CLOEXEC: Final = getattr(os, "O_CLOEXEC", 0)
_O_NONBLOCK: Final = getattr(os, "O_NONBLOCK", 0)
_O_DIRECTORY: Final = getattr(os, "O_DIRECTORY", 0)
_CREATE_FLAGS: Final = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_NOFOLLOW | _O_CLOEXEC
# O_NONBLOCK: opening a FIFO planted under a message name must not hang the consumer.
_READ_FLAGS: Final = os.O_RDONLY | _O_NOFOLLOW | _O_CLOEXEC | _O_NONBLOCK

_S_IFMT: Final = stat.S_IFMT(0o777777)
_S_IFREG: Final = stat.S_IFREG
_RENAME_NOREPLACE: Final = 1  # linux/fs.h
_RENAME_EXCL: Final = 0x4  # macOS sys/stdio.h
_AT_FDCWD: Final = -100

_FS_ENCODING: Final = sys.getfilesystemencoding()
_COPY_CHUNK: Final = 1 << 20

_TRIES: Final = 3  # of a create or a link failing with EPERM on a free name (see _raced)


def write_all(fd: int, data: bytes | memoryview) -> None:
    """Write every byte of *data*, looping on short writes (signals, pipes, full quotas)."""
    written = os.write(fd, data)
    if written < len(data):
        rest = memoryview(data)[written:]
        while rest:
            rest = rest[os.write(fd, rest) :]


def fchmod(fd: int, mode: int) -> None:
    """Set the permission bits of an open file, regardless of the process umask."""
    os.fchmod(fd, mode)


close: Final = os.close  # itself, not a call in front of it: twice per message
"""Close a file descriptor."""


def rename_noreplace(src: str, dst: str, dir_fd: int = _AT_FDCWD) -> None:
    """Rename *src* to *dst* (relative to *dir_fd*, if given) atomically unless *dst* exists.

    :class:`FileExistsError` if *dst* exists, :class:`FileNotFoundError` if *src* does
    not. Without an atomic no-replace rename (NFS, sshfs) it links then unlinks: never
    replacing; a crash between leaves two names on one inode, which the state machine
    repairs.
    """
    renameat2 = _libc.renameat2()
    if renameat2 is not None:
        if not renameat2(
            dir_fd,
            src.encode(_FS_ENCODING, "surrogateescape"),
            dir_fd,
            dst.encode(_FS_ENCODING, "surrogateescape"),
            _RENAME_NOREPLACE,
        ):
            return
        code = _libc.errno()
        if code not in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP):
            raise OSError(code, os.strerror(code), src, None, dst)
    elif (renamex_np := _libc.renamex_np()) is not None and dir_fd == _AT_FDCWD:  # pragma: no cover
        if not renamex_np(os.fsencode(src), os.fsencode(dst), _RENAME_EXCL):
            return
        code = _libc.errno()
        if code not in (errno.EINVAL, errno.ENOTSUP):
            raise OSError(code, os.strerror(code), src, None, dst)
    _link_then_unlink(src, dst, None if dir_fd == _AT_FDCWD else dir_fd)


# rename_noreplace_at calls this name, bound once: a test that stands in for the path
# form (rename_noreplace, patched by crash tests) leaves the descriptor form alone.
_rename_noreplace: Final = rename_noreplace


def _link_then_unlink(src: str, dst: str, dir_fd: int | None) -> None:
    """The no-replace rename where the filesystem has none (NFS, sshfs, SMB). Of peers
    moving one *src* at once, on any hosts, exactly one succeeds: the one whose
    ``unlink`` removed *src*; the others withdraw their link and raise
    :class:`FileNotFoundError`, as with an atomic rename. The outcome is read from the
    filesystem (is *src* still there, did our unlink remove it), not from an errno alone.
    """
    try:
        link_noreplace(src, dst, dir_fd)
    except FileNotFoundError:
        # RACE: another host took *dst* (claimed the message we just published) between
        # the server making our link and the client's lookup of the new name (sshfs and
        # NFS look it up). ENOENT from link(2) means "no source", so a source still there
        # says the link was made (link counts and inodes cannot tell: sshfs says 1 and
        # numbers each name apart) if it cannot have left and come back meanwhile: a
        # `.new`, a lease or a hold can't; a ready name (no dot) can, so it needs *dst*.
        ready = "." not in os.path.basename(src)
        if not exists_at(src, dir_fd) or (ready and not exists_at(dst, dir_fd)):
            raise  # we made nothing (or, for a ready name, cannot tell: at least once)
    try:
        os.unlink(src, dir_fd=dir_fd)
    except FileNotFoundError:
        # RACE: a peer on another host linked the same source to its own name and removed
        # the source first: it won. Withdraw our name so that the message is held once.
        with contextlib.suppress(FileNotFoundError):
            os.unlink(dst, dir_fd=dir_fd)
        raise FileNotFoundError(errno.ENOENT, "moved by another process meanwhile", src) from None


def link_noreplace(src: str, dst: str, dir_fd: int | None = None, _tries: int = _TRIES) -> None:
    """Give the inode at *src* a second name *dst* (in *dir_fd*, if given), atomically:
    :class:`FileExistsError` if *dst* exists; sshfs's EPERM is read by :func:`_raced`."""
    try:
        os.link(src, dst, src_dir_fd=dir_fd, dst_dir_fd=dir_fd, follow_symlinks=False)
    except PermissionError as exc:
        if not _raced(exc, dst, dir_fd, _tries - 1):
            raise
        # RACE: another host linked *dst* meanwhile; it was claimed or removed since
        link_noreplace(src, dst, dir_fd, _tries - 1)


def unlink(path: str) -> bool:
    """Remove *path*; ``False`` if it was already gone."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    return True


def read_regular(path: str) -> bytes:
    """Read a whole regular file, never through a symlink nor blocking on a FIFO: ``EINVAL``
    if the name holds something else, :class:`FileNotFoundError` if it vanished."""
    return read_message(path)[0]


def read_message(
    path: str, dir_fd: int | None = None, limit: int | None = None
) -> tuple[bytes, os.stat_result]:
    """Read a message file (as :func:`read_regular`; relative to *dir_fd*, if given): its
    body and status (for :func:`vsqs._host.stable_inode`). Over *limit* bytes: EFBIG."""
    # Without a dir_fd keyword when there is none: the receive path's read, a tenth cheaper.
    fd = os.open(path, _READ_FLAGS) if dir_fd is None else os.open(path, _READ_FLAGS, dir_fd=dir_fd)
    try:
        return read_opened(fd, path, limit)
    finally:
        os.close(fd)  # ours: opened above, closed here only


def read_opened(fd: int, path: str, limit: int | None = None) -> tuple[bytes, os.stat_result]:
    """Read the file just opened as *fd* (*path* in errors) as :func:`read_message` does."""
    info = os.fstat(fd)  # the one check that the name holds a regular file: keep it
    if info.st_mode & _S_IFMT != _S_IFREG:
        raise OSError(errno.EINVAL, "not a regular file", path)
    size = info.st_size
    if limit is not None and size > limit:
        raise OSError(errno.EFBIG, f"too large ({size} bytes, at most {limit} read)", path)
    try:
        first = os.read(fd, size) if size else b""
        if len(first) == size:
            return first, info
        cap = sys.maxsize if limit is None else limit + 1
        chunks, got = [first], len(first)
        # A short read (NFS, signals): go on to EOF, never past one byte over the limit.
        while got < cap and (chunk := os.read(fd, min(_COPY_CHUNK, cap - got))):
            chunks.append(chunk)  # (a file grown past the limit meanwhile reads as garbage)
            got += len(chunk)
    except OSError as exc:  # an EBADF of a closed descriptor (a double close) stays one
        try:
            if exc.errno == errno.EBADF:
                os.fstat(fd)
        except FileNotFoundError:  # RACE: another host removed it (JuiceFS: EBADF, ENOENT)
            raise FileNotFoundError(errno.ENOENT, "removed by another host", path) from None
        raise
    return b"".join(chunks), info


# -- relative to a directory descriptor, never through a symlink ----------------------
#
# Everything under ``.vsqs/`` is reached from a descriptor of its directory, opened with
# O_NOFOLLOW | O_DIRECTORY from the queue's own descriptor: a symlink planted anywhere
# under ``.vsqs`` is never followed, so nothing outside the queue is ever touched.

_DIR_FLAGS: Final = os.O_RDONLY | _O_DIRECTORY | _O_NOFOLLOW | _O_CLOEXEC


def open_queue_dir(path: str) -> int:
    """Open a queue directory (its own path may be a symlink the user chose)."""
    return os.open(path, os.O_RDONLY | _O_DIRECTORY | _O_CLOEXEC)


def open_dir(name: str, dir_fd: int | None = None) -> int:
    """Open the directory *name* (relative to *dir_fd*) without following a symlink:
    :class:`NotADirectoryError` (or ``ELOOP``) for anything else, ``ENOENT`` if absent."""
    return os.open(name, _DIR_FLAGS, dir_fd=dir_fd)


def make_dir_at(name: str, mode: int, dir_fd: int, *, flush_in: str | None = None) -> bool:
    """Create the directory *name* in *dir_fd*; ``False`` if the name exists already.
    *flush_in* (the path of *dir_fd*): flush it after, so that the name survives (not in memory)."""
    try:
        os.mkdir(name, mode, dir_fd=dir_fd)
    except FileExistsError:
        return False
    if flush_in is not None and not in_memory(flush_in):
        os.fsync(dir_fd)
    return True


def fchmod_dir_at(name: str, mode: int, dir_fd: int) -> None:
    """Set the mode of the directory *name* in *dir_fd* (opened without following),
    keeping a set-group-id bit it inherited: how a shared queue keeps its group."""
    fd = open_dir(name, dir_fd)
    try:
        os.fchmod(fd, mode | (os.fstat(fd).st_mode & stat.S_ISGID))
    finally:
        os.close(fd)


def create_at(name: str, mode: int = 0o666, dir_fd: int | None = None, _tries: int = _TRIES) -> int:
    """Create *name* (in *dir_fd*, if given) atomically, on any hosts (``O_EXCL``): a
    write-only fd; ``FileExistsError`` if taken (sshfs's EPERM: read by :func:`_raced`)."""
    try:
        return os.open(name, _CREATE_FLAGS, mode, dir_fd=dir_fd)
    except BaseException as exc:
        if isinstance(exc, PermissionError) and _raced(exc, name, dir_fd, _tries - 1):
            # RACE: another host made *name* meanwhile; it was renamed or removed since
            return create_at(name, mode, dir_fd, _tries - 1)
        if not isinstance(exc, OSError):
            # Ctrl-C raised as the open returned: the file is ours (O_EXCL), its fd lost, so
            # no caller could remove it. RACE: after an EINTR instead (no local filesystem)
            # it may be another process's same-microsecond name: that publish fails loudly.
            with contextlib.suppress(OSError):
                os.unlink(name, dir_fd=dir_fd)
        raise


create_exclusive: Final = create_at  # itself, not a call in front of it: every publish's
"""Create *path* and return a write-only fd; :class:`FileExistsError` if it exists."""


def _raced(exc: PermissionError, name: str, dir_fd: int | None, tries: int) -> bool:
    """After a create or link of *name* failed with *exc*: :class:`FileExistsError` if
    *name* is there; ``True`` (try again) for EPERM on a free name with *tries* left.
    RACE: another host made *name* between our lookup and the server's call (sshfs: EPERM,
    SFTP's bare failure, as for EEXIST, ENOSPC, EROFS; a denial is EACCES), and may have
    renamed it away since (a `.new` committed, a message claimed): a retry then makes our
    own file (O_EXCL and link never touch an existing one); a real EPERM fails again."""
    if exists_at(name, dir_fd):
        raise FileExistsError(errno.EEXIST, "made by another host meanwhile", name)
    return exc.errno == errno.EPERM and tries > 0


def open_lock_at(name: str, mode: int, dir_fd: int) -> int:
    """Open (creating if needed) the regular file *name* in *dir_fd* for a lock: never
    follows a symlink, never truncates; ``EINVAL`` if *name* is not a regular file."""
    fd = os.open(name, os.O_RDWR | os.O_CREAT | _O_NOFOLLOW | _O_CLOEXEC | _O_NONBLOCK,
                 mode, dir_fd=dir_fd)  # fmt: skip
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(errno.EINVAL, "not a regular file", name)
    return fd


def try_lock(fd: int, *, shared: bool = False) -> bool:
    """Take an exclusive (or *shared*) ``flock`` on *fd* without waiting; ``False`` if
    another holds it."""
    try:
        fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def unlock(fd: int) -> None:
    """Release the ``flock`` on *fd*."""
    fcntl.flock(fd, fcntl.LOCK_UN)


def read_at(name: str, dir_fd: int, limit: int | None = None) -> bytes:
    """Read the regular file *name* in *dir_fd* (as :func:`read_message`)."""
    return read_message(name, dir_fd, limit)[0]


def unlink_at(name: str, dir_fd: int) -> bool:
    """Remove *name* from *dir_fd* (a link itself, never its target); ``False`` if gone."""
    try:
        os.unlink(name, dir_fd=dir_fd)
    except FileNotFoundError:
        return False
    return True


def replace_at(src: str, dst: str, dir_fd: int) -> None:
    """Rename *src* over *dst*, both in *dir_fd* (vsqs's own files, never messages)."""
    os.replace(src, dst, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)


def rename_noreplace_at(src: str, dst: str, dir_fd: int) -> None:
    """:func:`rename_noreplace` of two names in *dir_fd*."""
    _rename_noreplace(src, dst, dir_fd)


def exists_at(name: str, dir_fd: int | None = None) -> bool:
    """Whether *name* exists (in *dir_fd*, if given; without following a final symlink)."""
    return os.access(name, os.F_OK, dir_fd=dir_fd, follow_symlinks=False)


def mtime_at(name: str, dir_fd: int | None = None) -> float:
    """The mtime (seconds) of *name* (in *dir_fd*, if given); infinity if it is gone."""
    try:
        return os.lstat(name, dir_fd=dir_fd).st_mtime
    except FileNotFoundError:
        return math.inf  # RACE: removed meanwhile; whoever asks treats it as brand new


def mtime_us_at(name: str, dir_fd: int) -> int:
    """The modification time (µs) of *name* in *dir_fd*, not following a symlink."""
    return os.lstat(name, dir_fd=dir_fd).st_mtime_ns // 1000


scandir: Final = os.scandir  # itself, not a call in front of it: the hot path of a backlog


def list_at(dir_fd: int) -> list[str]:
    """Every name in the directory open as *dir_fd*."""
    return os.listdir(dir_fd)


def now_us_at(dir_fd: int) -> int:
    """The filesystem's own clock (µs): the mtime of a file created now in *dir_fd* (on a
    network filesystem, the server's: the clock of every message file's mtime)."""
    name = f".now-{os.getpid()}-{os.urandom(4).hex()}"
    fd = create_at(name, 0o600, dir_fd)
    try:
        return os.fstat(fd).st_mtime_ns // 1000
    finally:
        os.close(fd)
        unlink_at(name, dir_fd)


def copy_fd(source: int, target: int, progress: Callable[[], object]) -> int:
    """Copy *source* to *target* in 1 MiB chunks; the size. *progress* is called before
    each chunk (a mover renews its claim there); what it raises stops the copy."""
    size = 0
    while True:
        progress()
        chunk = os.read(source, _COPY_CHUNK)
        if not chunk:
            return size
        write_all(target, chunk)
        size += len(chunk)


def inode(path: str, dir_fd: int | None = None) -> int:
    """The inode number of *path* (relative to *dir_fd*, if given; not following a
    symlink); 0 where it is per host."""
    return _host.stable_inode(os.stat(path, dir_fd=dir_fd, follow_symlinks=False))


def open_regular(path: str) -> int:
    """Open a regular file for reading (no symlinks, no FIFOs); the caller closes it."""
    fd = os.open(path, _READ_FLAGS)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(errno.EINVAL, "not a regular file", path)
    return fd


exists: Final = exists_at  # by path: the same call


def same_file(first: str, second: str) -> bool:
    """Whether two names are links to one inode (a no-replace rename interrupted midway)."""
    try:
        a, b = os.lstat(first), os.lstat(second)
    except FileNotFoundError:
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def make_queue_dir(path: str, mode: int, *, set_mode: bool, durable: bool = False) -> None:
    """Create the queue directory *path* (and its parents) if needed; with *set_mode*,
    give it *mode* whatever the umask, when we own it (another user sharing the queue
    may not chmod it), keeping a set-group-id bit (which keeps a shared queue's group).
    *durable*: the names of the directories made survive a power loss.

    :raises NotADirectoryError: *path* exists and is not a directory.
    """
    missing = missing_dirs(path) if durable else []
    os.makedirs(path, mode=mode, exist_ok=True)
    info = os.stat(path)
    if not stat.S_ISDIR(info.st_mode):
        raise NotADirectoryError(errno.ENOTDIR, "not a directory", path)
    if set_mode and info.st_uid == os.geteuid() and info.st_mode & 0o777 != mode:
        os.chmod(path, mode | (info.st_mode & 0o2000))
    flush_made(missing)


def make_dirs(path: str, mode: int = 0o777, *, durable: bool = False) -> None:
    """Create *path* and its parents; an existing directory is fine (as ``os.makedirs``).
    *durable*: the names of the directories made survive a power loss."""
    missing = missing_dirs(path) if durable else []
    os.makedirs(path, mode=mode, exist_ok=True)
    flush_made(missing)


mtime: Final = mtime_at  # by path: the same call


def is_plain_dir(path: str) -> bool:
    """Whether *path* is a directory itself, not a symlink to one."""
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except FileNotFoundError:
        return False


def remove_tree(path: str) -> None:
    """Remove a directory tree that vsqs owns (a deleted named queue); never follows a
    symlink (``shutil.rmtree`` refuses one at *path*, and removes links inside as links)."""
    import shutil  # noqa: PLC0415 -- 2 ms at import, for deleting a queue

    shutil.rmtree(path)
