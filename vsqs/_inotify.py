"""The inotify(7) system calls, through ctypes: the one descriptor kind vsqs waits on.

Only the calls (the descriptor's ``poll(2)`` and ``close`` too: with :mod:`vsqs._fs`, the
only module that makes system calls) and the decoding of events (names by
:mod:`vsqs._ids`); what to make of them (one descriptor per
process, generations, who reads) is :mod:`vsqs._waiters`'s.
"""

from __future__ import annotations

import os
import select
import struct
from collections.abc import Collection
from typing import Final

from . import _libc
from ._ids import ready_code_of_bytes

# inotify(7) event bits: a message became ready or held (moved in), or left (deleted,
# moved out). IN_CREATE is left out on purpose: a `.new` file appearing is not news.
_IN_MOVED_FROM: Final = 0x00000040
_IN_MOVED_TO: Final = 0x00000080
_IN_DELETE: Final = 0x00000200
_IN_DELETE_SELF: Final = 0x00000400
_IN_MOVE_SELF: Final = 0x00000800
_IN_NONBLOCK: Final = os.O_NONBLOCK
_IN_CLOEXEC: Final = getattr(os, "O_CLOEXEC", 0)
_MASK: Final = _IN_MOVED_FROM | _IN_MOVED_TO | _IN_DELETE | _IN_DELETE_SELF | _IN_MOVE_SELF

_EVENT: Final = struct.Struct("iIII")  # struct inotify_event: wd, mask, cookie, len
_IN_Q_OVERFLOW: Final = 0x00004000

WAKE: Final = ".wake-"
"""The prefix of the names vsqs makes only to cause events (``Layout.wake``). One moved
in is an announcement (``Layout.announce``); the others are only created and removed."""
ANNOUNCEMENT: Final = -1
"""What :func:`read_events` records for an announcement, beside the messages made
ready (packed ids, never negative)."""
_WAKE: Final = WAKE.encode("ascii")


def have_inotify() -> bool:
    """Whether this system has inotify (Linux, a C library with its calls)."""
    return _libc.inotify() is not None


def init() -> int:
    """A new non-blocking, close-on-exec inotify descriptor.

    :raises OSError: ``EMFILE`` at the per-user instance limit (128 by default).
    """
    calls = _libc.inotify()
    assert calls is not None
    fd = int(calls[0](_IN_NONBLOCK | _IN_CLOEXEC))
    if fd < 0:
        code = _libc.errno()
        raise OSError(code, f"inotify_init1: {os.strerror(code)}")
    return fd


def add_watch(fd: int, path: str) -> int:
    """Watch *path* for messages moved in or out and deletes; the watch descriptor.

    :raises OSError: ``ENOSPC`` at the per-user watch limit (8192 by default).
    """
    calls = _libc.inotify()
    assert calls is not None
    wd = int(calls[1](fd, os.fsencode(path), _MASK))
    if wd < 0:
        code = _libc.errno()
        raise OSError(code, f"inotify_add_watch: {os.strerror(code)}", path)
    return wd


def rm_watch(fd: int, wd: int) -> None:
    """Remove a watch (an error, such as a directory already gone, is ignored)."""
    calls = _libc.inotify()
    if calls is not None and calls[2] is not None:
        calls[2](fd, wd)


def close(fd: int) -> None:
    """Close an inotify descriptor (its watches go with it)."""
    os.close(fd)


def wait_readable(fd: int, seconds: float) -> bool:
    """Block until *fd* has events or *seconds* pass (``poll(2)``); whether it has."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(max(0.0, seconds) * 1000))


def read_events(fd: int, exact: Collection[int] = ()) -> dict[int, list[int] | None]:
    """Drain the descriptor: for each watch that saw an event, the messages made ready
    (names moved in that are ready ids: :func:`vsqs._ids.ready_code_of_bytes`, which
    agrees with a listing's :func:`vsqs._ids.sort_names`), as packed ids, and
    :data:`ANNOUNCEMENT` for each announcement, in event order. Key -1: events were lost
    (the queue overflowed).

    ``None`` instead of the names: something may have been made ready that no event
    names. Where the filesystem has no atomic no-replace rename, a move is a ``link``
    then an ``unlink`` (:func:`vsqs._fs.rename_noreplace`): the new name appears by
    ``IN_CREATE``, which is not watched (every publish's ``.new`` would wake every
    waiter), and only the source's removal is seen. So the removal of any name but a
    ready message (``<id>.new``, a held ``<id>.<expiry>``, a poke, a foreign file) may
    be a move whose target is unnamed; an announcement's own removal is not (its move
    was seen), nor a ready message's (a claim or a purge makes nothing ready), nor any
    removal in a watch of *exact*, whose filesystem always renames atomically (a
    delete is then only a delete: a woken receive need not list after an ack).
    """
    changed: dict[int, list[int] | None] = {}
    unnamed: set[int] = set()  # marked at the end: a list may still grow meanwhile
    unpack = _EVENT.unpack_from
    try:
        while data := os.read(fd, _READ_SIZE):
            offset, end = 0, len(data)
            while offset < end:
                wd, mask, _, length = unpack(data, offset)
                start = offset + 16
                offset = start + length
                if mask & _IN_Q_OVERFLOW:
                    wd = -1
                names = changed.get(wd)
                if names is None:
                    names = changed[wd] = []
                if mask & _IN_MOVED_TO:
                    name = data[start:offset].rstrip(b"\0")
                    code = ready_code_of_bytes(name)
                    if code is not None:
                        names.append(code)
                    elif name.startswith(_WAKE):
                        names.append(ANNOUNCEMENT)
                elif mask & _IN_DELETE and wd not in exact and _may_end_a_move(data[start:offset]):
                    unnamed.add(wd)
            if end < _READ_SIZE - _EVENT_MAX:
                break  # a short read: the descriptor is drained (saves a failing read)
    except BlockingIOError:
        pass  # drained
    for wd in unnamed:
        changed[wd] = None
    return changed


def _may_end_a_move(raw: bytes) -> bool:
    """Whether the removal of *raw* (a name, NUL-padded) may end a link-then-unlink move
    whose new name no event named: anything but a ready message's name (a claim or a
    purge) or an announcement's (``.wake-<pid>-<hex>-<sub>``, whose move was seen; a
    poke or a staged one is ``.wake-<pid>-<hex>``: see ``Layout.announce``)."""
    name = raw.rstrip(b"\0")
    if ready_code_of_bytes(name) is not None:
        return False
    return not (name.startswith(_WAKE) and name.count(b"-") > _WAKE_DASHES)


_WAKE_DASHES: Final = 2  # in `.wake-<pid>-<hex>`


_READ_SIZE: Final = 65536
_EVENT_MAX: Final = 16 + 256  # one event with the longest name
