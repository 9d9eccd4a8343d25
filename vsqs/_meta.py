"""Per-message metadata: attributes, receive counts, history, delayed markers.

A plain message is exactly the design's file and nothing else; what vsqs knows beyond
that is kept under ``.vsqs/meta`` and ``.vsqs/delayed`` (see ``_layout``), written only
for the messages that need it.

Metadata is written *before* the transition that makes it matter (before a publish
becomes ready, before a held message returns to the queue), so a reader that sees the
message also sees its metadata.
"""

from __future__ import annotations

import errno
import threading
from collections.abc import Mapping
from typing import Any, Final

from . import _fs
from ._errors import InvalidAttributes, UnsafeEntry
from ._layout import DELAYED, META, Layout
from ._message import NO_ATTRIBUTES

MAX_ATTRIBUTES: Final = 10  # as SQS
MAX_ATTRIBUTE_BYTES: Final = 8192  # all names and values together, UTF-8
MAX_NAME_CHARS: Final = 256
GROUP: Final = "\x00group"
"""The key under which a message's group is kept among its attributes on disk (no
attribute a user gives may start with NUL); split off again when it is read."""
MAX_GROUP_CHARS: Final = 128  # as SQS's MessageGroupId


class Meta:
    """The metadata of one message (absent means: no attributes, never returned). A
    plain class, not a dataclass, which would compile its methods at every ``import vsqs``."""

    __slots__ = (
        "attributes",
        "ended",
        "history",
        "inode",
        "last_received_us",
        "lease",
        "receive_count",
    )

    def __init__(
        self,
        *,
        attributes: dict[str, str] | None = None,
        receive_count: int = 0,
        lease: str = "",
        ended: str = "",
        last_received_us: int = 0,
        history: dict[str, Any] | None = None,
        inode: int = 0,
    ) -> None:
        self.attributes: dict[str, str] = {} if attributes is None else attributes
        self.receive_count = receive_count
        """Leases that have ended without a delete (the count of *completed* receives)."""
        self.lease = lease
        """The expiry suffix of the last lease counted, so a repeated requeue counts once."""
        self.ended = ended
        """The expiry suffix of the last consumer lease that ended undeleted (what a stale
        receipt is compared with, to tell a returned lease from an extended one)."""
        self.last_received_us = last_received_us
        self.history: dict[str, Any] = {} if history is None else history
        """Set when dead-lettered: source queue, first sent, last received, receive count."""
        self.inode = inode
        """The inode of the message file it describes (kept across renames), so metadata
        is never attributed to another message that reused the id (a clock-skewed
        publisher may give a new message the id of one that is held); 0 where unknown."""

    def owned_by(self, inode: int) -> bool:
        """Whether this metadata describes the message file with *inode* (0: unknown)."""
        return not self.inode or not inode or self.inode == inode

    def to_json(self) -> bytes:
        data: dict[str, Any] = {}
        if self.inode:
            data["inode"] = self.inode
        if self.attributes:
            data["attributes"] = self.attributes
        if self.receive_count or self.lease:  # a lease alone: a hold that counts no receive
            data["receive_count"] = self.receive_count
            data["lease"] = self.lease
        if self.ended:
            data["ended"] = self.ended
        if self.last_received_us:
            data["last_received_us"] = self.last_received_us
        if self.history:
            data["history"] = self.history
        import json  # noqa: PLC0415 -- 2 ms at import: only where records are read or written

        return json.dumps(data, separators=(",", ":"), sort_keys=True).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> Meta:
        try:
            import json  # noqa: PLC0415 -- see above

            data = json.loads(raw)
        except ValueError:
            # A torn write is impossible (we rename into place), but a hand-edited or
            # foreign file must not stop delivery: treat it as no metadata.
            return cls()
        if not isinstance(data, dict):
            return cls()
        attributes = data.get("attributes") or {}
        history = data.get("history") or {}
        return cls(
            attributes={str(k): str(v) for k, v in attributes.items()}
            if isinstance(attributes, dict)
            else {},
            receive_count=_int(data.get("receive_count")),
            lease=str(data.get("lease", "")),
            ended=str(data.get("ended", "")),
            last_received_us=_int(data.get("last_received_us")),
            history=history if isinstance(history, dict) else {},
            inode=_int(data.get("inode")),
        )


