"""One pass over a queue directory: what is ready, held, being written.

A listing is the only operation whose cost grows with the backlog, so the queue does one
only when its sorted view is used up or stale (see ``_queue``). The pass streams
``os.scandir`` and keeps ready ids as packed ints (``_ids.encode_ready``), so a consumer
facing a million messages holds tens of megabytes, not hundreds.

A listing is a snapshot that may be stale by the time it is used: files named in it can
vanish (claimed, deleted) and new ones appear. Callers treat every name as a hint and let
the atomic rename decide.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Final

from . import _fs
from ._ids import State as _State
from ._ids import parse_name, sort_names
from ._inotify import WAKE

# The exact names vsqs makes for an instant (see ``Layout.wake`` and ``Layout.announce``):
# ``.wake-<pid>-<8 hex digits>``, for an announcement followed by ``-<.vsqs subdirectory>``.
# A user's ``.wake-up-notes.txt`` is not one, and is never touched.
_POKE: Final = re.compile(re.escape(WAKE) + r"[0-9]+-[0-9a-f]{8}(?:-[a-z]+)?")


class Listing:
    """What one pass over the directory saw (a plain class, not a dataclass, which would
    compile its methods at every ``import vsqs``)."""

    __slots__ = ("held", "new", "planted", "pokes", "ready")

    def __init__(self) -> None:
        self.ready: list[int] = []
        """Packed ready ids (``_ids.encode_ready``), sorted oldest first."""
        self.held: list[tuple[int, str]] = []
        """``(expiry_us, name)`` of held messages, unsorted."""
        self.new: list[tuple[int, str]] = []
        """``(created_us, name)`` of messages being written."""
        self.pokes: list[str] = []
        """Names of pokes and announcements (``.wake-*``: :data:`vsqs._inotify.WAKE`), made
        in the queue directory for an instant to cause inotify events; a crash may leave
        one. Only regular files of exactly that grammar (``_POKE``); the caller checks
        they are empty."""
        self.planted: list[str] = []
        """Names of the message grammar held by something that is not a regular file (a
        directory, FIFO, socket, device or symlink planted there): not messages, in no
        count."""


NEW_GRACE_US: Final = 60_000_000
"""A ``.new`` older than this (µs) belongs to a crashed publisher: the capacity counts it
for nothing, and a drain does not wait for it once its mtime is that old too."""


def scan(path: str) -> Listing:
    """List *path* once. Raises :class:`FileNotFoundError` if the directory is gone.

    Only regular files are messages (or pokes): the type comes from the directory entry
    itself (``d_type``, which ``scandir`` gets for free on Linux's local filesystems and
    NFS); only where a filesystem does not give it does Python ``lstat`` the entry.
    """
    listing = Listing()
    names: list[str] = []
    odd: list[str] = []  # entries that are not regular files (the type costs no syscall)
    with _fs.scandir(path) as entries:
        for entry in entries:
            (names if entry.is_file(follow_symlinks=False) else odd).append(entry.name)
    other: list[str] = []
    sort_names(names, listing.ready, listing.held, listing.new, other)
    # Foreign files, dot-entries, directories named oddly: not ours. Pokes and
    # announcements are vsqs's, and a crash may leave one behind (never a user's
    # `.wake-*`: only the exact names vsqs makes).
    listing.pokes.extend(name for name in other if _POKE.fullmatch(name))
    # A name of the message grammar held by a directory, FIFO, socket or symlink: planted.
    listing.planted.extend(name for name in odd if parse_name(name) is not None)
    listing.ready.sort()
    return listing


def held_names_for(path: str, message_id: str) -> list[str]:
    """Every held name of one id (normally zero or one), by a full listing."""
    prefix = message_id + "."
    found = []
    with _fs.scandir(path) as entries:
        for entry in entries:
            name = entry.name
            if name.startswith(prefix):
                parsed = parse_name(name)
                held = parsed is not None and parsed.state is _State.HELD
                if held and entry.is_file(follow_symlinks=False):
                    found.append(name)
    return found


def current_names_in(path: str) -> dict[str, str]:
    """:func:`current_names` of one listing of *path* (a snapshot)."""
    with _fs.scandir(path) as entries:
        return current_names(entry.name for entry in entries)


def current_names(names: Iterable[str]) -> dict[str, str]:
    """The name each message id has now (ready ``<id>`` or held ``<id>.<expiry>``), from
    a listing: names that are not messages by the grammar (``0017``, ``17.new``) are not.

    One id has two names only after a crash (a no-replace rename by link and unlink,
    stopped between: two names of one file). The held name with the latest expiry is
    taken then, whatever the order of the listing.
    """
    best: dict[str, tuple[int, str]] = {}
    for name in names:
        entry = parse_name(name)
        if entry is None or entry.state is _State.NEW:
            continue
        rank = (-1 if entry.expires is None else entry.expires, name)
        current = best.get(entry.id)
        if current is None or rank > current:
            best[entry.id] = rank
    return {message_id: name for message_id, (_, name) in best.items()}
