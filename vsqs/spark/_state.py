"""The state of a streaming query on disk: its epoch and its claimed micro-batches.

``<stateDir>/<epoch>/epoch.json`` holds the queue and the highest batch claimed; one
``<seq>.json`` per claimed, not yet deleted micro-batch lists its messages; ``lock`` is
held (a :class:`vsqs.FileLock`) by the one run that serves the epoch. Used by
:mod:`vsqs.spark._stream`.

The default stateDir is the queue's ``.vsqs/spark/streams``
(:data:`~vsqs.spark._options.STATE`), the :class:`vsqs.Storage` of the epoch
``spark/streams/<epoch>``; a stateDir the user named elsewhere is opened as named
(:meth:`vsqs.Storage.outside`). Below it, nothing is reached
by path: every file is a name in a descriptor of the epoch directory, opened without
following a symlink, so a symlink planted at ``.vsqs/spark``, at the epoch directory or
at one of its files is refused with :class:`vsqs.UnsafeEntry` naming it, and nothing
outside is ever touched.
"""

from __future__ import annotations

import errno
import json
import os
import re
from dataclasses import replace
from typing import Any, Final

from .. import AnyQueue, FileLock, LeaseLost, Message, Storage, VsqsError, partitions_of
from ._options import Planned

EPOCH: Final = "epoch.json"
LOCK: Final = "lock"
_SUFFIX: Final = ".json"
_BATCH: Final = re.compile(r"(0|[1-9][0-9]{0,18})" + re.escape(_SUFFIX))  # save()'s names
EPOCH_LIMIT: Final = 64 << 10
"""The most read of ``epoch.json`` (bytes): it holds an epoch name, a queue's path and
a number; anything larger is not vsqs's, refused after one ``fstat`` (``EFBIG``)."""
BATCH_LIMIT: Final = 64 << 20
"""The most read of one batch's record (bytes), as of a ``batch_dedup_id`` record: a
batch whose record would be larger is refused when it is written (lower
``maxMessagesPerBatch``), so a larger file is not vsqs's and is never read."""


class StateDir:
    """``epoch.json`` and the ``<seq>.json`` records of one query's claimed batches.

    Every file is replaced durably and atomically (a temporary file, fsync, rename,
    directory fsync; :meth:`vsqs.Storage.write`): a reader sees the old record or the
    new. One run at a time writes (:meth:`lock`).

    :param queue: the queue's path.
    :param state_dir: the stateDir option (by default the queue's ``.vsqs/spark/streams``).
    :param epoch: the epoch: one directory in *state_dir*.
    """

    def __init__(self, queue: str, state_dir: str, epoch: str) -> None:
        self.path = f"{state_dir.rstrip('/')}/{epoch}"
        name = Storage.name_of(queue, state_dir)
        self._storage = (
            Storage.outside(state_dir, epoch) if name is None else Storage(queue, f"{name}/{epoch}")
        )
        self._held: FileLock | None = None

    def _read(self, name: str) -> bytes | None:
        """The content of the record *name*, bounded like every file under ``.vsqs``."""
        return self._storage.read(name, EPOCH_LIMIT if name == EPOCH else BATCH_LIMIT)

    def _write(self, name: str, data: object, limit: int = EPOCH_LIMIT) -> None:
        """Replace *name* with *data* durably (temporary file, fsync, rename, dir fsync);
        a record larger than *limit*, which :meth:`_read` would refuse, is not written."""
        content = json.dumps(data).encode()
        if len(content) > limit:
            raise ValueError(
                f"the Spark state record {self.path}/{name} would be {len(content)} bytes, "
                f"more than the {limit} read back: lower maxMessagesPerBatch"
            )
        self._storage.write(name, content, durable=True)

    # -- the records ---------------------------------------------------------------------

    def exists(self) -> bool:
        return self._storage.exists(EPOCH)

    def create(self, epoch: str, queue: str) -> None:
        self.set_high(epoch, queue, 0)

    def info(self) -> dict[str, Any]:
        raw = self._read(EPOCH)
        if raw is None:
            raise FileNotFoundError(errno.ENOENT, "no epoch record", f"{self.path}/{EPOCH}")
        data: dict[str, Any] = json.loads(raw)
        return data

    def set_high(self, epoch: str, queue: str, high: int) -> None:
        self._write(EPOCH, {"epoch": epoch, "queue": queue, "high": high})

    def save(self, seq: int, messages: list[Planned]) -> None:
        """Record the messages of batch *seq* durably, replacing its previous record.

        :raises ValueError: the record would be larger than :data:`BATCH_LIMIT` (it
            could never be read back): nothing is written.
        """
        self._write(f"{seq}{_SUFFIX}", {"messages": messages}, BATCH_LIMIT)

    def load(self) -> dict[int, list[Planned]]:
        """Every recorded batch (left by an earlier run of this query); temporary files
        an earlier run left by crashing are removed (call it under :meth:`lock`)."""
        found: dict[int, list[Planned]] = {}
        self._storage.sweep()
        for name in self._storage.names():
            found_seq = _BATCH.fullmatch(name)
            seq = None if found_seq is None else int(found_seq[1])
            raw = None if seq is None else self._read(name)
            if seq is not None and raw is not None:
                rows = json.loads(raw)["messages"]
                # Records of a vsqs before partitions have no directory: the queue's own.
                found[seq] = [
                    (r[0], r[1], dict(r[2]), int(r[3]), float(r[4]), str(r[5]) if r[5:] else "")
                    for r in rows
                ]
        return found

    def remove(self, seq: int) -> None:
        # RACE: none expected (one run per query holds the lock); removing twice is fine
        self._storage.remove(f"{seq}{_SUFFIX}")

    # -- one run at a time ---------------------------------------------------------------

    def lock(self, timeout: float) -> bool:
        """Take the epoch's lock (``lock``, never through a link; :class:`vsqs.FileLock`),
        waiting up to *timeout* seconds; ``False`` if another run still holds it."""
        lock = self._storage.lock(LOCK)
        if not lock.acquire(timeout):  # another run of this query: it may be stopping
            return False
        self._held = lock
        return True

    def close(self) -> None:
        """Release the lock (if held) and the descriptors."""
        if self._held is not None:
            self._held.release()
            self._held = None
        self._storage.close()


def take_over(queue: AnyQueue, receipt: str, seconds: float, where: str = "") -> Message:
    """Renew a lease an earlier run of this query recorded, through this handle.

    *where* is the message's directory as :data:`~vsqs.spark._options.Planned` names it
    (a partition of a partitioned queue, ``""`` for the queue's own); the message
    returned names that directory, so *queue* routes its delete and renewals there.
    The earlier run may have renewed it once more after its last record (a heartbeat
    that died between the rename and the save): the newer receipt is then used.
    """
    target = _partition(queue, where)
    try:
        message = target.change_visibility(receipt, seconds)
    except LeaseLost as exc:
        if exc.reason != "superseded" or not exc.current:
            raise
        message = target.change_visibility(exc.current, seconds)
    # A message renewed by its receipt alone does not say where it is.
    return message if message.queue else replace(message, queue=target.path)


def _partition(queue: AnyQueue, where: str) -> AnyQueue:
    """The partition of *queue* named *where* (*queue* itself for ``""``)."""
    if not where:
        return queue
    for part in partitions_of(queue):
        if os.path.basename(part.path) == where:
            return part
    raise StateMismatch(
        f"the recorded stream state names partition {where!r}, which the queue"
        f" {queue.path!r} does not have: the state belongs to another queue"
    )


class StateMismatch(VsqsError, RuntimeError):
    """The checkpoint's offsets and the reader's state do not belong together."""