def _int(value: object) -> int:
    # A hand-edited count must not stop delivery either: anything but an int counts 0.
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def validate_attributes(attributes: Mapping[str, str] | None) -> dict[str, str]:
    """Check *attributes* against the documented limits and return a plain dict copy."""
    if attributes is None:
        return {}
    if not isinstance(attributes, Mapping):
        raise InvalidAttributes(
            f"expected a mapping of str to str, got {type(attributes).__name__}"
        )
    if len(attributes) > MAX_ATTRIBUTES:
        raise InvalidAttributes(f"{len(attributes)} attributes, at most {MAX_ATTRIBUTES} allowed")
    total = 0
    result: dict[str, str] = {}
    for key, value in attributes.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise InvalidAttributes(
                f"attribute {key!r}: names and values must be str, "
                f"got {type(key).__name__} -> {type(value).__name__}"
            )
        if not key or len(key) > MAX_NAME_CHARS:
            raise InvalidAttributes(f"attribute name {key!r} must be 1 to {MAX_NAME_CHARS} chars")
        if key.startswith("\x00"):
            raise InvalidAttributes(f"attribute name {key!r}: names starting with NUL are reserved")
        try:
            total += len(key.encode()) + len(value.encode())
        except UnicodeEncodeError as exc:
            raise InvalidAttributes(f"attribute {key!r} is not valid Unicode text") from exc
        result[key] = value
    if total > MAX_ATTRIBUTE_BYTES:
        raise InvalidAttributes(
            f"attributes take {total} bytes of UTF-8, at most {MAX_ATTRIBUTE_BYTES} allowed"
        )
    return result


def validate_group(group: object) -> str:
    """Return *group* if it is a valid message group: 1 to 128 printable ASCII
    characters (letters, digits, punctuation; as SQS's ``MessageGroupId``). Pure: an
    integration checks a group it was given before it publishes anything with it.

    >>> import vsqs
    >>> vsqs.validate_group("customer-42")
    'customer-42'

    :raises TypeError: *group* is not a ``str``.
    :raises ValueError: it is empty, too long, or holds a space or another character.
    """
    if not isinstance(group, str):
        raise TypeError(f"group must be a str, not {type(group).__name__}")
    if not 0 < len(group) <= MAX_GROUP_CHARS or not all("!" <= ch <= "~" for ch in group):
        raise ValueError(
            f"group must be 1 to {MAX_GROUP_CHARS} printable ASCII characters (letters, "
            f"digits, punctuation; no spaces), not {group!r}"
        )
    return group


def with_group(attributes: dict[str, str], group: str | None) -> dict[str, str]:
    """*attributes* (checked) with *group* kept among them, for the message's record."""
    if group is None:
        return attributes
    return {**attributes, GROUP: validate_group(group)}


def split_group(attributes: Mapping[str, str]) -> tuple[Mapping[str, str], str | None]:
    """A record's attributes as the user gave them, and the message's group."""
    if GROUP not in attributes:
        return attributes, None
    rest = {key: value for key, value in attributes.items() if key != GROUP}
    return rest or NO_ATTRIBUTES, attributes[GROUP]


_UNREADABLE: Final = frozenset({errno.ELOOP, errno.EINVAL, errno.EISDIR, errno.ENXIO, errno.EFBIG})
"""What reading a planted non-file gives: a symlink (ELOOP), a FIFO (EINVAL from the
regular-file check), a directory (EISDIR), a socket (ENXIO); and a file too large to be
a record (EFBIG: see ``_layout.READ_LIMITS``), never read."""
_reported: set[tuple[str, str]] = set()


def report_once(queue: str, what: str, detail: str) -> None:
    """Log a problem with a queue's metadata once per process and kind."""
    if (queue, what) not in _reported:
        _reported.add((queue, what))
        import logging  # noqa: PLC0415 -- 3 ms at import, for a problem that is rare

        logging.getLogger("vsqs").warning(
            "queue %s: %s (%s); delivery goes on without it", queue, what, detail
        )


