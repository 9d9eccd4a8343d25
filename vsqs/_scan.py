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

from dataclasses import dataclass, field
from operator import attrgetter
from typing import Final

from . import _fs
from ._ids import State as _State
from ._ids import parse_name, sort_names
from ._inotify import WAKE

_NAME: Final = attrgetter("name")


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
    in the queue directory for an instant to cause inotify events; a crash may leave one."""


NEW_GRACE_US: Final = 60_000_000
"""A ``.new`` older than this (µs) belongs to a crashed publisher: the capacity counts it
for nothing, and a drain does not wait for it once its mtime is that old too."""


def scan(path: str) -> Listing:
    """List *path* once. Raises :class:`FileNotFoundError` if the directory is gone."""
    listing = Listing()
    other: list[str] = []
    with _fs.scandir(path) as entries:
        sort_names(map(_NAME, entries), listing.ready, listing.held, listing.new, other)
    # Foreign files, dot-entries, directories named oddly: not ours. Pokes and
    # announcements are vsqs's, and a crash may leave one behind.
    listing.pokes.extend(name for name in other if name.startswith(WAKE))
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
                if parsed is not None and parsed.state is _State.HELD:
                    found.append(name)
    return found
