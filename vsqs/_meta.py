"""Everything vsqs stores besides message bodies, all under one dot-directory.

A plain message is exactly the seed's file and nothing else. What vsqs needs beyond that
lives in ``<queue>/.vsqs/``, which vsqs 0.3 and any other reader of the seed's format
ignore (its name does not parse as an id)::

    .vsqs/meta/<id>         JSON: attributes, receive count, history (only when needed)
    .vsqs/delayed/<id>      empty: the held file of <id> is a delayed publish, not a lease
    .vsqs/dedup/<digest>    the id published under a deduplication id (expires)
    .vsqs/stats/<process>   JSON counters of one process (summed on read)
    .vsqs/closed            present once a producer closed the queue
    .vsqs/capacity.lock     the cross-process lock of bounded queues
    .vsqs/capacity.count    an upper bound on the message count (under that lock)

Metadata is written *before* the transition that makes it matter (before a publish
becomes ready, before a held message returns to the queue), so a reader that sees the
message also sees its metadata.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from . import _fs
from ._errors import InvalidAttributes

DIR: Final = ".vsqs"
MAX_ATTRIBUTES: Final = 10  # as SQS
MAX_ATTRIBUTE_BYTES: Final = 8192  # all names and values together, UTF-8
MAX_NAME_CHARS: Final = 256


@dataclass(slots=True)
class Meta:
    """The metadata of one message (absent means: no attributes, never returned)."""

    attributes: dict[str, str] = field(default_factory=dict)
    receive_count: int = 0
    """Leases that have ended without a delete (the count of *completed* receives)."""
    lease: str = ""
    """The expiry suffix of the last lease counted, so a repeated requeue counts once."""
    last_received_us: int = 0
    history: dict[str, Any] = field(default_factory=dict)
    """Set when dead-lettered: source queue, first sent, last received, receive count."""
    inode: int = 0
    """The inode of the message file it describes (kept across renames), so metadata is
    never attributed to another message that reused the id (a clock-skewed publisher
    may give a new message the id of one that is held); 0 where unknown."""

    def owned_by(self, inode: int) -> bool:
        """Whether this metadata describes the message file with *inode*."""
        return not self.inode or self.inode == inode

    def to_json(self) -> bytes:
        data: dict[str, Any] = {}
        if self.inode:
            data["inode"] = self.inode
        if self.attributes:
            data["attributes"] = self.attributes
        if self.receive_count:
            data["receive_count"] = self.receive_count
            data["lease"] = self.lease
        if self.last_received_us:
            data["last_received_us"] = self.last_received_us
        if self.history:
            data["history"] = self.history
        return json.dumps(data, separators=(",", ":"), sort_keys=True).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> Meta:
        try:
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


class MetaStore:
    """The ``.vsqs`` directory of one queue."""

    def __init__(self, queue_path: str, dir_mode: int = 0o777, file_mode: int | None = None):
        self.root = os.path.join(queue_path, DIR)
        self.meta_dir = os.path.join(self.root, "meta")
        self.delayed_dir = os.path.join(self.root, "delayed")
        self._dir_mode = dir_mode
        self._file_mode = file_mode
        self._made: set[str] = set()

    def path(self, *parts: str) -> str:
        return os.path.join(self.root, *parts)

    def ensure(self, directory: str) -> str:
        """Create a metadata directory on first use (never in a constructor)."""
        if directory not in self._made:
            if directory != self.root:
                self.ensure(self.root)
            if _fs.make_dir(directory, self._dir_mode) and self._file_mode is not None:
                # Keep a set-group-id bit inherited from the queue directory: it is how a
                # shared queue keeps its group on everything created inside it.
                inherited = os.stat(directory).st_mode & stat.S_ISGID
                _fs.chmod(directory, self._dir_mode | inherited)
            self._made.add(directory)
        return directory

    def exists(self) -> bool:
        """Whether any per-message metadata was ever written to this queue."""
        return os.path.isdir(self.meta_dir)

    def read(self, message_id: str) -> Meta | None:
        try:
            return Meta.from_json(_fs.read_regular(os.path.join(self.meta_dir, message_id)))
        except FileNotFoundError:
            return None

    def create(self, message_id: str, meta: Meta, *, durable: bool) -> bool:
        """Write metadata for a new message; ``False`` if the id already has some.

        Exclusive creation doubles as a collision check: an id with metadata belongs to
        another message, whatever state its file is in.
        """
        path = os.path.join(self.ensure(self.meta_dir), message_id)
        try:
            fd = _fs.create_exclusive(path, self._create_mode())
        except FileExistsError:
            return False
        self._write_fd(fd, path, meta.to_json(), durable=durable)
        return True

    def write(self, message_id: str, meta: Meta, *, durable: bool) -> None:
        """Replace the metadata of an existing message atomically."""
        self.write_file(self.ensure(self.meta_dir), message_id, meta.to_json(), durable=durable)

    def write_file(self, directory: str, name: str, data: bytes, *, durable: bool) -> None:
        """Atomically replace ``directory/name`` with *data* (temp file, then rename)."""
        tmp = os.path.join(directory, f".tmp-{name}-{os.getpid()}-{os.urandom(4).hex()}")
        fd = _fs.create_exclusive(tmp, self._create_mode())
        self._write_fd(fd, tmp, data, durable=durable)
        _fs.replace(tmp, os.path.join(directory, name))

    def remove(self, message_id: str) -> bool:
        return _fs.unlink(os.path.join(self.meta_dir, message_id))

    def mark_delayed(self, message_id: str) -> None:
        path = os.path.join(self.ensure(self.delayed_dir), message_id)
        try:
            _fs.close(_fs.create_exclusive(path, self._create_mode()))
        except FileExistsError:
            pass  # RACE: a colliding publisher marked the same id; the marker means the same

    def unmark_delayed(self, message_id: str) -> None:
        _fs.unlink(os.path.join(self.delayed_dir, message_id))

    def delayed_ids(self) -> set[str]:
        try:
            return {n for n in os.listdir(self.delayed_dir) if not n.startswith(".")}
        except FileNotFoundError:
            return set()

    def meta_ids(self) -> list[str]:
        try:
            return [n for n in os.listdir(self.meta_dir) if not n.startswith(".")]
        except FileNotFoundError:
            return []

    def _create_mode(self) -> int:
        return 0o666 if self._file_mode is None else self._file_mode

    def _write_fd(self, fd: int, path: str, data: bytes, *, durable: bool) -> None:
        try:
            if self._file_mode is not None:
                _fs.fchmod(fd, self._file_mode)
            _fs.write_all(fd, memoryview(data))
            if durable:
                _fs.fsync(fd)
        except BaseException:
            _fs.close(fd)
            _fs.unlink(path)
            raise
        _fs.close(fd)