class MetaStore:
    """The per-message metadata of one queue (``.vsqs/meta`` and ``.vsqs/delayed``).

    Every write is atomic (an exclusive create, or a temporary file renamed into place):
    a reader sees a whole record or none. Metadata never stops delivery: a record that
    cannot be read as a regular file (a planted link, FIFO or directory) is treated as
    absent, and reported once through :mod:`logging`.
    """

    def __init__(self, layout: Layout) -> None:
        self.layout = layout
        self.possible = True
        """Whether any metadata may exist; ``False`` once a look found no directory for it,
        so a plain queue never looks for it. Set again by every metadata write."""
        self._found = 0  # how many times `possible` was set: a look that saw none before
        self._announced = False  # whether this object announced .vsqs/meta (see _record)
        self._lock = threading.Lock()  # guards the three above (a handle is shared)

    def refresh(self) -> bool:
        """Look whether any per-message metadata was ever written (after a listing, or
        before a blocked receive sleeps); the new :attr:`possible`."""
        with self._lock:
            found = self._found
        present = self.layout.has_dir(META)  # the look itself, outside the lock
        with self._lock:
            if present:
                self.possible = True
                self._found += 1
            elif found == self._found:
                # RACE: another thread of this process may have found metadata (or written
                # some) while we looked: what it found stands, our older look does not.
                self.possible = False
            return self.possible

    def _record(self, message_id: str, meta: Meta, *, durable: bool, exclusive: bool) -> bool:
        """The one function that writes a record (``tests/test_wakeup.py`` fails if any
        other writes one): announce ``.vsqs/meta`` before this object's first record,
        then create it exclusively (``False`` if the id has one) or replace it.

        A blocked receive that found no ``.vsqs/meta`` before it slept trusts that,
        unless it is woken by the announcement (see :meth:`Layout.announce`): so every
        writer announces before its first record, even where the directory existed (its
        creator may have died before announcing it)."""
        with self._lock:
            self.possible = True
            self._found += 1
            if not self._announced:
                # Under the lock: a second writer of this object must not write a record
                # before the first one's announcement is made.
                self.layout.announce(META)
                self._announced = True
        data = meta.to_json()
        if exclusive:
            return self.layout.create(META, message_id, data, durable=durable)
        self.layout.write(META, message_id, data, durable=durable)
        return True

    def read(self, message_id: str) -> Meta | None:
        """The metadata of *message_id*, or ``None`` if it has none (or none readable)."""
        try:
            raw = self.layout.read(META, message_id)
        except OSError as exc:
            if exc.errno not in _UNREADABLE and not isinstance(exc, UnsafeEntry):
                raise
            report_once(self.layout.path, "unreadable metadata", f"{message_id}: {exc}")
            return None
        return None if raw is None else Meta.from_json(raw)

    def create(self, message_id: str, meta: Meta, *, durable: bool) -> bool:
        """Write metadata for a new message; ``False`` if the id already has some.

        Exclusive creation doubles as a collision check: an id with metadata belongs to
        another message, whatever state its file is in (a planted entry included).
        """
        if not self._record(message_id, meta, durable=durable, exclusive=True):
            return False
        if durable and not _fs.fsync_keeps_new_names(self.layout.path):
            # Its name too, before the message it describes becomes visible: a message
            # that survives a power loss keeps its attributes and history.
            try:
                self.layout.fsync(META)
            except BaseException:
                self.layout.remove(META, message_id)
                raise
        return True

    def write(self, message_id: str, meta: Meta, *, durable: bool) -> bool:
        """Replace the metadata of an existing message atomically; ``False`` if it could
        not be written (a planted directory in its place; reported once)."""
        try:
            return self._record(message_id, meta, durable=durable, exclusive=False)
        except (IsADirectoryError, UnsafeEntry) as exc:
            report_once(self.layout.path, "metadata that cannot be replaced", str(exc))
            return False

    def remove(self, message_id: str) -> bool:
        try:
            return self.layout.remove(META, message_id)
        except (IsADirectoryError, PermissionError, UnsafeEntry) as exc:
            # unlink() of a planted directory: EISDIR on Linux, EPERM on macOS.
            report_once(self.layout.path, "metadata that cannot be removed", str(exc))
            return False

    def mark_delayed(self, message_id: str) -> bool:
        """Mark *message_id* as a delayed publish; ``False`` if it is marked already.

        Exclusive, like metadata: a marker that exists belongs to another delayed message
        with this id (a peer that drew it in the same tick), so the caller draws again.
        """
        return self.layout.create(DELAYED, message_id, b"", durable=False)

    def unmark_delayed(self, message_id: str) -> None:
        try:
            self.layout.remove(DELAYED, message_id)
        except (IsADirectoryError, PermissionError, UnsafeEntry) as exc:
            report_once(self.layout.path, "a delay marker that cannot be removed", str(exc))

    def is_delayed(self, message_id: str) -> bool:
        try:
            return self.layout.exists(DELAYED, message_id)
        except UnsafeEntry:
            return False

    def delayed_ids(self) -> set[str]:
        return {name for name in self._names(DELAYED) if not name.startswith(".")}

    def meta_ids(self) -> list[str]:
        return [name for name in self._names(META) if not name.startswith(".")]

    def _names(self, sub: str) -> list[str]:
        try:
            return self.layout.names(sub)
        except UnsafeEntry:
            return []
