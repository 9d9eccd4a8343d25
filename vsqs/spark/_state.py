"""The state of a streaming query on disk: its epoch and its claimed micro-batches.

``<stateDir>/<epoch>/epoch.json`` holds the queue and the highest batch claimed; one
``<seq>.json`` per claimed, not yet deleted micro-batch lists its messages. Every file is
replaced durably (a temporary file, fsync, rename, directory fsync). Used by
:mod:`vsqs.spark._stream`.
"""

from __future__ import annotations

import json
import os
from typing import Any

from .. import LeaseLost, Message, Queue
from .._ids import parse_decimal
from ._options import Planned


def write_json(path: str, data: object) -> None:
    """Replace *path* with *data* durably (temporary file, fsync, rename, directory fsync)."""
    tmp = f"{path}.{os.getpid()}.tmp"
    # O_TRUNC: a leftover of a crashed process with our pid is overwritten.
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
    try:
        os.write(fd, json.dumps(data).encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    dir_fd = os.open(os.path.dirname(path), os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


class StateDir:
    """``epoch.json`` and the ``<seq>.json`` records of one query's claimed batches."""

    def __init__(self, path: str) -> None:
        self.path = path

    def _file(self, seq: int) -> str:
        return os.path.join(self.path, f"{seq}.json")

    def exists(self) -> bool:
        return os.path.exists(os.path.join(self.path, "epoch.json"))

    def create(self, epoch: str, queue: str) -> None:
        os.makedirs(self.path, exist_ok=True)
        self.set_high(epoch, queue, 0)

    def info(self) -> dict[str, Any]:
        with open(os.path.join(self.path, "epoch.json"), "rb") as fh:
            data: dict[str, Any] = json.load(fh)
        return data

    def set_high(self, epoch: str, queue: str, high: int) -> None:
        data = {"epoch": epoch, "queue": queue, "high": high}
        write_json(os.path.join(self.path, "epoch.json"), data)

    def save(self, seq: int, messages: list[Planned]) -> None:
        """Record the messages of batch *seq* durably, replacing its previous record."""
        write_json(self._file(seq), {"messages": messages})

    def load(self) -> dict[int, list[Planned]]:
        """Every recorded batch (left by an earlier run of this query)."""
        found: dict[int, list[Planned]] = {}
        for name in os.listdir(self.path):
            seq = parse_decimal(name.removesuffix(".json")) if name.endswith(".json") else None
            if seq is not None:
                with open(os.path.join(self.path, name), "rb") as fh:
                    rows = json.load(fh)["messages"]
                found[seq] = [(r[0], r[1], dict(r[2]), int(r[3]), float(r[4])) for r in rows]
        return found

    def remove(self, seq: int) -> None:
        try:
            os.unlink(self._file(seq))
        except FileNotFoundError:
            pass  # RACE: none expected (one run per query holds the lock); removing twice is fine


def take_over(queue: Queue, receipt: str, seconds: float) -> Message:
    """Renew a lease an earlier run of this query recorded, through this handle.

    The earlier run may have renewed it once more after its last record (a heartbeat
    that died between the rename and the save): the newer receipt is then used.
    """
    try:
        return queue.change_visibility(receipt, seconds)
    except LeaseLost as exc:
        if exc.reason != "superseded" or not exc.current:
            raise
        return queue.change_visibility(exc.current, seconds)


class StateMismatch(RuntimeError):
    """The checkpoint's offsets and the reader's state do not belong together."""
