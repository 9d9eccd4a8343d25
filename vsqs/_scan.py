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

import os
import re
from dataclasses import dataclass, field
from typing import Final

from ._ids import MAX_DIGITS, MS_LIMIT, parse_name
from ._ids import State as _State
from ._inotify import WAKE

# The exact names vsqs makes for an instant (see ``Layout.wake`` and ``Layout.announce``):
# ``.wake-<pid>-<8 hex digits>``, for an announcement followed by ``-<.vsqs subdirectory>``.
# A user's ``.wake-up-notes.txt`` is not one, and is never touched.
_POKE: Final = re.compile(re.escape(WAKE) + r"[0-9]+-[0-9a-f]{8}(?:-[a-z]+)?")


@dataclass(slots=True)
class Listing:
    """What one pass over the directory saw."""

    ready: list[int] = field(default_factory=list)
    """Packed ready ids (``_ids.encode_ready``), sorted oldest first."""
    held: list[tuple[int, str]] = field(default_factory=list)
    """``(expiry_us, name)`` of held messages, unsorted."""
    new: list[tuple[int, str]] = field(default_factory=list)
    """``(created_us, name)`` of messages being written."""
    pokes: list[str] = field(default_factory=list)
    """Names of pokes and announcements (``.wake-*``: :data:`vsqs._inotify.WAKE`), made
    in the queue directory for an instant to cause inotify events; a crash may leave one.
    Only regular files of exactly that grammar (``_POKE``); the caller checks they are empty."""
    planted: list[str] = field(default_factory=list)
    """Names of the message grammar held by something that is not a regular file (a
    directory, FIFO, socket, device or symlink planted there): not messages, in no count."""


def scan(path: str) -> Listing:
    """List *path* once. Raises :class:`FileNotFoundError` if the directory is gone.

    Only regular files are messages (or pokes): the type comes from the directory entry
    itself (``d_type``, which ``scandir`` gets for free on Linux's local filesystems and
    NFS); only where a filesystem does not give it does Python ``lstat`` the entry.
    """
    listing = Listing()
    ready_append = listing.ready.append
    with os.scandir(path) as entries:
        for entry in entries:
            name = entry.name
            # Fast path for the common case, a ready id: digits only.
            if name.isdigit() and name.isascii():
                if len(name) > MAX_DIGITS or (name[0] == "0" and name != "0"):
                    continue
                if not entry.is_file(follow_symlinks=False):
                    listing.planted.append(name)
                    continue
                value = int(name)
                ready_append(
                    ((value * 1000 if value < MS_LIMIT else value) << 1) | (value < MS_LIMIT)
                )
                continue
            parsed = parse_name(name)
            if parsed is None:
                # A poke or announcement its maker left behind (never a user's `.wake-*`).
                if _POKE.fullmatch(name) and entry.is_file(follow_symlinks=False):
                    listing.pokes.append(name)
                continue  # foreign files, dot-entries, directories named oddly: not ours
            if not entry.is_file(follow_symlinks=False):
                listing.planted.append(name)
                continue
            if parsed.state is _State.HELD:
                assert parsed.expires is not None
                listing.held.append((parsed.expires, name))
            elif parsed.state is _State.NEW:
                listing.new.append((parsed.key, name))
    listing.ready.sort()
    return listing


def held_names_for(path: str, message_id: str) -> list[str]:
    """Every held name of one id (normally zero or one), by a full listing."""
    prefix = message_id + "."
    found = []
    with os.scandir(path) as entries:
        for entry in entries:
            name = entry.name
            if name.startswith(prefix):
                parsed = parse_name(name)
                held = parsed is not None and parsed.state is _State.HELD
                if held and entry.is_file(follow_symlinks=False):
                    found.append(name)
    return found
