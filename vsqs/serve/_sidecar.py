"""What the SQS API keeps about a queue that vsqs itself does not: one small JSON file.

``.vsqs/sqs/record.json`` in the queue's directory (:data:`RECORD` in the
:class:`vsqs.Storage` named :data:`STORAGE`) holds a JSON object::

    {"created": 1732257000.1, "modified": 1732257000.1,
     "attributes": {"ReceiveMessageWaitTimeSeconds": "20", "MaximumMessageSize": "262144"},
     "tags": {"team": "orders"},
     "permissions": {"label": {"accounts": ["123456789012"], "actions": ["SendMessage"]}},
     "tasks": [{"handle": "...", "status": "RUNNING", ...}]}

``attributes`` are the queue attributes that have no vsqs setting (the others are
vsqs's stored settings: ``VisibilityTimeout`` is ``visibility_timeout``, and so on).
Permissions are recorded and listed, never enforced (access is the credentials
file's business). A queue without the file (made by the library) has none of these.

Written as the settings are: a whole new file renamed over the old one (readers see one
or the other), under a lock on ``.vsqs/sqs/lock`` (a :class:`vsqs.FileLock`, waited for
up to :data:`LOCK_WAIT` seconds) so that two servers changing one queue's tags at once
both land. A file that is not a JSON object is treated as
absent when read and replaced by the next change.

:func:`read_cached` is :func:`read` for the request path (every send and receive asks
for the queue's SQS attributes): the record is read again only when one ``lstat`` of
the file shows it changed (another inode, size, modification or change time), while
it is young (written in the last :data:`TRUST_AFTER` seconds, by this host's clock: a
filesystem whose timestamps are coarse cannot tell two changes within one tick apart;
:data:`TRUST_AFTER_IN_MEMORY` on tmpfs, whose tick is a jiffy),
and always on a filesystem other hosts write (NFS, FUSE...: there a ``stat`` may answer
from the client's attribute cache, where opening the file revalidates it).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Final, NamedTuple

from .. import FileLock, Storage, _userfiles
from ._inline import in_memory

__all__ = ["read", "read_cached", "update"]

STORAGE: Final = "sqs"
# The server's vsqs.Storage in each queue (a directory of its own).
RECORD: Final = "record.json"
LOCK: Final = "lock"
RECORD_LIMIT: Final = 64 << 10
"""The most read of a record (bytes): 50 tags, a few attributes and move tasks fit in a
few KiB; anything larger is not the server's, refused after one ``fstat``."""

LOCK_WAIT: Final = 10.0
"""Seconds a change waits for another server's change of the same queue."""
# One for every queue's record: flock over NFS is per process (POSIX locks), so the
# threads of this process queue here first.
_threads = threading.Lock()
TRUST_AFTER: Final = 2.0
"""A record younger than this (seconds since its modification time) is always re-read."""
TRUST_AFTER_IN_MEMORY: Final = 0.05
"""The same on a memory filesystem (tmpfs, ramfs), whose timestamps are the kernel's
coarse clock in nanoseconds: a tick is a jiffy, 10 ms at most."""
_CACHE_SIZE: Final = 4096  # queues remembered; beyond, the memory is dropped and rebuilt


class _Entry(NamedTuple):
    stamp: tuple[int, ...] | None  # the record's, taken before it was read
    record: Mapping[str, Any]
    settle: float  # TRUST_AFTER of its filesystem
    storage: Storage  # for its stamp only: never opens a descriptor


_cache: dict[str, _Entry] = {}  # by queue directory
_cache_lock = threading.Lock()


def read(queue_dir: str) -> dict[str, Any]:
    """The queue's SQS record (an empty one if it has none, or an unreadable one).

    :raises FileNotFoundError: the queue's directory is gone (deleted meanwhile): never
        read as a queue without a record, which would answer as another kind of queue.
    """
    storage = Storage(queue_dir, STORAGE)
    try:
        raw = storage.read(RECORD, RECORD_LIMIT)
    except FileNotFoundError:
        raise  # RACE: the queue was deleted meanwhile; the request answers so
    except OSError:
        return {}  # a non-file was planted there
    finally:
        storage.close()
    if raw is None:
        # Storage.read says None for an absent directory too: a queue deleted meanwhile
        # (RACE: DeleteQueue through any server) raises here, never reads as record-less.
        _userfiles.lstatus(queue_dir)
        return {}
    try:
        document = json.loads(raw)
    except ValueError:
        return {}
    return document if isinstance(document, dict) else {}


def read_cached(queue_dir: str) -> Mapping[str, Any]:
    """The queue's SQS record, as :func:`read` returns it, from memory while the file is
    unchanged (see the module's docstring). Never older than the file was at the call's
    ``lstat``. The mapping is shared: read it, never change it.
    """
    with _cache_lock:
        entry = _cache.get(queue_dir)
    if entry is None:
        settle = TRUST_AFTER_IN_MEMORY if in_memory(queue_dir) else TRUST_AFTER
        storage = Storage(queue_dir, STORAGE)
    else:
        settle, storage = entry.settle, entry.storage
    stamp = storage.stamp(RECORD, settle=settle)  # no descriptor
    if entry is not None and stamp is not None and entry.stamp == stamp:
        return entry.record
    # The status was taken before the read: a change in between is newer than the stamp
    # kept with it, so the next call sees another stamp and reads again.
    document = read(queue_dir)
    with _cache_lock:
        if len(_cache) >= _CACHE_SIZE:
            _cache.clear()
        _cache[queue_dir] = _Entry(stamp, document, settle, storage)
    return document


def _locked(storage: Storage) -> FileLock:
    """The record's lock, waited for up to :data:`LOCK_WAIT` seconds (then
    :class:`~vsqs.LockTimeout`: another server holding it is stopped)."""
    return storage.lock(LOCK, timeout=LOCK_WAIT, threads=_threads)


def update(
    queue_dir: str, change: Callable[[dict[str, Any]], object], *, touch: bool = False
) -> dict[str, Any]:
    """Apply *change* (which edits the record in place) and store the result; return it.

    Atomic (one rename) and serialised with every other update of the queue, by any
    process on any host whose filesystem honours ``flock``. With *touch*, ``modified``
    (the queue's ``LastModifiedTimestamp``) is set to now. An exception raised by
    *change* leaves the record as it was.
    """
    storage = Storage(queue_dir, STORAGE)
    try:
        with _locked(storage):
            document = read(queue_dir)
            change(document)
            now = time.time()
            document.setdefault("created", now)
            if touch or "modified" not in document:
                document["modified"] = now
            storage.write(RECORD, json.dumps(document).encode(), durable=True)
    finally:
        storage.close()
    return document
